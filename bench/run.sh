#!/usr/bin/env bash
# Benchmark (not a test): training throughput and memory of every example in
# xf against current PyTorch from PyPI, eager and torch.compile, on the same
# machine and thread count. Seed 001 Table 1 sizes (vocab 5000, context 128,
# d 128, FFN 512, 32 heads, dropout 0.1), batch 64 of 128 tokens, AdamW
# (lr 1e-3, weight decay 0.01), at each layer count of LAYERS.
#
# For every example and layer count it prints, and writes to out/bench/results.md:
#   xf, torch eager and torch.compile tokens/s over STEPS steady-state training
#     steps (not timed: xf's first step, PyTorch's first 3, which compile and
#     settle the allocator), and xf/eager, xf/compile;
#   xf's planned memory (what xfrun reports, also when it cannot allocate it)
#     and the peak RSS of each of the three runs, each in its own process;
#   xf's model GFLOP/s, from the training (forward + backward) ops per token
#     that `xfc --stats` counts, and that rate as a fraction of the machine's
#     sgemm rate (the higher of OpenBLAS cblas_sgemm and torch.mm, 1024^3
#     float32, THREADS threads, measured at the start of the run);
# then the geometric means of xf/eager and xf/compile over the examples.
# A run that fails (xf out of memory, say) shows "fail" and a note; the
# benchmark goes on.
#
# PyTorch lives in bench/.venv, created and filled from PyPI on the first run
# (the CPU wheel index when reachable, else PyPI's default wheel with its CUDA
# libraries, about 5 GB). The test suite does not use it.
#
# Usage: bench/run.sh [example ...]
#   env: LAYERS (default "2 18"), STEPS (timed steps, default 3),
#        THREADS (default: all cores), BATCH (default 64)
set -euo pipefail
cd "$(dirname "$0")/.."
layers_list=${LAYERS:-2 18} steps=${STEPS:-3} threads=${THREADS:-$(nproc)} batch=${BATCH:-64} seq=128
examples=${*:-transformer she he we me macaron macaron_she postnorm rk4}
out=out/bench venv=bench/.venv py=bench/.venv/bin/python
for ex in $examples; do
  [ -f "examples/$ex.xf" ] || { echo "bench: no examples/$ex.xf" >&2; exit 1; }
done
mkdir -p "$out"

# --- PyTorch 2 from PyPI in bench/.venv ---------------------------------------
has_torch() { [ -x "$py" ] && "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'; }
if ! has_torch; then
  python3 -m venv "$venv" || { echo "bench: cannot create $venv (python3 -m venv; apt-get install python3-venv)" >&2; exit 1; }
  echo "bench: installing torch into $venv (first run only)"
  "$py" -m pip install --retries 0 --timeout 15 --index-url https://download.pytorch.org/whl/cpu torch numpy ||
    { echo "bench: the CPU wheel index is unreachable; installing PyPI's default torch wheel"
      "$py" -m pip install torch numpy; } ||
    { echo "bench: cannot install torch from PyPI" >&2; exit 1; }
fi
torch_version=$("$py" -c 'import importlib.metadata as m; print(m.version("torch"))')

# --- xf, release build -----------------------------------------------------------
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-release -j"$(nproc)" >/dev/null

# --- helpers -----------------------------------------------------------------------
# peak_rss FILE CMD...: runs CMD, writes its peak RSS in MiB to FILE, returns its status.
peak_rss() {
  "$py" -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write("%.0f\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024))
sys.exit(rc)' "$@"
}
# ratio A B: A/B to 2 decimals, or "-" unless both are numbers.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { n = "^[0-9.]+$"; if (a ~ n && b ~ n && b > 0) printf "%.2f", a / b; else printf "-" }'; }
row() { printf '| %-11s | %2s | %8s | %11s | %13s | %8s | %10s | %11s | %10s | %13s | %15s | %10s | %8s |\n' "$@"; }
# torch_run MODE (eager or compile) for $ex, $layers: prints "tokens/s peak-RSS-MiB warm-up-s", else "fail - -".
torch_run() {
  local flag=; [ "$1" = compile ] && flag=--compile
  OMP_NUM_THREADS=$threads "$py" bench/torch_ref.py "$ex" $flag --layers "$layers" --batch "$batch" \
    --seq "$seq" --steps "$steps" --threads "$threads" 2>"$base.$1.log" || echo "fail - -"
}
notes=()
note() { notes+=("$*"); echo "bench: $*" >&2; }

# --- sgemm rate ----------------------------------------------------------------------
blas_rate=-
if cc -O2 bench/sgemm.c -o "$out/sgemm" -lopenblas 2>"$out/sgemm.log"; then blas_rate=$("$out/sgemm" "$threads"); fi
torch_rate=$(OMP_NUM_THREADS=$threads "$py" bench/torch_ref.py sgemm --threads "$threads" 2>>"$out/sgemm.log") || torch_rate=-
sgemm=$(awk -v a="$blas_rate" -v b="$torch_rate" 'BEGIN { print (a ~ /^[0-9.]+$/ && (b !~ /^[0-9.]+$/ || a + 0 >= b + 0)) ? a : b }')

header="xf $(git describe --always --dirty 2>/dev/null || echo "?") against torch $torch_version; $threads threads, batch $batch x $seq tokens,"
header+=" $steps timed steps; sgemm 1024^3 float32: OpenBLAS $blas_rate, torch.mm $torch_rate GFLOP/s (using $sgemm);"
header+=" model FLOPs: xfc --stats, training (forward + backward) ops per token at T = $seq"
echo "$header"
echo
table=$(row example L "xf tok/s" "eager tok/s" "compile tok/s" "xf/eager" "xf/compile" "xf plan MiB" "xf RSS MiB" \
            "eager RSS MiB" "compile RSS MiB" "xf GFLOP/s" "of sgemm")$'\n'$(row "" "" "" "" "" "" "" "" "" "" "" "" "" | sed 's/ /-/g')
echo "$table"

# --- one row per example and layer count -----------------------------------------------
for layers in $layers_list; do
  for ex in $examples; do
    base=$out/$ex-L$layers
    xf=fail plan=- xf_rss=- ops=- gflops=- frac=-
    # xf: compile, count ops, train STEPS + 1 steps on the bundled books (BPE 5000, cached)
    ops=$(build-release/xfc --stats "examples/$ex.xf" -D layers="$layers" 2>/dev/null |
          awk -F': ' '/^training .*ops per token/ { print $2 }') || true
    if ! build-release/xfc "examples/$ex.xf" -D layers="$layers" -o "$base.so" 2>"$base.xf.log"; then
      note "$ex L$layers: xfc: $(grep -m1 error "$base.xf.log")"
    else
      rm -f "$base.csv"
      if peak_rss "$base.xf.rss" build-release/xfrun train "$base.so" --steps $((steps + 1)) --batch "$batch" \
           --seq "$seq" --threads "$threads" --eval-batches 1 --log "$base.csv" >"$base.xf.log" 2>&1; then
        # tokens/s over the steps after the first (warm-up), from the log's elapsed column
        xf=$(awk -F, -v t="$((batch * seq))" 'NR == 2 { t0 = $4 } END { printf "%.1f", (NR - 2) * t / ($4 - t0) }' "$base.csv")
        xf_rss=$(cat "$base.xf.rss")
      else
        note "$ex L$layers: $(grep -m1 error "$base.xf.log" || tail -n 1 "$base.xf.log")"
      fi
      plan=$(grep -o -m1 -E '[0-9.]+ MiB (planned|for batch)' "$base.xf.log" | cut -d' ' -f1) || plan=-
      [ -z "$plan" ] && plan=-
    fi
    if [ "$xf" != fail ] && [ -n "$ops" ]; then
      gflops=$(awk -v r="$xf" -v o="$ops" 'BEGIN { printf "%.1f", r * o / 1e9 }')
      frac=$(ratio "$gflops" "$sgemm")
    fi
    # torch: eager, then compiled, each in its own process (its own peak RSS)
    read -r eager_tps eager_rss _ <<<"$(torch_run eager)"
    read -r compile_tps compile_rss _ <<<"$(torch_run compile)"
    [ "$eager_tps" = fail ] && note "$ex L$layers: torch eager: $(tail -n 1 "$base.eager.log")"
    [ "$compile_tps" = fail ] && note "$ex L$layers: torch.compile: $(tail -n 1 "$base.compile.log")"
    line=$(row "$ex" "$layers" "$xf" "$eager_tps" "$compile_tps" "$(ratio "$xf" "$eager_tps")" "$(ratio "$xf" "$compile_tps")" \
               "$plan" "$xf_rss" "$eager_rss" "$compile_rss" "$gflops" "$frac")
    echo "$line"
    table+=$'\n'$line
  done
done

# --- geometric means over the examples, per layer count ----------------------------------
summary=$(awk -F'|' 'NR > 2 {
    L = $3 + 0; e = $7 + 0; c = $8 + 0; seen[L] = 1
    if (e > 0) { se[L] += log(e); ne[L]++ }
    if (c > 0) { sc[L] += log(c); nc[L]++ }
  }
  END { for (L in seen) printf "geometric mean, L = %d: xf/eager %s over %d examples, xf/compile %s over %d examples\n", L,
          ne[L] ? sprintf("%.2f", exp(se[L] / ne[L])) : "-", ne[L], nc[L] ? sprintf("%.2f", exp(sc[L] / nc[L])) : "-", nc[L] }' \
  <<<"$table" | sort -t= -k2 -n)
echo
echo "$summary"
{
  echo "# xf against PyTorch: training throughput and memory"
  echo
  echo "$header."
  echo "Written by bench/run.sh on $(date -u '+%Y-%m-%d %H:%M UTC')."
  echo
  echo "$table"
  echo
  while read -r s; do echo "- $s"; done <<<"$summary"
  if [ ${#notes[@]} -gt 0 ]; then
    echo
    echo "Failures:"
    echo
    printf -- '- %s\n' "${notes[@]}"
  fi
} >"$out/results.md"
echo "bench: wrote $out/results.md"
