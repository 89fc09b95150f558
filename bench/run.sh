#!/usr/bin/env bash
# Benchmark (not a test): training throughput of every example at seed 001
# Table 1 sizes (vocab 5000, context 128, d 128, FFN 512, batch 64, 32 heads)
# with fewer layers (LAYERS, default 2), in xf and in Debian's python3-torch
# on the same machine and thread count. Prints tokens/s and the ratio.
# Usage: bench/run.sh [example ...]   (env: LAYERS, STEPS, THREADS, BATCH)
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${LAYERS:-2} steps=${STEPS:-3} threads=${THREADS:-$(nproc)} batch=${BATCH:-64}
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" 2>/dev/null || {
  echo "bench: needs Debian's python3-torch: apt-get install python3-torch"; exit 1; }
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-release -j"$(nproc)" >/dev/null
mkdir -p out/bench
python3 - > out/bench/text.bin <<'PY'
import random, sys
random.seed(1)
sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(200000)))
PY
examples=${*:-transformer she he we me macaron macaron_she postnorm rk4}
printf '%-12s %12s %12s %8s\n' example "xf tok/s" "torch tok/s" "xf/torch"
for ex in $examples; do
  build-release/xfc examples/$ex.xf -D layers="$layers" -o out/bench/$ex.so
  build-release/xfrun train out/bench/$ex.so --data out/bench/text.bin --steps $((steps + 1)) --batch "$batch" \
    --seq 128 --threads "$threads" --log out/bench/$ex.csv > /dev/null 2>&1
  # tokens/s over the steps after the first (warm-up), from the log's elapsed column
  xf=$(awk -F, -v b="$batch" 'NR == 2 { t0 = $4 } END { printf "%.1f", (NR - 2) * b * 128 / ($4 - t0) }' out/bench/$ex.csv)
  th=$(/usr/bin/python3 bench/torch_ref.py "$ex" --layers "$layers" --batch "$batch" --seq 128 --steps "$steps" --threads "$threads")
  printf '%-12s %12s %12s %8.2f\n' "$ex" "$xf" "$th" "$(echo "$xf / $th" | bc -l)"
done
