#!/usr/bin/env bash
# Reproduces the seed papers' comparisons at a scale this 2-core machine
# finishes in well under an hour each, with xfrun compare:
#   fig8      seed 001 Fig. 8: SHE, HE, WE, ME, attention with 1 and 32 heads
#   fig10     seed 001 Fig. 10: context 16, 32, 64 at 2 layers (SHE, attention-32)
#   fig11     seed 001 Fig. 11: 1, 2, 4 layers at context 32 (SHE, attention-32)
#   macaron   seed 004: Lie-Trotter against Strang-Marchuk at equal parameters,
#             for attention-32 and SHE
#   spread    SHE and attention-32 of Fig. 8 over seeds 1..3: how far apart
#             runs of one model land at this budget
# Usage: experiments/run.sh NAME... [--toy]   (all five when no NAME)
# Writes experiments/out/NAME/ (table.md, table.csv, curves.svg, runs/).
# Corpus: the 18 Gutenberg books (data/gutenberg.tar.xz, unpacked into
# experiments/out/data/), a byte-level BPE of 5000 tokens trained on them,
# 1 % of each book held out. Seed 001 Table 1 otherwise (d 128, FFN 512,
# vocabulary 5000, batch 64, AdamW lr 1e-3, dropout 0.1), with the paper's
# reduced setting of its Figs. 10-11 (2 layers, context 32) and, for time,
# STEPS batches (default 600: 1.2 M tokens at context 32, about 0.4 epochs of
# this corpus, as the paper's 0.457). --toy: models of d 32 for 20 steps
# on a slice of the corpus (the CI smoke run).
set -euo pipefail
cd "$(dirname "$0")/.."
names=() toy=0
for a in "$@"; do
  case $a in
    --toy) toy=1 ;;
    fig8 | fig10 | fig11 | macaron | spread) names+=("$a") ;;
    -h | --help) sed -n '2,21p' "$0" | cut -c3-; exit 0 ;;
    *) echo "experiments/run.sh: unknown experiment '$a' (fig8, fig10, fig11, macaron, spread, --toy)" >&2; exit 2 ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=(fig8 fig10 fig11 macaron spread)
build=${XF_BUILD:-build}
if [ ! -x "$build/xfrun" ] || [ ! -x "$build/xfc" ]; then
  cmake -S . -B "$build" > /dev/null && cmake --build "$build" -j"$(nproc)" > /dev/null
fi
out=${XF_EXPERIMENTS_OUT:-experiments/out}
data=$out/data/gutenberg
if [ ! -d "$data" ]; then
  mkdir -p "$out/data"
  tar -C "$out/data" -xJf data/gutenberg.tar.xz
fi
steps=${STEPS:-600}
size=(-D d=128 -D ffn=512 -D vocab=5000)
common=(--data "$data" --batch 64 --lr 0.001 --cache "$out/cache")
if [ $toy = 1 ]; then
  # a slice of three books, tiny models, 20 steps: checks the machinery only
  mkdir -p "$out/data/toy"
  for b in carroll-alice blake-poems bryant-stories; do head -c 60000 "$data/$b.txt" > "$out/data/toy/$b.txt"; done
  steps=20
  size=(-D d=32 -D ffn=64 -D vocab=300)
  common=(--data "$out/data/toy" --batch 8 --lr 0.001 --cache "$out/cache")
  out=$out/toy
fi
e=examples
for name in "${names[@]}"; do
  echo "== $name ($steps steps per run)"
  case $name in
    fig8) models=($e/she.xf $e/he.xf $e/we.xf $e/me.xf $e/transformer.xf:heads=1 $e/transformer.xf:heads=32)
          defs=(-D layers=2 -D context=32) ;;
    fig10) models=($e/she.xf:context=16 $e/transformer.xf:context=16 $e/she.xf:context=32 $e/transformer.xf:context=32
                   $e/she.xf:context=64 $e/transformer.xf:context=64)
           defs=(-D layers=2 -D heads=32) ;;
    fig11) models=($e/she.xf:layers=1 $e/transformer.xf:layers=1 $e/she.xf:layers=2 $e/transformer.xf:layers=2
                   $e/she.xf:layers=4 $e/transformer.xf:layers=4)
           defs=(-D context=32 -D heads=32) ;;
    macaron) models=($e/transformer.xf $e/macaron.xf $e/she.xf $e/macaron_she.xf)
             defs=(-D layers=2 -D context=32 -D heads=32) ;;
    spread) models=($e/she.xf $e/transformer.xf:heads=32)
            defs=(-D layers=2 -D context=32) ;;
  esac
  seeds=1
  [ "$name" = spread ] && [ $toy = 0 ] && seeds=3
  if [ $toy = 1 ]; then defs=(-D layers=1 -D context=16 -D heads=2); fi
  "$build/xfrun" compare "${models[@]}" "${size[@]}" "${defs[@]}" "${common[@]}" --steps "$steps" --seeds $seeds -o "$out/$name"
done
