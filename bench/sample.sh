#!/usr/bin/env bash
# Benchmark (not a test): sampling speed of xf against the strongest
# reference a user has, on the same machine and thread count. Seed 001 Table 1
# shapes (vocab 5000, context 128, d 128, 32 heads, FFN 512) at LAYERS layers,
# a prompt of about 10 tokens, TOKENS new tokens, batch 1 and 8, greedy and
# top-p 0.6:
#   - the transformer against Hugging Face transformers' `generate` with its KV
#     cache (GPT2LMHeadModel of the same shape, bench/sample_ref.py hf);
#   - each Extractor against PyTorch recomputing the whole sequence per token
#     (bench/torch_ref.py's model, bench/sample_ref.py recompute): Hugging Face
#     has no cache for them;
#   - xf's incremental decoder (`xfrun sample`) and its whole-context
#     recompute (`--no-incremental`, the same text).
# Per row: tokens/s, ms per step (one new token for every sequence), peak RSS,
# the ratios, and xf's per-token operations (`xfc --stats`, at t = context)
# as GFLOP/s and as a fraction of the GEMM rate measured at the start
# (build-release/xf-gemm-bench). Writes out/bench/sample.md.
#
# PyTorch and transformers live in bench/.venv, made on the first run (as
# bench/run.sh, plus transformers). The test suite does not use them.
#
# Usage: bench/sample.sh [example ...]   (default: transformer she he we me)
#   env: LAYERS (default 18), TOKENS (default 100), THREADS (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${LAYERS:-18} tokens=${TOKENS:-100} threads=${THREADS:-$(nproc)}
examples=${*:-transformer she he we me}
out=out/bench venv=bench/.venv py=bench/.venv/bin/python work=out/bench/sample
prompt_text="Once upon a time there was a little princess"
mkdir -p "$work"

# --- xf, release build; the GEMM rate ------------------------------------------------
. bench/lib.sh
release_build
xfc=build-release/xfc xfrun=build-release/xfrun
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
echo "CPU: ${cpu:-unknown}, $(nproc) cores, $threads threads used"
sgemm=-
if build-release/xf-gemm-bench --threads "$threads" >"$out/gemm.txt" 2>"$out/gemm.log"; then
  grep -m1 '^GEMM:' "$out/gemm.txt" || true
  sgemm=$(awk '/^rate: / { print $2 }' "$out/gemm.txt")
  echo "GEMM rate (geometric mean over the model products): ${sgemm:--} GFLOP/s"
fi

# --- PyTorch and transformers in bench/.venv --------------------------------------------
has() { [ -x "$py" ] && "$py" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }
if ! has torch; then
  python3 -m venv "$venv" || { echo "bench: cannot create $venv (python3 -m venv)" >&2; exit 1; }
  echo "bench: installing torch into $venv (first run only)"
  "$py" -m pip install --retries 0 --timeout 15 --index-url https://download.pytorch.org/whl/cpu torch numpy ||
    "$py" -m pip install torch numpy || { echo "bench: cannot install torch from PyPI" >&2; exit 1; }
fi
has transformers || "$py" -m pip install transformers || { echo "bench: cannot install transformers" >&2; exit 1; }
versions=$("$py" -c 'import importlib.metadata as m; print("torch", m.version("torch"), "transformers", m.version("transformers"))')
echo "$versions"
echo

# xf_sample SO ARGS...: "tokens/s ms-per-step prompt-tokens peak-RSS-MiB", else "fail - - -"
xf_sample() {
  local so=$1; shift
  if /usr/bin/time -f '%M' -o "$work/rss" "$xfrun" sample "$so" --checkpoint "${so%.so}.ck" --prompt "$prompt_text" \
       --max-tokens "$tokens" --threads "$threads" "$@" >/dev/null 2>"$work/xf.log"; then
    awk -v rss="$(tail -n 1 "$work/rss")" '/^xfrun: prompt of / { print $16, $18, $4, int(rss / 1024) }' "$work/xf.log"
  else
    echo "fail - - -"
  fi
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { n = "^[0-9.]+$"; if (a ~ n && b ~ n && b > 0) printf "%.2f", a / b; else printf "-" }'; }
row() { printf '| %-11s | %5s | %-7s | %9s | %8s | %7s | %-14s | %9s | %7s | %6s | %12s | %9s | %9s | %6s |\n' "$@"; }

table=$(row example batch filter "xf tok/s" "xf ms" "xf MiB" reference "ref tok/s" "ref MiB" xf/ref \
            "xf recompute" "xf/recomp" "GFLOP/s" "of GEMM")$'\n'
table+=$(row "" "" "" "" "" "" "" "" "" "" "" "" "" "" | sed 's/ /-/g')
echo "$table"
for ex in $examples; do
  so=$work/$ex.so
  "$xfc" "examples/$ex.xf" -D layers="$layers" -o "$so" >"$work/$ex.xfc.log" 2>&1 || { echo "bench: xfc $ex failed" >&2; continue; }
  "$xfrun" train "$so" --steps 1 --batch 1 --threads "$threads" --save "${so%.so}.ck" >"$work/$ex.train.log" 2>&1 ||
    { echo "bench: xfrun train $ex failed (log: $work/$ex.train.log)" >&2; continue; }
  ops=$("$xfc" --stats "examples/$ex.xf" -D layers="$layers" | awk '/^operations per generated token/ { f = 1 } f && /^<model>/ && !done { print $NF; done = 1 }')
  for batch in 1 8; do
    for filter in greedy top-p; do
      args=(--num-samples "$batch")
      [ "$filter" = greedy ] && args+=(--temperature 0) || args+=(--temperature 1 --top-p 0.6)
      read -r xs xms np xrss <<<"$(xf_sample "$so" "${args[@]}")"
      read -r rs _ _ _ <<<"$(xf_sample "$so" "${args[@]}" --no-incremental)"
      refargs=(--layers "$layers" --batch "$batch" --prompt "${np/-/10}" --tokens "$tokens" --threads "$threads")
      [ "$filter" = top-p ] && refargs+=(--top-p 0.6)
      if [ "$ex" = transformer ]; then ref="HF generate"; mode=(hf); else ref="torch recompute"; mode=(recompute "$ex"); fi
      read -r ts _ trss <<<"$(OMP_NUM_THREADS=$threads "$py" bench/sample_ref.py "${mode[@]}" "${refargs[@]}" 2>"$work/ref.log" ||
                              echo "fail - -")"
      [ "$ts" = fail ] && echo "bench: $ref for $ex: $(tail -n 1 "$work/ref.log")" >&2
      gf=$(awk -v o="$ops" -v s="$xs" 'BEGIN { if (o > 0 && s ~ /^[0-9.]+$/) printf "%.2f", o * s / 1e9; else printf "-" }')
      r=$(row "$ex" "$batch" "$filter" "$xs" "$xms" "$xrss" "$ref" "$ts" "$trss" "$(ratio "$xs" "$ts")" "$rs" \
              "$(ratio "$xs" "$rs")" "$gf" "$(ratio "$gf" "$sgemm")")
      echo "$r"
      table+=$'\n'"$r"
    done
  done
done
{
  echo "xf $(git describe --always --dirty 2>/dev/null || echo "?"), $versions; CPU: ${cpu:-unknown}, $threads threads;"
  echo "$layers layers, $tokens new tokens after a prompt of about 10; GEMM rate $sgemm GFLOP/s;"
  echo "GFLOP/s: xfc --stats operations per generated token (at t = context) x xf tokens/s"
  echo
  echo "$table"
} >"$out/sample.md"
echo
echo "bench: wrote $out/sample.md"
