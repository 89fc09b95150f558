#!/usr/bin/env bash
# The mixture of experts (examples/moe.xf, stdlib/modern.xf MoE): routed
# (each expert one GEMM over only its rows) and dense (every expert on every
# row, weighed by its gate) are the same model: trained from the same seed
# they log the same losses and load-balancing losses, step by step; xfc
# --stats counts 2/8 of the dense mixture's FFN operations for top-2 of 8 at
# Table 1 widths; the balance column of --log is 1 per layer at a uniform
# router (the loss of eq. 4 of the Switch Transformer), so about 2 at 2 layers.
# Usage (from the repo root): tests/runtime/run_moe.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
python3 -c "import sys; sys.stdout.write(''.join(chr(97 + (i * 7 + i // 13) % 26) for i in range(40000)))" > "$tmp/text.txt"

ffn_ops() {  # the first layer's MoE operations, xfc --stats
  "$xfc" --stats -D layers=2 "$@" examples/moe.xf | awk '$1 == "lm.layers.0.ffn" && !n++ { print $NF }'
}
routed=$(ffn_ops -D dense=0) dense=$(ffn_ops -D dense=1)
if [ -n "$routed" ] && [ -n "$dense" ] && awk -v r="$routed" -v d="$dense" 'BEGIN { exit !(r / d > 0.24 && r / d < 0.27) }'; then
  ok "xfc --stats: routed MoE $routed operations per sequence, dense $dense ($(awk -v r="$routed" -v d="$dense" 'BEGIN { printf "%.3f", r / d }'))"
else
  bad "xfc --stats: routed $routed, dense $dense operations: not about 2/8"
fi

small=(-D vocab=256 -D layers=2 -D d=16 -D ffn=24 -D heads=2 -D context=16 -D experts=4 -D dropout=0)
for dense in 0 1; do
  "$xfc" examples/moe.xf "${small[@]}" -D dense=$dense -o "$tmp/moe$dense.so" 2> "$tmp/xfc.err" ||
    { bad "xfc dense=$dense: $(head -1 "$tmp/xfc.err")"; continue; }
  "$xfrun" train "$tmp/moe$dense.so" --data "$tmp/text.txt" --tokenizer bytes --steps 8 --batch 4 --lr 0.01 \
    --threads 1 --log "$tmp/moe$dense.csv" > "$tmp/train$dense.out" 2>&1 ||
    bad "xfrun train dense=$dense: $(tail -1 "$tmp/train$dense.out")"
done
if [ -s "$tmp/moe0.csv" ] && [ -s "$tmp/moe1.csv" ]; then
  cmp=$(python3 - "$tmp/moe0.csv" "$tmp/moe1.csv" <<'PY'
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
if len(a) != 8 or len(b) != 8 or "balance" not in a[0]:
    print("bad logs: %d and %d rows, columns %s" % (len(a), len(b), list(a[0]) if a else []))
    sys.exit(1)
worst = max(abs(float(x[k]) - float(y[k])) / abs(float(y[k])) for x, y in zip(a, b) for k in ("loss", "balance"))
bal = float(a[0]["balance"])
print("8 steps: loss and balance within %.1e relative; balance at step 1 %.4f" % (worst, bal))
sys.exit(0 if worst <= 1e-5 and 1.9 < bal < 2.5 else 1)
PY
  ) && ok "routed and dense MoE train alike: $cmp" || bad "routed and dense MoE differ: $cmp"
fi
finish
