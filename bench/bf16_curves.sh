#!/usr/bin/env bash
# Benchmark (not a test): how far --precision=bf16 moves a training curve:
# bf16 GEMM products, and on the CPU activations stored in bf16.
# Each example (2 layers, batch 16 x 64, seed 3, the bundled books) trained
# STEPS steps on the CPU twice, compiled with xfc --precision=bf16 and with
# the default (float32 GEMMs on the CPU), and a third time in float32 with
# --no-fuse on the CPU: the model's rounding floor, two float32 runs that
# differ only in the order of their roundings. Prints, per example, the worst relative
# loss difference of bf16 against float32 over the steps, the final losses,
# the floor (the same difference between the two float32 runs), and the
# verdict against the stated tolerance: a worst difference of at most
# max(2e-2, 2 x floor) and final losses within max(1 %, 2 x the floor's
# final difference); then the CPU GEMMs line xfrun printed (bf16 products,
# or float32 and why). Results also in out/bench/bf16_curves.md.
# With DEVICE=cuda-emu the same on the emulated CUDA device (xfc
# --target=cuda, XF_CUDA_EMULATE=1 xfrun --device cuda: the CUDA C the GPU
# would run, on the host; docs/cuda.md), --precision=bf16 against
# --precision=fp32, BATCH x 64 tokens a step (the emulation runs about 500
# tokens/s at batch 16), the floor the float32 model.so run on the CPU (its
# own forms: the unfused emulation is too slow for 200 steps); results in
# out/bench/bf16_curves-cuda-emu.md.
# Usage: bench/bf16_curves.sh [example ...]
#   env: STEPS (default 200), THREADS (default: all cores), DEVICE (cpu, the
#        default, or cuda-emu), BATCH (default 16), JOBS (examples trained at
#        once, default 1; the emulation runs on one core, so JOBS=2 THREADS=1
#        on two cores)
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/bench
mkdir -p "$out/curves"
. bench/lib.sh
release_build
steps=${STEPS:-200} threads=${THREADS:-$(nproc)} device=${DEVICE:-cpu} batch=${BATCH:-16} jobs=${JOBS:-1}
case $device in
  cpu) target=() run=() where=CPU results=bf16_curves.md floor_what="unfused" ;;
  cuda-emu) target=(--target=cuda) run=(--device cuda) where="emulated CUDA device" results=bf16_curves-cuda-emu.md
            floor_what="on the CPU"
            export XF_CUDA_EMULATE=1 ;;
  *) echo "bench: DEVICE=$device: expected cpu or cuda-emu" >&2; exit 2 ;;
esac
examples=${*:-$(for f in examples/*.xf; do b=$(basename "$f" .xf); [ "$b" = gpt2_small ] || echo "$b"; done)}

# curve EX: the three runs of example EX and its table row, in $base.row.
curve() {
  local ex=$1 base=$out/curves/$1-$device pr
  for pr in bf16 fp32 floor; do
    local flags=(--precision="${pr/floor/fp32}" "${target[@]}") on=("${run[@]}")
    [ "$pr" = floor ] && [ "$device" = cpu ] && flags+=(--no-fuse)
    [ "$pr" = floor ] && [ "$device" != cpu ] && on=(--device cpu)
    if ! build-release/xfc "examples/$ex.xf" -D layers=2 "${flags[@]}" -o "$base.$pr.so" 2>"$base.$pr.log" ||
       ! build-release/xfrun train "$base.$pr.so" "${on[@]}" --batch "$batch" --seq 64 --seed 3 --eval-batches 1 \
         --steps "$steps" --threads "$threads" --log "$base.$pr.csv" >>"$base.$pr.log" 2>&1; then
      echo "| $ex | fail ($pr: $(tail -n 1 "$base.$pr.log")) | | | | |" > "$base.row"
      return
    fi
  done
  python3 - "$base.bf16.csv" "$base.fp32.csv" "$base.floor.csv" "$ex" > "$base.row" <<'PY'
import csv, sys
a, b, f = ([float(r["loss"]) for r in csv.DictReader(open(p))] for p in sys.argv[1:4])
worst = lambda x, y: max(abs(u - v) / abs(v) for u, v in zip(x, y))
final = lambda x, y: abs(x[-1] - y[-1]) / abs(y[-1])
w, fw, ff = worst(a, b), worst(f, b), final(f, b)
ok = w <= max(2e-2, 2 * fw) and final(a, b) <= max(1e-2, 2 * ff)
print("| %s | %.2e | %.4f | %.4f | %.2e, %.2f %% | %s |" % (sys.argv[4], w, a[-1], b[-1], fw, 100 * ff, "yes" if ok else "no"))
PY
  rm -f "$base.bf16.so" "$base.fp32.so" "$base.floor.so"
}

# JOBS examples at a time, each in its own rows file; the table in order.
running=0
for ex in $examples; do
  rm -f "$out/curves/$ex-$device.row"
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  curve "$ex" &
  running=$((running + 1))
done
wait
gemms=
for ex in $examples; do
  gemms=$(grep -m1 -E 'CPU GEMMs|GEMMs in bf16' "$out/curves/$ex-$device.bf16.log" 2>/dev/null) && break
done
{
  echo "--precision=bf16 against float32 on the $where, $steps steps, 2 layers, batch $batch x 64, seed 3, $threads threads"
  echo
  echo "| example | worst relative loss difference | final loss bf16 | final loss float32 | floor: float32 $floor_what against float32 (worst, final) | within tolerance |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for ex in $examples; do
    cat "$out/curves/$ex-$device.row" 2>/dev/null || echo "| $ex | fail (no row) | | | | |"
  done
  echo
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); ${gemms:-no GEMMs line}"
} | tee "$out/$results"
