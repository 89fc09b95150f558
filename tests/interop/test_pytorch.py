#!/usr/bin/env python3
"""xfc --emit=pytorch against xf (issue 24), and PyTorch as an independent oracle.

  test_pytorch.py XFC XFRUN XF_DUMP   (from the repository root, with torch)

For every example at small sizes (2 layers, dropout 0): xf trains 3 steps
from its initialisation (so the weights are perturbed) and saves a
checkpoint; the generated module loads it (load_xf), and on the batch of
tests/interop/xf_dump.c computes, in float64,
  - the logits (within 1e-5 of xf's, relative to their largest magnitude),
  - the loss (1e-5 relative),
  - every parameter's gradient (1e-4 relative to the tensor's largest),
  - 10 torch.optim.AdamW steps on that batch (lr 1e-3, betas 0.9 and 0.999,
    eps 1e-8, weight decay 0.01, xf's defaults): every step's loss within
    1e-5 relative of xf's, and the parameters after them within 1e-4
    (relative Frobenius norm).
Then the files that travel (issue 34): `xfrun export` writes the checkpoint's
weights alone, fp32 and bf16 (no "optimizer." tensors); the fp32 export loaded
into a fresh module (load_xf) gives xf's logits within 1e-5 at two sequence
lengths (the context, and a shorter one with another batch); the bf16 export
loads as the checkpoint's values rounded to bfloat16 by torch. And one block
alone: the class of the first layer, made on its own with the layer's
weights, run at two (B, T), equals the layer inside the full model (its
input and output taken by a forward hook).
Exit status 77 (skipped, saying so) when torch or safetensors is missing.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import safetensors  # noqa: F401  (load_xf reads the checkpoint with it)
except ImportError as e:
    print(f"skipped: {e} (bench/run.sh installs torch into bench/.venv)")
    sys.exit(77)

XFC, XFRUN, DUMP = sys.argv[1:4]
B2, T2 = 3, 5  # the second shape: another batch, a shorter sequence
EXAMPLES = ["transformer", "she", "he", "we", "me", "macaron", "macaron_she", "postnorm", "rk4", "linear_attention",
            "gla", "retnet", "ssm", "moe", "mamba",
            # stdlib/attention.xf's variants: ALiBi, a temperature, grouped queries, a sliding window,
            # a relative bias (all fused)
            "tests/grad/attention_variants.xf",
            # score biases (fused): local + global keys, a learned slope, block-sparse; a key-padding mask
            "tests/fusion/attn_bias.xf", "tests/fusion/attn_padding.xf",
            # stdlib/modern.xf: Llama blocks (rotary attention, SwiGLU, RMSNorm)
            "tests/grad/modern.xf",
            # stdlib/modern.xf: top-k mixtures of experts, routed and dense, a logged side output
            "tests/grad/moe.xf",
            # stdlib/modern.xf: Mamba blocks (a width-4 convolution, the selective scan, a gate)
            "tests/grad/mamba.xf",
            # the language's construction-time features: keywords, defaults, repeat as i, if,
            # assert, side outputs, // and %, a shadowed Linear
            "tests/grad/language.xf",
            # stdlib/sequence.xf: inner layers on the sequence shortened by 2 (T2 6 there: a multiple of 2)
            "hourglass"]
B, T, STEPS = 2, 8, 10
passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def one(ex, tmp):
    """ex: an example's name, or a model file's path (its own sizes, vocab 256)."""
    global T2
    T2 = 6 if ex == "hourglass" else 5  # a time axis T / 2: T a multiple of 2
    defs = ["-D", "layers=2", "-D", "d=16", "-D", "ffn=24", "-D", "context=8", "-D", "vocab=256", "-D", "dropout=0"]
    if ex not in ("she", "he", "we", "me", "macaron_she", "ssm", "mamba"):
        defs += ["-D", "heads=2"]
    src = f"examples/{ex}.xf"
    if ex.endswith(".xf"):
        src, defs, ex = ex, ["-D", "vocab=256"], os.path.basename(ex)[:-3]
    so, py, ck = (os.path.join(tmp, f"{ex}.{s}") for s in ("so", "py", "safetensors"))
    subprocess.run([XFC, src, *defs, "-o", so], check=True)
    with open(py, "w") as f:
        subprocess.run([XFC, "--emit=pytorch", src, *defs], stdout=f, check=True)
    text = os.path.join(tmp, "text.txt")
    subprocess.run([XFRUN, "train", so, "--data", text, "--tokenizer", "bytes", "--steps", "3", "--batch", "4",
                    "--lr", "0.01", "--threads", "1", "--save", ck], check=True, capture_output=True)
    out = os.path.join(tmp, ex)
    os.makedirs(out, exist_ok=True)
    subprocess.run([DUMP, so, ck, str(B), str(T), str(STEPS), out], check=True)
    names = [l.split() for l in open(os.path.join(out, "params.txt"))]
    grads = np.fromfile(os.path.join(out, "grads.f32"), np.float32)
    final = np.fromfile(os.path.join(out, "final.f32"), np.float32)
    xf_loss = [float(l) for l in open(os.path.join(out, "loss.txt"))]

    ns = {}
    exec(compile(open(py).read(), py, "exec"), ns)
    model = ns["Model"]().double()
    ns["load_xf"](model, ck)
    model = model.double()
    V = 256
    bt = torch.arange(B).reshape(B, 1) * 7 + torch.arange(T).reshape(1, T) * 13 + 1
    tokens, targets = bt % V, (bt % V + 1) % V
    logits = model(tokens)["logits"]
    xf_logits = np.fromfile(os.path.join(out, "logits.f32"), np.float32).reshape(B, T, V)
    e_logits = rel(xf_logits, logits.detach().numpy())
    o = model(tokens, targets)
    o["loss"].backward()
    e_loss = abs(xf_loss[0] - o["loss"].item()) / abs(o["loss"].item())
    worst, worst_name, at = 0.0, "", 0
    for name, n in names:
        n = int(n)
        g = model.get_parameter(name).grad
        e = rel(grads[at:at + n], g.numpy().reshape(-1)) if g is not None else float(np.abs(grads[at:at + n]).max())
        if e > worst:
            worst, worst_name = e, name
        at += n
    check(e_logits <= 1e-5 and e_loss <= 1e-5 and worst <= 1e-4,
          f"{ex}: logits {e_logits:.1e}, loss {e_loss:.1e}, {len(names)} gradients worst {worst:.1e} ({worst_name})")
    if src.startswith("examples/"):  # an LM with lm.layers
        exported(ex, ns, ck, so, tmp)
    # 10 AdamW steps on the batch
    model.zero_grad()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(tokens, targets)["loss"]
        loss.backward()
        opt.step()
        losses.append(loss.item())
    e_curve = max(abs(a - b) / abs(b) for a, b in zip(xf_loss, losses))
    at, e_w = 0, 0.0
    for name, n in names:
        n = int(n)
        w = model.get_parameter(name).detach().numpy().reshape(-1)
        e = float(np.linalg.norm(final[at:at + n] - w) / max(np.linalg.norm(w), 1e-30))
        if os.environ.get("XF_TEST_VERBOSE"):
            print(f"  {name}: |w| {np.linalg.norm(w):.3g}, |xf - torch| {np.linalg.norm(final[at:at + n] - w):.3g}")
        e_w = max(e_w, e)
        at += n
    check(e_curve <= 1e-5 and e_w <= 1e-4,
          f"{ex}: {STEPS} AdamW steps, losses within {e_curve:.1e}, parameters within {e_w:.1e} (relative norm)")


def batch(b, t, v=256):
    bt = torch.arange(b).reshape(b, 1) * 7 + torch.arange(t).reshape(1, t) * 13 + 1
    return bt % v


def exported(ex, ns, ck, so, tmp):
    """xfrun export (fp32, bf16) into a fresh module at two lengths; the first layer's class alone."""
    from safetensors import safe_open
    w32, w16 = os.path.join(tmp, f"{ex}.f32.safetensors"), os.path.join(tmp, f"{ex}.bf16.safetensors")
    subprocess.run([XFRUN, "export", ck, "-o", w32], check=True, capture_output=True)
    subprocess.run([XFRUN, "export", ck, "--dtype=bf16", "-o", w16], check=True, capture_output=True)
    with safe_open(ck, "pt") as f:
        ck_names = [k for k in f.keys() if not k.startswith("optimizer.")]
        ck_vals = {k: f.get_tensor(k) for k in ck_names}
    model = ns["load_xf"](ns["Model"]().double(), w32).eval()
    errs = []
    for b, t in ((B, T), (B2, T2)):
        out = os.path.join(tmp, f"{ex}.{b}x{t}")
        os.makedirs(out, exist_ok=True)
        subprocess.run([DUMP, so, ck, str(b), str(t), "0", out], check=True)
        xf_logits = np.fromfile(os.path.join(out, "logits.f32"), np.float32).reshape(b, t, -1)
        with torch.no_grad():
            errs.append(rel(xf_logits, model(batch(b, t))["logits"].numpy()))
    with safe_open(w16, "pt") as f:
        names16 = list(f.keys())
        bf16_ok = sorted(names16) == sorted(ck_names) and all(
            f.get_tensor(k).dtype == torch.bfloat16 and torch.equal(f.get_tensor(k), ck_vals[k].to(torch.bfloat16))
            for k in names16)
    m16 = ns["load_xf"](ns["Model"]().double(), w16)
    bf16_ok = bf16_ok and all(torch.equal(w, ck_vals[k].to(torch.bfloat16).double()) for k, w in m16.state_dict().items())
    with safe_open(w32, "pt") as f:
        moments = [k for k in f.keys() if k.startswith("optimizer.")]
    check(max(errs) <= 1e-5 and bf16_ok and not moments,
          f"{ex}: xfrun export: logits of the fp32 export at [{B}, {T}] {errs[0]:.1e}, at [{B2}, {T2}] {errs[1]:.1e}; "
          f"bf16 export {'loads as the rounded checkpoint' if bf16_ok else 'DIFFERS from the rounded checkpoint'}; "
          f"{len(moments)} optimizer tensors")
    # the first layer's class on its own, at two shapes, against the layer inside the model
    first = "lm.layers.pre.0" if ex == "hourglass" else "lm.layers.0"  # Hourglass: its first full-length layer
    layer = model.get_submodule(first)
    alone = type(layer)().double().eval()
    alone.load_state_dict(layer.state_dict(), strict=True)
    seen = []
    hook = layer.register_forward_hook(lambda m, args, out: seen.append((args, out)))
    worst = 0.0
    with torch.no_grad():
        for b, t in ((B, T), (B2, T2)):
            seen.clear()
            model(batch(b, t))
            args, out = seen[0]
            mine = alone(*args)
            # a block with side outputs returns (y, side values ...): each of them
            pairs = [(mine, out)] if torch.is_tensor(out) else list(zip(mine, out))
            for a, b in pairs:
                worst = max(worst, float((a - b).abs().max() / b.abs().max()))
            out = out if torch.is_tensor(out) else next(o for o in out if o.dim() >= 2)
    hook.remove()
    check(worst <= 1e-12 and tuple(out.shape[:2]) == (B2, T2),
          f"{ex}: {type(layer).__name__} alone at [{B}, {T}] and [{B2}, {T2}] equals {first} in the model ({worst:.1e})")


def gather_scatter(tmp):
    """tests/grad/op_gather_scatter.xf's exported loss against torch.gather and scatter_add
    on the same parameters: the one_hot forms of the language give their values."""
    py = os.path.join(tmp, "gather.py")
    with open(py, "w") as f:
        subprocess.run([XFC, "--emit=pytorch", "tests/grad/op_gather_scatter.xf"], stdout=f, check=True)
    ns = {}
    exec(compile(open(py).read(), py, "exec"), ns)
    m = ns["Model"]().double()
    got = m()["loss"].item()
    x, c = m.x.detach(), m.c.detach()
    ids = ((torch.arange(24) * 7) % 5).reshape(3, 2, 4)
    z = torch.zeros(3, 6, 4, dtype=x.dtype).scatter_add(1, (torch.arange(20) % 6).reshape(1, 5, 4).expand(3, 5, 4), x)
    t = torch.gather(x, 1, torch.topk(((torch.arange(60) * 7) % 60).reshape(3, 5, 4).double(), 2, dim=1).indices)
    want = ((torch.gather(x, 1, ids) * c).sum() + (z * z).sum() + (t * t * c).sum()).item()
    check(abs(got - want) <= 1e-12 * abs(want), f"gather, scatter_add and topk: {got:.12g} against torch's {want:.12g}")


torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "text.txt"), "w") as f:
        f.write("the cat sat on the mat. the dog ran to the tree. " * 300)
    os.environ["XF_CACHE_DIR"] = os.path.join(tmp, "cache")
    for ex in sys.argv[4:] or EXAMPLES + ["gather"]:
        try:
            gather_scatter(tmp) if ex == "gather" else one(ex, tmp)
        except Exception as e:  # a generated module that does not run is a failure, named
            check(False, f"{ex}: {type(e).__name__}: {e}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
