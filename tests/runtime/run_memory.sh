#!/usr/bin/env bash
# The memory xfrun allocates is the plan xfc reports: for every example,
# at two (batch, seq) pairs, the four figures of `xfc --stats` (activations
# and outputs, parameters/gradients/inputs, AdamW moments, total) equal
# those of xfrun train's memory line to the 0.1 MiB printed. The process's
# peak RSS stays within what the plan and the libraries explain.
# Usage (from the repo root): tests/runtime/run_memory.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
python3 -c "import sys; sys.stdout.write(''.join(chr(97 + (i * 7 + i // 13) % 26) for i in range(60000)))" > "$tmp/text.txt"

# four numbers in MiB: activations, persistent, moments, total
xfc_plan() {
  "$xfc" --stats "$@" | awk '/planned\)/ { a = $NF == "MiB" ? $(NF-1) : $NF } /parameters, gradients, inputs/ { p = $(NF-1) }
    /AdamW moments/ { m = $(NF-1) } /^  total/ { t = $(NF-1) } END { print a, p, m, t }'
}
xfrun_plan() {
  sed -n 's/^xfrun: memory: activations and outputs \([0-9.]*\) MiB, parameters, gradients, inputs \([0-9.]*\) MiB, AdamW moments \([0-9.]*\) MiB, total \([0-9.]*\) MiB$/\1 \2 \3 \4/p' "$1"
}

examples=$(ls examples/*.xf)
[ -n "$examples" ] || bad "no examples found"
for f in $examples; do
  ex=$(basename "$f" .xf)
  defs=(-D vocab=256 -D layers=2)
  "$xfc" "$f" "${defs[@]}" -o "$tmp/$ex.so" 2> "$tmp/$ex.xfc.err" || { bad "$ex: xfc: $(head -1 "$tmp/$ex.xfc.err")"; continue; }
  odd="5 77"; grep -q 'shorten' "$f" && odd="5 78"  # a time axis T / shorten: T a multiple of it
  for bs in "16 128" "$odd"; do
    read -r batch seq <<<"$bs"
    want=$(xfc_plan "$f" "${defs[@]}" --batch="$batch" --seq="$seq")
    "$xfrun" train "$tmp/$ex.so" --data "$tmp/text.txt" --tokenizer bytes --steps 1 --batch "$batch" --seq "$seq" \
      --threads 2 --eval-batches 1 > /dev/null 2> "$tmp/$ex.err" || { bad "$ex batch $batch seq $seq: xfrun: $(tail -1 "$tmp/$ex.err")"; continue; }
    got=$(xfrun_plan "$tmp/$ex.err")
    if [ -n "$got" ] && [ "$got" = "$want" ] && [ "$(echo "$want" | wc -w)" = 4 ]; then
      ok "$ex batch $batch seq $seq: xfc --stats and xfrun plan the same MiB (activations, persistent, moments, total): $got"
    else
      bad "$ex batch $batch seq $seq: xfc --stats '$want', xfrun '$got'"
    fi
  done
done

# peak RSS of a run at batch 64: the plan plus what the libraries, corpus
# and tokenizer take doing nothing (a run of --steps 0 at batch 1) plus 5 %
"$xfc" examples/transformer.xf -D vocab=256 -D layers=4 -o "$tmp/t4.so" || bad "compile transformer L4"
rss() { python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[0] if False else "'"$tmp"'/rss.err", "w"))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$@"; }
base=$(rss "$xfrun" train "$tmp/t4.so" --data "$tmp/text.txt" --tokenizer bytes --steps 0 --batch 1 --threads 2 --eval-batches 1)
peak=$(rss "$xfrun" train "$tmp/t4.so" --data "$tmp/text.txt" --tokenizer bytes --steps 2 --batch 64 --threads 2 --eval-batches 1)
plan=$(xfrun_plan "$tmp/rss.err" | awk '{ printf "%d", $4 }')
if [ -n "$plan" ] && [ "$peak" -le $((base + plan + plan / 20)) ]; then
  ok "transformer L4 batch 64: peak RSS $peak MiB <= idle $base MiB + plan $plan MiB + 5 %"
else
  bad "transformer L4 batch 64: peak RSS $peak MiB, idle $base MiB, plan '$plan' MiB"
fi
finish
