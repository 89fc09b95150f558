#!/usr/bin/env bash
# Every ```xf block of docs/language.md that defines a model must compile, so
# the documentation cannot drift from the language. The worked example's
# claims (parameter count, the error for a missing transpose) are checked too.
# Usage (from the repo root): tests/docs_test.sh path/to/xfc
set -u
xfc=$1
. tests/lib.sh
awk -v dir="$tmp" '
  /^```xf$/ { n++; f = dir "/block" n ".xf"; on = 1; next }
  /^```$/ && on { on = 0; next }
  on { print > f }
' docs/language.md
count=0
for f in "$tmp"/block*.xf; do
  grep -q '^model' "$f" || continue
  count=$((count + 1))
  if out=$("$xfc" "$f" 2>&1); then ok "docs model $(basename "$f")"; else bad "docs model $(basename "$f"): $out"; fi
done
[ $count -ge 2 ] && ok "docs has $count model examples" || bad "docs has only $count model examples"
ex=$(grep -l 'block DecayMixer' "$tmp"/block*.xf | head -1)
p=$("$xfc" --stats -D layers=1 "$ex" | awk '$1 == "lm.layers.0.mixer" { print $2, $3 }' | head -1)
[ "$p" = "DecayMixer 65792" ] && ok "worked example has 4d^2 + 2d parameters" || bad "worked example stats: $p"
if out=$("$xfc" --check-grad -D layers=2 -D d=8 -D context=5 -D vocab=11 -D ffn=12 -D dropout=0 "$ex" 2>&1) &&
   printf '%s\n' "$out" | tail -1 | grep -q ': pass$'; then ok "worked example passes the gradient check"
else bad "worked example gradient check: $(printf '%s\n' "$out" | tail -3)"; fi
sed 's/num = scan(w, e \* v, 1)/num = scan(w, e * transpose(v, 1, 2), 1)/' "$ex" > "$tmp/broken.xf"
msg=$("$xfc" "$tmp/broken.xf" 2>&1 | head -1)
case "$msg" in
  *"shapes [B, T, 128] and [B, 128, T] do not broadcast"*) ok "worked example error names both shapes" ;;
  *) bad "worked example error: $msg" ;;
esac
finish
