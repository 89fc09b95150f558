#!/usr/bin/env bash
# xfrun end to end: training lowers the loss on a byte file, two runs with
# the same seed and thread count give the same loss curve bit for bit, and
# every bad input gets a one-line error and exit status 1.
# Usage (from the repo root): tests/runtime/run_xfrun.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache

# a text of 40 kB: a few sentences repeated with variations
python3 - "$tmp/text.txt" <<'PY'
import sys, random
random.seed(3)
words = "the cat sat on a mat and the dog ran to the tree while a bird sang".split()
out = []
while sum(len(w) + 1 for w in out) < 40000:
    out += random.sample(words, 6) + ["."]
open(sys.argv[1], "w").write(" ".join(out))
PY
"$xfc" -o "$tmp/me.so" examples/me.xf -D vocab=256 -D layers=1 -D d=32 -D ffn=64 -D context=32 || bad "compile me.so"
"$xfc" -o "$tmp/she.so" examples/she.xf -D vocab=256 -D layers=1 -D d=32 -D ffn=64 -D context=32 || bad "compile she.so"

# the generated code is deterministic: the same input gives the same bytes
"$xfc" -o "$tmp/she2.so" examples/she.xf -D vocab=256 -D layers=1 -D d=32 -D ffn=64 -D context=32
cmp -s "$tmp/she.so" "$tmp/she2.so" && ok "xfc -o twice: identical bytes" || bad "xfc -o twice gives different files"
ldd "$tmp/she.so" | grep -v -E 'linux-vdso|libc\.so|libm\.so|ld-linux' | grep -q . && bad "model.so needs more than libc and libm: $(ldd "$tmp/she.so")" || ok "model.so depends on libc and libm only"
llvm=$("$xfc" --emit=llvm -O0 examples/me.xf -D vocab=256 -D layers=1 -D d=8 -D ffn=8 -D context=8)
printf '%s' "$llvm" | grep -q '^define internal void @xf_prog_train' && printf '%s' "$llvm" | grep -q '^@xf_model = constant' &&
  ok "--emit=llvm prints the module with its programs and descriptor" || bad "--emit=llvm output"

# training lowers the loss below a bound; the same seed gives the same curve
for run in 1 2; do
  "$xfrun" train "$tmp/she.so" --data "$tmp/text.txt" --steps 150 --batch 8 --seq 32 --lr 0.003 --seed 7 --threads 2 \
    --tokenizer bytes --log "$tmp/run$run.csv" > "$tmp/run$run.out" 2> "$tmp/run$run.err" || bad "train run $run exits 0"
done
first=$(sed -n 2p "$tmp/run1.csv" | cut -d, -f2)
last=$(tail -1 "$tmp/run1.csv" | cut -d, -f2)
if python3 -c "import sys; f, l = float('$first'), float('$last'); sys.exit(0 if f > 5.0 and l < 2.6 else 1)"; then
  ok "training lowers the loss: $first -> $last (bound 2.6)"
else
  bad "training lowers the loss: $first -> $last (want first > 5.0, last < 2.6)"
fi
if diff <(cut -d, -f1,2 "$tmp/run1.csv") <(cut -d, -f1,2 "$tmp/run2.csv") > /dev/null; then
  ok "two runs with seed 7 and 2 threads: identical loss curves ($(($(wc -l < "$tmp/run1.csv") - 1)) steps)"
else
  bad "two runs with the same seed differ"
fi
# --profile: every kernel's wall time over the steps after the first; the
# shares add up to the kernels' total, which is at most the step's time
"$xfrun" train "$tmp/she.so" --data "$tmp/text.txt" --steps 4 --batch 8 --seq 32 --threads 2 --tokenizer bytes \
  --eval-batches 1 --profile > "$tmp/prof.out" 2> "$tmp/prof.err" || bad "train --profile exits 0: $(cat "$tmp/prof.err")"
python3 tests/check_profile.py "$tmp/prof.out" 3 "" '^k[0-9]+ matmul \S+:[0-9]+$' "fused=weight_grad" "cross_entropy" &&
  ok "--profile: $(head -1 "$tmp/prof.out")" || bad "--profile output: $(cat "$tmp/prof.out")"
# the model's other scalar outputs are logged by name after the fixed columns
"$xfc" -o "$tmp/side.so" tests/runtime/side_output.xf || bad "compile side_output.xf"
"$xfrun" train "$tmp/side.so" --data "$tmp/text.txt" --steps 5 --batch 4 --seq 32 --threads 2 --tokenizer bytes \
  --eval-batches 1 --log "$tmp/side.csv" > /dev/null 2>&1 || bad "train side_output.so exits 0"
python3 - "$tmp/side.csv" <<'PY' && ok "a side output is logged: $(sed -n 2p "$tmp/side.csv" | cut -d, -f10)" || bad "side output log: $(head -3 "$tmp/side.csv")"
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert list(rows[0].keys())[-1] == "penalty" and len(rows) == 5, rows[0].keys()
v = [float(r["penalty"]) for r in rows]
assert all(math.isfinite(x) and 0 < x < 2 for x in v) and len(set(v)) > 1, v
PY
grep -q "held-out loss" "$tmp/run1.out" && ok "train reports the held-out loss" || bad "no held-out loss: $(cat "$tmp/run1.out")"
"$xfrun" eval "$tmp/me.so" --data "$tmp/text.txt" --tokenizer bytes --seq 32 > "$tmp/eval.out" 2>&1 &&
  grep -q "perplexity" "$tmp/eval.out" && ok "eval prints loss and perplexity" || bad "eval: $(cat "$tmp/eval.out")"

# bad inputs: exit status 1 and a one-line message naming the problem
head -c 3000 "$tmp/me.so" > "$tmp/truncated.so"
printf 'const struct { unsigned abi; } xf_model = {999};\n' > "$tmp/abi.c"
cc -shared -fPIC -o "$tmp/abi.so" "$tmp/abi.c"
: > "$tmp/empty.txt"
python3 -c "open('$tmp/bytes.bin', 'wb').write(bytes(range(256)) * 20)"
"$xfc" -o "$tmp/small_vocab.so" examples/me.xf -D vocab=100 -D layers=1 -D d=8 -D ffn=8 -D context=8
expect_error "missing model" "no such file" "$xfrun" train "$tmp/nope.so" --data "$tmp/text.txt"
expect_error "truncated model" "cannot load model" "$xfrun" train "$tmp/truncated.so" --data "$tmp/text.txt"
expect_error "model of another ABI" "ABI 999" "$xfrun" train "$tmp/abi.so" --data "$tmp/text.txt"
expect_error "not a model" "not an xf model" "$xfrun" train /usr/lib/x86_64-linux-gnu/libm.so.6 --data "$tmp/text.txt"
expect_error "missing data" "cannot open data file" "$xfrun" train "$tmp/me.so" --data "$tmp/nope.txt"
expect_error "empty data" "is empty" "$xfrun" train "$tmp/me.so" --data "$tmp/empty.txt"
expect_error "tokenizer and model vocabularies differ" "tokenizer bytes has a vocabulary of 256, model .*small_vocab.so has 100" "$xfrun" train "$tmp/small_vocab.so" --data "$tmp/bytes.bin" --tokenizer bytes
expect_error "a byte-level BPE needs 256 tokens" "vocabulary of 100 is smaller than the 256 byte tokens" "$xfrun" train "$tmp/small_vocab.so" --data "$tmp/bytes.bin"
expect_error "--seq beyond the context" "context length" "$xfrun" train "$tmp/me.so" --data "$tmp/text.txt" --seq 33
expect_usage "impossible --batch" "--batch 0: not a valid value" "$xfrun" train "$tmp/me.so" --data "$tmp/text.txt" --batch 0
expect_error "enormous --batch" "batch" "$xfrun" train "$tmp/me.so" --data "$tmp/text.txt" --batch 2000000000
expect_usage "unknown command" "unknown command .fly." "$xfrun" fly "$tmp/me.so"
head -c 60 "$tmp/text.txt" > "$tmp/short.txt"
expect_error "data too short" "too few" "$xfrun" train "$tmp/me.so" --data "$tmp/short.txt" --seq 32 --batch 1 --tokenizer bytes
finish
