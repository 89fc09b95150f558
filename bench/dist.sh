#!/usr/bin/env bash
# Data-parallel training throughput: tokens/s of xfrun train with N = 1 and
# N = 2 processes (one thread each) at seed 001 Table 1 sizes with 2 layers,
# the scaling efficiency tps(2) / (2 tps(1)), and the bytes all-reduced per
# step (every gradient and the loss, float32). Writes out/bench/dist.md.
# Usage: bench/dist.sh [steps (default 6)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
build=${BUILD:-build}
out=out/bench
mkdir -p "$out"
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -eq 0 ] && mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
{
  echo "| model (2 layers, Table 1 sizes) | parameters | bytes all-reduced per step | N=1 tok/s | N=2 tok/s | scaling efficiency |"
  echo "|---|---|---|---|---|---|"
} > "$out/dist.md"
for ex in she transformer; do
  "$build/xfc" -o "$out/$ex.dist.so" examples/$ex.xf -D layers=2
  params=$("$build/xfc" --stats examples/$ex.xf -D layers=2 | awk '/^total parameters:/ {print $3}')
  "$build/xfrun" train "$out/$ex.dist.so" --steps "$steps" --batch 64 --threads 1 --log "$out/$ex.n1.csv" > /dev/null 2>&1
  "${mpi[@]}" "$build/xfrun" train "$out/$ex.dist.so" --steps "$steps" --batch 64 --threads 1 --log "$out/$ex.n2.csv" > /dev/null 2>&1
  t1=$(tail -1 "$out/$ex.n1.csv" | cut -d, -f3) t2=$(tail -1 "$out/$ex.n2.csv" | cut -d, -f3)
  python3 -c "p=$params; t1=$t1; t2=$t2; print(f'| $ex | {p:,} | {4*(p+1):,} | {t1:,.0f} | {t2:,.0f} | {t2/(2*t1):.2f} |')" >> "$out/dist.md"
done
cat "$out/dist.md"
