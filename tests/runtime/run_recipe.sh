#!/usr/bin/env bash
# The training recipe of xfrun train (issue 24), each flag for what it
# promises:
#   - --lr-schedule cosine, linear and wsd with --warmup, --min-lr and
#     --cooldown: the logged rate of every step equals the formula of --help;
#   - --clip: the logged norm is the gradients' before clipping, and AdamW's
#     first moment after one step (in the checkpoint) is (1 - beta1) times
#     gradients of norm min(norm, clip);
#   - --weight-decay-on matrices: gains (rank 1) are not decayed, matrices are
#     the same as with decay on every parameter;
#   - --accum 4 --batch 4 reproduces --batch 16 within 1e-6 per step (loss and
#     gradient norm), dropout on;
#   - a run stopped mid-warm-up or mid-decay (a checkpoint of --save-every, the
#     process killed) and resumed ends with the same checkpoint, byte for byte,
#     and the same log rows, as an uninterrupted one;
#   - --eval-every N logs the held-out loss on every N-th step and the last;
#   - model GFLOP/s (xfc --stats' training ops per token x tokens/s) and its
#     fraction of the GEMM rate measured at start, in the log and progress;
#   - the options of train refused elsewhere, bad values refused.
# Usage (from the repo root): tests/runtime/run_recipe.sh path/to/xfc path/to/xfrun path/to/python
set -u
xfc=$1 xfrun=$2 py=${3:-python3}
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. the dog ran to the tree. ' * 300)" > "$tmp/text.txt"
"$xfc" -o "$tmp/t.so" examples/transformer.xf -D layers=2 -D d=16 -D context=8 -D ffn=24 -D vocab=256 -D heads=2 ||
  bad "compile the transformer"
train=(--data "$tmp/text.txt" --tokenizer bytes --seq 8 --seed 5 --threads 1)

# schedules: the logged rates against the formulas
check_rates() {  # label csv schedule lr min warmup steps cooldown
  python3 - "$@" <<'PY'
import csv, math, sys
label, path, kind = sys.argv[1:4]
lr, mn = float(sys.argv[4]), float(sys.argv[5])
warm, steps, cool = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
def want(s):
    if warm > 0 and s <= warm:
        return lr * s / warm
    p = min(max((s - warm) / (steps - warm), 0.0), 1.0) if steps > warm else 1.0
    if kind == "cosine":
        return mn + (lr - mn) * 0.5 * (1 + math.cos(math.pi * p))
    if kind == "linear":
        return lr + (mn - lr) * p
    if kind == "wsd":
        start = steps - cool
        return lr if s <= start else lr + (mn - lr) * min((s - start) / cool, 1.0)
    return lr
rows = list(csv.DictReader(open(path)))
worst = max(abs(float(r["lr"]) - want(int(r["step"]))) / lr for r in rows)
ok = len(rows) == steps and worst < 1e-8
print(f"{label}: {len(rows)} steps, worst |logged - formula| / lr {worst:.1e}")
sys.exit(0 if ok else 1)
PY
}
for spec in "cosine 3 0" "linear 0 0" "wsd 2 5"; do
  set -- $spec
  "$xfrun" train "$tmp/t.so" "${train[@]}" --batch 4 --steps 20 --lr 0.002 --min-lr 0.0002 --lr-schedule $1 --warmup $2 \
    $([ "$1" = wsd ] && echo --cooldown $3) --log "$tmp/$1.csv" > /dev/null 2>&1 || bad "$1: training"
  out=$(check_rates "$1, --warmup $2" "$tmp/$1.csv" $1 0.002 0.0002 $2 20 $3) && ok "$out" || bad "$out"
done
"$xfrun" train "$tmp/t.so" "${train[@]}" --batch 4 --steps 20 --lr-schedule wsd --lr 0.002 --log "$tmp/wsd_default.csv" > /dev/null 2>&1
out=$(check_rates "wsd, the default cooldown (a fifth of the steps)" "$tmp/wsd_default.csv" wsd 0.002 0 0 20 4) && ok "$out" || bad "$out"

# clipping: the first moment after one step is (1 - beta1) g min(1, clip / |g|)
"$xfrun" train "$tmp/t.so" "${train[@]}" --batch 4 --steps 1 --clip 0.05 --log "$tmp/clip.csv" --save "$tmp/clip.st" > /dev/null 2>&1
"$xfrun" train "$tmp/t.so" "${train[@]}" --batch 4 --steps 1 --log "$tmp/noclip.csv" --save "$tmp/noclip.st" > /dev/null 2>&1
out=$("$py" - "$tmp/clip.csv" "$tmp/clip.st" "$tmp/noclip.csv" "$tmp/noclip.st" <<'PY'
import csv, sys
import numpy as np
from safetensors.numpy import load_file
def moment_norm(path):
    t = load_file(path)
    return float(np.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for k, v in t.items() if k.startswith("optimizer.exp_avg."))))
norm = float(next(csv.DictReader(open(sys.argv[1])))["grad_norm"])
norm0 = float(next(csv.DictReader(open(sys.argv[3])))["grad_norm"])
clipped, unclipped = moment_norm(sys.argv[2]) / 0.1, moment_norm(sys.argv[4]) / 0.1
ok = norm == norm0 and norm > 0.05 and abs(clipped - 0.05) < 1e-6 and abs(unclipped - norm) / norm < 1e-5
print(f"logged norm {norm:.6g} (the same unclipped), gradients into AdamW {clipped:.6g} with --clip 0.05, {unclipped:.6g} without")
sys.exit(0 if ok else 1)
PY
) && ok "--clip: $out" || bad "--clip: $out"

# weight decay on matrices only: gains keep 1 - lr wd, matrices agree
for on in all matrices; do
  "$xfrun" train "$tmp/t.so" "${train[@]}" --batch 4 --steps 1 --weight-decay 0.5 --weight-decay-on $on --save "$tmp/wd_$on.st" > /dev/null 2>&1
done
out=$("$py" - "$tmp/wd_all.st" "$tmp/wd_matrices.st" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, m = load_file(sys.argv[1]), load_file(sys.argv[2])
params = [k for k in a if not k.startswith("optimizer.")]
vec = [k for k in params if a[k].ndim == 1]
mat = [k for k in params if a[k].ndim >= 2]
gains = [k for k in vec if k.endswith(".g")]
# gains start at 1: decayed, w = 1 (1 - lr wd) - u; not, w = 1 - u
dg = max(abs(float((m[k].astype(np.float64) - a[k]).mean()) - 0.001 * 0.5) for k in gains)
dm = max(float(np.abs(m[k] - a[k]).max()) for k in mat)
ok = len(gains) > 0 and len(mat) > 0 and dg < 1e-6 and dm == 0
print(f"{len(gains)} gains differ by lr wd = 5e-4 (worst error {dg:.1e}), {len(mat)} matrices identical (max diff {dm:g})")
sys.exit(0 if ok else 1)
PY
) && ok "--weight-decay-on matrices: $out" || bad "--weight-decay-on matrices: $out"

# accumulation: 4 micro-batches of 4 = one batch of 16, dropout on
"$xfrun" train "$tmp/t.so" "${train[@]}" --batch 16 --steps 12 --log "$tmp/b16.csv" > /dev/null 2>&1
"$xfrun" train "$tmp/t.so" "${train[@]}" --batch 4 --accum 4 --steps 12 --log "$tmp/a4.csv" > "$tmp/a4.out" 2>&1
out=$(python3 - "$tmp/b16.csv" "$tmp/a4.csv" <<'PY'
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
wl = max(abs(float(x["loss"]) - float(y["loss"])) / float(x["loss"]) for x, y in zip(a, b))
wn = max(abs(float(x["grad_norm"]) - float(y["grad_norm"])) / float(x["grad_norm"]) for x, y in zip(a, b))
print(f"{len(a)} steps: loss within {wl:.1e}, gradient norm within {wn:.1e} relative")
sys.exit(0 if len(a) == len(b) == 12 and wl <= 1e-6 and wn <= 1e-5 else 1)
PY
) && ok "--accum 4 --batch 4 = --batch 16: $out" || bad "--accum 4 --batch 4 vs --batch 16: $out"
grep -q "16 x 8 tokens in 4 micro-batches" "$tmp/a4.out" && grep -q "gradient sums" "$tmp/a4.out" &&
  ok "--accum: the run says its micro-batches and the memory of the sums" || bad "--accum messages: $(head -3 "$tmp/a4.out")"

# resume mid-warm-up (checkpoint at step 2 of 4) and mid-decay (step 8): the
# process killed at the next step; the resumed run ends as the uninterrupted one
rec=(--batch 4 --steps 14 --lr 0.002 --lr-schedule cosine --warmup 4 --min-lr 0.0001 --clip 1 --accum 2 --weight-decay-on matrices)
"$xfrun" train "$tmp/t.so" "${train[@]}" "${rec[@]}" --log "$tmp/full.csv" --save "$tmp/full.st" > /dev/null 2>&1
for at in 2 8; do
  (XF_TEST_KILL_RANK=0:$((at + 1)) "$xfrun" train "$tmp/t.so" "${train[@]}" "${rec[@]}" --log "$tmp/part$at.csv" \
    --save "$tmp/part$at.st" --save-every $at) > /dev/null 2>&1
  # the log's rows past the checkpoint are dropped, as a user would (xfrun plot keeps the later rows anyway)
  head -n $((at + 1)) "$tmp/part$at.csv" > "$tmp/resumed$at.csv"
  "$xfrun" train "$tmp/t.so" --data "$tmp/text.txt" --tokenizer bytes --threads 1 --steps 14 --resume "$tmp/part$at.st" \
    --log "$tmp/resumed$at.csv" --save "$tmp/resumed$at.st" > /dev/null 2>&1
  same_checkpoint "$tmp/resumed$at.st" "$tmp/full.st" && cmp -s <(cut -d, -f1,2,5,6 "$tmp/resumed$at.csv") <(cut -d, -f1,2,5,6 "$tmp/full.csv") &&
    ok "stopped after step $at ($([ $at -le 4 ] && echo mid-warm-up || echo mid-decay)), resumed without the recipe's flags: the same checkpoint and log, byte for byte" ||
    bad "resumed after step $at differs from the uninterrupted run"
done

# --eval-every: held-out losses on steps 3, 6 and the last
"$xfrun" train "$tmp/t.so" "${train[@]}" --batch 4 --steps 7 --eval-every 3 --log "$tmp/ev.csv" > "$tmp/ev.out" 2>&1
got=$(python3 -c "
import csv, sys
print(' '.join(r['step'] for r in csv.DictReader(open(sys.argv[1])) if r['eval_loss']))" "$tmp/ev.csv")
last=$(tail -1 "$tmp/ev.csv" | cut -d, -f7)
final=$(sed -n 's/.*held-out loss \([0-9.]*\).*/\1/p' "$tmp/ev.out")
[ "$got" = "3 6 7" ] && python3 -c "import sys; sys.exit(0 if abs(float('$last') - float('$final')) < 5e-5 else 1)" &&
  ok "--eval-every 3: held-out losses logged at steps $got, the last the run's final one ($final)" ||
  bad "--eval-every 3: logged at '$got', last '$last', final '$final'"

# model FLOP/s: xfc --stats' training operations per token x tokens/s, and
# its fraction of the GEMM rate the run measured at start
ops=$("$xfc" --stats examples/transformer.xf -D layers=2 -D d=16 -D context=8 -D ffn=24 -D vocab=256 -D heads=2 |
  sed -n 's/^training (forward + backward) ops per token: //p')
rate=$(sed -n 's/.*GEMM rate \([0-9.]*\) GFLOP\/s.*/\1/p' "$tmp/ev.out")
out=$(python3 - "$tmp/ev.csv" "$ops" "$rate" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ops, rate = float(sys.argv[2]), float(sys.argv[3])
worst = max(abs(float(r["model_gflops"]) - ops * float(r["tokens_per_s"]) * 1e-9) / (ops * float(r["tokens_per_s"]) * 1e-9) for r in rows)
wm = max(abs(float(r["mfu"]) - float(r["model_gflops"]) / rate) / (float(r["model_gflops"]) / rate) for r in rows)
print(f"{ops:.0f} ops/token x tokens/s within {worst:.1e}, over the GEMM rate {rate} GFLOP/s within {wm:.1e}")
sys.exit(0 if worst < 1e-3 and wm < 2e-3 and rate > 0 else 1)
PY
) && ok "model FLOP/s in the log: $out" || bad "model FLOP/s in the log: $out"
grep -q "% of GEMM)" "$tmp/ev.out" && ok "the progress line shows model GFLOP/s and the fraction" || bad "progress line: $(grep step "$tmp/ev.out" | tail -1)"

# refusals
expect_usage "--lr-schedule bad" "expected constant, cosine, linear or wsd" "$xfrun" train "$tmp/t.so" --lr-schedule steep
expect_usage "--weight-decay-on bad" "expected all or matrices" "$xfrun" train "$tmp/t.so" --weight-decay-on biases
expect_usage "--accum 0" "--accum 0: not a valid value" "$xfrun" train "$tmp/t.so" --accum 0
expect_usage "--clip -1" "--clip -1: not a valid value" "$xfrun" train "$tmp/t.so" --clip -1
expect_usage "the recipe's options outside train" "--lr-schedule is an option of xfrun train, not of xfrun eval" "$xfrun" eval "$tmp/t.so" --lr-schedule cosine
"$xfrun" train --help | grep -q -- "--lr-schedule" && ok "xfrun train --help lists the recipe" || bad "xfrun train --help"
for cmd in eval sample; do
  ! "$xfrun" $cmd --help | grep -q -- "--lr-schedule" && ok "xfrun $cmd --help lists only its own options" || bad "xfrun $cmd --help"
done
finish
