#!/usr/bin/env bash
# xfrun compare end to end on tiny models:
#   - the outputs: per-run logs and checkpoints, curves.svg with every run,
#     table.md and table.csv with a row per model;
#   - fairness: the same model twice gives identical curves; different
#     models see identical batches (XF_TEST_BATCHES hook), other seeds other
#     batches;
#   - resume: a comparison interrupted with SIGINT exits 130 and the same
#     command finishes it, reaching the checkpoints of an uninterrupted one
#     byte for byte; finished runs are not redone;
#   - budgets: --tokens as steps, --seconds as a time limit;
#   - bad inputs: a file that does not compile names the file and the error;
#     mismatched vocabularies, a -D no model has: one line each, exit 1;
#   - usage errors (no model, no or two budgets, a misspelt option, a bad
#     value): exit 2 and "(see xfrun compare --help)"; --opt=value is
#     --opt value.
# Usage (from the repo root): tests/runtime/run_compare.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
python3 -c "import sys; sys.stdout.write(''.join(('the cat sat on the mat. ','a dog ran to the big tree. ','she said hello. ')[(i * 7) % 3] for i in range(3000)))" > "$tmp/text.txt"
small=(-D layers=1 -D d=16 -D ffn=32 -D context=16 -D vocab=256)
common=(--tokenizer bytes --data "$tmp/text.txt" --batch 4 --threads 1 --xfc "$xfc")

# two models, one twice, two seeds
XF_TEST_BATCHES=1 "$xfrun" compare examples/she.xf examples/transformer.xf examples/she.xf "${small[@]}" -D heads=2 "${common[@]}" \
  --steps 40 --seeds 2 -o "$tmp/a" > "$tmp/a.out" 2> "$tmp/a.err" || bad "compare: $(tail -3 "$tmp/a.err")"
r=$tmp/a/runs
for f in table.md table.csv curves.svg; do [ -s "$tmp/a/$f" ] || bad "no $f"; done
rows=$(grep -c '^| \(she\|transformer\|she-2\) |' "$tmp/a/table.md")
[ "$rows" = 3 ] && ok "table.md has a row per model" || bad "table.md: $(cat "$tmp/a/table.md")"
cmp -s "$tmp/a.out" "$tmp/a/table.md" && ok "the table is printed" || bad "stdout is not table.md"
[ "$(wc -l < "$tmp/a/table.csv")" = 4 ] && head -1 "$tmp/a/table.csv" | grep -q "heldout_loss_sd" &&
  ok "table.csv: header and 3 rows" || bad "table.csv: $(cat "$tmp/a/table.csv")"
[ "$(grep -c '<polyline class="median"' "$tmp/a/curves.svg")" = 6 ] && ok "curves.svg draws the 6 runs" ||
  bad "curves.svg has $(grep -c '<polyline class="median"' "$tmp/a/curves.svg") median curves"
grep -q '^| she | 14480 | 5.07e+04 |' "$tmp/a/table.md" && ok "parameters and training ops per token from xfc --stats" ||
  bad "she row: $(grep '^| she |' "$tmp/a/table.md")"
grep -q ' ± ' "$tmp/a/table.md" && ok "two seeds: mean ± standard deviation" || bad "no spread in the table"
# fairness
if diff <(cut -d, -f1,2 "$r/she-seed1.csv") <(cut -d, -f1,2 "$r/she-2-seed1.csv") > /dev/null &&
   diff <(cut -d, -f1,2 "$r/she-seed2.csv") <(cut -d, -f1,2 "$r/she-2-seed2.csv") > /dev/null; then
  ok "the same model twice: identical loss curves (both seeds)"
else
  bad "the same model twice gives different curves"
fi
if cmp -s "$r/she-seed1.batches" "$r/transformer-seed1.batches" && cmp -s "$r/she-seed2.batches" "$r/transformer-seed2.batches" &&
   [ "$(wc -l < "$r/she-seed1.batches")" = 40 ] && ! cmp -s "$r/she-seed1.batches" "$r/she-seed2.batches"; then
  ok "she and transformer saw the same 40 batches per seed; seeds 1 and 2 differ"
else
  bad "batches differ between models or agree between seeds"
fi
# finished runs are not redone
"$xfrun" compare examples/she.xf examples/transformer.xf examples/she.xf "${small[@]}" -D heads=2 "${common[@]}" \
  --steps 40 --seeds 2 -o "$tmp/a" > "$tmp/a2.out" 2> "$tmp/a2.err"
if [ "$(grep -c 'done before' "$tmp/a2.err")" = 6 ] && ! grep -q "xfrun: training" "$tmp/a2.err" && cmp -s "$tmp/a2.out" "$tmp/a.out"; then
  ok "run again: all 6 runs done before, the same table"
else
  bad "run again: $(grep -c 'done before' "$tmp/a2.err") runs done before"
fi

# interrupted and resumed = uninterrupted, byte for byte
args=(examples/she.xf examples/transformer.xf "${small[@]}" -D heads=2 "${common[@]}" --steps 1500)
"$xfrun" compare "${args[@]}" -o "$tmp/u" > /dev/null 2> "$tmp/u.err" || bad "uninterrupted: $(tail -2 "$tmp/u.err")"
"$xfrun" compare "${args[@]}" -o "$tmp/i" > /dev/null 2> "$tmp/i.err" &
pid=$!
for _ in $(seq 1 400); do
  [ -f "$tmp/i/runs/transformer-seed1.csv" ] && [ "$(wc -l < "$tmp/i/runs/transformer-seed1.csv")" -gt 200 ] && break
  sleep 0.05
done
kill -INT $pid
wait $pid
rc=$?
if [ $rc = 130 ] && grep -q "interrupted; run the same command again" "$tmp/i.err" && [ -f "$tmp/i/runs/she-seed1.done" ] &&
   [ ! -f "$tmp/i/runs/transformer-seed1.done" ]; then
  ok "SIGINT during the second run: exit 130, the first run kept, the second saved"
else
  bad "SIGINT: exit $rc: $(tail -2 "$tmp/i.err")"
fi
"$xfrun" compare "${args[@]}" -o "$tmp/i" > /dev/null 2> "$tmp/i2.err" || bad "resume: $(tail -2 "$tmp/i2.err")"
if grep -q "she seed 1: done before" "$tmp/i2.err" && grep -q "transformer seed 1 (2 of 2 runs): resuming" "$tmp/i2.err" &&
   same_checkpoint "$tmp/u/runs/transformer-seed1.safetensors" "$tmp/i/runs/transformer-seed1.safetensors" &&
   same_checkpoint "$tmp/u/runs/she-seed1.safetensors" "$tmp/i/runs/she-seed1.safetensors" &&
   diff <(cut -d, -f1,2 "$tmp/u/runs/transformer-seed1.csv") <(cut -d, -f1,2 "$tmp/i/runs/transformer-seed1.csv") > /dev/null; then
  ok "resumed: the checkpoints and the curve equal the uninterrupted comparison's, byte for byte"
else
  bad "resumed comparison differs from the uninterrupted one"
fi

# budgets
"$xfrun" compare examples/she.xf "${small[@]}" "${common[@]}" --tokens 1000 -o "$tmp/t" > /dev/null 2>&1
[ "$(tail -1 "$tmp/t/runs/she-seed1.csv" | cut -d, -f1)" = 16 ] && ok "--tokens 1000 at 4 x 16: 16 steps" ||
  bad "--tokens: $(tail -1 "$tmp/t/runs/she-seed1.csv")"
"$xfrun" compare examples/she.xf "${small[@]}" "${common[@]}" --seconds 1 -o "$tmp/s" > /dev/null 2> "$tmp/s.err"
if grep -q "time limit of .* s reached" "$tmp/s.err" && [ -f "$tmp/s/runs/she-seed1.done" ]; then
  ok "--seconds 1: stopped by the time limit after $(tail -1 "$tmp/s/runs/she-seed1.csv" | cut -d, -f1) steps"
else
  bad "--seconds: $(tail -2 "$tmp/s.err")"
fi

# a model's own values: FILE.xf:NAME=VALUE
"$xfrun" compare examples/transformer.xf:heads=1 examples/transformer.xf:heads=4 "${small[@]}" "${common[@]}" --steps 3 \
  -o "$tmp/h" > "$tmp/h.out" 2> "$tmp/h.err"
if grep -q '^| transformer-heads1 |' "$tmp/h.out" && grep -q '^| transformer-heads4 |' "$tmp/h.out" &&
   ! cmp -s "$tmp/h/runs/transformer-heads1.so" "$tmp/h/runs/transformer-heads4.so"; then
  ok "transformer.xf:heads=1 and :heads=4: two models, labelled by their values"
else
  bad "per-model values: $(tail -2 "$tmp/h.err")"
fi

# --opt=value is --opt value, for compare's own options and those passed to xfrun train; -oDIR is -o DIR
"$xfrun" compare examples/she.xf -D layers=1 -D d=16 -D ffn=32 -D context=16 -D vocab=256 --tokenizer bytes \
  --data "$tmp/text.txt" --batch 4 --seq 8 --threads 1 --xfc "$xfc" --steps 5 -o "$tmp/sp" > /dev/null 2> "$tmp/sp.err" ||
  bad "--opt value: $(tail -2 "$tmp/sp.err")"
"$xfrun" compare examples/she.xf -Dlayers=1 -Dd=16 -Dffn=32 -Dcontext=16 -Dvocab=256 --tokenizer=bytes \
  --data="$tmp/text.txt" --batch=4 --seq=8 --threads=1 --xfc="$xfc" --steps=5 -o"$tmp/eq" > /dev/null 2> "$tmp/eq.err" ||
  bad "--opt=value: $(tail -2 "$tmp/eq.err")"
if [ "$(wc -l < "$tmp/eq/runs/she-seed1.csv")" = 6 ] &&
   diff <(cut -d, -f1,2 "$tmp/sp/runs/she-seed1.csv") <(cut -d, -f1,2 "$tmp/eq/runs/she-seed1.csv") > /dev/null &&
   grep -q "seq 8" "$tmp/eq/table.md"; then
  ok "--steps=5 --batch=4 --seq=8 -Dname=value -oDIR: the same run as with separate values"
else
  bad "--opt=value differs: $(tail -2 "$tmp/eq.err")"
fi

# bad inputs
sed 's/SHE(d, context)/SHEE(d, context)/' examples/she.xf > "$tmp/broken.xf"
line=$(grep -n SHEE "$tmp/broken.xf" | cut -d: -f1)
expect_error "a file that does not compile" "compare: .*broken.xf does not compile: .*broken.xf:$line:[0-9]+: error" \
  "$xfrun" compare examples/she.xf "$tmp/broken.xf" "${small[@]}" "${common[@]}" --steps 5 -o "$tmp/b"
"$xfc" -o "$tmp/v300.so" examples/transformer.xf -D layers=1 -D d=16 -D ffn=32 -D context=16 -D vocab=300 -D heads=2
expect_error "mismatched vocabularies" "different vocabularies \(examples/she.xf 256, .*v300.so 300\)" \
  "$xfrun" compare examples/she.xf "$tmp/v300.so" "${small[@]}" "${common[@]}" --steps 5 -o "$tmp/b"
expect_error "a -D no model has" "-D colour=3: no model has a config value" \
  "$xfrun" compare examples/she.xf -D colour=3 "${common[@]}" --steps 5 -o "$tmp/b"
expect_error "a missing file" "nothere.xf: no such file" "$xfrun" compare nothere.xf --steps 3 -o "$tmp/b"
# usage errors: exit 2, the message and "(see xfrun compare --help)"
expect_usage "no model" "^xfrun compare: error: no model" "$xfrun" compare --steps 3 -o "$tmp/usage"
expect_usage "no budget" "give one budget" "$xfrun" compare examples/she.xf -o "$tmp/usage"
expect_usage "two budgets" "give one budget: .* \(got --steps and --seconds\)" \
  "$xfrun" compare examples/she.xf --steps 3 --seconds=2 -o "$tmp/usage"
expect_usage "a misspelt option" "unknown option --step \(did you mean --steps\?\)" \
  "$xfrun" compare examples/she.xf --step 3 -o "$tmp/usage"
expect_usage "a bad number" "--seeds 0: expected a whole number from 1 to 100" \
  "$xfrun" compare examples/she.xf --steps 3 --seeds=0 -o "$tmp/usage"
expect_usage "a bad pass-through value" "--batch x: not a valid value" \
  "$xfrun" compare examples/she.xf --steps 3 --batch=x -o "$tmp/usage"
expect_usage "-D without =" "-D layers: expected NAME=VALUE" \
  "$xfrun" compare examples/she.xf -D layers --steps 3 -o "$tmp/usage"
expect_usage "own values on a .so" "only a .xf input takes its own NAME=VALUE" \
  "$xfrun" compare "$tmp/v300.so:heads=1" --steps 3 -o "$tmp/usage"
expect_usage "a missing value" "--data needs a value" "$xfrun" compare examples/she.xf --steps 3 -o "$tmp/usage" --data
[ ! -e "$tmp/usage" ] && ok "usage errors create no output folder" || bad "a usage error created $tmp/usage"
finish
