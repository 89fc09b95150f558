#!/usr/bin/env bash
# Benchmark (not a test): what a sliding window saves. The GPT-2-small class
# (d 768, 12 heads of 64, FFN 3072, LAYERS layers) at batch 1 x SEQ, trained
# STEPS steady-state steps (xf's first step not timed) three ways on the same
# machine and thread count:
#   full      examples/gpt2_small.xf: causal attention over every earlier key
#   window W  bench/models/window.xf: stdlib SlidingWindowAttention (keys
#             i - W < j <= i; the fused op skips the keys before the window)
#   none      bench/models/window_none.xf: each attention replaced by its
#             four projections, (q + k + v) Wo
# and prints seconds per step of each, the attention's share of the step
# (full - none, window - none) and the window's attention time as a
# fraction of full attention's, with the runtime's GEMM line. Results also
# in out/bench/window.md.
# Usage: bench/attention_window.sh
#   env: WINDOWS (default "128"), SEQ (default 1024), LAYERS (default 2),
#        STEPS (default 3), THREADS (default: all cores), DEFS (more xfc -D
#        options for all three, e.g. "-D ffn=256 -D vocab=256": a smaller
#        rest of the step, so the attention's share is measured more finely)
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/bench
mkdir -p "$out"
. bench/lib.sh
release_build
windows=${WINDOWS:-128} seq=${SEQ:-1024} layers=${LAYERS:-2} steps=${STEPS:-3} threads=${THREADS:-$(nproc)}
read -r -a defs <<<"${DEFS:-}"
# seconds per step of xfc's model ($1, then -D overrides), over the steps after the first
step_s() {
  local base=$out/window.$RANDOM
  build-release/xfc "$@" -D layers="$layers" -D context="$seq" "${defs[@]}" -o "$base.so" 2>"$base.log" || { echo fail; return; }
  build-release/xfrun train "$base.so" --steps $((steps + 1)) --batch 1 --seq "$seq" --threads "$threads" \
    --eval-batches 1 --log "$base.csv" >>"$base.log" 2>&1 || { echo fail; return; }
  grep -o -m1 'GEMM: .*' "$base.log" >"$out/window.gemm" || true
  awk -F, 'NR == 2 { t0 = $4 } END { printf "%.3f", ($4 - t0) / (NR - 2) }' "$base.csv"
  rm -f "$base.so" "$base.csv" "$base.log"
}
none=$(step_s bench/models/window_none.xf)
full=$(step_s examples/gpt2_small.xf)
{
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads; $(cat "$out/window.gemm")"
  echo "GPT-2-small class, $layers layers, batch 1 x $seq${DEFS:+ ($DEFS)}, seconds per training step (mean of $steps):"
  echo
  echo "| attention | s / step | attention s / step | / full attention |"
  echo "| --- | --- | --- | --- |"
  echo "| none (projections only) | $none | - | - |"
  fa=$(awk -v a="$full" -v b="$none" 'BEGIN { printf "%.3f", a - b }')
  echo "| full causal | $full | $fa | 1 |"
  for w in $windows; do
    win=$(step_s bench/models/window.xf -D window="$w")
    wa=$(awk -v a="$win" -v b="$none" 'BEGIN { printf "%.3f", a - b }')
    echo "| window $w | $win | $wa | $(awk -v a="$wa" -v b="$fa" 'BEGIN { printf "%.2f", a / b }') |"
  done
} | tee "$out/window.md"
