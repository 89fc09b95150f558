#!/usr/bin/env bash
# The docs name only what exists (tests/docs_refs.py): the tree passes, and a
# copy of it with a stale path, flag and subcommand planted in a doc fails
# naming each.
# Usage (from the repo root): tests/docs_refs.sh XFC XFRUN
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
if out=$(python3 tests/docs_refs.py "$xfc" "$xfrun" . 2>&1); then ok "$(tail -1 <<<"$out")"
else bad "stale references in the docs: $out"; fi
mkdir -p "$tmp/tree/docs"
cp README.md "$tmp/tree/" && cp docs/*.md "$tmp/tree/docs/"
for d in *; do [ -e "$tmp/tree/$d" ] || ln -s "$PWD/$d" "$tmp/tree/$d"; done
ln -s "$PWD/.ci" "$tmp/tree/.ci"
echo 'Planted: `codegen/gone.c`, `xfrun train m.so --stpes 3`, `xfrun convert ck`.' >> "$tmp/tree/docs/cuda.md"
out=$(python3 tests/docs_refs.py "$xfc" "$xfrun" "$tmp/tree" 2>&1)
rc=$?
n=$(grep -c -E 'no such path: codegen/gone.c|xfrun has no option --stpes|xfrun has no subcommand convert' <<<"$out")
[ $rc -eq 1 ] && [ "$n" -eq 3 ] && ok "a planted stale path, flag and subcommand fail: $(grep -m1 gone.c <<<"$out")" ||
  bad "planted stale references (exit $rc, $n of 3 named): $out"
finish
