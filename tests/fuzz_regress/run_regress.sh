#!/usr/bin/env bash
# Fuzzing regressions: inputs that once crashed xfc, tripped a sanitizer or
# the IR verifier, or ran for minutes (found by scripts/fuzz.sh or written by
# hand), and other hostile inputs. Each must now end cleanly: exit status 0
# (compiled) or 1 (a user error), within 20 s, with no sanitizer report.
#
# Every file runs as `xfc --stats FILE` (parse, elaborate, verify, autodiff,
# verify, statistics: the same path as the fuzz target). A file can instead
# give one or more lines `# args: ...`; it then runs once per line.
#
# Usage (from the repository root): tests/fuzz_regress/run_regress.sh path/to/xfc
set -u
xfc=${1:?usage: run_regress.sh path/to/xfc}
pass=0 fail=0
for f in tests/fuzz_regress/*.xf; do
  mapfile -t runs < <(sed -n 's/^# args: *//p' "$f")
  [ ${#runs[@]} -eq 0 ] && runs=(--stats)
  for args in "${runs[@]}"; do
    # shellcheck disable=SC2086  # args is a list of options
    err=$(timeout 20 "$xfc" $args "$f" 2>&1 >/dev/null)
    rc=$?
    why=
    if [ $rc -eq 124 ]; then
      why="timed out after 20 s"
    elif [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
      why="exit status $rc"
    elif grep -qE 'Sanitizer|runtime error|internal error|Segmentation|Aborted' <<<"$err"; then
      why="sanitizer or internal error report"
    fi
    if [ -z "$why" ]; then
      echo "ok   $f ($args)"
      pass=$((pass + 1))
    else
      echo "FAIL $f ($args): $why"
      head -20 <<<"$err"
      fail=$((fail + 1))
    fi
  done
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
