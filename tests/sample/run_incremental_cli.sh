#!/usr/bin/env bash
# xfrun sample with the incremental decoder (the default) and with
# --no-incremental: the same text for a fixed seed, past the context length
# too; --num-samples draws several continuations in one batch, --prompts
# several prompts of different lengths in one batch; a model
# without a step program says why and recomputes. Text and notes are
# compared; the timing line (xfrun: prompt of ...) differs between runs
# and only the incremental decoder reports its caches.
# Usage (from the repo root): tests/sample/run_incremental_cli.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. the dog ran to the tree. ' * 300)" > "$tmp/text.txt"
# mamba and sliding_window (a window of 4) decode in a frame of 4 positions
# that moves along (docs/decoding.md, "Frames")
for ex in she transformer mamba sliding_window; do
  defs=(-D layers=2 -D d=32 -D context=16 -D ffn=64 -D vocab=256)
  grep -q 'heads' "examples/$ex.xf" && defs+=(-D heads=4)
  [ $ex = sliding_window ] && defs+=(-D window=4)
  "$xfc" -o "$tmp/$ex.so" examples/$ex.xf "${defs[@]}" || bad "compile $ex"
  "$xfrun" train "$tmp/$ex.so" --data "$tmp/text.txt" --tokenizer bytes --steps 40 --batch 8 --save "$tmp/$ex.st" \
    --threads 2 > /dev/null 2>&1 || bad "train $ex"
  for opts in "--temperature 0" "--seed 3" "--seed 4 --top-k 5 --num-samples 3"; do
    a=$("$xfrun" sample "$tmp/$ex.so" --checkpoint "$tmp/$ex.st" --prompt "the cat" --max-tokens 40 --threads 2 $opts 2>"$tmp/a.err")
    b=$("$xfrun" sample "$tmp/$ex.so" --checkpoint "$tmp/$ex.st" --prompt "the cat" --max-tokens 40 --threads 2 --no-incremental $opts 2>"$tmp/b.err")
    a="$a$(grep -avE '^xfrun: (prompt of|caches)' "$tmp/a.err")" b="$b$(grep -avE '^xfrun: (prompt of|caches)' "$tmp/b.err")"
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "$ex $opts: the same 40 tokens (past context 16) with and without --no-incremental" ||
      bad "$ex $opts: incremental '$a' vs full '$b'"
  done
  # prompts of 1, 14 and 24 tokens (past the context of 16: the context rule)
  # in one batch, one or two samples each
  printf 'the cat sat on\nt\n\nthe dog ran to the tree.\n' > "$tmp/prompts"
  for opts in "--temperature 0" "--seed 5 --num-samples 2"; do
    a=$("$xfrun" sample "$tmp/$ex.so" --checkpoint "$tmp/$ex.st" --prompts "$tmp/prompts" --max-tokens 25 --threads 2 $opts 2>/dev/null)
    b=$("$xfrun" sample "$tmp/$ex.so" --checkpoint "$tmp/$ex.st" --prompts "$tmp/prompts" --max-tokens 25 --threads 2 --no-incremental $opts 2>/dev/null)
    k=$(printf '%s\n' "$a" | grep -c '^--- prompt')
    [ -n "$a" ] && [ "$a" = "$b" ] && [ "$k" -ge 3 ] &&
      ok "$ex --prompts (3 lengths) $opts: $k streams, the same text with and without --no-incremental" ||
      bad "$ex --prompts $opts: incremental '$a' vs full '$b'"
  done
  n=$("$xfrun" sample "$tmp/$ex.so" --checkpoint "$tmp/$ex.st" --prompt "the" --max-tokens 10 --num-samples 4 --seed 9 | grep -c '^--- sample')
  [ "$n" = 4 ] && ok "$ex --num-samples 4: four continuations" || bad "$ex --num-samples 4 printed $n"
done
"$xfc" -o "$tmp/near.so" tests/fusion/attn_near.xf 2> "$tmp/near.err"
grep -q "tests/fusion/attn_near.xf:10:12: softmax mixes positions" "$tmp/near.err" && ok "xfc names the op that is not causal" ||
  bad "xfc note: $(cat "$tmp/near.err")"
expect_usage "--num-samples 0" "not a valid value" "$xfrun" sample "$tmp/she.so" --checkpoint "$tmp/she.st" --num-samples 0
printf '\n\r\n' > "$tmp/none"
expect_error "--prompts of empty lines" "no prompt in it" "$xfrun" sample "$tmp/she.so" --checkpoint "$tmp/she.st" --prompts "$tmp/none"
expect_error "--prompts missing" "cannot open" "$xfrun" sample "$tmp/she.so" --checkpoint "$tmp/she.st" --prompts "$tmp/absent"
expect_error "--prompt and --prompts" "give one of them" "$xfrun" sample "$tmp/she.so" --checkpoint "$tmp/she.st" --prompt x --prompts "$tmp/prompts"
finish
