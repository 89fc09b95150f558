#!/usr/bin/env bash
# Resume loses nothing: the checkpoint records the run's settings.
#   - SIGINT mid-run with --data, --tokenizer bytes, --save, --log and
#     --threads 1; the line xfrun prints ("continue with: ...") run verbatim
#     gives the checkpoint of an uninterrupted run byte for byte, and its log
#     (step, loss, lr, gradient norm, held-out loss: every column but the
#     timings) byte for byte; the uninterrupted run is the same command in
#     another folder (the checkpoint records the paths as given);
#   - the resumed run reports where each setting came from, and what was
#     given again;
#   - --steps at or below the checkpoint's step is an error naming both;
#   - warnings: no --save, --threads above the cores, a prompt longer than
#     the context.
# Usage (from the repo root): tests/runtime/run_resume.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
mkdir -p "$tmp/a" "$tmp/b"
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. the dog ran to the tree. ' * 300)" > "$tmp/a/text.txt"
cp "$tmp/a/text.txt" "$tmp/b/text.txt"
"$xfc" -o "$tmp/a/m.so" examples/she.xf -D layers=2 -D d=32 -D context=16 -D ffn=64 -D vocab=256 2> /dev/null || bad "compile"
cp "$tmp/a/m.so" "$tmp/b/m.so"
steps=3000
run=(train m.so --data text.txt --tokenizer bytes --batch 4 --seq 16 --eval-every 500 --save ck.st --log run.csv --threads 1)

# the uninterrupted run
(cd "$tmp/b" && "$xfrun" "${run[@]}" --steps $steps > out.txt 2> err.txt) || bad "uninterrupted run: $(tail -2 "$tmp/b/err.txt")"

# interrupted once the log has 30 steps
cd "$tmp/a"
"$xfrun" "${run[@]}" --steps $steps > out.txt 2> int.err &
pid=$!
for _ in $(seq 1 600); do
  [ -f run.csv ] && [ "$(wc -l < run.csv)" -gt 30 ] && break
  sleep 0.02
done
kill -INT $pid
wait $pid
rc=$?
at=$(tail -1 run.csv | cut -d, -f1)
line=$(grep -o "continue with: .*" int.err | sed 's/^continue with: //')
if [ $rc = 130 ] && [ "$at" -lt $steps ] && [ "$line" = "$xfrun train m.so --resume ck.st" ]; then
  ok "SIGINT at step $at: exit 130, prints: $(grep -o 'interrupted.*' int.err | sed "s|$xfrun|xfrun|")"
else
  bad "SIGINT: exit $rc at step $at, line '$line': $(tail -2 int.err)"
fi
eval "$line" > resumed.out 2> resumed.err || bad "the printed line failed: $(tail -2 resumed.err)"
grep -qx "xfrun: resuming ck.st at step $at; from the checkpoint: --data text.txt --tokenizer bytes --save ck.st --log run.csv --threads 1 --eval-every 500 --steps $steps" resumed.err &&
  ok "the resumed run says where its settings came from: $(grep -o 'resuming.*' resumed.err)" || bad "no resume report: $(head -3 resumed.err)"
cmp -s ck.st "$tmp/b/ck.st" && ok "the printed line run verbatim: the checkpoint equals the uninterrupted run's, byte for byte" ||
  bad "resumed checkpoint differs from the uninterrupted one"
cols() { cut -d, -f1,2,5,6,7 "$1"; }
if cmp -s <(cols run.csv) <(cols "$tmp/b/run.csv") && [ "$(wc -l < run.csv)" = $((steps + 1)) ]; then
  ok "the log: $steps rows, step, loss, lr, gradient norm and held-out loss equal the uninterrupted run's, byte for byte"
else
  bad "the resumed log differs: $(diff <(cols run.csv) <(cols "$tmp/b/run.csv") | head -4)"
fi
cmp -s resumed.out "$tmp/b/out.txt" &&
  ok "the final line equals the uninterrupted run's: $(cat resumed.out)" || bad "final line: $(cat resumed.out) vs $(cat "$tmp/b/out.txt")"

# a run that is complete, and --steps at or below the checkpoint's step
expect_error "resume a complete run" "ck.st is at step $steps already and --steps is $steps \(the run it recorded is complete\): give --steps above $steps" \
  "$xfrun" train m.so --resume ck.st
expect_error "--steps below the checkpoint's step" "ck.st is at step $steps already and --steps is 10: give --steps above $steps" \
  "$xfrun" train m.so --resume ck.st --steps 10
# options given again override and are reported
"$xfrun" train m.so --resume ck.st --steps=$((steps + 5)) --log other.csv > /dev/null 2> over.err
grep -q "; given: --log other.csv --steps $((steps + 5))$" over.err && [ "$(wc -l < other.csv)" = 6 ] &&
  ok "--steps=N and --log given again: reported and used ($(grep -o 'given:.*' over.err))" || bad "overrides: $(head -2 over.err)"

# warnings
"$xfrun" train m.so --data text.txt --tokenizer bytes --steps 1 --batch 2 > /dev/null 2> nosave.err
grep -q "^xfrun: warning: no --save: the trained parameters will not be kept (give --save FILE)$" nosave.err &&
  ok "no --save: $(grep -o 'warning.*' nosave.err)" || bad "no --save warning: $(head -3 nosave.err)"
cores=$(getconf _NPROCESSORS_ONLN)
"$xfrun" train m.so --data text.txt --tokenizer bytes --steps 1 --batch 2 --threads $((cores + 1)) --save t.st > /dev/null 2> threads.err
grep -q "warning: --threads $((cores + 1)) is more than the $cores cores here" threads.err &&
  ok "--threads above the cores: $(grep -o 'warning.*' threads.err)" || bad "--threads warning: $(head -3 threads.err)"
long=$(python3 -c "print('abcdefgh' * 6)")
"$xfrun" sample m.so --checkpoint ck.st --prompt "$long" --max-tokens 2 > /dev/null 2> prompt.err
grep -q "xfrun: the prompt has 48 tokens, more than the model's context of 16: it keeps the last 16" prompt.err &&
  ok "a long prompt: $(grep -o 'the prompt has.*' prompt.err)" || bad "long prompt: $(head -3 prompt.err)"
finish
