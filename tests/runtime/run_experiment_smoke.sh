#!/usr/bin/env bash
# The experiments at toy size (experiments/run.sh fig8 --toy): the Gutenberg
# corpus unpacks, the six models of seed 001 Fig. 8 compile and train on it
# through xfrun compare, and the table, CSV and curves come out.
# Usage (from the repo root): tests/runtime/run_experiment_smoke.sh BUILD_DIR
set -u
. tests/lib.sh
export XF_BUILD=$1 XF_EXPERIMENTS_OUT=$tmp/out
experiments/run.sh fig8 --toy > "$tmp/log" 2>&1 || bad "experiments/run.sh fig8 --toy: $(tail -3 "$tmp/log")"
d=$tmp/out/toy/fig8
[ "$(ls "$tmp/out/data/gutenberg"/*.txt | wc -l)" = 18 ] && ok "data/gutenberg.tar.xz: 18 books" || bad "the corpus did not unpack"
for m in she he we me transformer-heads1 transformer-heads32; do
  grep -q "^| $m | [0-9]* | [0-9.e+]* | [0-9]* | [0-9.]* | [0-9.]* | [0-9.]* |$" "$d/table.md" && ok "row $m" || bad "no row for $m"
done
[ "$(wc -l < "$d/table.csv")" = 7 ] && ok "table.csv: 6 models" || bad "table.csv: $(wc -l < "$d/table.csv") lines"
[ "$(grep -c '<polyline class="median"' "$d/curves.svg")" = 6 ] && ok "curves.svg: 6 curves" || bad "curves.svg"
finish
