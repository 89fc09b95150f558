#!/usr/bin/env bash
# Finite-difference gradient checks (xfc --check-grad: float64, 5-point
# central differences, max relative error < 1e-6):
#   - every primitive op on its own (tests/grad/op_*.xf),
#   - every example at small sizes, with 2 layers,
#   - tests/golden/sinusoidal.xf and tests/grad/recurrent_blocks.xf for the
#     library blocks no example uses,
#   - a user-written attention block (tests/fusion/attn_user.xf) and near
#     misses of the pattern (tests/fusion/attn_near.xf), and a user-written
#     scan read out by its rows with near misses (tests/fusion/scan_near.xf),
# each on the graph xfc compiles (attention fused; with --no-fuse as written),
# and a coverage check: every op marked differentiable in ir/ir.h occurs in
# the graph of some checked model, so no gradient rule goes unchecked.
# Usage (from the repo root): tests/grad/run_gradcheck.sh path/to/xfc
set -u
xfc=$1
pass=0 fail=0
seen=$(mktemp)
trap 'rm -f "$seen"' EXIT
check() {  # label, xfc arguments...
  local label=$1
  shift
  local out
  out=$("$xfc" --check-grad "$@" 2>&1)
  local rc=$?
  "$xfc" --emit=fused "$@" 2>/dev/null | sed -n 's/^%[0-9]* = \([a-z_]*\).*/\1/p' >> "$seen"
  if [ $rc -eq 0 ] && printf '%s\n' "$out" | tail -1 | grep -q ': pass$'; then
    echo "ok   $label: $(printf '%s\n' "$out" | tail -1)"; pass=$((pass + 1))
  else
    echo "FAIL $label (exit $rc)"; printf '%s\n' "$out" | grep -E 'FAIL|error' | head -20; fail=$((fail + 1))
  fi
}
for f in tests/grad/op_*.xf; do
  args=$(sed -n 's/^# args: //p' "$f")
  # shellcheck disable=SC2086
  check "$f" $args "$f"
done
small="-D layers=2 -D d=8 -D vocab=11 -D ffn=12 -D dropout=0"
for ex in examples/*.xf; do
  heads=; grep -q 'heads' "$ex" && heads="-D heads=2"
  grep -q 'kv_heads' "$ex" && heads="$heads -D kv_heads=1"
  ctx=5; grep -q 'shorten' "$ex" && ctx=6  # a time axis T / shorten: the context a multiple of it
  # shellcheck disable=SC2086
  check "$ex (small)" $small -D context=$ctx $heads "$ex"
done
check "examples/she.xf with dropout masks" $small -D context=5 -D dropout=0.25 --check-dropout examples/she.xf
check "tests/golden/sinusoidal.xf" tests/golden/sinusoidal.xf
check "tests/grad/recurrent_blocks.xf" tests/grad/recurrent_blocks.xf
check "tests/grad/language.xf (fused)" tests/grad/language.xf
check "tests/grad/language.xf (--no-fuse)" --no-fuse tests/grad/language.xf
check "tests/fusion/attn_user.xf (fused)" tests/fusion/attn_user.xf
check "tests/fusion/attn_user.xf (--no-fuse)" --no-fuse tests/fusion/attn_user.xf
check "tests/fusion/attn_near.xf" tests/fusion/attn_near.xf
check "tests/fusion/attn_bias.xf (fused)" tests/fusion/attn_bias.xf
check "tests/fusion/attn_bias.xf (--no-fuse)" --no-fuse tests/fusion/attn_bias.xf
check "tests/fusion/attn_padding.xf (fused)" tests/fusion/attn_padding.xf
check "tests/fusion/attn_padding.xf (--no-fuse)" --no-fuse tests/fusion/attn_padding.xf
check "tests/fusion/scan_near.xf" tests/fusion/scan_near.xf
check "tests/fusion/scan_near.xf (--no-fuse)" --no-fuse tests/fusion/scan_near.xf
check "examples/transformer.xf (small, --remat)" $small -D context=5 -D heads=2 --remat examples/transformer.xf
check "examples/transformer.xf (small, --no-fuse)" $small -D context=5 -D heads=2 --no-fuse examples/transformer.xf
check "tests/fusion/attn_variants.xf" tests/fusion/attn_variants.xf
check "tests/fusion/attn_temp_bias.xf (fused)" tests/fusion/attn_temp_bias.xf
check "tests/fusion/attn_temp_bias.xf (--no-fuse)" --no-fuse tests/fusion/attn_temp_bias.xf
check "tests/sample/alibi.xf" tests/sample/alibi.xf
check "tests/grad/attention_variants.xf (fused)" tests/grad/attention_variants.xf
check "tests/grad/attention_variants.xf (--no-fuse)" --no-fuse tests/grad/attention_variants.xf
check "tests/grad/std_math.xf" tests/grad/std_math.xf
check "tests/grad/modern.xf (fused)" tests/grad/modern.xf
check "tests/grad/modern.xf (--no-fuse)" --no-fuse tests/grad/modern.xf
check "tests/grad/moe.xf (fused)" tests/grad/moe.xf
check "tests/grad/moe.xf (--no-fuse)" --no-fuse tests/grad/moe.xf
check "tests/grad/mamba.xf (fused)" tests/grad/mamba.xf
check "tests/grad/mamba.xf (--no-fuse)" --no-fuse tests/grad/mamba.xf
check "tests/sample/position_decay.xf" tests/sample/position_decay.xf
# stop_gradient: dloss/dx reads the stop_gradient node, dloss/dy is a zero
g=$("$xfc" --emit=grad tests/grad/stop_gradient.xf 2>&1)
sgn=$(sed -n 's/^%\([0-9]*\) = stop_gradient .*/\1/p' <<<"$g")
gx=$(sed -n 's/^output grad.x = %\([0-9]*\)$/\1/p' <<<"$g") gy=$(sed -n 's/^output grad.y = %\([0-9]*\)$/\1/p' <<<"$g")
if [ -n "$sgn" ] && grep -qE "^%$gx = mul %[0-9]+, %$sgn " <<<"$g" &&
   grep -qE "^%$gy = expand %([0-9]+) " <<<"$g" && grep -qE "^%$(sed -n "s/^%$gy = expand %\([0-9]*\) .*/\1/p" <<<"$g") = const 0 " <<<"$g"; then
  echo "ok   tests/grad/stop_gradient.xf: dloss/dx = dloss o stop_gradient(y o x), dloss/dy = 0"; pass=$((pass + 1))
else
  echo "FAIL tests/grad/stop_gradient.xf: the gradient graph: $(grep '^output grad' <<<"$g" | tr '\n' ' ')"; fail=$((fail + 1))
fi
ops=$(sed -n 's/.*X([A-Z_]*, "\([a-z_]*\)", [0-9], OPC_[A-Z]*, 1,.*/\1/p' ir/ir.h)
[ "$(printf '%s\n' "$ops" | grep -c .)" -ge 30 ] || { echo "FAIL the differentiable ops of ir/ir.h not found (its X rows changed?)"; fail=$((fail + 1)); }
for op in $ops; do
  if grep -qx "$op" "$seen"; then pass=$((pass + 1)); else echo "FAIL differentiable op '$op' is in no checked model"; fail=$((fail + 1)); fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
