#!/usr/bin/env bash
# The training recipe's --accum and --clip on the CUDA device, through the
# emulation (XF_CUDA_EMULATE=1: the generated CUDA source of the model and
# of the optimizer kernels, xf_grad_accum, xf_grad_norm, xf_grad_norm_sum,
# xf_adamw, run on the CPU), against the CPU. The transformer at 2 layers,
# d 16, context 8, dropout on, 8 steps of --batch 4 --accum 4 --clip 0.5:
#   - the logged loss and gradient norm of every step within 1e-6 relative;
#   - every final parameter within 1e-6 of the model's largest parameter
#     (max |cpu - cuda| over all elements / max |cpu| over all parameters);
#     the worst per tensor (max |cpu - cuda| / max |cpu| of the tensor) is
#     printed beside it;
#   - the step's CUDA graph gives the eager launches' parameters
#     (XF_CUDA_GRAPH=0) bit for bit: the graph reads the micro-batch and its
#     batch row from device memory (XfStepVars), not from its arguments;
#   - --accum 4 --batch 4 is --batch 16 on the device too (loss within 1e-6);
#   - the clip was active: the logged norm is above 0.5 on every step, the
#     parameters differ from a run without --clip, and --clip 100 (never
#     reached) gives those of no --clip bit for bit.
# Usage (from the repo root): tests/cuda/run_recipe.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. the dog ran to the tree. ' * 300)" > "$tmp/text.txt"
if ! "$xfc" --target=cuda -o "$tmp/t.so" examples/transformer.xf -D layers=2 -D d=16 -D context=8 -D ffn=24 -D vocab=256 \
  -D heads=2 > "$tmp/xfc.out" 2>&1; then
  if grep -q "without the CUDA toolkit" "$tmp/xfc.out"; then echo "skipped: no CUDA toolkit"; exit 77; fi
  bad "xfc --target=cuda: $(cat "$tmp/xfc.out")"
fi
train=(--data "$tmp/text.txt" --tokenizer bytes --seq 8 --seed 5 --threads 1 --steps 8)
recipe=(--batch 4 --accum 4)
run() {  # name device [env...] -- xfrun options: trains, logging to $tmp/name.csv, saving $tmp/name.st
  local name=$1 dev=$2
  shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env XF_CUDA_EMULATE=1 "${envs[@]}" "$xfrun" train "$tmp/t.so" --device "$dev" "${train[@]}" "$@" --log "$tmp/$name.csv" \
    --save "$tmp/$name.st" > "$tmp/$name.out" 2>&1 || bad "$name: $(tail -3 "$tmp/$name.out")"
}
run cpu cpu -- "${recipe[@]}" --clip 0.5
run emu cuda -- "${recipe[@]}" --clip 0.5
run eager cuda XF_CUDA_GRAPH=0 -- "${recipe[@]}" --clip 0.5
run b16 cuda -- --batch 16 --clip 0.5
run noclip cuda -- "${recipe[@]}"
run clip100 cuda -- "${recipe[@]}" --clip 100
grep -q "device: GPU 0 emulated" "$tmp/emu.out" && ok "the emulated device trained: $(grep -m1 'device:' "$tmp/emu.out" | cut -d: -f3-)" ||
  bad "no emulated device: $(head -3 "$tmp/emu.out")"

python3 - "$tmp" <<'PY' && ok "--accum and --clip on the CUDA device" || bad "--accum and --clip on the CUDA device"
import array, csv, json, struct, sys
tmp = sys.argv[1]
def log(name):
    return [(float(r["loss"]), float(r["grad_norm"])) for r in csv.DictReader(open(f"{tmp}/{name}.csv"))]
def params(name):  # the parameters of a checkpoint (safetensors, float32), not the optimizer's moments
    b = open(f"{tmp}/{name}.st", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k == "__metadata__" or k.startswith("optimizer."):
            continue
        s, e = v["data_offsets"]
        out[k] = array.array("f", b[8 + n + s:8 + n + e])
    return out
fails = []
def check(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what)
    if not cond:
        fails.append(what)
cpu, emu = log("cpu"), log("emu")
wl = max(abs(a[0] - b[0]) / abs(a[0]) for a, b in zip(cpu, emu))
wn = max(abs(a[1] - b[1]) / abs(a[1]) for a, b in zip(cpu, emu))
check(len(cpu) == len(emu) == 8 and wl <= 1e-6 and wn <= 1e-6,
      f"{len(emu)} steps of --batch 4 --accum 4 --clip 0.5, CPU against the emulated GPU: loss within {wl:.2e}, "
      f"gradient norm within {wn:.2e} relative (worst step)")
pc, pe = params("cpu"), params("emu")
big = max(max(abs(x) for x in t) for t in pc.values())
diff = max(max(abs(x - y) for x, y in zip(pc[k], pe[k])) for k in pc)
per, worst_k = max((max(abs(x - y) for x, y in zip(pc[k], pe[k])) / max(abs(x) for x in pc[k]), k) for k in pc)
check(sorted(pc) == sorted(pe) and diff / big <= 1e-6,
      f"final parameters ({len(pc)} tensors): max |cpu - cuda| {diff:.2e}, {diff / big:.2e} of the largest parameter "
      f"({big:.3g}); worst tensor relative to its own largest element: {per:.2e} ({worst_k})")
check(params("eager") == pe, "the step's CUDA graph and its eager launches (XF_CUDA_GRAPH=0): the same parameters, bit for bit")
b16 = log("b16")
w16 = max(abs(a[0] - b[0]) / abs(a[0]) for a, b in zip(b16, emu))
check(len(b16) == 8 and w16 <= 1e-6, f"on the device, --accum 4 --batch 4 = --batch 16: loss within {w16:.2e} relative")
norms = [n for _, n in emu]
check(min(norms) > 0.5, f"the clip was active: logged gradient norm {min(norms):.3f} .. {max(norms):.3f} > 0.5 on every step")
nc = log("noclip")
check(nc[0] == emu[0] and params("noclip") != pe,
      "without --clip: the same first loss and norm (before any update), other parameters")
check(params("clip100") == params("noclip"), "--clip 100 (never reached: scale 1): the parameters of no --clip, bit for bit")
sys.exit(1 if fails else 0)
PY
finish
