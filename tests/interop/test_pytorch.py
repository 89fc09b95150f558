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
EXAMPLES = ["transformer", "she", "he", "we", "me", "macaron", "macaron_she", "postnorm", "rk4", "linear_attention",
            "gla", "retnet", "ssm"]
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
    defs = ["-D", "layers=2", "-D", "d=16", "-D", "ffn=24", "-D", "context=8", "-D", "vocab=256", "-D", "dropout=0"]
    if ex not in ("she", "he", "we", "me", "macaron_she", "ssm"):
        defs += ["-D", "heads=2"]
    so, py, ck = (os.path.join(tmp, f"{ex}.{s}") for s in ("so", "py", "safetensors"))
    subprocess.run([XFC, f"examples/{ex}.xf", *defs, "-o", so], check=True)
    with open(py, "w") as f:
        subprocess.run([XFC, "--emit=pytorch", f"examples/{ex}.xf", *defs], stdout=f, check=True)
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


torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "text.txt"), "w") as f:
        f.write("the cat sat on the mat. the dog ran to the tree. " * 300)
    os.environ["XF_CACHE_DIR"] = os.path.join(tmp, "cache")
    for ex in sys.argv[4:] or EXAMPLES:
        try:
            one(ex, tmp)
        except Exception as e:  # a generated module that does not run is a failure, named
            check(False, f"{ex}: {type(e).__name__}: {e}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
