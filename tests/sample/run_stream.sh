#!/usr/bin/env bash
# examples/c/stream.c, the sampler's C API from a program of its own: for a
# trained transformer and SHE (BPE tokenizer in the checkpoint), its streamed
# text equals `xfrun sample`'s, greedy and with top-p 0.6; bad arguments say
# what is wrong.
# Usage (from the repo root): tests/sample/run_stream.sh xfc xfrun xf-stream
set -u
xfc=$1 xfrun=$2 stream=$3
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. the dog ran to the tree. ' * 300)" > "$tmp/text.txt"
# the vocabulary the merges reach (at most 300): the model's
v=$("$xfrun" tokenize --train --vocab 300 "$tmp/text.txt" -o "$tmp/tok.json" 2>&1 | sed -n 's/^tokenize: vocab \([0-9]*\).*/\1/p')
[ -n "$v" ] || bad "tokenizer"
for ex in transformer she; do
  "$xfc" -o "$tmp/$ex.so" examples/$ex.xf -D layers=2 -D d=32 -D context=16 -D ffn=64 -D vocab=$v -D heads=4 2>/dev/null ||
    "$xfc" -o "$tmp/$ex.so" examples/$ex.xf -D layers=2 -D d=32 -D context=16 -D ffn=64 -D vocab=$v || bad "compile $ex"
  "$xfrun" train "$tmp/$ex.so" --data "$tmp/text.txt" --tokenizer "$tmp/tok.json" --steps 30 --batch 8 --save "$tmp/$ex.st" \
    --threads 1 > /dev/null 2>&1 || bad "train $ex"
  for mode in "greedy" "top-p"; do
    if [ "$mode" = greedy ]; then
      want=$("$xfrun" sample "$tmp/$ex.so" --checkpoint "$tmp/$ex.st" --prompt "the cat" --max-tokens 30 --temperature 0 --threads 1 2>/dev/null)
      got=$("$stream" "$tmp/$ex.so" "$tmp/$ex.st" "the cat" 30 2>&1)
    else
      want=$("$xfrun" sample "$tmp/$ex.so" --checkpoint "$tmp/$ex.st" --prompt "the cat" --max-tokens 30 --top-p 0.6 --seed 7 --threads 1 2>/dev/null)
      got=$("$stream" "$tmp/$ex.so" "$tmp/$ex.st" "the cat" 30 0.6 7 2>&1)
    fi
    [ -n "$got" ] && [ "$got" = "$want" ] && ok "$ex $mode: stream.c prints xfrun sample's text ($(printf '%s' "$got" | wc -c) bytes)" ||
      bad "$ex $mode: stream.c '$got' vs xfrun '$want'"
  done
done
out=$("$stream" 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q "^usage: stream" && ok "no arguments: usage, exit 2" || bad "no arguments ($rc): $out"
out=$("$stream" "$tmp/none.so" "$tmp/she.st" "x" 2>&1); rc=$?
[ $rc -eq 1 ] && printf '%s' "$out" | grep -q "none.so" && ok "a missing model: $out" || bad "a missing model ($rc): $out"
finish
