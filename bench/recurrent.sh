#!/usr/bin/env bash
# Benchmark (not a test): a recurrent mixer against self-attention in xf, on
# the same machine and thread count (issue 23). Seed 001 Table 1 sizes
# (vocab 5000, d 128, FFN 512, 8 heads, dropout 0.1) at LAYERS layers:
#   training: examples/linear_attention.xf and examples/transformer.xf at
#     each context of CONTEXTS, batches of 8192 tokens (64 x 128, 8 x 1024),
#     tokens/s over STEPS steps after the first, planned memory, peak RSS,
#     and linear attention / transformer;
#   sampling at the largest context: a prompt of about 100 tokens and one of
#     about 900, each continued by TOKENS tokens (batch 1, greedy), tokens/s
#     of each (the best of three runs) and their ratio: a cost per token that does not grow with the
#     position gives 1. The decoding memory per sequence is xfc --stats'.
# Writes out/bench/recurrent.md. No PyTorch: both sides are xf.
#
# Usage: bench/recurrent.sh
#   env: LAYERS (default 18), CONTEXTS (default "128 1024"), STEPS (default 3),
#        TOKENS (default 100), THREADS (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${LAYERS:-18} contexts=${CONTEXTS:-128 1024} steps=${STEPS:-3} tokens=${TOKENS:-100}
threads=${THREADS:-$(nproc)}
out=out/bench work=out/bench/recurrent
mkdir -p "$work"
. bench/lib.sh
release_build
xfc=build-release/xfc xfrun=build-release/xfrun
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
head_line="CPU: ${cpu:-unknown}, $(nproc) cores, $threads threads; $layers layers"
echo "$head_line"

table="| context | model | tokens/s | planned MiB | peak RSS MiB | linear / transformer |"$'\n'"| --- | --- | --- | --- | --- | --- |"
gemm=
for ctx in $contexts; do
  batch=$((8192 / ctx))
  declare -A tps=()
  for ex in transformer linear_attention; do
    base=$work/$ex-c$ctx
    $xfc "examples/$ex.xf" -D layers="$layers" -D context="$ctx" -o "$base.so" 2>"$base.xfc.log" ||
      { echo "bench: xfc $ex: $(grep -m1 error "$base.xfc.log")" >&2; exit 1; }
    rm -f "$base.csv"
    peak_rss "$base.rss" $xfrun train "$base.so" --steps $((steps + 1)) --batch "$batch" --threads "$threads" \
      --eval-batches 1 --log "$base.csv" --save "$base.safetensors" >"$base.log" 2>&1 ||
      { echo "bench: xfrun train $ex: $(tail -n 1 "$base.log")" >&2; exit 1; }
    tps[$ex]=$(awk -F, -v t=8192 'NR == 2 { t0 = $4 } END { printf "%.1f", (NR - 2) * t / ($4 - t0) }' "$base.csv")
    plan=$(grep -o -m1 -E '[0-9.]+ MiB (planned|for batch)' "$base.log" | cut -d' ' -f1) || plan=-
    gemm=$(grep -o -m1 'GEMM: .*' "$base.log") || true
    r=-
    [ "$ex" = linear_attention ] && r=$(ratio "${tps[linear_attention]}" "${tps[transformer]}")
    line="| $ctx | $ex | ${tps[$ex]} | ${plan:--} | $(cat "$base.rss") | $r |"
    echo "$line"
    table+=$'\n'$line
  done
  unset tps
done

# sampling at the largest context: prompts of about 100 and 900 tokens
ctx=${contexts##* }
first=$(ls data/children/*.txt)
first=${first%%$'\n'*}
text=$(tr -s '\n\r\t' '   ' < "$first")
stable="| model | prompt tokens | tokens/s | ms a step | decoding memory per sequence (KiB) |"$'\n'"| --- | --- | --- | --- | --- |"
for ex in transformer linear_attention; do
  base=$work/$ex-c$ctx
  mem=$($xfc --stats "examples/$ex.xf" -D layers="$layers" -D context="$ctx" |
        awk '/caches \(what later positions read\)/ { c = $(NF-3) } /workspace \(planned, every step\)/ { w = $(NF-3) } END { print c " + " w }')
  rates=()
  for chars in 280 2900; do
    rate=0
    for rep in 1 2 3; do  # the best of three: a run of 100 tokens takes tens of ms
      $xfrun sample "$base.so" --checkpoint "$base.safetensors" --threads "$threads" --temperature 0 \
        --prompt "${text:0:$chars}" --max-tokens "$tokens" >"$base.sample$chars.txt" 2>"$base.sample$chars.log" ||
        { echo "bench: xfrun sample $ex: $(tail -n 1 "$base.sample$chars.log")" >&2; exit 1; }
      read -r n r m <<<"$(sed -n 's/.*prompt of \([0-9]*\) tokens.* tokens in [0-9.]* s: \([0-9.]*\) tokens\/s, \([0-9.]*\) ms a step.*/\1 \2 \3/p' "$base.sample$chars.log")"
      if awk -v a="$r" -v b="$rate" 'BEGIN { exit !(a + 0 > b + 0) }'; then rate=$r ms=$m; fi
    done
    rates+=("$rate")
    line="| $ex | $n | $rate | $ms | $mem |"
    echo "$line"
    stable+=$'\n'$line
  done
  echo "$ex: tokens/s after the long prompt / after the short one: $(ratio "${rates[1]}" "${rates[0]}")"
  stable+=$'\n'"| $ex | long / short | $(ratio "${rates[1]}" "${rates[0]}") | | |"
done
{
  echo "# bench/recurrent.sh"
  echo
  echo "$head_line; ${gemm:-GEMM line not printed}"
  echo
  echo "Training, batches of 8192 tokens, $steps steps after the first:"
  echo
  echo "$table"
  echo
  echo "Sampling at context $ctx, batch 1, greedy, $tokens new tokens after each prompt:"
  echo
  echo "$stable"
} > "$out/recurrent.md"
echo "bench: wrote $out/recurrent.md"
