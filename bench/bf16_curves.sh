#!/usr/bin/env bash
# Benchmark (not a test): how far --precision=bf16 moves a training curve:
# bf16 GEMM products, and on the CPU activations stored in bf16.
# Each example (2 layers, batch 16 x 64, seed 3, the bundled books) trained
# STEPS steps on the CPU twice, compiled with xfc --precision=bf16 and with
# the default (float32 GEMMs on the CPU); prints, per example, the worst
# relative loss difference over the steps and the final losses, and the
# CPU GEMMs line xfrun printed (bf16 products, or float32 and why). Results
# also in out/bench/bf16_curves.md.
# With DEVICE=cuda-emu the same on the emulated CUDA device (xfc
# --target=cuda, XF_CUDA_EMULATE=1 xfrun --device cuda: the CUDA C the GPU
# would run, on the host; docs/cuda.md), --precision=bf16 against
# --precision=fp32, BATCH x 64 tokens a step (the emulation runs about 500
# tokens/s at batch 16); results in out/bench/bf16_curves-cuda-emu.md.
# Usage: bench/bf16_curves.sh [example ...]
#   env: STEPS (default 200), THREADS (default: all cores), DEVICE (cpu, the
#        default, or cuda-emu), BATCH (default 16)
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/bench
mkdir -p "$out/curves"
. bench/lib.sh
release_build
steps=${STEPS:-200} threads=${THREADS:-$(nproc)} device=${DEVICE:-cpu} batch=${BATCH:-16}
case $device in
  cpu) target=() run=() where=CPU results=bf16_curves.md ;;
  cuda-emu) target=(--target=cuda) run=(--device cuda) where="emulated CUDA device" results=bf16_curves-cuda-emu.md
            export XF_CUDA_EMULATE=1 ;;
  *) echo "bench: DEVICE=$device: expected cpu or cuda-emu" >&2; exit 2 ;;
esac
examples=${*:-$(for f in examples/*.xf; do b=$(basename "$f" .xf); [ "$b" = gpt2_small ] || echo "$b"; done)}
gemms=
{
  echo "--precision=bf16 against float32 on the $where, $steps steps, 2 layers, batch $batch x 64, seed 3, $threads threads"
  echo
  echo "| example | worst relative loss difference | final loss bf16 | final loss float32 |"
  echo "| --- | --- | --- | --- |"
  for ex in $examples; do
    base=$out/curves/$ex-$device
    for pr in bf16 fp32; do
      if ! build-release/xfc "examples/$ex.xf" -D layers=2 "${target[@]}" --precision=$pr -o "$base.$pr.so" 2>"$base.$pr.log" ||
         ! build-release/xfrun train "$base.$pr.so" "${run[@]}" --batch "$batch" --seq 64 --seed 3 --eval-batches 1 \
           --steps "$steps" --threads "$threads" --log "$base.$pr.csv" >>"$base.$pr.log" 2>&1; then
        echo "| $ex | fail ($pr: $(tail -n 1 "$base.$pr.log")) | | |"
        continue 2
      fi
    done
    [ -z "$gemms" ] && gemms=$(grep -m1 -E 'CPU GEMMs|GEMMs in bf16' "$base.bf16.log" || echo "no GEMMs line")
    python3 - "$base.bf16.csv" "$base.fp32.csv" "$ex" <<'PY'
import csv, sys
a = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
b = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))]
w = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("| %s | %.2e | %.4f | %.4f |" % (sys.argv[3], w, a[-1], b[-1]))
PY
    rm -f "$base.bf16.so" "$base.fp32.so"
  done
  echo
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $gemms"
} | tee "$out/$results"
