#!/usr/bin/env bash
# Command-line checks of the xfc driver: options, input files, exit statuses
# and messages. Every check asserts the exit status and a message fragment
# (on stdout for --help and --version, on stderr for errors), that failing
# runs print nothing on stdout, and that no sanitizer or crash report appears.
# Usage (from the repo root): tests/cli_test.sh path/to/xfc
set -u
xfc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
model=examples/transformer.xf

# check NAME STATUS STREAM FRAGMENT ARGS...: run xfc ARGS. STREAM is out or
# err, where FRAGMENT must appear, or none: the run must print nothing.
check() {
  local name=$1 want=$2 stream=$3 frag=$4
  shift 4
  "$xfc" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  report "$name" $? "$want" "$stream" "$frag"
}

report() {
  local name=$1 rc=$2 want=$3 stream=$4 frag=$5 why=""
  if [ "$rc" -ne "$want" ]; then
    why="exit status $rc, want $want"
  elif [ "$stream" = none ] && { [ -s "$tmp/out" ] || [ -s "$tmp/err" ]; }; then
    why="it printed something"
  elif [ "$stream" != none ] && ! grep -qF -- "$frag" "$tmp/$stream"; then
    why="std$stream lacks '$frag'"
  elif grep -qE 'Sanitizer|runtime error|Segmentation|Aborted|internal error' "$tmp/out" "$tmp/err"; then
    why="crash or sanitizer report"
  elif [ "$want" -ne 0 ] && [ -s "$tmp/out" ]; then
    why="a failing run printed on stdout"
  fi
  if [ -z "$why" ]; then
    echo "ok   $name"
    pass=$((pass + 1))
  else
    echo "FAIL $name: $why"
    sed 's/^/    | /' "$tmp/err" | head -n 12
    fail=$((fail + 1))
  fi
}

check "--help exits 0 and prints usage" 0 out "usage: xfc [options] model.xf" --help
check "-h is --help" 0 out "usage: xfc" -h
check "--version prints the version" 0 out "xfc 0.1.0 (commit " --version
check "--version names the build type and targets" 0 out "targets: cpu (LLVM 14)" --version
# usage errors exit 2, with "(see xfc --help)"
check "no input file" 2 err "xfc: error: no input file"
check "usage errors point to --help" 2 err "(see xfc --help)"
check "unknown option" 2 err "xfc: error: unknown option --bogus" --bogus "$model"
check "a misspelt option names the closest" 2 err "unknown option --stast (did you mean --stats?)" --stast "$model"
check "a misspelt --emit value names the closest" 2 err "--emit=scheduel: expected one of ast, ir, pytorch, fused, grad, loops, schedule, cost, cuda, ptx, llvm (did you mean schedule?)" --emit=scheduel "$model"
check "a flag takes no value" 2 err "--stats takes no value (got --stats=1)" --stats=1 "$model"
check "two input files" 2 err "more than one input file (examples/transformer.xf and examples/me.xf)" "$model" examples/me.xf
# both styles: --opt=value and --opt value
check "--emit ir (a value after a space)" 0 out "graph transformer" --emit ir -D layers=1 "$model"
check "--batch 8 --seq 16 (values after spaces)" 0 out "training step at batch 8, seq 16" --stats --batch 8 --seq 16 -D layers=1 "$model"
check "--batch=8 --seq=16" 0 out "training step at batch 8, seq 16" --stats --batch=8 --seq=16 -D layers=1 "$model"
check "-- ends the options" 0 out "graph transformer" --emit=ir -D layers=1 -- "$model"
check "-o FILE says what it wrote" 0 err "xfc: wrote $tmp/t.so (" -o "$tmp/t.so" -D layers=1 "$model"
check "missing input file" 1 err "$tmp/nosuch.xf: error: cannot read $tmp/nosuch.xf: No such file or directory" "$tmp/nosuch.xf"
check "directory as input" 1 err "examples: error: cannot read examples: it is a directory" examples
check "-D without =" 2 err "xfc: error: -D layers: expected name=value" -D layers "$model"
check "-D without a name" 2 err "xfc: error: -D =3: expected name=value" -D =3 "$model"
check "-D at the end of argv" 2 err "xfc: error: -D needs a value" "$model" -D
check "-I at the end of argv" 2 err "xfc: error: -I needs a value" "$model" -I
check "--emit=bogus" 2 err "xfc: error: --emit=bogus: expected" --emit=bogus "$model"
check "-D of an unknown config value" 1 err "<command line>: error: -D nosuch: model 'transformer' has no config value 'nosuch'" -D nosuch=1 "$model"

: >"$tmp/empty.xf"
check "empty file" 1 err "$tmp/empty.xf:1:1: error: no model in $tmp/empty.xf" "$tmp/empty.xf"

check "a valid model compiles silently" 0 none "" "$model"
check "-Dname=value in one argument" 0 none "" -Dlayers=1 "$model"
check "--emit=ast prints the syntax tree" 0 out "transformer" --emit=ast "$model"
check "--emit=ir prints the graph" 0 out "graph transformer" --emit=ir -D layers=1 "$model"

# a model whose logits read later positions: an error (tests/errors/noncausal_lm.xf),
# unless declared `noncausal model`, which compiles with a note (no decoder)
sed 's/^model peek/noncausal model peek/' tests/errors/noncausal_lm.xf > "$tmp/noncausal.xf"
check "a declared noncausal model compiles" 0 err "no incremental decoder for model 'peek'" -o "$tmp/nc.so" "$tmp/noncausal.xf"
check "--emit=ir marks a noncausal model" 0 out "graph peek (T <= 8, noncausal)" --emit=ir "$tmp/noncausal.xf"
check "an undeclared one is an error" 1 err "reads later positions" -o "$tmp/nc.so" tests/errors/noncausal_lm.xf

if [ -w /dev/full ]; then
  "$xfc" --emit=ir "$model" >/dev/full 2>"$tmp/err"
  rc=$?
  : >"$tmp/out"
  report "an output write error fails" $rc 1 err "xfc: error writing output"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
