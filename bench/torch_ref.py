#!/usr/bin/python3
"""PyTorch reference of every example, for bench/run.sh (not a test).

The same architectures as stdlib/*.xf: pre-norm residuals with dropout,
Lie-Trotter and Strang-Marchuk layers, post-norm, RK4, learned positions,
attention and the Extractors (seed 001 eqs. 10-17, 23-29). The causal
convolutions are written as a PyTorch user would: a sum of shifted matmuls
for SHE's matrix per lag, a depthwise conv1d for the vector and scalar kinds.
Prints tokens/s of training steps (forward, backward, AdamW).
Usage: torch_ref.py EXAMPLE --layers N --batch B --seq T --steps S --threads N
"""
import argparse, math, time
import torch
import torch.nn as nn
import torch.nn.functional as F

def lin(i, o, bias=True):
    m = nn.Linear(i, o, bias=bias)
    nn.init.normal_(m.weight, 0, 0.01)
    if bias:
        nn.init.zeros_(m.bias)
    return m

class FFN(nn.Module):
    def __init__(s, d, c):
        super().__init__(); s.fc1, s.fc2 = lin(d, c), lin(c, d)
    def forward(s, x):
        return s.fc2(F.relu(s.fc1(x)))

class Attention(nn.Module):
    def __init__(s, d, heads):
        super().__init__(); s.h = heads
        s.q, s.k, s.v, s.o = (lin(d, d, False) for _ in range(4))
    def forward(s, x):
        B, T, d = x.shape
        split = lambda t: t.view(B, T, s.h, d // s.h).transpose(1, 2)
        q, k, v = split(s.q(x)), split(s.k(x)), split(s.v(x))
        z = q @ k.transpose(2, 3) / math.sqrt(d // s.h)
        z = z.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        return s.o((F.softmax(z, -1) @ v).transpose(1, 2).reshape(B, T, d))

def causal_depthwise(x, w):  # x [B, T, d], w [L, d]: out_i = sum_{j<=i} x_j * w_{i-j}
    B, T, d = x.shape
    k = w[:T].flip(0).t().unsqueeze(1)                      # [d, 1, T]
    return F.conv1d(F.pad(x.transpose(1, 2), (T - 1, 0)), k, groups=d).transpose(1, 2)

class Extractor(nn.Module):
    def __init__(s, kind, d, L):
        super().__init__(); s.kind = kind
        std = lambda *shape: nn.Parameter(torch.randn(*shape) * 0.01)
        if kind == "she": s.w = std(L, d, d)
        elif kind == "me": s.w = std(L)
        else: s.w = std(L, d)
        if kind == "he": s.inp = lin(d, d, False)
        if kind != "me": s.adj, s.out = lin(d, d, False), lin(d, d, False)
    def forward(s, x):
        B, T, d = x.shape
        if s.kind == "she":
            ext = sum(F.pad(x[:, :T - k], (0, 0, k, 0)) @ s.w[k] for k in range(T))
        elif s.kind == "me":
            ext = causal_depthwise(x, s.w[:, None].expand(-1, d))
        else:
            ext = causal_depthwise(s.inp(x) if s.kind == "he" else x, s.w)
        return ext if s.kind == "me" else s.out(s.adj(x) * ext)

class Residual(nn.Module):  # PreNorm, PostNorm, RK4 with step h
    def __init__(s, style, d, f, p, h):
        super().__init__(); s.style, s.f, s.p, s.h, s.ln = style, f, p, h, nn.LayerNorm(d)
    def forward(s, x):
        drop = lambda t: F.dropout(t, s.p, s.training)
        if s.style == "pre": return x + s.h * drop(s.f(s.ln(x)))
        if s.style == "post": return s.ln(s.h * drop(s.f(x)) + x)
        F_ = lambda z: s.f(s.ln(z))
        g1 = s.h * F_(x); g2 = s.h * F_(x + g1 / 2); g3 = s.h * F_(x + g2 / 2); g4 = s.h * F_(x + g3)
        return x + drop((g1 + 2 * g2 + 2 * g3 + g4) / 6)

class Layer(nn.Module):
    def __init__(s, scheme, style, d, mixer, ffns, p):
        super().__init__()
        if scheme == "lt":
            s.subs = nn.ModuleList([Residual(style, d, mixer, p, 1), Residual(style, d, ffns[0], p, 1)])
        else:
            s.subs = nn.ModuleList([Residual(style, d, ffns[0], p, 0.5), Residual(style, d, mixer, p, 1),
                                    Residual(style, d, ffns[1], p, 0.5)])
    def forward(s, x):
        for m in s.subs: x = m(x)
        return x

class LM(nn.Module):
    def __init__(s, ex, vocab, L, d, c, layers, heads, p):
        super().__init__()
        scheme = "sm" if ex.startswith("macaron") else "lt"
        style = {"postnorm": "post", "rk4": "rk4"}.get(ex, "pre")
        def mixer():
            k = ex.replace("macaron_", "")
            return Extractor(k, d, L) if k in ("she", "he", "we", "me") else Attention(d, heads)
        ffns = lambda: [FFN(d, c // 2), FFN(d, c // 2)] if scheme == "sm" else [FFN(d, c)]
        s.tok = nn.Parameter(torch.randn(vocab, d) * 0.01); s.pos = nn.Parameter(torch.randn(L, d) * 0.01)
        s.layers = nn.ModuleList([Layer(scheme, style, d, mixer(), ffns(), p) for _ in range(layers)])
        s.ln, s.head, s.p = nn.LayerNorm(d), lin(d, vocab), p
    def forward(s, tokens, targets):
        T = tokens.shape[1]
        x = F.dropout(s.tok[tokens] + s.pos[:T], s.p, s.training)
        for l in s.layers: x = l(x)
        logits = s.head(s.ln(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

def main():
    a = argparse.ArgumentParser()
    a.add_argument("example"); a.add_argument("--layers", type=int, default=2)
    a.add_argument("--batch", type=int, default=64); a.add_argument("--seq", type=int, default=128)
    a.add_argument("--steps", type=int, default=3); a.add_argument("--threads", type=int, default=2)
    a.add_argument("--vocab", type=int, default=5000)
    o = a.parse_args()
    torch.set_num_threads(o.threads); torch.manual_seed(0)
    m = LM(o.example, o.vocab, 128, 128, 512, o.layers, 32, 0.1)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)
    tok = torch.randint(0, o.vocab, (o.batch, o.seq)); tgt = torch.randint(0, o.vocab, (o.batch, o.seq))
    def step():
        opt.zero_grad(); loss = m(tok, tgt); loss.backward(); opt.step(); return loss
    step()  # warm-up
    t0 = time.perf_counter()
    for _ in range(o.steps): step()
    dt = time.perf_counter() - t0
    print(f"{o.batch * o.seq * o.steps / dt:.1f}")

main()
