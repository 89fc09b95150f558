#!/usr/bin/env python3
"""--stats against the closed forms of the papers.

seed 001 Table 7 (d = l = 128, exact figures), Tables 3 and 4 (closed forms
in d, l, n at other sizes), seed 003 Table 6.1 (parameters of FFN, layer
norm, attention), and whole-model parameter totals.
Usage (from the repo root): tests/stats/test_stats.py path/to/xfc
"""
import subprocess, sys
from fractions import Fraction as F

XFC = sys.argv[1]
passed = failed = 0

def stats(example, **defs):
    args = [XFC, "--stats", f"examples/{example}.xf"]
    for k, v in defs.items():
        args += ["-D", f"{k}={v}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rows, total, per_token = {}, None, None
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("operations per generated token"):
            per_token = {}
        elif per_token is not None and len(parts) == 8 and parts[2].isdigit():
            per_token[parts[0]] = dict(zip(["block", "mul", "add", "div", "exp", "other", "ops"],
                                           [parts[1]] + [int(p) for p in parts[2:]]))
        elif not parts:
            if per_token is not None:
                stats.per_token = per_token
        if line.startswith("total parameters:"):
            total = int(parts[-1])
        elif len(parts) == 9 and parts[2].isdigit():
            rows[parts[0]] = dict(zip(["block", "params", "mul", "add", "div", "exp", "other", "ops"],
                                      [parts[1]] + [int(p) for p in parts[2:]]))
    return rows, total

def expect(name, got, want):
    global passed, failed
    if got == want:
        passed += 1
        print(f"ok   {name}: {got}")
    else:
        failed += 1
        print(f"FAIL {name}: got {got}, want {want}")

def check_row(label, row, **want):
    for k, v in want.items():
        expect(f"{label} {k}", row[k], int(v))

# ---- seed 001 Table 7: d = l = 128 ------------------------------------------
table7 = {
    # mixer: (example, defs, params, mul, add, div, exp, total)
    "1-head attention": ("transformer", {"heads": 1}, 65536, 10502144, 10420096, 16512, 8256, 20947008),
    "32-head attention": ("transformer", {"heads": 32}, 65536, 10502144, 10416128, 528384, 264192, 21710848),
    "SHE": ("she", {}, 2129920, 139476992, 139411456, 0, 0, 278888448),
    "HE": ("he", {}, 65536, 7364608, 7282688, 0, 0, 14647296),
    "WE": ("we", {}, 49152, 5267456, 5201920, 0, 0, 10469376),
    "ME": ("me", {}, 128, 1056768, 1040384, 0, 0, 2097152),
}
for label, (ex, defs, p, mul, add, div, exp, total) in table7.items():
    rows, _ = stats(ex, layers=1, **defs)
    check_row(f"Table 7 {label}", rows["lm.layers.0.mixer"], params=p, mul=mul, add=add, div=div, exp=exp, ops=total)

# ---- seed 001 Tables 3 and 4: closed forms at other sizes --------------------
def closed_forms(d, l, n):
    h = F(1, 2)
    return {
        "transformer": dict(mul=l*l*d + 4*l*d*d + l*d, add=l*l*d + 4*l*d*d - 4*l*d - l*n,
                            div=n*l*l + n*l, exp=h*n*l*l + h*n*l, params=4*d*d),
        "she": dict(mul=h*l*l*d*d + F(5, 2)*l*d*d + l*d, add=h*l*l*d*d + F(5, 2)*l*d*d - 3*l*d,
                    div=0, exp=0, params=l*d*d + 2*d*d),
        "he": dict(mul=h*l*l*d + F(3, 2)*l*d + 3*l*d*d, add=3*l*d*d + h*l*l*d - F(7, 2)*l*d,
                   div=0, exp=0, params=l*d + 3*d*d),
        "we": dict(mul=h*l*l*d + F(3, 2)*l*d + 2*l*d*d, add=2*l*d*d + h*l*l*d - F(5, 2)*l*d,
                   div=0, exp=0, params=l*d + 2*d*d),
        "me": dict(mul=h*l*l*d + h*l*d, add=h*l*l*d - h*l*d, div=0, exp=0, params=l),
    }
for d, l, n in [(64, 32, 4), (24, 40, 3), (16, 7, 1)]:
    forms = closed_forms(d, l, n)
    for ex, want in forms.items():
        defs = dict(d=d, context=l, layers=1)
        if ex == "transformer":
            defs["heads"] = n
        rows, _ = stats(ex, **defs)
        check_row(f"Tables 3-4 {ex} d={d} l={l} n={n}", rows["lm.layers.0.mixer"], **want)

# ---- seed 001 Tables 5 and 6: operations per generated token at position t ----
# Table 5's attention additions are checked in the table's own sum,
# (3(d-1)d/n + t(d/n-1) + (t-1)d/n + (t-1))n + (d-1)d = 2td + 4d^2 - 5d - n:
# its printed closed form, 2td - tn + t + 4d^2 - 5d - 1, equals the sum only
# for n = 1 (a slip in the paper; Table 3, which it increments, agrees with the sum).
def per_token_forms(d, t, n):
    return {
        "transformer": dict(mul=2*t*d + 4*d*d, add=(3*(d-1)*d//n + t*(d//n-1) + (t-1)*d//n + (t-1))*n + (d-1)*d,
                            div=2*t*n, exp=t*n),
        "she": dict(mul=t*d*d + 2*d*d + d, add=t*d*d + 2*d*d - 3*d, div=0, exp=0),
        "he": dict(mul=t*d + 3*d*d + d, add=t*d + 3*d*d - 4*d, div=0, exp=0),
        "we": dict(mul=t*d + 2*d*d + d, add=t*d + 2*d*d - 3*d, div=0, exp=0),
        "me": dict(mul=t*d, add=t*d - d, div=0, exp=0),
    }
for d, t, n in [(128, 128, 32), (128, 128, 1), (64, 32, 4), (24, 40, 3), (16, 7, 1)]:
    for ex, want in per_token_forms(d, t, n).items():
        if ex != "transformer" and n != 32 and (d, t) == (128, 128):
            continue
        defs = dict(d=d, context=t, layers=1)
        if ex == "transformer":
            defs["heads"] = n
        stats(ex, **defs)
        check_row(f"Tables 5-6 {ex} d={d} t={t} n={n}", stats.per_token["lm.layers.0.mixer"], **want)

# ---- seed 003 Table 6.1 and whole-model totals ---------------------------------
for d, c, v, l, m, n in [(128, 512, 5000, 128, 18, 32), (32, 96, 300, 16, 3, 4)]:
    rows, total = stats("transformer", d=d, ffn=c, vocab=v, context=l, layers=m, heads=n)
    check_row(f"Table 6.1 FFN d={d} c={c}", rows["lm.layers.0.ffn"], params=2*d*c + d + c)
    check_row(f"Table 6.1 layer norm d={d}", rows["lm.layers.0.sub1.ln"], params=2*d)
    check_row(f"Table 6.1 self-attention d={d}", rows["lm.layers.0.mixer"], params=4*d*d)
    layer = 4*d*d + (2*d*c + d + c) + 2 * 2*d
    want = v*d + l*d + m*layer + 2*d + d*v + v  # embeddings, layers, final LN, output layer (eq. 21)
    expect(f"transformer total params d={d} m={m}", total, want)
    _, mac = stats("macaron", d=d, ffn=c, vocab=v, context=l, layers=m, heads=n)
    # two FFNs of width c/2 (seed 004 section 4.1) and a third layer norm: + 3d per layer
    expect(f"macaron total params d={d} m={m}", mac, want + m * 3 * d)
    _, rk = stats("rk4", d=d, ffn=c, vocab=v, context=l, layers=m, heads=n)
    expect(f"rk4 total params (f shared by the 4 stages) d={d}", rk, want)

# RK4 evaluates its function four times: 4x the mixer's operations.
rows, _ = stats("rk4", layers=1)
base, _ = stats("transformer", layers=1)
expect("rk4 calls the mixer 4 times", rows["lm.layers.0.mixer"]["mul"], 4 * base["lm.layers.0.mixer"]["mul"])

# ---- the caches of incremental decoding (codegen/stepmem.c) --------------------
# Per sequence of l positions: what later positions read, and nothing else
# but the l token ids. Attention keeps K and V (2 m l d floats); an Extractor
# the input of its causal convolution (m l d floats); the rest (logits, the
# FFN, the norms) is workspace planned by lifetimes.
def step_memory(example, **defs):
    args = [XFC, "--stats", f"examples/{example}.xf"]
    for k, v in defs.items():
        args += ["-D", f"{k}={v}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    got = {"frame": 0}
    for line in out.splitlines():
        if "(a frame of " in line:  # every read of an earlier position looks back a bounded distance
            got["frame"] = int(line.split("(a frame of ")[1].split()[0])
        for key in ("caches", "workspace", "of which recurrent states"):
            if line.strip().startswith(key):
                got[key] = int(line.split("(")[-1].split()[0])
    return got

def tokens(l):
    return (4 * l + 63) // 64 * 64

for d, l, m in [(128, 128, 18), (32, 16, 3)]:
    kv = 2 * m * l * d * 4
    got = step_memory("transformer", d=d, context=l, layers=m, heads=4)
    expect(f"transformer caches d={d} l={l} m={m}: K and V (within 1.5x: {got['caches'] / kv:.4f}x)",
           got["caches"], kv + tokens(l))
    for ex in ("she", "we", "me"):
        got = step_memory(ex, d=d, context=l, layers=m)
        expect(f"{ex} caches d={d} l={l} m={m}: the convolution's input", got["caches"], m * l * d * 4 + tokens(l))

# A scan along time keeps one state row per sequence (codegen/stepmem.c):
# linear attention's mu [n, h, h] and nu [n, h, 1] per layer, the same at
# every context, beside the token ids of its frame of 2 positions (a scan
# looks back one); the caches do not grow with the position the model can
# reach.
for d, n, m in [(128, 8, 18), (32, 4, 3)]:
    h = d // n
    state = m * n * (h * h + h) * 4
    for l in (128, 1024):
        got = step_memory("linear_attention", d=d, heads=n, context=l, layers=m)
        expect(f"linear_attention frame d={d} n={n} l={l} m={m}", got["frame"], 2)
        expect(f"linear_attention caches d={d} n={n} l={l} m={m}: the scan states", got["caches"], state + tokens(2))
        expect(f"linear_attention recurrent states d={d} n={n} l={l} m={m}", got["of which recurrent states"], state)
    got = step_memory("transformer", d=d, heads=n, context=128, layers=m)
    expect(f"transformer recurrent states d={d} m={m}: none", got["of which recurrent states"], 0)

# Bounded lookbacks (codegen/stepmem.c step_frame): a sliding window of W
# keys decodes in a frame of W positions, K and V of W positions per layer
# at any context; Mamba's width-4 convolution in a frame of 4, its caches
# the convolution's input over 4 positions (m x 4 x 2d floats) and the
# selective scan's states (m x 2d x 16), the same at contexts 128 and 1024;
# full attention keeps the whole context (no frame).
for l in (256, 1024):
    got = step_memory("sliding_window", d=128, heads=4, context=l, layers=18, window=128)
    expect(f"sliding_window frame W=128 l={l}", got["frame"], 128)
    expect(f"sliding_window caches W=128 l={l}: K and V of 128 positions", got["caches"], 2 * 18 * 128 * 128 * 4 + tokens(128))
mamba = [step_memory("mamba", context=l) for l in (128, 1024)]
expect("mamba frame: the width-4 convolution", mamba[0]["frame"], 4)
expect("mamba caches: the same at contexts 128 and 1024", mamba[1]["caches"], mamba[0]["caches"])
expect("mamba caches: the convolution's input of 4 positions and the scans' states", mamba[0]["caches"],
       18 * 4 * 256 * 4 + 18 * 256 * 16 * 4 + tokens(4))
expect("transformer frame: none (attention over every key)", step_memory("transformer", context=128)["frame"], 0)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
