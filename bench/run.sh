#!/usr/bin/env bash
# Benchmark (not a test): training throughput and memory of every example in
# xf against current PyTorch from PyPI, eager and torch.compile, on the same
# machine and thread count. Seed 001 Table 1 sizes (vocab 5000, context 128,
# d 128, FFN 512, 32 heads, dropout 0.1), batch 64 of 128 tokens, AdamW
# (lr 1e-3, weight decay 0.01), at each layer count of LAYERS; then the
# GPT-2-small class (examples/gpt2_small.xf, 12 layers) at each batch x seq
# of GPT2, in a table of its own.
#
# First it prints the machine: the CPU (its model name and the widest of
# avx512f and avx2 it has), then the runtime's GEMM (build-release/xf-gemm-bench,
# bench/sgemm.c: the provider's xf_gemm_describe line, its GFLOP/s on each
# product the models run at THREADS threads split as the runtime splits them,
# and "rate", their geometric mean; under PRECISION=bf16 the same for its
# bf16 products, xf-gemm-bench --bf16, whose rate the rows then divide by),
# and torch.mm's rate for reference.
#
# For every example and layer count it prints, and writes to out/bench/results.md
# (results-bf16.md under PRECISION=bf16):
#   xf, torch eager and torch.compile tokens/s over STEPS steady-state training
#     steps (not timed: xf's first step, PyTorch's first 3, which compile and
#     settle the allocator), the best torch (the higher of eager and compile),
#     and xf/eager, xf/compile, xf/best;
#   xf's planned memory (what xfrun reports, also when it cannot allocate it)
#     and the peak RSS of each of the three runs, each in its own process;
#   xf's model GFLOP/s, from the training (forward + backward) ops per token
#     that `xfc --stats` counts, and that rate as a fraction of the GEMM rate
#     (xf-gemm-bench's "rate", measured at the start of the run);
# then, per layer count, the geometric means of xf/eager, xf/compile and
# xf/best over the examples and the lowest xf/best with its example.
# A run that fails (xf out of memory, say) shows "fail" and a note; the
# benchmark goes on.
#
# PyTorch lives in bench/.venv, created and filled from PyPI on the first run
# (the CPU wheel index when reachable, else PyPI's default wheel with its CUDA
# libraries, about 5 GB). The test suite does not use it.
#
# Usage: bench/run.sh [example ...]
#   env: LAYERS (default "2 18"), STEPS (timed steps, default 3),
#        THREADS (default: all cores), BATCH (default 64),
#        GPT2 (the batch x seq shapes of examples/gpt2_small.xf's rows, default
#        "4x256 1x1024"; empty: none), PRECISION (fp32, the default: float32
#        everywhere; bf16: xfc --precision=bf16, bf16 GEMM products and
#        activations stored in bf16 (parameters, moments, statistics and
#        sums float32), against torch eager and compiled under
#        torch.autocast(bfloat16); results in out/bench/results-bf16.md)
set -euo pipefail
cd "$(dirname "$0")/.."
layers_list=${LAYERS:-2 18} steps=${STEPS:-3} threads=${THREADS:-$(nproc)} batch=${BATCH:-64} seq=128
gpt2=${GPT2-4x256 1x1024}
precision=${PRECISION:-fp32}
case $precision in
  fp32) xf_prec=() torch_prec=() results=results.md suffix= ;;
  bf16) xf_prec=(--precision=bf16) torch_prec=(--bf16) results=results-bf16.md suffix=-bf16 ;;
  *) echo "bench: PRECISION=$precision: expected fp32 or bf16" >&2; exit 2 ;;
esac
examples=${*:-transformer she he we me macaron macaron_she postnorm rk4}
out=out/bench venv=bench/.venv py=bench/.venv/bin/python
for ex in $examples; do
  [ -f "examples/$ex.xf" ] || { echo "bench: no examples/$ex.xf" >&2; exit 1; }
done
mkdir -p "$out"
notes=()
note() { notes+=("$*"); echo "bench: $*" >&2; }

# --- the machine: CPU, then the runtime's GEMM ---------------------------------------
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
flags=$(awk -F': *' '/^flags/ { print " " $2 " "; exit }' /proc/cpuinfo 2>/dev/null)
case $flags in
  *" avx512f "*) cpu_isa=avx512f ;;
  *" avx2 "*) cpu_isa=avx2 ;;
  *) cpu_isa="neither avx512f nor avx2" ;;
esac
cpu_line="CPU: ${cpu:-unknown} ($cpu_isa), $(nproc) cores, $threads threads used"
echo "$cpu_line"

# xf, release build (xfc, xfrun, xf-gemm-bench)
if ! { cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release && cmake --build build-release -j"$(nproc)"; } \
     >"$out/build.log" 2>&1; then
  tail -n 20 "$out/build.log" >&2
  echo "bench: the release build failed (log: $out/build.log)" >&2
  exit 1
fi

# xf-gemm-bench: "GEMM: ..." (xf_gemm_describe), one "m x n x k [ta tb]: G GFLOP/s"
# line per product, then "rate: X", the geometric mean over the model products
gemm_line="GEMM: xf-gemm-bench failed" gemm_rates=() sgemm=-
if build-release/xf-gemm-bench --threads "$threads" >"$out/gemm.txt" 2>"$out/gemm.log"; then
  gemm_line=$(grep -m1 '^GEMM:' "$out/gemm.txt") || gemm_line="GEMM: ?"
  mapfile -t gemm_rates < <(grep -v '^GEMM:' "$out/gemm.txt")
  sgemm=$(awk '/^rate: / { print $2 }' "$out/gemm.txt")
  [ -n "$sgemm" ] || sgemm=-
  cat "$out/gemm.txt"
else
  cat "$out/gemm.txt"
  note "xf-gemm-bench: $(tail -n 1 "$out/gemm.log")"
fi
# PRECISION=bf16: the rate of the bf16 products too (xf-gemm-bench --bf16),
# which the rows' "of GEMM rate" then divides by
sgemm32=$sgemm gemm16_rates=()
if [ "$precision" = bf16 ]; then
  if build-release/xf-gemm-bench --bf16 --threads "$threads" >"$out/gemm16.txt" 2>"$out/gemm16.log"; then
    mapfile -t gemm16_rates < <(grep -v '^GEMM:' "$out/gemm16.txt")
    sgemm=$(awk '/^rate: / { print $2 }' "$out/gemm16.txt")
    [ -n "$sgemm" ] || sgemm=-
    echo "bf16 products (xf-gemm-bench --bf16):"
    grep -v '^GEMM:' "$out/gemm16.txt"
  else
    note "xf-gemm-bench --bf16: $(tail -n 1 "$out/gemm16.log"); the rows' GEMM rate is float32's"
  fi
fi
echo

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
# best A B: the higher of two rates, or the one that is a number, or "-".
best() { awk -v a="$1" -v b="$2" 'BEGIN { n = "^[0-9.]+$"; if (a ~ n && (b !~ n || a + 0 >= b + 0)) print a; else if (b ~ n) print b; else print "-" }'; }
row() { printf '| %-11s | %2s | %8s | %11s | %13s | %10s | %8s | %10s | %7s | %11s | %10s | %13s | %15s | %10s | %12s |\n' "$@"; }
# torch_run MODE (eager or compile) EX LAYERS BATCH SEQ: prints "tokens/s peak-RSS-MiB warm-up-s",
# else "fail - -"; its log in $base.MODE.log.
torch_run() {
  local flag=; [ "$1" = compile ] && flag=--compile
  OMP_NUM_THREADS=$threads "$py" bench/torch_ref.py "$2" $flag "${torch_prec[@]}" --layers "$3" --batch "$4" \
    --seq "$5" --steps "$steps" --threads "$threads" 2>"$base.$1.log" || {
    local rc=$?
    # a process killed by a signal (the kernel's out-of-memory killer) leaves no message
    [ -s "$base.$1.log" ] || echo "exit status $rc$([ $rc -gt 128 ] && echo ", killed by signal $((rc - 128)) (out of memory?)")" >"$base.$1.log"
    echo "fail - -"
  }
}

# --- torch.mm, for reference: 1024^3 and the geometric mean over the same products ---
read -r torch_mm torch_mm_model _ <<<"$(OMP_NUM_THREADS=$threads "$py" bench/torch_ref.py sgemm --threads "$threads" \
  2>"$out/torch_mm.log" || echo "- -")"
[ "$torch_mm" = - ] && note "torch.mm: $(tail -n 1 "$out/torch_mm.log")"
torch_line="torch.mm (torch $torch_version, reference): $torch_mm GFLOP/s at 1024^3, $torch_mm_model on the products above (geometric mean)"
echo "$torch_line"
echo

header="xf $(git describe --always --dirty 2>/dev/null || echo "?") against torch $torch_version; $threads threads, batch $batch x $seq tokens,"
header+=" $steps timed steps; GEMM rate (xf-gemm-bench, geometric mean over the model products): $sgemm GFLOP/s;"
header+=" model FLOPs: xfc --stats, training (forward + backward) ops per token at T = $seq"
[ "$precision" = bf16 ] && header+="; xf with --precision=bf16 (bf16 GEMM products and activations; parameters, moments and sums float32), torch eager and compiled under torch.autocast(bfloat16); $([ ${#gemm16_rates[@]} -gt 0 ] && echo "the GEMM rate is the bf16 products' (xf-gemm-bench --bf16), float32's $sgemm32" || echo "the GEMM rate is float32's")"
echo "$header"
echo
table=$(row example L "xf tok/s" "eager tok/s" "compile tok/s" "best torch" "xf/eager" "xf/compile" "xf/best" "xf plan MiB" \
            "xf RSS MiB" "eager RSS MiB" "compile RSS MiB" "xf GFLOP/s" "of GEMM rate")$'\n'
table+=$(row "" "" "" "" "" "" "" "" "" "" "" "" "" "" "" | sed 's/ /-/g')
echo "$table"

# --- one row per example and layer count -----------------------------------------------
# bench_row EX LAYERS BATCH SEQ LABEL: trains EX in xf and in torch (eager, compiled); the
# table's row in $ROW, LABEL in its second column (in this shell, so that notes are kept).
bench_row() {
  local ex=$1 layers=$2 batch=$3 seq=$4 label=$5
  base=$out/$ex-L$layers-${batch}x$seq$suffix
  local xf=fail plan=- xf_rss=- ops=- gflops=- frac=- xf_gemm
  # xf: compile, count ops, train STEPS + 1 steps on the bundled books (BPE 5000, cached)
  ops=$(build-release/xfc --stats "examples/$ex.xf" -D layers="$layers" 2>/dev/null |
        awk -F': ' '/^training .*ops per token/ { print $2 }') || true
  if ! build-release/xfc "examples/$ex.xf" -D layers="$layers" "${xf_prec[@]}" -o "$base.so" 2>"$base.xf.log"; then
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
    [ "$precision" = bf16 ] && ! grep -q '^xfrun: CPU GEMMs: bf16' "$base.xf.log" &&
      note "$ex L$layers: $(grep -m1 'CPU GEMMs' "$base.xf.log" || echo "no CPU GEMMs line")"
    # xfrun's own GEMM line must be the one the GEMM rate was measured on
    xf_gemm=$(grep -o -m1 'GEMM: .*' "$base.xf.log") || true
    [ -n "$xf_gemm" ] && [ "$xf_gemm" != "$gemm_line" ] && note "$ex L$layers: xfrun ran on '$xf_gemm', the GEMM rate is of '$gemm_line'"
  fi
  if [ "$xf" != fail ] && [ -n "$ops" ]; then
    gflops=$(awk -v r="$xf" -v o="$ops" 'BEGIN { printf "%.1f", r * o / 1e9 }')
    frac=$(ratio "$gflops" "$sgemm")
  fi
  # torch: eager, then compiled, each in its own process (its own peak RSS)
  local eager_tps eager_rss compile_tps compile_rss best_tps
  read -r eager_tps eager_rss _ <<<"$(torch_run eager "$ex" "$layers" "$batch" "$seq")"
  read -r compile_tps compile_rss _ <<<"$(torch_run compile "$ex" "$layers" "$batch" "$seq")"
  [ "$eager_tps" = fail ] && note "$ex L$layers ${batch}x$seq: torch eager: $(tail -n 1 "$base.eager.log")"
  [ "$compile_tps" = fail ] && note "$ex L$layers ${batch}x$seq: torch.compile: $(tail -n 1 "$base.compile.log")"
  best_tps=$(best "$eager_tps" "$compile_tps")
  ROW=$(row "$ex" "$label" "$xf" "$eager_tps" "$compile_tps" "$best_tps" "$(ratio "$xf" "$eager_tps")" \
      "$(ratio "$xf" "$compile_tps")" "$(ratio "$xf" "$best_tps")" "$plan" "$xf_rss" "$eager_rss" "$compile_rss" \
      "$gflops" "$frac")
}

for layers in $layers_list; do
  for ex in $examples; do
    bench_row "$ex" "$layers" "$batch" "$seq" "$layers"
    echo "$ROW"
    table+=$'\n'$ROW
  done
done

# --- geometric means over the examples, per layer count ----------------------------------
# columns ($1 is empty): 2 example, 3 L, 8 xf/eager, 9 xf/compile, 10 xf/best
summary=$(awk -F'|' 'function gm(s, n) { return n ? sprintf("%.2f", exp(s / n)) : "-" }
  NR > 2 {
    L = $3 + 0; e = $8 + 0; c = $9 + 0; b = $10 + 0; seen[L] = 1
    if (e > 0) { se[L] += log(e); ne[L]++ }
    if (c > 0) { sc[L] += log(c); nc[L]++ }
    if (b > 0) { sb[L] += log(b); nb[L]++; if (!(L in lo) || b < lo[L]) { lo[L] = b; ex = $2; gsub(/ /, "", ex); lo_ex[L] = ex } }
  }
  END { for (L in seen) printf "geometric mean, L = %d: xf/eager %s over %d examples, xf/compile %s over %d, xf/best %s over %d; lowest xf/best %s (%s)\n",
          L, gm(se[L], ne[L]), ne[L], gm(sc[L], nc[L]), nc[L], gm(sb[L], nb[L]), nb[L],
          (L in lo) ? sprintf("%.2f", lo[L]) : "-", (L in lo) ? lo_ex[L] : "none" }' \
  <<<"$table" | sort -t= -k2 -n)
echo
echo "$summary"

# --- the GPT-2-small class (examples/gpt2_small.xf, 12 layers), per batch x seq of GPT2 ---
table2=
if [ -n "$gpt2" ]; then
  echo
  echo "examples/gpt2_small.xf (12 layers, d 768, 12 heads of 64, FFN 3072, context 1024, vocab 5000, no dropout):"
  table2=$(row example "B x T" "xf tok/s" "eager tok/s" "compile tok/s" "best torch" "xf/eager" "xf/compile" "xf/best" \
               "xf plan MiB" "xf RSS MiB" "eager RSS MiB" "compile RSS MiB" "xf GFLOP/s" "of GEMM rate")$'\n'
  table2+=$(row "" "" "" "" "" "" "" "" "" "" "" "" "" "" "" | sed 's/ /-/g')
  echo "$table2"
  for shape in $gpt2; do
    bench_row gpt2_small 12 "${shape%x*}" "${shape#*x}" "$shape"
    echo "$ROW"
    table2+=$'\n'$ROW
  done
fi
{
  echo "# xf against PyTorch: training throughput and memory"
  echo
  echo "$header."
  echo "Written by bench/run.sh on $(date -u '+%Y-%m-%d %H:%M UTC')."
  echo
  echo "- $cpu_line"
  echo "- $gemm_line"
  for r in "${gemm_rates[@]}"; do echo "  - $r"; done
  [ ${#gemm16_rates[@]} -gt 0 ] && echo "- bf16 products (xf-gemm-bench --bf16), the GEMM rate of the rows:"
  for r in "${gemm16_rates[@]}"; do echo "  - $r"; done
  echo "- $torch_line"
  echo
  echo "$table"
  echo
  while read -r s; do echo "- $s"; done <<<"$summary"
  if [ -n "$table2" ]; then
    echo
    echo "examples/gpt2_small.xf (12 layers, d 768, 12 heads of 64, FFN 3072, context 1024), per batch x sequence:"
    echo
    echo "$table2"
  fi
  if [ ${#notes[@]} -gt 0 ]; then
    echo
    echo "Failures:"
    echo
    printf -- '- %s\n' "${notes[@]}"
  fi
} >"$out/$results"
echo "bench: wrote $out/$results"
