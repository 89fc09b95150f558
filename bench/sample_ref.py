#!/usr/bin/env python3
"""Sampling references for bench/sample.sh (not a test).

hf: Hugging Face transformers' GPT2LMHeadModel of the Table 1 transformer's
shape (vocab 5000, context 128, d 128, 32 heads, FFN 512 with ReLU, no
dropout), random weights, `generate` with its KV cache (use_cache=True).

recompute EXAMPLE: bench/torch_ref.py's PyTorch model of the example, one
full forward over the whole sequence (its last 128 tokens) per new token:
what a PyTorch user has for the Extractors, which have no cache there.

Both: a prompt of --prompt random tokens for each of --batch sequences, then
--tokens new tokens, greedy (--top-p 1) or top-p sampling (temperature 1),
--threads CPU threads, one untimed warm-up run first. Prints one line:
tokens/s (batch x tokens over the timed seconds), ms per step, peak RSS MiB.
"""
import argparse, resource, sys, time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))


def top_p_draw(logits, p, gen):  # [B, V] -> [B]: transformers' TopPLogitsWarper, then a draw
    if p >= 1:
        return logits.argmax(-1)
    sorted_logits, idx = torch.sort(logits, descending=False)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    remove = cum <= 1 - p
    remove[..., -1:] = False
    mask = remove.scatter(1, idx, remove)
    probs = logits.masked_fill(mask, -float("inf")).softmax(-1)
    return torch.multinomial(probs, 1, generator=gen).squeeze(1)


def run_hf(a):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=a.vocab, n_positions=128, n_embd=128, n_layer=a.layers, n_head=32, n_inner=512,
                     activation_function="relu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).eval()
    prompt = torch.randint(0, a.vocab, (1, a.prompt)).repeat(a.batch, 1)
    kw = dict(max_new_tokens=a.tokens, min_new_tokens=a.tokens, use_cache=True, pad_token_id=0,
              attention_mask=torch.ones_like(prompt))
    kw.update(dict(do_sample=True, top_p=a.top_p, top_k=0, temperature=1.0) if a.top_p < 1 else dict(do_sample=False))
    with torch.inference_mode():
        model.generate(prompt, **{**kw, "max_new_tokens": 4, "min_new_tokens": 4})
        t0 = time.perf_counter()
        out = model.generate(prompt, **kw)
        dt = time.perf_counter() - t0
    assert out.shape == (a.batch, a.prompt + a.tokens), out.shape
    return dt


def run_recompute(a):
    import torch_ref
    model = torch_ref.LM(a.example, a.vocab, 128, 128, 512, a.layers, 32, 0.0).eval()

    def logits_of(tokens):  # the last position's logits of torch_ref.LM
        T = tokens.shape[1]
        x = model.tok[tokens] + model.pos[:T]
        for layer in model.layers:
            x = layer(x)
        return model.head(model.ln(x[:, -1]))

    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, a.vocab, (1, a.prompt)).repeat(a.batch, 1)

    def generate(n):
        seq = prompt
        for _ in range(n):
            nxt = top_p_draw(logits_of(seq[:, -128:]), a.top_p, gen)
            seq = torch.cat([seq, nxt[:, None]], 1)
        return seq

    with torch.inference_mode():
        generate(2)
        t0 = time.perf_counter()
        out = generate(a.tokens)
        dt = time.perf_counter() - t0
    assert out.shape == (a.batch, a.prompt + a.tokens)
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("hf", "recompute"))
    ap.add_argument("example", nargs="?", default="transformer")
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    dt = run_hf(a) if a.mode == "hf" else run_recompute(a)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("%.1f %.3f %.0f" % (a.batch * a.tokens / dt, dt * 1e3 / a.tokens, rss))


if __name__ == "__main__":
    main()
