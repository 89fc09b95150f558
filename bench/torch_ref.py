#!/usr/bin/env python3
"""PyTorch 2 reference of every example, for bench/run.sh (not a test).

The same architectures as examples/*.xf with stdlib/*.xf: pre-norm residuals
with dropout, Lie-Trotter and Strang-Marchuk layers, post-norm, RK4 with one
shared function per sublayer, learned positions, attention and the Extractors
(seed 001 eqs. 10-17, 23-29). Written as a PyTorch 2 user writes them:
attention is F.scaled_dot_product_attention(q, k, v, is_causal=True); the
causal convolutions are a sum of shifted matmuls for SHE's matrix per lag and
a depthwise conv1d for the vector and scalar kinds.

Training steps are forward, backward and AdamW (lr 1e-3, weight decay 0.01)
on random tokens. With --compile the model is wrapped in torch.compile and the
optimizer step is compiled too. The warm-up steps (3 by default: they
compile, and eager PyTorch also needs a few steps until its allocator stops
page-faulting at 18 layers) are not timed. Prints one line: tokens/s over the timed steps, the peak RSS of this
process in MiB (ru_maxrss, so run eager and compiled in separate processes)
and the warm-up seconds.

With --flex (and --compile) the attention variants run through FlexAttention
(torch.nn.attention.flex_attention: the score term as a score_mod, the mask as
a mask_mod with a block mask that skips empty tiles), the other reference a
PyTorch user would pick for them.

Usage: torch_ref.py EXAMPLE [--compile [--flex]] [--bf16] --layers N --batch B --seq T --steps S --threads N [--device cuda]
       torch_ref.py sgemm --threads N [--device cuda]
With --device cuda (scripts/gpu-check) the model, tokens and products are on
the GPU in float32 (TF32 only with --tf32), timed between synchronisations,
and the memory printed is the GPU's peak allocated, not the RSS. --bf16 runs
the forward and the loss under torch.autocast to bfloat16 on the device
(parameters, gradients and AdamW stay float32), as a PyTorch user would.
The sgemm mode prints two GFLOP/s rates of torch.mm in float32 into a
preallocated output: at 1024^3, and the geometric mean over the products the
models run that xf-gemm-bench times (bench/sgemm.c), each the best of at
least 10 after 3 warm-up products (2 m n k flops per product).
"""
import argparse, math, resource, time
import torch
import torch.nn as nn
import torch.nn.functional as F

VARIANTS = ("alibi", "sliding_window", "gqa", "temperature", "relative_bias")  # examples/<name>.xf: the transformer, another attention
EXAMPLES = ("transformer", "she", "he", "we", "me", "macaron", "macaron_she", "postnorm", "rk4", "gpt2_small", "moe",
            "hourglass") + VARIANTS
# Sizes: seed 001 Table 1 (vocab 5000, context 128, d 128, FFN 512, 32 heads,
# dropout 0.1), and examples/gpt2_small.xf's (context 1024, d 768, a GELU FFN
# of 3072, 12 heads, no dropout; its layer count is --layers).
TABLE1 = dict(L=128, d=128, c=512, heads=32, p=0.1)
SIZES = {"gpt2_small": dict(L=1024, d=768, c=3072, heads=12, p=0.0)}

def lin(i, o, bias=True):
    m = nn.Linear(i, o, bias=bias)
    nn.init.normal_(m.weight, 0, 0.01)
    if bias:
        nn.init.zeros_(m.bias)
    return m

class FFN(nn.Module):  # nn.xf FFN: fc2(relu(fc1(x))); FFNGelu: fc2(gelu(fc1(x))), erf's GELU
    def __init__(s, d, c, act=F.relu):
        super().__init__(); s.fc1, s.fc2, s.act = lin(d, c), lin(c, d), act
    def forward(s, x):
        return s.fc2(s.act(s.fc1(x)))

class MoE(nn.Module):  # modern.xf MoE (examples/moe.xf: top-2 of 8), dispatched as a PyTorch user writes it
    """Router scores x Wg; each token's top-k experts, gates softmax over their scores; expert i
    ReLU(x Wh_i + bh_i) Wf_i + bf_i on only its tokens (the token-choice loop of Switch and
    Mixtral implementations: index the rows of each expert, one matmul each, index_add back);
    the Switch load-balancing loss E sum_i f_i P_i in self.balance."""
    def __init__(s, d, c, experts=8, k=2):
        super().__init__(); s.E, s.k = experts, k
        s.Wg = nn.Parameter(torch.randn(d, experts) * 0.02)
        s.Wh = nn.Parameter(torch.randn(experts, d, c) * 0.02); s.bh = nn.Parameter(torch.zeros(experts, c))
        s.Wf = nn.Parameter(torch.randn(experts, c, d) * 0.02); s.bf = nn.Parameter(torch.zeros(experts, d))
    def forward(s, x):
        B, T, d = x.shape
        xs = x.reshape(-1, d)
        scores = xs @ s.Wg
        top, ids = torch.topk(scores, s.k, dim=-1)                        # [N, k]
        gate = torch.softmax(top, -1)
        y = torch.zeros_like(xs)
        flat = ids.reshape(-1)
        for e in range(s.E):
            rows = (flat == e).nonzero(as_tuple=True)[0]
            if rows.numel() == 0: continue
            tok = rows // s.k
            h = F.relu(xs[tok] @ s.Wh[e] + s.bh[e]) @ s.Wf[e] + s.bf[e]
            y.index_add_(0, tok, h * gate.reshape(-1)[rows, None])
        f = F.one_hot(ids, s.E).to(x.dtype).sum(1).mean(0) / s.k
        s.balance = s.E * (f * torch.softmax(scores, -1).mean(0)).sum()
        return y.reshape(B, T, d)

class Attention(nn.Module):  # mixers.xf CausalSelfAttention: no biases, scale 1/sqrt(d/heads)
    def __init__(s, d, heads):
        super().__init__(); s.h = heads
        s.q, s.k, s.v, s.o = (lin(d, d, False) for _ in range(4))
    def forward(s, x):
        B, T, d = x.shape
        split = lambda t: t.view(B, T, s.h, d // s.h).transpose(1, 2)
        y = F.scaled_dot_product_attention(split(s.q(x)), split(s.k(x)), split(s.v(x)), is_causal=True)
        return s.o(y.transpose(1, 2).reshape(B, T, d))

FLEX = False  # --flex: the variants through FlexAttention instead of SDPA

class AttentionVariant(nn.Module):  # stdlib/attention.xf's variants, through SDPA as a PyTorch user writes them
    def __init__(s, kind, d, heads, window=32, kv_heads=8, buckets=32):
        super().__init__(); s.kind, s.h, s.window, s.buckets, s.masks = kind, heads, window, buckets, {}
        s.kv = kv_heads if kind == "gqa" else heads
        s.q, s.o = lin(d, d, False), lin(d, d, False)
        s.k, s.v = lin(d, d // heads * s.kv, False), lin(d, d // heads * s.kv, False)
        if kind == "temperature": s.log_tau = nn.Parameter(torch.zeros(heads, 1, 1))
        if kind == "relative_bias": s.w = nn.Parameter(torch.zeros(heads, buckets))
    def flex(s, q, k, v):
        """The same variants as FlexAttention writes them (torch.nn.attention.flex_attention):
        the score term a score_mod, the mask a mask_mod whose block mask skips empty tiles."""
        from torch.nn.attention.flex_attention import flex_attention, create_block_mask
        T, W, K = q.shape[2], s.window, s.buckets
        if s.kind == "sliding_window": mask = lambda b, h, i, j: (i >= j) & (i - j < W)
        else: mask = lambda b, h, i, j: i >= j
        key = (T, str(q.device))
        if key not in s.masks: s.masks[key] = create_block_mask(mask, None, None, T, T, device=q.device)
        mod = None
        if s.kind == "temperature":
            tau = torch.exp(s.log_tau.view(s.h))
            mod = lambda sc, b, h, i, j: sc * tau[h]
        elif s.kind == "alibi":
            slope = torch.exp((torch.arange(s.h, device=q.device) + 1) * (-8 / s.h * math.log(2)))
            mod = lambda sc, b, h, i, j: sc - slope[h] * (i - j)
        elif s.kind == "relative_bias":
            mod = lambda sc, b, h, i, j: sc + s.w[h, torch.clamp(i - j, 0, K - 1)]
        return flex_attention(q, k, v, score_mod=mod, block_mask=s.masks[key], enable_gqa=s.kv != s.h)
    def forward(s, x):
        B, T, d = x.shape; hd = d // s.h
        q = s.q(x).view(B, T, s.h, hd).transpose(1, 2)
        k, v = (m(x).view(B, T, s.kv, hd).transpose(1, 2) for m in (s.k, s.v))
        if FLEX: return s.o(s.flex(q, k, v).transpose(1, 2).reshape(B, T, d))
        i = torch.arange(T, device=x.device)
        dist = (i[:, None] - i[None, :]).to(x.dtype)  # i - j
        if s.kind == "temperature":  # tau q k^T / sqrt(h)
            y = F.scaled_dot_product_attention(q * torch.exp(s.log_tau), k, v, is_causal=True)
        elif s.kind == "alibi":  # scores - s_m (i - j), slopes 2^(-8 (m + 1) / n), under the causal mask
            slope = torch.exp((torch.arange(s.h, device=x.device) + 1) * (-8 / s.h * math.log(2))).view(s.h, 1, 1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=(-slope * dist).masked_fill(dist < 0, float("-inf")))
        elif s.kind == "relative_bias":  # scores + w[m, min(i - j, K - 1)], under the causal mask
            bias = s.w[:, dist.long().clamp(0, s.buckets - 1)]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(dist < 0, float("-inf")))
        elif s.kind == "sliding_window":  # keys i - window < j <= i
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=(dist >= 0) & (dist < s.window))
        else:  # grouped queries: query head m reads key head m // (heads / kv_heads)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return s.o(y.transpose(1, 2).reshape(B, T, d))

def causal_depthwise(x, w):  # x [B, T, d], w [L, d]: out_i = sum_{j<=i} x_j * w_{i-j}
    B, T, d = x.shape
    k = w[:T].flip(0).t().unsqueeze(1)                      # [d, 1, T]
    return F.conv1d(F.pad(x.transpose(1, 2), (T - 1, 0)), k, groups=d).transpose(1, 2)

class Extractor(nn.Module):  # mixers.xf SHE, WE, HE, ME
    def __init__(s, kind, d, L):
        super().__init__(); s.kind = kind
        std = lambda *shape: nn.Parameter(torch.randn(*shape) * 0.01)
        if kind == "she": s.w = std(L, d, d)                # a matrix per lag
        elif kind == "me": s.w = std(L)                     # a scalar per lag
        else: s.w = std(L, d)                               # a vector per lag
        if kind == "he": s.inp = lin(d, d, False)
        if kind != "me": s.adj, s.out = lin(d, d, False), lin(d, d, False)
    def forward(s, x):
        B, T, d = x.shape
        if s.kind == "she":  # out_i = sum_k x_{i-k} W_k
            ext = sum(F.pad(x[:, :T - k], (0, 0, k, 0)) @ s.w[k] for k in range(T))
        elif s.kind == "me":
            ext = causal_depthwise(x, s.w[:, None].expand(-1, d))
        else:
            ext = causal_depthwise(s.inp(x) if s.kind == "he" else x, s.w)
        return ext if s.kind == "me" else s.out(s.adj(x) * ext)

class Residual(nn.Module):  # residual.xf PreNorm, PostNorm, RK4 with step h
    def __init__(s, style, d, f, p, h):
        super().__init__(); s.style, s.f, s.p, s.h, s.ln = style, f, p, h, nn.LayerNorm(d)
    def forward(s, x):
        drop = lambda t: F.dropout(t, s.p, s.training)
        if s.style == "pre": return x + s.h * drop(s.f(s.ln(x)))
        if s.style == "post": return s.ln(s.h * drop(s.f(x)) + x)
        F_ = lambda z: s.f(s.ln(z))                         # RK4: one F for all four stages
        g1 = s.h * F_(x); g2 = s.h * F_(x + g1 / 2); g3 = s.h * F_(x + g2 / 2); g4 = s.h * F_(x + g3)
        return x + drop((g1 + 2 * g2 + 2 * g3 + g4) / 6)

class Layer(nn.Module):  # schemes.xf LieTrotter ("lt") and StrangMarchuk ("sm")
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

class LM(nn.Module):  # lm.xf CausalLM with LearnedPositions and LMHead, then cross_entropy (mean)
    def __init__(s, ex, vocab, L, d, c, layers, heads, p):
        super().__init__()
        scheme = "sm" if ex.startswith("macaron") else "lt"
        style = {"postnorm": "post", "rk4": "rk4"}.get(ex, "pre")
        def mixer():
            k = ex.replace("macaron_", "")
            if k in VARIANTS: return AttentionVariant(k, d, heads)
            return Extractor(k, d, L) if k in ("she", "he", "we", "me") else Attention(d, heads)
        act = F.gelu if ex == "gpt2_small" else F.relu
        ffns = lambda: [FFN(d, c // 2), FFN(d, c // 2)] if scheme == "sm" else [MoE(d, c) if ex == "moe" else FFN(d, c, act)]
        s.tok = nn.Parameter(torch.randn(vocab, d) * 0.01); s.pos = nn.Parameter(torch.randn(L, d) * 0.01)
        s.layers = nn.ModuleList([Layer(scheme, style, d, mixer(), ffns(), p) for _ in range(layers)])
        # sequence.xf Hourglass (examples/hourglass.xf): a layer at T, the layers above at T / 2, a layer at T
        s.shorten = 2 if ex == "hourglass" else 0
        if s.shorten:
            s.pre, s.post = Layer(scheme, style, d, mixer(), ffns(), p), Layer(scheme, style, d, mixer(), ffns(), p)
        s.ln, s.head, s.p = nn.LayerNorm(d), lin(d, vocab), p
    def forward(s, tokens, targets):
        T = tokens.shape[1]
        x = F.dropout(s.tok[tokens] + s.pos[:T], s.p, s.training)
        if s.shorten:  # shifted by s - 1, the mean of each group of s, the inner layers, each group repeated s times
            k = s.shorten
            h = s.pre(x)
            y = F.pad(h, (0, 0, k - 1, 0))[:, :T]
            y = y.reshape(y.shape[0], T // k, k, y.shape[2]).mean(2)
            for l in s.layers: y = l(y)
            x = s.post(h + y.repeat_interleave(k, 1))
        else:
            for l in s.layers: x = l(x)
        logits = s.head(s.ln(x))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        moes = [m for m in s.modules() if isinstance(m, MoE)]
        return loss + 0.01 * sum(m.balance for m in moes) if moes else loss

# The products of xf-gemm-bench (bench/sgemm.c): m, n, k, trans_a, trans_b.
GEMM_SHAPES = ((8192, 512, 128, 0, 0), (8192, 128, 128, 0, 0), (8192, 5000, 128, 0, 0), (4096, 32, 32, 0, 0),
               (128, 512, 8192, 1, 0), (8192, 128, 512, 0, 1))

def sync(dev):
    if dev == "cuda": torch.cuda.synchronize()

def mm_rate(m, n, k, ta=0, tb=0, reps=10, dev="cpu"):
    a = torch.randn(k, m, device=dev).t() if ta else torch.randn(m, k, device=dev)
    b = torch.randn(n, k, device=dev).t() if tb else torch.randn(k, n, device=dev)
    c = torch.empty(m, n, device=dev)
    for _ in range(3): torch.mm(a, b, out=c)
    sync(dev)
    best, spent, i = float("inf"), 0.0, 0
    while i < reps or (spent < 0.5 and i < 1000):
        t0 = time.perf_counter(); torch.mm(a, b, out=c); sync(dev); dt = time.perf_counter() - t0
        best, spent, i = min(best, dt), spent + dt, i + 1
    return 2 * m * n * k / best / 1e9

def sgemm(threads, dev):
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32, as xf's GEMMs today
    rates = [mm_rate(*s, dev=dev) for s in GEMM_SHAPES]
    print(f"{mm_rate(1024, 1024, 1024, dev=dev):.1f} {math.exp(sum(map(math.log, rates)) / len(rates)):.1f}")

def main():
    a = argparse.ArgumentParser()
    a.add_argument("example", choices=EXAMPLES + ("sgemm",))
    a.add_argument("--compile", action="store_true", help="torch.compile the model and the optimizer step")
    a.add_argument("--layers", type=int, default=2)
    a.add_argument("--batch", type=int, default=64); a.add_argument("--seq", type=int, default=128)
    a.add_argument("--steps", type=int, default=3, help="timed steps")
    a.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    a.add_argument("--threads", type=int, default=2); a.add_argument("--vocab", type=int, default=5000)
    a.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: the model on the GPU; the memory printed is the peak allocated on it")
    a.add_argument("--tf32", action="store_true", help="allow TF32 tensor-core products (cuda), as xfc --precision=tf32")
    a.add_argument("--bf16", action="store_true", help="the forward and the loss under torch.autocast(bfloat16)")
    a.add_argument("--flex", action="store_true", help="the attention variants through FlexAttention (with --compile)")
    o = a.parse_args()
    global FLEX
    FLEX = o.flex
    if o.flex and not o.compile: a.error("--flex needs --compile: FlexAttention fuses only when compiled")
    dev = o.device
    if o.example == "sgemm":
        return sgemm(o.threads, dev)
    torch.set_num_threads(o.threads); torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = o.tf32
    torch.backends.cudnn.allow_tf32 = o.tf32
    z = SIZES.get(o.example, TABLE1)
    m = LM(o.example, o.vocab, z["L"], z["d"], z["c"], o.layers, z["heads"], z["p"]).to(dev).train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)
    model, opt_step = m, opt.step
    if o.compile:
        model = torch.compile(m)
        opt_step = torch.compile(opt.step)
    tok = torch.randint(0, o.vocab, (o.batch, o.seq), device=dev); tgt = torch.randint(0, o.vocab, (o.batch, o.seq), device=dev)
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=o.bf16):
            loss = model(tok, tgt)
        loss.backward(); opt_step()
        return loss
    t0 = time.perf_counter()
    for _ in range(o.warmup): step()
    sync(dev)
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(o.steps): loss = step()
    sync(dev)
    dt = time.perf_counter() - t0
    assert torch.isfinite(loss), "loss is not finite"
    if dev == "cuda": rss_mib = torch.cuda.max_memory_allocated() / 2**20
    else: rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"{o.batch * o.seq * o.steps / dt:.1f} {rss_mib:.0f} {warm:.1f}")

if __name__ == "__main__":
    main()
