"""xfrun checkpoints with the real safetensors package (PyPI), both ways.

Usage: .venv/bin/python tests/runtime/test_safetensors.py path/to/test_checkpoint

1. test_checkpoint writes a checkpoint whose values are known (tensor k in
   parameter, exp_avg, exp_avg_sq order, element i = value(k, i)); safetensors'
   safe_open and load_file read it, every tensor and the metadata match.
2. safetensors' save_file writes 2x those tensors (keeping the metadata);
   test_checkpoint loads that file into the model and checks every value.
3. A file with an extra tensor, and one in F64, are refused with their names.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError as e:
    print(f"FAIL: the safetensors and numpy packages are needed ({e}); run scripts/setup-pydeps "
          "(it installs them from PyPI, which must be reachable)")
    sys.exit(1)

tool = sys.argv[1]
failed = 0


def check(cond, what):
    global failed
    print(("ok   " if cond else "FAIL ") + what)
    failed += not cond


def value(k, n):
    i = np.arange(n, dtype=np.float64)
    return (np.sin(0.37 * k + 0.011 * i) * (1 + k % 3)).astype(np.float32)


with tempfile.TemporaryDirectory() as tmp:
    a = os.path.join(tmp, "a.safetensors")
    r = subprocess.run([tool, "write", a], capture_output=True, text=True)
    check(r.returncode == 0, f"test_checkpoint write: {r.stderr.strip()}")
    with safe_open(a, framework="np") as f:
        meta = f.metadata()
        names = list(f.keys())
        # xf's entry order (k of value(k, i)) is the order of the data offsets
        raw = open(a, "rb").read()
        header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
        order = sorted(names, key=lambda n: header[n]["data_offsets"][0])
        params = [n for n in order if not n.startswith("optimizer.")]
        check(order == params + ["optimizer.exp_avg." + n for n in params] + ["optimizer.exp_avg_sq." + n for n in params],
              f"{len(params)} parameters, then their exp_avg, then their exp_avg_sq: {len(names)} tensors")
        tensors = load_file(a)
        worst = 0
        for k, n in enumerate(order):
            t = f.get_tensor(n)
            check_t = t.dtype == np.float32 and np.array_equal(t.reshape(-1), value(k, t.size))
            worst += not check_t
            if not np.array_equal(tensors[n], t):
                worst += 1
        check(worst == 0, f"every value of {len(names)} tensors read by safe_open and load_file is as written")
        check(meta.get("format") == "xf-checkpoint/1" and meta.get("model") == "she" and meta.get("step") == "1234"
              and meta.get("note") == "written by test_checkpoint" and meta.get("optimizer") == "AdamW",
              f"metadata: format, model, step, note, optimizer ({len(meta)} keys)")
        check(tensors[params[0]].ndim >= 1 and all(d > 0 for d in tensors[params[0]].shape),
              f"shapes: {params[0]} is {tensors[params[0]].shape}")
    try:
        import torch
        from safetensors.torch import load_file as load_torch
    except ImportError:
        print("note: torch is not installed here; the numpy loader stands for both")
    else:
        tt = load_torch(a)
        check(all(torch.equal(tt[n], torch.from_numpy(tensors[n])) for n in names),
              f"safetensors.torch.load_file (torch {torch.__version__}) reads the same {len(tt)} tensors")
    # the other way: safetensors writes, xf reads
    b = os.path.join(tmp, "b.safetensors")
    save_file({n: 2 * t for n, t in tensors.items()}, b, metadata=meta)
    r = subprocess.run([tool, "check", b], capture_output=True, text=True)
    check(r.returncode == 0, f"test_checkpoint check (file written by safetensors.numpy): {r.stdout.strip()} {r.stderr.strip()}")
    c = os.path.join(tmp, "c.safetensors")
    extra = dict(tensors)
    extra["lm.extra_weight"] = np.zeros((3, 4), np.float32)
    save_file(extra, c, metadata=meta)
    r = subprocess.run([tool, "check", c], capture_output=True, text=True)
    check(r.returncode != 0 and "'lm.extra_weight' that model 'she' does not have" in r.stderr,
          f"an extra tensor is refused: {r.stderr.strip()}")
    d = os.path.join(tmp, "d.safetensors")
    f64 = dict(tensors)
    f64[params[0]] = tensors[params[0]].astype(np.float64)
    save_file(f64, d, metadata=meta)
    r = subprocess.run([tool, "check", d], capture_output=True, text=True)
    check(r.returncode != 0 and f"'{params[0]}' is F64" in r.stderr, f"an F64 tensor is refused: {r.stderr.strip()}")

print(f"{'FAIL' if failed else 'ok'}: {failed} failed")
sys.exit(1 if failed else 0)
