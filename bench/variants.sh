#!/usr/bin/env bash
# Benchmark (not a test): the attention variants of stdlib/attention.xf
# (examples/alibi, sliding_window, gqa, temperature, relative_bias: the
# transformer of seed 001 Table 1 with another attention; vocab 5000, context
# 128, d 128, FFN 512, 32 heads, dropout 0.1), batch 64 x 128, AdamW, at each
# layer count of LAYERS, on the same machine and thread count:
#   xf: each variant's training tokens/s and its ratio to the plain
#     transformer's (examples/transformer.xf) in the same run;
#   PyTorch: the same model three ways a PyTorch user would write it
#     (bench/torch_ref.py): SDPA eager, SDPA under torch.compile, and
#     FlexAttention compiled (--compile --flex: the score term a score_mod,
#     the mask a mask_mod and a block mask; "n/a" where torch cannot train
#     it: torch 2.15's FlexAttention has no backward on a CPU); xf / the
#     best of the three.
# Tokens/s over STEPS steps after the first (PyTorch: after 3 warm-up steps).
# Prints the GEMM line of xfrun beside the figures; writes out/bench/variants.md.
#
# Other examples built on the transformer's layer take the same table:
# `bench/variants.sh hourglass` (examples/hourglass.xf: its inner layers on
# the sequence shortened by 2; `layers` counts those, beside one full-length
# layer before and one after).
#
# Usage: bench/variants.sh [variant ...]
#   env: LAYERS (default "2 18"), STEPS (default 3), THREADS (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
layers_list=${LAYERS:-2 18} steps=${STEPS:-3} threads=${THREADS:-$(nproc)} batch=64
variants=${*:-alibi sliding_window gqa temperature relative_bias}
out=out/bench work=out/bench/variants py=bench/.venv/bin/python
for v in $variants; do
  [ -f "examples/$v.xf" ] || { echo "bench: no examples/$v.xf" >&2; exit 1; }
done
mkdir -p "$work"
. bench/lib.sh
release_build
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
head_line="CPU: ${cpu:-unknown}, $(nproc) cores, $threads threads; batch $batch x 128"
echo "$head_line"
[ -x "$py" ] || echo "bench: no $py (bench/run.sh creates it): no PyTorch columns" >&2

# xf_tps EX LAYERS: xf's training tokens/s, or "fail" (its log beside)
gemm=
xf_tps() {
  local base=$work/$1-l$2
  build-release/xfc "examples/$1.xf" -D layers="$2" -o "$base.so" 2>"$base.xfc.log" || { echo fail; return; }
  rm -f "$base.csv"
  build-release/xfrun train "$base.so" --steps $((steps + 1)) --batch $batch --threads "$threads" --eval-batches 1 \
    --log "$base.csv" >"$base.log" 2>&1 || { echo fail; return; }
  grep -o -m1 'GEMM: .*' "$base.log" >"$work/gemm" || true
  awk -F, -v t=$((batch * 128)) 'NR == 2 { t0 = $4 } END { printf "%.1f", (NR - 2) * t / ($4 - t0) }' "$base.csv"
}
# torch_tps EX LAYERS FLAGS...: torch_ref.py's tokens/s, or "fail"
torch_tps() {
  local ex=$1 layers=$2 base=$work/$1-l$2-torch${3:-}${4:-}
  shift 2
  [ -x "$py" ] || { echo -; return; }
  OMP_NUM_THREADS=$threads $py bench/torch_ref.py "$ex" "$@" --layers "$layers" --batch $batch --seq 128 \
    --steps "$steps" --threads "$threads" >"$base.out" 2>"$base.err" || {
    # torch 2.15's FlexAttention has no backward on a CPU: no training to time
    if grep -q 'does not support backward on CPU' "$base.err"; then echo "n/a (no CPU backward)"; else echo fail; fi
    return
  }
  read -r t _ <"$base.out"
  echo "$t"
}
best3() { printf '%s\n' "$@" | awk '$1 + 0 > b { b = $1 + 0 } END { if (b > 0) print b; else print "-" }'; }

table="| variant | layers | xf tok/s | / xf transformer | SDPA eager | SDPA compile | FlexAttention compile | xf / best torch |"
table+=$'\n'"| --- | --- | --- | --- | --- | --- | --- | --- |"
for layers in $layers_list; do
  base_tps=$(xf_tps transformer "$layers")
  line="| transformer | $layers | $base_tps | 1 | | | | |"
  echo "$line"
  table+=$'\n'$line
  for v in $variants; do
    x=$(xf_tps "$v" "$layers")
    [ "$x" = fail ] && echo "bench: xf $v L$layers: $(tail -n 1 "$work/$v-l$layers.log" 2>/dev/null)" >&2
    e=$(torch_tps "$v" "$layers") c=$(torch_tps "$v" "$layers" --compile) f=$(torch_tps "$v" "$layers" --compile --flex)
    for t in "$e" "$c" "$f"; do [ "$t" = fail ] && echo "bench: torch $v L$layers failed (logs in $work)" >&2; done
    b=$(best3 "$e" "$c" "$f")
    line="| $v | $layers | $x | $(ratio "$x" "$base_tps") | $e | $c | $f | $(ratio "$x" "$b") |"
    echo "$line"
    table+=$'\n'$line
  done
done
{
  echo "# bench/variants.sh"
  echo
  echo "$head_line; $(cat "$work/gemm" 2>/dev/null || echo "GEMM line not printed")"
  echo
  echo "$table"
} >"$out/variants.md"
echo "$(cat "$work/gemm" 2>/dev/null)"
echo "bench: wrote $out/variants.md"
