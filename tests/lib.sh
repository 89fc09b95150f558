# lib.sh: what the shell tests share. Source it after set -u; it makes $tmp
# (removed on exit), counts ok/bad, and `finish` prints the tally and sets
# the exit status.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
finish() {
  echo "$pass passed, $fail failed"
  [ $fail -eq 0 ]
}
# expect_error LABEL FRAGMENT COMMAND...: the command exits 1 with a one-line
# message matching FRAGMENT (grep -E).
expect_error() {
  local label=$1 frag=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && printf '%s' "$out" | grep -qE -- "$frag"; then
    ok "$label: $out"
  else
    bad "$label (exit $rc): $out"
  fi
}
