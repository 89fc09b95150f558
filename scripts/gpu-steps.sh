# shellcheck shell=bash
# gpu-steps.sh: steps 2-4 of scripts/gpu-check, shared by the run in the
# source tree (scripts/gpu-check) and the run of a bundle (DIR/run, written by
# scripts/gpu-bundle, which copies this file into DIR). Sourced, not run.
#
# The caller sets, then calls gs_init:
#   ROOT        the folder test_cuda_backend runs in (examples/, stdlib/, the
#               test models of tests/) and that holds bench/torch_ref.py
#   OUT         the output folder: logs, table.md, speed.md
#   XFRUN       xfrun; TEST_BIN: test_cuda_backend; XFC: xfc, or empty where
#               there is none (a bundle: everything is compiled beforehand)
#   MODELS      the compiled models: $ex-fp32-L2.so (curves), $ex-L$L.so (speed)
#   CPU_CURVES  the CPU's loss curves, $ex.cpu.csv
#   COST_DIR    `xfc --emit=cost` per example and layer count ($ex-L$L.txt)
#   STATS_DIR   `xfc --stats` likewise ($ex-L$L.txt)
#   DATA_ARGS   xfrun's corpus and cache arguments (an array, may be empty)
#   XF_ENV      the prefix of every command of xf's binaries (an array, e.g.
#               env LD_LIBRARY_PATH=...: the CUDA libraries of a bundle)
# and may set (the environment of gpu-check and DIR/run):
#   STEPS (50) steps of the curves; EXAMPLES (every example); LAYERS ("2 18")
#   layer counts of the speed table, empty: no speed; COMPILE_EXAMPLES
#   ("transformer macaron he we me she") and COMPILE_LAYERS (18): the
#   torch.compile columns; XF_STEPS (21) and TORCH_STEPS (20) steps a speed
#   run times; BF16_ROWS ("transformer:18:64:128 gpt2_small:12:8:1024",
#   EX:LAYERS:BATCH:SEQ; empty: none): the bf16 table of step 4, xf compiled
#   with --precision=bf16 (bf16 storage and GEMMs) against PyTorch eager and
#   torch.compile under bf16 autocast at that batch x seq (models
#   $ex-bf16-L$L.so, costs and stats $ex-bf16-L$L.txt);
#   BUDGET seconds for steps 2-4 (0: none; every command still has
#   its own limit); JOBS: checks run at once in steps 2 and 3 (default half
#   the cores, at most 8; 1 when the GPU is in an exclusive compute mode);
#   PYTHON (python3).

ALL_EXAMPLES="transformer she he we me macaron macaron_she postnorm rk4 linear_attention gla retnet ssm moe mamba"

# ---- bookkeeping: rows of the table, the budget, a pool of background checks ---------------
gs_init() {
  STEPS=${STEPS:-50} EXAMPLES=${EXAMPLES:-$ALL_EXAMPLES} LAYERS=${LAYERS-2 18}
  COMPILE_EXAMPLES=${COMPILE_EXAMPLES-transformer macaron he we me she} COMPILE_LAYERS=${COMPILE_LAYERS-18}
  XF_STEPS=${XF_STEPS:-21} TORCH_STEPS=${TORCH_STEPS:-20} BUDGET=${BUDGET:-0} PYTHON=${PYTHON:-python3}
  BF16_ROWS=${BF16_ROWS-transformer:18:64:128 gpt2_small:12:8:1024}
  if [ -z "${JOBS:-}" ]; then
    JOBS=$(( $(nproc 2> /dev/null || echo 2) / 2 ))
    [ "$JOBS" -gt 8 ] && JOBS=8
    [ "$JOBS" -lt 1 ] && JOBS=1
  fi
  mkdir -p "$OUT/rows" "$OUT/test" "$OUT/curves" "$OUT/speed"
  rm -f "$OUT/rows/"* "$OUT/speed.md" "$OUT/table.md"
  TRAIN_ARGS=(--batch 16 --seq 64 --seed 3 --eval-batches 1 --steps "$STEPS")  # the curves of step 3
  rows=() fails=0
  gs_deadline=0 gs_phase_end=0
  [ "$BUDGET" -gt 0 ] && gs_deadline=$(( $(gs_now) + BUDGET ))
}
gs_now() { printf '%(%s)T' -1; }
gs_phase() {  # SECONDS: what the commands started from now on may use at most (0: the rest of the budget)
  gs_phase_end=0
  [ "$1" -gt 0 ] && gs_phase_end=$(( $(gs_now) + $1 ))
}
gs_left() {  # seconds the budget (and the phase) has left; a large number without one
  local now left=1000000
  now=$(gs_now)
  [ "$gs_deadline" -gt 0 ] && left=$(( gs_deadline - now ))
  [ "$gs_phase_end" -gt 0 ] && [ $(( gs_phase_end - now )) -lt "$left" ] && left=$(( gs_phase_end - now ))
  echo "$left"
}
tmo() {  # CAP COMMAND...: the command under `timeout`, at most CAP seconds and what the
  # budget has left less the 10 s a kill may take; status 124 without running it when under 5 s are left
  local cap=$1 left
  shift
  left=$(( $(gs_left) - 10 ))
  [ "$left" -lt "$cap" ] && cap=$left
  [ "$cap" -lt 5 ] && return 124
  timeout -k 10 "$cap" "$@"
}
row() {  # what, PASS|FAIL|info, detail: a row of the table, printed now
  rows+=("| $1 | $2 | $3 |")
  [ "$2" = FAIL ] && fails=$((fails + 1))
  printf '%-5s %s: %s\n' "$2" "$1" "$3"
}
jrow() {  # what, PASS|FAIL|info, detail: a row from a background check, kept in its file
  printf '%s\t%s\t%s\n' "$1" "$2" "${3//$'\n'/ }" >> "$ROWFILE"
}
gs_spawn() {  # KEY FUNCTION ARGS...: FUNCTION in the background (at most JOBS at once), its rows in rows/KEY
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  local key=$1
  shift
  ( ROWFILE=$OUT/rows/$key; : > "$ROWFILE"; "$@" ) < /dev/null &
}
gs_collect() {  # wait for every background check, then their rows in the order of their keys
  wait
  local f w r d
  for f in "$OUT/rows/"*; do
    [ -f "$f" ] || continue
    while IFS=$'\t' read -r w r d; do row "$w" "$r" "$d"; done < "$f"
  done
  rm -f "$OUT/rows/"*
}
why_failed() {  # STATUS LOG: why a command failed, in a few words
  case $1 in
    124 | 137) echo "timed out (limit or budget spent)" ;;
    *) echo "status $1: $(grep -m1 -iE 'error|fail' "$2" 2> /dev/null || tail -1 "$2" 2> /dev/null)" | cut -c1-300 ;;
  esac
}
gs_finish() {  # the table (OUT/table.md) and the speed table; exit 1 on any failure
  {
    echo "| check | result | detail |"
    echo "| --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
  } > "$OUT/table.md"
  echo
  cat "$OUT/table.md"
  if [ -f "$OUT/speed.md" ]; then
    echo
    cat "$OUT/speed.md"
    { echo; cat "$OUT/speed.md"; } >> "$OUT/table.md"
  fi
  echo
  echo "gpu-check: $fails failed (logs in $OUT)"
  exit $((fails > 0))
}
gs_jobs_for_gpu() {  # one check at a time when the GPU admits one process
  local mode
  mode=$(timeout 30 nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2> /dev/null | head -1)
  case $mode in *Exclusive* | *Prohibited*) JOBS=1 ;; esac
}

# ---- before the GPU: the models, the CPU's curves, the cost estimates -----------------------
gs_compile() {  # EX PRECISION LAYERS OUTPUT: xfc --target=cuda, its log beside OUTPUT
  local prec=()
  [ "$2" = default ] || prec=(--precision="$2")
  "$XFC" --target=cuda "${prec[@]}" "$ROOT/examples/$1.xf" -D layers="$3" -o "$4" 2> "${4%.so}.xfc.log"
}
gs_prepare_models() {  # every model steps 3 and 4 run, compiled into MODELS; cost and stats beside
  mkdir -p "$MODELS" "$COST_DIR" "$STATS_DIR"
  local ex L
  for ex in $EXAMPLES; do
    gs_spawn "p-$ex-c" gs_prepare_one "$ex" fp32 2 "$MODELS/$ex-fp32-L2.so"
    for L in $LAYERS; do
      gs_spawn "p-$ex-$L" gs_prepare_one "$ex" default "$L" "$MODELS/$ex-L$L.so"
    done
  done
  local row b q
  for row in $BF16_ROWS; do
    IFS=: read -r ex L b q <<< "$row"
    gs_spawn "p-$ex-bf16-$L" gs_prepare_bf16 "$ex" "$L" "$b" "$q"
  done
  gs_collect
}
gs_prepare_bf16() {  # EX LAYERS BATCH SEQ: a model of the bf16 table, its cost and op counts at BATCH x SEQ
  local k=$1-bf16-L$2
  if ! gs_compile "$1" bf16 "$2" "$MODELS/$k.so"; then
    jrow "$1 (layers $2, bf16): compile" FAIL "$(grep -m1 error "$MODELS/$k.xfc.log")"
    return
  fi
  if ! "$XFC" --target=cuda --precision=bf16 --emit=cost --batch="$3" --seq="$4" "$ROOT/examples/$1.xf" -D layers="$2" \
       > "$COST_DIR/$k.txt" 2> /dev/null || ! grep -q '^total:' "$COST_DIR/$k.txt"; then
    jrow "$1 (layers $2, bf16): cost estimate" FAIL "no estimate"
    rm -f "$COST_DIR/$k.txt"
  fi
  "$XFC" --stats --precision=bf16 --batch="$3" --seq="$4" "$ROOT/examples/$1.xf" -D layers="$2" > "$STATS_DIR/$k.txt" 2> /dev/null
}
gs_prepare_one() {  # EX PRECISION LAYERS OUTPUT
  if ! gs_compile "$@"; then
    jrow "$1 (layers $3, $2): compile" FAIL "$(grep -m1 error "${4%.so}.xfc.log")"
    return
  fi
  [ "$2" = default ] || return 0
  # the cost model's estimate at batch 64 x 128 (xfc --emit=cost) and the op counts
  if ! "$XFC" --target=cuda --emit=cost --batch=64 --seq=128 "$ROOT/examples/$1.xf" -D layers="$3" \
       > "$COST_DIR/$1-L$3.txt" 2> "$COST_DIR/$1-L$3.log" || ! grep -q '^total:' "$COST_DIR/$1-L$3.txt"; then
    jrow "$1 (layers $3): cost estimate" FAIL "$(head -1 "$COST_DIR/$1-L$3.log")"
    rm -f "$COST_DIR/$1-L$3.txt"
  fi
  rm -f "$COST_DIR/$1-L$3.log"
  "$XFC" --stats "$ROOT/examples/$1.xf" -D layers="$3" > "$STATS_DIR/$1-L$3.txt" 2> /dev/null
}
gs_cpu_curve() {  # EX: STEPS steps on the CPU from the model of the curves, the reference of step 3
  local ex=$1
  mkdir -p "$CPU_CURVES"
  rm -f "$CPU_CURVES/$ex.cpu.csv"
  "${XF_ENV[@]}" "$XFRUN" train "$MODELS/$ex-fp32-L2.so" --device cpu "${DATA_ARGS[@]}" "${TRAIN_ARGS[@]}" \
    --log "$CPU_CURVES/$ex.cpu.csv" > "$CPU_CURVES/$ex.cpu.log" 2>&1 ||
    jrow "$ex: train on the CPU" FAIL "$(grep -m1 error "$CPU_CURVES/$ex.cpu.log")"
  # the model's rounding floor: the same run with the other float32 GEMM
  # library (tests/runtime/run_rounding.sh); none where it is missing
  rm -f "$CPU_CURVES/$ex.cpu2.csv"
  "${XF_ENV[@]}" "$XFRUN" train "$MODELS/$ex-fp32-L2.so" --device cpu --gemm openblas "${DATA_ARGS[@]}" "${TRAIN_ARGS[@]}" \
    --log "$CPU_CURVES/$ex.cpu2.csv" > "$CPU_CURVES/$ex.cpu2.log" 2>&1 || rm -f "$CPU_CURVES/$ex.cpu2.csv"
}
gs_prepare_curves() {  # the CPU's curve of every example, one at a time (each uses every core)
  local ex
  for ex in $EXAMPLES; do
    [ -f "$MODELS/$ex-fp32-L2.so" ] || continue
    ROWFILE=$OUT/rows/c-$ex gs_cpu_curve "$ex"
  done
  gs_collect
}

# ---- 2. test_cuda_backend --gpu: the comparisons of cuda_backend on the device --------------
# Each part is the test with a filter (its argument: the checks whose model
# path holds it), several at once: the graph, every example (fused, --no-fuse
# and bf16; the transformer also at context 200, SHE over several chunks),
# the golden and fusion models, and every op model of tests/grad.
gs_test_part() {  # NAME FILTER...: one test process per FILTER, one row for them all
  local name=$1 log rc n=0 pass=0 fail=0 first="" t0
  shift
  t0=$(gs_now)
  for f in "$@"; do
    log=$OUT/test/$(echo "$name-$f" | tr '/ ' '__').log
    (cd "$ROOT" && tmo 240 "${XF_ENV[@]}" "$TEST_BIN" --gpu "$f") > "$log" 2>&1
    rc=$?
    n=$((n + 1))
    if [ "$rc" -eq 0 ] && grep -qE '^[0-9]+ passed, 0 failed' "$log"; then
      pass=$((pass + $(grep -oE '^[0-9]+ passed' "$log" | cut -d' ' -f1)))
    else
      fail=$((fail + 1))
      if [ -z "$first" ]; then
        case $rc in
          77) first="$f: the test skipped on a machine with a GPU ($(head -1 "$log"))" ;;
          124 | 137) first="$f: timed out (limit or budget spent) after $(grep -c '^ok' "$log") checks passed" ;;
          *) first="$f: $(grep -m1 '^FAIL' "$log" || tail -1 "$log")" ;;
        esac
      fi
    fi
  done
  if [ "$fail" -eq 0 ]; then
    jrow "device test $name" PASS "$pass checks passed ($n processes, $(( $(gs_now) - t0 )) s)"
  else
    jrow "device test $name" FAIL "$fail of $n processes failed; first: ${first:0:300}"
  fi
}
gs_step_tests() {  # spawns the parts; gs_collect prints their rows
  local cc=${XF_CC:-cc}
  if ! command -v "$cc" > /dev/null 2>&1; then
    row "device tests" FAIL "no C compiler '$cc' here: test_cuda_backend links every model it compiles with it (set XF_CC)"
    return
  fi
  local ex ops=()
  gs_spawn "t-00-graph" gs_test_part graph graph
  for ex in $ALL_EXAMPLES; do
    [ -f "$ROOT/examples/$ex.xf" ] && gs_spawn "t-10-$ex" gs_test_part "$ex" "examples/$ex.xf"
  done
  gs_spawn "t-20-models" gs_test_part "golden and fusion models" tests/golden/ tests/fusion/
  # the op models in four parts, each a process per model
  local i=0 f parts=("" "" "" "")
  for f in "$ROOT"/tests/grad/op_*.xf; do
    [ -f "$f" ] || continue
    parts[i % 4]+=" tests/grad/${f##*/}"
    i=$((i + 1))
  done
  for i in 0 1 2 3; do
    # shellcheck disable=SC2086  # the part's model paths, no spaces in them
    [ -n "${parts[i]}" ] && gs_spawn "t-30-ops-$i" gs_test_part "op models ($((i + 1))/4)" ${parts[i]}
  done
}

# ---- 3. curves and samples, GPU against the CPU -------------------------------------------
# Every example (2 layers of the Table 1 widths, batch 16 of 64 tokens,
# --precision=fp32) trained STEPS steps on the GPU against the CPU's curve
# from the same seed: within max(1e-3, 2 x the model's rounding floor: the
# CPU's curve with OpenBLAS against oneDNN's) relative at every step, and falling; then
# greedy sampling from the GPU's checkpoint on both devices: the same text.
gs_curve() {  # EX
  local ex=$1 so=$MODELS/$1-fp32-L2.so cpu=$CPU_CURVES/$1.cpu.csv o=$OUT/curves/$1 rc msg
  [ -f "$so" ] || { jrow "$ex: curve" FAIL "no model $so"; return; }
  [ -f "$cpu" ] || { jrow "$ex: curve" FAIL "no CPU curve $cpu"; return; }
  rm -f "$o.gpu.csv"
  tmo 240 "${XF_ENV[@]}" "$XFRUN" train "$so" --device cuda "${DATA_ARGS[@]}" "${TRAIN_ARGS[@]}" \
    --log "$o.gpu.csv" --save "$o.gpu.safetensors" > "$o.gpu.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || { jrow "$ex: train on the GPU" FAIL "$(why_failed "$rc" "$o.gpu.log")"; return; }
  if msg=$(tmo 60 "$PYTHON" - "$cpu" "$o.gpu.csv" "$STEPS" "${cpu%.cpu.csv}.cpu2.csv" 2>&1 <<'PY'
import csv, os, sys
def curve(p): return [float(r["loss"]) for r in csv.DictReader(open(p))]
def dist(a, b): return max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and b else float("inf")
a, b, n = curve(sys.argv[1]), curve(sys.argv[2]), int(sys.argv[3])
floor = dist(a, curve(sys.argv[4])) if os.path.exists(sys.argv[4]) else 0.0
bound = max(1e-3, 2 * floor)
worst = dist(a, b)
print(f"{len(b)} steps, loss {b[0]:.4f} -> {b[-1]:.4f}, worst relative difference to the CPU {worst:.1e}"
      f" (bound {bound:.1e}; the CPU with another GEMM library: {floor:.1e})")
sys.exit(0 if len(a) == len(b) == n and worst <= bound and b[-1] < b[0] else 1)
PY
  ); then jrow "$ex: curve" PASS "$msg"; else jrow "$ex: curve" FAIL "$msg"; fi
  local sample=(--checkpoint "$o.gpu.safetensors" --prompt "Once upon a time" --max-tokens 40 --temperature 0) s_gpu s_cpu
  s_gpu=$(tmo 120 "${XF_ENV[@]}" "$XFRUN" sample "$so" --device cuda "${sample[@]}" 2> "$o.sgpu.log")
  s_cpu=$(tmo 120 "${XF_ENV[@]}" "$XFRUN" sample "$so" --device cpu "${sample[@]}" 2> "$o.scpu.log")
  if [ -n "$s_gpu" ] && [ "$s_gpu" = "$s_cpu" ] && ! grep -q recomputing "$o.sgpu.log"; then
    jrow "$ex: greedy sample" PASS "the same 40 tokens on both, incremental on the GPU"
  else
    jrow "$ex: greedy sample" FAIL "GPU '${s_gpu:0:60}' CPU '${s_cpu:0:60}' $(head -1 "$o.sgpu.log")"
  fi
}
gs_step_curves() {  # spawns every example; gs_collect prints their rows
  local ex
  for ex in $EXAMPLES; do gs_spawn "u-$ex" gs_curve "$ex"; done
}

# ---- 4. speed against PyTorch on the same GPU -----------------------------------------------
# Seed 001 Table 1 sizes (batch 64 of 128 tokens) at each layer count of
# LAYERS: xf on the GPU (TF32 GEMMs, the default) against PyTorch eager,
# torch.compile and torch.compile with bf16 autocast (bench/torch_ref.py
# --device cuda --tf32 [--compile] [--bf16]), one run at a time, with the
# cost model's estimate (xfc --emit=cost) beside xf's step time. Runs in the
# order xf (every example and layer count), eager, then torch.compile and
# torch.compile with bf16 autocast example by example, so a spent budget
# drops the last.
declare -gA sp  # the speed cells: sp[what,ex-L$L], what: xf, plan, eager, comp, bf and their _mem
gs_torch() {  # EX LAYERS WHAT CAP FLAGS...: one torch_ref.py run; its tok/s and peak MiB into sp[WHAT,...]
  local ex=$1 L=$2 what=$3 cap=$4 log rc tok mem
  shift 4
  log=$OUT/speed/$ex-L$L.$what
  tmo "$cap" "$PYTHON" "$ROOT/bench/torch_ref.py" "$ex" --device cuda --tf32 --layers "$L" --steps "$TORCH_STEPS" "$@" \
    > "$log.out" 2> "$log.log"
  rc=$?
  read -r tok mem _ < "$log.out"
  case $rc in
    0) ;;
    124 | 137) tok=timeout mem=- ;;
    *) tok=fail mem=- ;;
  esac
  sp[$what,$ex-L$L]=${tok:--} sp[${what}_mem,$ex-L$L]=${mem:--}
  echo "torch $what $ex L$L: ${tok:--} tok/s"
}
has_torch() {  # EX: whether bench/torch_ref.py has the example
  case " $TORCH_EXAMPLES " in *" $1 "*) return 0 ;; esac
  return 1
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
gs_step_speed() {
  [ -n "$LAYERS" ] || return 0
  local torch_ok=false mm=- ex L base rc k
  if tmo 120 "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> "$OUT/speed/torch.log"; then
    torch_ok=true
    tmo 120 "$PYTHON" "$ROOT/bench/torch_ref.py" sgemm --device cuda --threads 1 > "$OUT/speed/mm.out" 2> "$OUT/speed/mm.log"
    read -r _ mm < "$OUT/speed/mm.out"
    mm=${mm:--}
  else
    row "speed" info "$PYTHON has no torch with CUDA: xf only"
  fi
  # torch_ref.py's EXAMPLES tuple, over however many lines it spans
  TORCH_EXAMPLES=$(awk '/^EXAMPLES = \(/, /\)/' "$ROOT/bench/torch_ref.py" | grep -o '"[A-Za-z0-9_]*"' | tr -d '"' | tr '\n' ' ')
  [ -n "$TORCH_EXAMPLES" ] || row "speed" info "no EXAMPLES tuple in bench/torch_ref.py: no PyTorch columns"
  # xf, every example and layer count
  for L in $LAYERS; do
    for ex in $EXAMPLES; do
      base=$OUT/speed/$ex-L$L k=$ex-L$L
      sp[xf,$k]=- sp[plan,$k]=-
      [ -f "$MODELS/$ex-L$L.so" ] || continue
      rm -f "$base.csv"
      tmo 120 "${XF_ENV[@]}" "$XFRUN" train "$MODELS/$ex-L$L.so" --device cuda "${DATA_ARGS[@]}" --steps "$XF_STEPS" \
        --batch 64 --seq 128 --eval-batches 1 --log "$base.csv" > "$base.log" 2>&1
      rc=$?
      case $rc in
        0) sp[xf,$k]=$(awk -F, 'NR == 2 { t0 = $4 } END { if (NR > 2 && $4 > t0) printf "%.0f", (NR - 2) * 8192 / ($4 - t0); else print "-" }' "$base.csv") ;;
        124 | 137) sp[xf,$k]=timeout ;;
        *) sp[xf,$k]=fail ;;
      esac
      sp[plan,$k]=$(grep -o -m1 -E '[0-9.]+ MiB planned' "$base.log" | cut -d' ' -f1)
      echo "xf $ex L$L: ${sp[xf,$k]} tok/s"
    done
  done
  if $torch_ok; then
    # first every reference of the COMPILE_EXAMPLES (eager, torch.compile, with
    # bf16 autocast), then eager for the others: what a short budget cuts is
    # the least asked for
    for L in $COMPILE_LAYERS; do
      case " $LAYERS " in *" $L "*) ;; *) continue ;; esac
      for ex in $COMPILE_EXAMPLES; do
        has_torch "$ex" || continue
        case " $EXAMPLES " in *" $ex "*) ;; *) continue ;; esac
        gs_torch "$ex" "$L" eager 120
        gs_torch "$ex" "$L" comp 180 --compile
        gs_torch "$ex" "$L" bf 180 --compile --bf16
      done
    done
  fi
  gs_bf16_run "$torch_ok"  # before the eager runs of the others: what the budget cuts is the least asked for
  if $torch_ok; then
    for L in $LAYERS; do  # eager, every example torch_ref.py has
      for ex in $EXAMPLES; do
        has_torch "$ex" && [ -z "${sp[eager,$ex-L$L]:-}" ] && gs_torch "$ex" "$L" eager 120
      done
    done
  fi
  local xf ms est me ops gf frac
  {
    echo "Training at seed 001 Table 1 sizes, batch 64 x 128; xf's GEMMs in TF32 (its default), torch with TF32 allowed;" \
         "torch.mm float32 rate ${mm} GFLOP/s. xf: $XF_STEPS steps (the first untimed), torch: $TORCH_STEPS after 3 untimed." \
         "The torch.compile columns only for ${COMPILE_EXAMPLES:-none} at ${COMPILE_LAYERS:-no} layers (COMPILE_EXAMPLES," \
         "COMPILE_LAYERS); bf16: torch.compile with torch.autocast(bfloat16). est: xfc --emit=cost (an H100 estimate)." \
         "'-': not run or not available, 'timeout': its time limit or the budget ran out, 'fail': see the log in $OUT/speed."
    echo
    echo "| example | L | xf tok/s | xf ms/step | est ms | measured/est | eager tok/s | compile tok/s | bf16 compile tok/s |" \
         "xf/eager | xf/compile | xf/bf16 compile | xf plan MiB | eager peak MiB | compile peak MiB | bf16 compile peak MiB |" \
         "xf GFLOP/s | of torch.mm |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    for L in $LAYERS; do
      for ex in $EXAMPLES; do
        k=$ex-L$L ms=- est=- me=- gf=- frac=-
        xf=${sp[xf,$k]:--}
        [ "$(ratio "$xf" 1)" != - ] && ms=$(awk -v r="$xf" 'BEGIN { printf "%.2f", 8192 / r * 1000 }')
        [ -f "$COST_DIR/$k.txt" ] &&
          est=$(awk '/^total:/ { for (i = 1; i < NF; i++) if ($i == "estimated") printf "%.2f", $(i + 1) / 1000 }' "$COST_DIR/$k.txt")
        est=${est:--}
        me=$(ratio "$ms" "$est")
        ops=$(awk -F': ' '/^training .*ops per token/ { print $2 }' "$STATS_DIR/$k.txt" 2> /dev/null)
        [ "$ms" != - ] && [ -n "$ops" ] && gf=$(awk -v r="$xf" -v o="$ops" 'BEGIN { printf "%.0f", r * o / 1e9 }') &&
          frac=$(ratio "$gf" "$mm")
        echo "| $ex | $L | $xf | $ms | $est | $me | ${sp[eager,$k]:--} | ${sp[comp,$k]:--} | ${sp[bf,$k]:--} |" \
             "$(ratio "$xf" "${sp[eager,$k]:--}") | $(ratio "$xf" "${sp[comp,$k]:--}") | $(ratio "$xf" "${sp[bf,$k]:--}") |" \
             "${sp[plan,$k]:--} | ${sp[eager_mem,$k]:--} | ${sp[comp_mem,$k]:--} | ${sp[bf_mem,$k]:--} | $gf | $frac |"
      done
    done
  } > "$OUT/speed.md"
  gs_bf16_table "$mm" >> "$OUT/speed.md"
}

# The bf16 table (BF16_ROWS): xf with bf16 storage and GEMMs against PyTorch
# eager and torch.compile under bf16 autocast, at each row's batch x seq.
gs_bf16_run() {  # TORCH_OK: the runs, into sp[xb|xbplan|bfe|bfc,...]
  local row ex L b q k base rc
  for row in $BF16_ROWS; do
    IFS=: read -r ex L b q <<< "$row"
    k=$ex-L$L base=$OUT/speed/$ex-bf16-L$L
    sp[xb,$k]=- sp[xbplan,$k]=-
    if [ -f "$MODELS/$ex-bf16-L$L.so" ]; then
      rm -f "$base.csv"
      tmo 180 "${XF_ENV[@]}" "$XFRUN" train "$MODELS/$ex-bf16-L$L.so" --device cuda "${DATA_ARGS[@]}" --steps "$XF_STEPS" \
        --batch "$b" --seq "$q" --eval-batches 1 --log "$base.csv" > "$base.log" 2>&1
      rc=$?
      case $rc in
        0) sp[xb,$k]=$(awk -F, -v n=$((b * q)) 'NR == 2 { t0 = $4 } END { if (NR > 2 && $4 > t0) printf "%.0f", (NR - 2) * n / ($4 - t0); else print "-" }' "$base.csv") ;;
        124 | 137) sp[xb,$k]=timeout ;;
        *) sp[xb,$k]=fail ;;
      esac
      sp[xbplan,$k]=$(grep -o -m1 -E '[0-9.]+ MiB planned' "$base.log" | cut -d' ' -f1)
      echo "xf bf16 $ex L$L ${b}x$q: ${sp[xb,$k]} tok/s"
      # where the step's time goes: --profile (4 steps, the last 3 timed, no graph)
      [ "$rc" -eq 0 ] && tmo 120 "${XF_ENV[@]}" "$XFRUN" train "$MODELS/$ex-bf16-L$L.so" --device cuda "${DATA_ARGS[@]}" \
        --steps 4 --batch "$b" --seq "$q" --eval-batches 1 --profile > "$base.profile" 2>&1
    fi
    if [ "$1" = true ] && has_torch "$ex"; then
      gs_torch "$ex" "$L" bfe 180 --bf16 --batch "$b" --seq "$q"
      gs_torch "$ex" "$L" bfc 240 --compile --bf16 --batch "$b" --seq "$q"
    fi
  done
}
gs_bf16_table() {  # MM: the table, from sp
  [ -n "$BF16_ROWS" ] || return 0
  local row ex L b q k best est ms ops gf
  echo
  echo "bf16: xf compiled with --precision=bf16 (activations stored in bf16, bf16 GEMMs; parameters, moments and sums" \
       "float32) against PyTorch under torch.autocast(bfloat16), eager and torch.compile; torch.mm float32 rate $1 GFLOP/s."
  echo
  echo "| example | L | batch x seq | xf tok/s | xf ms/step | est ms | eager bf16 tok/s | compile bf16 tok/s | xf/best |" \
       "xf plan MiB | eager peak MiB | compile peak MiB | xf GFLOP/s |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for row in $BF16_ROWS; do
    IFS=: read -r ex L b q <<< "$row"
    k=$ex-L$L ms=- est=- gf=-
    [ "$(ratio "${sp[xb,$k]:--}" 1)" != - ] && ms=$(awk -v r="${sp[xb,$k]}" -v n=$((b * q)) 'BEGIN { printf "%.2f", n / r * 1000 }')
    [ -f "$COST_DIR/$ex-bf16-L$L.txt" ] &&
      est=$(awk '/^total:/ { for (i = 1; i < NF; i++) if ($i == "estimated") printf "%.2f", $(i + 1) / 1000 }' "$COST_DIR/$ex-bf16-L$L.txt")
    ops=$(awk -F': ' '/^training .*ops per token/ { print $2 }' "$STATS_DIR/$ex-bf16-L$L.txt" 2> /dev/null)
    [ "$ms" != - ] && [ -n "$ops" ] && gf=$(awk -v r="${sp[xb,$k]}" -v o="$ops" 'BEGIN { printf "%.0f", r * o / 1e9 }')
    best=$(awk -v a="${sp[bfe,$k]:--}" -v c="${sp[bfc,$k]:--}" 'BEGIN { m = (a + 0 > c + 0) ? a + 0 : c + 0; if (m > 0) print m; else print "-" }')
    echo "| $ex | $L | ${b} x $q | ${sp[xb,$k]:--} | $ms | ${est:--} | ${sp[bfe,$k]:--} | ${sp[bfc,$k]:--} | $(ratio "${sp[xb,$k]:--}" "$best") |" \
         "${sp[xbplan,$k]:--} | ${sp[bfe_mem,$k]:--} | ${sp[bfc_mem,$k]:--} | $gf |"
  done
  for row in $BF16_ROWS; do gs_profile_table "$row"; done
}
# EX:LAYERS:BATCH:SEQ: the bf16 model's --profile by kernel class kN (its
# rows of every source line together, the largest first), the 15 largest
# beside the cost model's estimate of the class (xfc --emit=cost: launches x
# est us over its rows and steps)
gs_profile_table() {
  local ex L b q base cost
  IFS=: read -r ex L b q <<< "$1"
  base=$OUT/speed/$ex-bf16-L$L cost=$COST_DIR/$ex-bf16-L$L.txt
  grep -q '^profile of' "$base.profile" 2> /dev/null || return 0
  echo
  echo "$ex, $L layers, bf16, $b x $q: $(grep -m1 '^profile of' "$base.profile")"
  echo
  echo "| share | measured ms / step | est ms / step | measured / est | runs / step | kernel class (its first label) |"
  echo "| --- | --- | --- | --- | --- | --- |"
  awk -v cost="$cost" '
    BEGIN { while ((getline l < cost) > 0) { n = split(l, f, " "); k = f[1]; sub(/\.s[0-9]+$/, "", k)
              if (k ~ /^k[0-9]+$/ && n >= 14) est[k] += f[3] * f[13] / 1000 } }
    /^ *[0-9.]+% / { k = ($4 ~ /^k[0-9]+$/) ? $4 : $0
      if (!(k in ms)) { order[++ng] = k; lab[k] = $0; sub(/^ *[0-9.]+% +[0-9.]+ +[0-9]* +/, "", lab[k]) }
      sh[k] += $1; ms[k] += $2; if ($3 ~ /^[0-9]+$/) runs[k] += $3 }
    END { for (i = 1; i <= ng; i++) for (j = i; j > 1 && ms[order[j - 1]] < ms[order[j]]; j--) { t = order[j]; order[j] = order[j - 1]; order[j - 1] = t }
      for (i = 1; i <= ng && i <= 15; i++) { k = order[i]
        e = (k in est) ? sprintf("%.3f", est[k]) : "-"; r = (k in est && est[k] > 0) ? sprintf("%.2f", ms[k] / est[k]) : "-"
        printf "| %.1f%% | %.3f | %s | %s | %s | %s |\n", sh[k], ms[k], e, r, (k in runs) ? runs[k] : "-", lab[k] } }' "$base.profile"
}
