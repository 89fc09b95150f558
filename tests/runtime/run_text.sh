#!/usr/bin/env bash
# Text in, text out with xfrun: a BPE tokenizer trained on the corpus and
# cached with the tokens, checkpoints, resuming bit for bit, evaluation from a
# checkpoint, reproducible sampling, long prompts, and the errors for a
# checkpoint or tokenizer of another model.
# Usage (from the repo root): tests/runtime/run_text.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache

mkdir "$tmp/books"
cp data/children/carroll-alice.txt data/children/blake-poems.txt "$tmp/books/"
small="-D layers=1 -D d=32 -D ffn=64 -D context=32"
"$xfc" -o "$tmp/she.so" examples/she.xf -D vocab=512 $small || bad "compile she.so"
"$xfc" -o "$tmp/wide.so" examples/she.xf -D vocab=512 -D layers=1 -D d=48 -D ffn=64 -D context=32 || bad "compile wide.so"
"$xfc" -o "$tmp/v300.so" examples/she.xf -D vocab=300 $small || bad "compile v300.so"
train() { "$xfrun" train "$tmp/she.so" --data "$tmp/books" --batch 4 --seq 32 --lr 0.003 --seed 3 --threads 2 "$@"; }

# 1. The first run trains a BPE of the model's vocabulary on the corpus and caches it with the tokens.
train --steps 20 --log "$tmp/a.csv" --save "$tmp/a.st" > "$tmp/a.out" 2> "$tmp/a.err" || bad "train: $(cat "$tmp/a.err")"
grep -q "training a byte-level BPE tokenizer of 512 tokens on 2 files" "$tmp/a.err" &&
  ls "$tmp"/cache/tokenizer-*-512.json "$tmp"/cache/tokens-*.bin > /dev/null 2>&1 &&
  ok "first run: BPE of 512 trained on the 2 files, tokenizer and tokens cached" || bad "first run: $(cat "$tmp/a.err"; ls "$tmp/cache")"
first=$(sed -n 2p "$tmp/a.csv" | cut -d, -f2) last=$(tail -1 "$tmp/a.csv" | cut -d, -f2)
python3 -c "import sys; sys.exit(0 if float('$first') > 5.5 and float('$last') < float('$first') - 0.5 else 1)" &&
  ok "the loss falls on BPE tokens: $first -> $last" || bad "loss $first -> $last"
# 2. The second run uses the cache and sees the same tokens: the same curve.
train --steps 20 --log "$tmp/a2.csv" > /dev/null 2> "$tmp/a2.err" || bad "second run"
! grep -q "training a byte-level BPE" "$tmp/a2.err" && cmp -s <(cut -d, -f1,2 "$tmp/a.csv") <(cut -d, -f1,2 "$tmp/a2.csv") &&
  ok "second run: cached tokenizer and tokens, identical loss curve" || bad "second run differs or retrains: $(cat "$tmp/a2.err")"

# 3. Resume: 10 steps, save, resume to 20 = 20 steps straight, bit for bit.
train --steps 10 --log "$tmp/b.csv" --save "$tmp/b.st" > /dev/null 2>&1 || bad "train 10 steps"
"$xfrun" train "$tmp/she.so" --data "$tmp/books" --threads 2 --resume "$tmp/b.st" --steps 20 --log "$tmp/b.csv" \
  --save "$tmp/b.st" > /dev/null 2> "$tmp/b.err" || bad "resume: $(cat "$tmp/b.err")"
grep -q "steps 11..20" "$tmp/b.err" && cmp -s <(cut -d, -f1,2 "$tmp/a.csv") <(cut -d, -f1,2 "$tmp/b.csv") &&
  ok "resumed at step 11: the loss curve of steps 1..20 is identical to the uninterrupted run ($(tail -1 "$tmp/b.csv" | cut -d, -f2))" ||
  bad "resume differs: $(diff <(cut -d, -f1,2 "$tmp/a.csv") <(cut -d, -f1,2 "$tmp/b.csv") | head -5)"
same_checkpoint "$tmp/a.st" "$tmp/b.st" && ok "the checkpoints after 20 steps are identical (parameters, moments, step; all but the run.* paths)" ||
  bad "checkpoints of the straight and the resumed run differ"
train --steps 6 --save-every 4 --save "$tmp/c.st" > /dev/null 2>&1 && python3 - "$tmp/c.st" <<'PY' && ok "--save-every 4 --steps 6: the last checkpoint is at step 6" || bad "--save-every"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
sys.exit(0 if json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]["step"] == "6" else 1)
PY

# 4. Evaluation from a checkpoint beats fresh parameters.
fresh=$("$xfrun" eval "$tmp/she.so" --data "$tmp/books" --batch 4 --threads 2 2>/dev/null | sed 's/.*held-out loss \([0-9.]*\).*/\1/')
trained=$("$xfrun" eval "$tmp/she.so" --checkpoint "$tmp/a.st" --data "$tmp/books" --batch 4 --threads 2 2>/dev/null | sed 's/.*held-out loss \([0-9.]*\).*/\1/')
python3 -c "import sys; sys.exit(0 if float('$trained') < float('$fresh') - 0.5 else 1)" 2>/dev/null &&
  ok "eval --checkpoint: held-out loss $trained (fresh parameters: $fresh)" || bad "eval: trained '$trained' fresh '$fresh'"

# 5. Sampling: the checkpoint carries the tokenizer; a seed fixes the text.
sample() { "$xfrun" sample "$tmp/she.so" --checkpoint "$tmp/a.st" --threads 2 "$@"; }
sample --prompt "Alice was" --max-tokens 30 --seed 4 > "$tmp/s1" 2> "$tmp/s.err" || bad "sample: $(cat "$tmp/s.err")"
sample --prompt "Alice was" --max-tokens 30 --seed 4 > "$tmp/s2" 2>/dev/null
sample --prompt "Alice was" --max-tokens 30 --seed 5 > "$tmp/s3" 2>/dev/null
cmp -s "$tmp/s1" "$tmp/s2" && ! cmp -s "$tmp/s1" "$tmp/s3" && grep -q "^Alice was" "$tmp/s1" &&
  [ "$(wc -c < "$tmp/s1")" -gt 30 ] && ok "sample: seed 4 twice gives the same text, seed 5 another: $(head -c 80 "$tmp/s1" | tr '\n' ' ')" ||
  bad "sample: $(cat "$tmp/s1" "$tmp/s3")"
# Greedy decoding with two long prompts that differ only beyond the context window continue alike.
python3 - "$tmp" <<'PY'
import sys
tail = " ".join(["the queen said that the king and the knave and the hatter were all mad"] * 6)
open(sys.argv[1] + "/p1", "w").write("Alice sat by the river bank and thought about rabbits and cats. " * 5 + tail)
open(sys.argv[1] + "/p2", "w").write("Down the hole she fell for a long time, past cupboards and shelves. " * 5 + tail)
PY
sample --prompt "$(cat "$tmp/p1")" --max-tokens 15 --temperature 0 > "$tmp/g1" 2> "$tmp/g1.err" || bad "long prompt: $(cat "$tmp/g1.err")"
sample --prompt "$(cat "$tmp/p2")" --max-tokens 15 --temperature 0 > "$tmp/g2" 2>/dev/null
[ "$(tail -c 200 "$tmp/g1")" = "$(tail -c 200 "$tmp/g2")" ] && [ "$(wc -c < "$tmp/g1")" -gt "$(wc -c < "$tmp/p1")" ] &&
  ok "prompts longer than the context keep their last 32 tokens: $(tail -c 60 "$tmp/g1" | tr '\n' ' ')" || bad "long prompts: $(tail -c 100 "$tmp/g1") | $(tail -c 100 "$tmp/g2")"

# 6. Errors: another model's checkpoint, another vocabulary, bad sampling settings.
expect_error "resume with a checkpoint of another model names the tensor" "tensor '.*' has shape \[.*32\], model 'she' needs \[.*48\]" \
  "$xfrun" train "$tmp/wide.so" --data "$tmp/books" --resume "$tmp/a.st" --steps 30
expect_error "sample with a checkpoint of another model" "has shape" "$xfrun" sample "$tmp/wide.so" --checkpoint "$tmp/a.st"
expect_error "the tokenizer's vocabulary must be the model's" "tokenizer .* has a vocabulary of 512, model .*v300.so has 300" \
  "$xfrun" train "$tmp/v300.so" --data "$tmp/books" --tokenizer "$(ls "$tmp"/cache/tokenizer-*-512.json)"
expect_usage "sample needs a checkpoint" "--checkpoint FILE is required" "$xfrun" sample "$tmp/she.so"
expect_usage "--top-p beyond 1" "top-p" "$xfrun" sample "$tmp/she.so" --checkpoint "$tmp/a.st" --top-p 1.5
expect_error "empty prompt" "prompt is empty" "$xfrun" sample "$tmp/she.so" --checkpoint "$tmp/a.st" --prompt ""
expect_error "not a checkpoint" "header length|too short" "$xfrun" sample "$tmp/she.so" --checkpoint "$tmp/books/blake-poems.txt"
expect_error "missing checkpoint" "cannot open checkpoint" "$xfrun" train "$tmp/she.so" --resume "$tmp/nope.st"
expect_error "a folder without text" "no .txt files" "$xfrun" train "$tmp/she.so" --data "$tmp/cache/.."/cache --steps 1

# 7. No --data: the bundled children's books.
"$xfrun" train "$tmp/v300.so" --steps 2 --batch 2 --threads 2 > "$tmp/d.out" 2> "$tmp/d.err" &&
  grep -q "tokenizer of 300 tokens on 5 files" "$tmp/d.err" && grep -q "held-out loss" "$tmp/d.out" &&
  ok "no --data: the 5 bundled children's books ($(grep -o 'on 5 files ([0-9.]* MB)' "$tmp/d.err"))" || bad "default corpus: $(cat "$tmp/d.err")"

finish
