#!/usr/bin/env bash
# Benchmark (not a test): the mixture of experts of examples/moe.xf (top-2 of
# 8 expert FFNs, seed 001 Table 1 widths: vocab 5000, context 128, d 128, FFN
# 512 per expert, 32 heads, dropout 0.1), batch 64 x 128, AdamW, at each layer
# count of LAYERS, on the same machine and thread count:
#   xf routed (-D dense=0: each expert one GEMM over only its tokens) and xf
#     dense (-D dense=1: every expert on every token, weighed by the gates:
#     the same model and values) in the same run, and routed / dense;
#   PyTorch eager and torch.compile of the same model written as a PyTorch
#     user writes it (bench/torch_ref.py moe: topk, then per expert the rows
#     routed to it, one matmul each, index_add back), and xf routed / best;
#   tokens/s over STEPS steps after the first (PyTorch: after 3 warm-up
#     steps), xf's planned memory, the peak RSS of each run, and the operations
#     per sequence xfc --stats counts in the first layer's mixture.
# Prints the GEMM line of xfrun beside the figures; writes out/bench/moe.md.
#
# Usage: bench/moe.sh
#   env: LAYERS (default "2 18"), STEPS (default 3), THREADS (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
layers_list=${LAYERS:-2 18} steps=${STEPS:-3} threads=${THREADS:-$(nproc)} batch=64
out=out/bench work=out/bench/moe py=bench/.venv/bin/python
mkdir -p "$work"
. bench/lib.sh
release_build
xfc=build-release/xfc xfrun=build-release/xfrun
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
head_line="CPU: ${cpu:-unknown}, $(nproc) cores, $threads threads; batch $batch x 128"
echo "$head_line"

table="| layers | run | tokens/s | planned MiB | peak RSS MiB | MoE ops / sequence (layer 0) |"$'\n'"| --- | --- | --- | --- | --- | --- |"
ratios=
gemm=
for layers in $layers_list; do
  declare -A tps=()
  for dense in 0 1; do
    run=$([ $dense = 0 ] && echo "xf routed" || echo "xf dense")
    base=$work/moe-l$layers-d$dense
    $xfc examples/moe.xf -D layers="$layers" -D dense=$dense -o "$base.so" 2>"$base.xfc.log" ||
      { echo "bench: xfc: $(grep -m1 error "$base.xfc.log")" >&2; exit 1; }
    ops=$($xfc --stats examples/moe.xf -D layers="$layers" -D dense=$dense | awk '$1 == "lm.layers.0.ffn" && !n++ { print $NF }')
    rm -f "$base.csv"
    peak_rss "$base.rss" $xfrun train "$base.so" --steps $((steps + 1)) --batch $batch --threads "$threads" \
      --eval-batches 1 --log "$base.csv" >"$base.log" 2>&1 ||
      { echo "bench: xfrun train ($run): $(tail -n 1 "$base.log")" >&2; exit 1; }
    tps[$dense]=$(awk -F, -v t=$((batch * 128)) 'NR == 2 { t0 = $4 } END { printf "%.1f", (NR - 2) * t / ($4 - t0) }' "$base.csv")
    plan=$(grep -o -m1 -E '[0-9.]+ MiB (planned|for batch)' "$base.log" | cut -d' ' -f1) || plan=-
    gemm=$(grep -o -m1 'GEMM: .*' "$base.log") || true
    line="| $layers | $run | ${tps[$dense]} | ${plan:--} | $(cat "$base.rss") | $ops |"
    echo "$line"
    table+=$'\n'$line
  done
  best=0
  if [ -x "$py" ]; then
    for mode in eager compile; do
      flag=$([ $mode = compile ] && echo --compile || true)
      base=$work/moe-l$layers-torch-$mode
      if $py bench/torch_ref.py moe $flag --layers "$layers" --batch $batch --seq 128 --steps "$steps" \
           --threads "$threads" >"$base.out" 2>"$base.err"; then
        read -r t rss _ < "$base.out"
        awk -v a="$t" -v b="$best" 'BEGIN { exit !(a + 0 > b + 0) }' && best=$t
      else
        t=fail rss=-
        echo "bench: torch_ref.py moe ($mode): $(tail -n 1 "$base.err")" >&2
      fi
      line="| $layers | torch $mode | $t | | $rss | |"
      echo "$line"
      table+=$'\n'$line
    done
  else
    echo "bench: no $py (bench/run.sh creates it): no PyTorch rows" >&2
  fi
  r="layers $layers: routed / dense $(ratio "${tps[0]}" "${tps[1]}"), routed / best torch $(ratio "${tps[0]}" "$best")"
  echo "$r"
  ratios+="- $r"$'\n'
  unset tps
done
{
  echo "# bench/moe.sh"
  echo
  echo "$head_line; ${gemm:-GEMM line not printed}"
  echo
  echo "$table"
  echo
  echo "$ratios"
} > "$out/moe.md"
echo "bench: wrote $out/moe.md"
