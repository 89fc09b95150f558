#!/usr/bin/env bash
# Golden dumps: `xfc --emit=ir -D layers=2` of every example and
# `xfc --emit=ast` of examples/she.xf and `xfc --emit=loops` of a one-layer
# transformer, of rmsnorm and of scan must equal tests/golden/*. Every
# example must have its golden file. `--update` rewrites them.
# Usage (from the repo root): tests/golden/run_golden.sh path/to/xfc [--update]
set -u
xfc=$1
update=${2:-}
pass=0 fail=0
check() {  # name, golden file, command...
  local name=$1 golden=$2
  shift 2
  local out
  out=$("$@" 2>&1)
  local rc=$?
  if [ "$update" = --update ]; then printf '%s\n' "$out" > "$golden"; fi
  if [ $rc -ne 0 ]; then
    echo "FAIL $name: exit $rc"; printf '%s\n' "$out" | head -20; fail=$((fail + 1))
  elif [ ! -f "$golden" ]; then
    echo "FAIL $name: no golden file $golden"; fail=$((fail + 1))
  elif ! diff -u "$golden" <(printf '%s\n' "$out") > /tmp/xf-golden-diff.$$; then
    echo "FAIL $name: differs from $golden"; head -40 /tmp/xf-golden-diff.$$; fail=$((fail + 1))
  else
    echo "ok   $name"; pass=$((pass + 1))
  fi
  rm -f /tmp/xf-golden-diff.$$
}
for ex in examples/*.xf; do
  name=$(basename "$ex" .xf)
  check "ir $name" "tests/golden/$name.ir" "$xfc" --emit=ir -D layers=2 "$ex"
done
check "ast she" tests/golden/she.ast "$xfc" --emit=ast examples/she.xf
check "ir sinusoidal" tests/golden/sinusoidal.ir "$xfc" --emit=ir tests/golden/sinusoidal.xf
check "ir repeat_index" tests/golden/repeat_index.ir "$xfc" --emit=ir tests/golden/repeat_index.xf
check "ir shadowing" tests/golden/shadowing.ir "$xfc" --emit=ir tests/golden/shadowing.xf
# the loop description (codegen/lower.c) both backends print
check "loops transformer" tests/golden/transformer.loops "$xfc" --emit=loops -D layers=1 examples/transformer.xf
check "loops rmsnorm" tests/golden/op_rmsnorm.loops "$xfc" --emit=loops tests/grad/op_rmsnorm.xf
check "loops scan" tests/golden/op_scan.loops "$xfc" --emit=loops tests/grad/op_scan.xf
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
