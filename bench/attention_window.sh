#!/usr/bin/env bash
# Benchmark (not a test): what a sliding window saves. The GPT-2-small class
# (d 768, 12 heads of 64, FFN 3072, LAYERS layers) at batch 1 x SEQ, trained
# STEPS steady-state steps (xf's first step not timed) under xfrun's
# profiler, two ways on the same machine and thread count:
#   full      examples/gpt2_small.xf: causal attention over every earlier key
#   window W  bench/models/window.xf: stdlib SlidingWindowAttention (keys
#             i - W < j <= i; the fused op skips the keys before the window)
# and prints milliseconds per step of each, the attention kernels' time per
# step (the profile's attention, attention_lse, attention_grad and
# attention_dbias kernels, every layer) and the window's attention time as
# a fraction of full attention's, with the runtime's GEMM line. Results also
# in out/bench/window.md.
# Usage: bench/attention_window.sh
#   env: WINDOWS (default "128"), SEQ (default 1024), LAYERS (default 2),
#        STEPS (default 3), THREADS (default: all cores), DEFS (more xfc -D
#        options for both, e.g. "-D ffn=256 -D vocab=256")
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/bench
mkdir -p "$out"
. bench/lib.sh
release_build
windows=${WINDOWS:-128} seq=${SEQ:-1024} layers=${LAYERS:-2} steps=${STEPS:-3} threads=${THREADS:-$(nproc)}
read -r -a defs <<<"${DEFS:-}"
# "step_ms attention_ms" of xfc's model ($1, then -D overrides): the
# profile's means over the steps after the first
profile_ms() {
  local base=$out/window.$RANDOM
  build-release/xfc "$@" -D layers="$layers" -D context="$seq" "${defs[@]}" -o "$base.so" 2>"$base.log" || { echo "fail fail"; return; }
  build-release/xfrun train "$base.so" --steps $((steps + 1)) --batch 1 --seq "$seq" --threads "$threads" \
    --eval-batches 1 --profile >>"$base.log" 2>&1 || { echo "fail fail"; return; }
  grep -o -m1 'GEMM: .*' "$base.log" >"$out/window.gemm" || true
  awk '/^profile of/ { for (i = 1; i <= NF; i++) if ($i == "ms") step = $(i - 1) }
       $4 ~ /^k[0-9.s]+$/ && $5 ~ /^attention/ { att += $2 }
       END { printf "%.1f %.1f", step, att }' "$base.log"
  rm -f "$base.so" "$base.log"
}
read -r full_step full_att <<<"$(profile_ms examples/gpt2_small.xf)"
{
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads; $(cat "$out/window.gemm")"
  echo "GPT-2-small class, $layers layers, batch 1 x $seq${DEFS:+ ($DEFS)}, milliseconds per training step (xfrun --profile, mean of $steps):"
  echo
  echo "| attention | ms / step | attention kernels ms / step | / full attention |"
  echo "| --- | --- | --- | --- |"
  echo "| full causal | $full_step | $full_att | 1 |"
  for w in $windows; do
    read -r win_step win_att <<<"$(profile_ms bench/models/window.xf -D window="$w")"
    echo "| window $w | $win_step | $win_att | $(awk -v a="$win_att" -v b="$full_att" 'BEGIN { printf "%.2f", a / b }') |"
  done
} | tee "$out/window.md"
