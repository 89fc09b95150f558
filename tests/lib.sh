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
# expect_exit LABEL STATUS LAST FRAGMENT COMMAND...: the command exits with
# STATUS, its first line of output matching FRAGMENT (grep -E); with LAST
# empty that is its only line, else a second and last line matches LAST.
expect_exit() {
  local label=$1 want=$2 last=$3 frag=$4
  shift 4
  local out rc lines=1
  out=$("$@" 2>&1)
  rc=$?
  [ -n "$last" ] && lines=2
  if [ $rc -eq "$want" ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq $lines ] &&
     printf '%s\n' "$out" | head -1 | grep -qE -- "$frag" &&
     { [ -z "$last" ] || printf '%s\n' "$out" | tail -1 | grep -qE -- "$last"; }; then
    ok "$label: $(printf '%s\n' "$out" | head -1)"
  else
    bad "$label (exit $rc): $out"
  fi
}
# expect_error LABEL FRAGMENT COMMAND...: the command exits 1 with a one-line
# message matching FRAGMENT.
expect_error() { expect_exit "$1" 1 "" "$2" "${@:3}"; }
# expect_usage LABEL FRAGMENT COMMAND...: a usage error: exit 2, the message
# matching FRAGMENT on the first line, "(see ... --help)" on the second.
expect_usage() { expect_exit "$1" 2 '^\(see xf.* --help\)$' "$2" "${@:3}"; }
# same_checkpoint A B: two safetensors checkpoints hold the same tensors,
# bytes and metadata, but for the run.* keys (where each run wrote: --save,
# --log, ... as given); byte for byte when the runs wrote to the same paths.
same_checkpoint() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    h['__metadata__'] = {k: v for k, v in h.get('__metadata__', {}).items() if not k.startswith('run.')}
    return h, b[8 + n:]
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
PY
}
