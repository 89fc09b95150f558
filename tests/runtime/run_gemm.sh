#!/usr/bin/env bash
# The GEMM dispatch, functionally (no timing): on a CPU with AVX2 or
# AVX-512 the provider xfrun uses by default runs a kernel that uses them,
# and xfrun says which in one line; a generic kernel is detected and
# reported with its remedy (forced here through each library's own
# environment variable); xfrun train prints the GEMM line.
# Usage (from the repo root): tests/runtime/run_gemm.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
unset OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA

flags=$(grep -m1 '^flags' /proc/cpuinfo)
isa=sse
case " $flags " in *" avx512f "*) isa=avx512 ;; *" avx2 "*) isa=avx2 ;; esac
providers=$("$xfrun" info | sed -n 's/^providers in this build: //p')
echo "CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-), widest ISA $isa; providers: $providers"
[ -n "$providers" ] || bad "xfrun info names no GEMM provider"

# kernel names that use AVX2 or wider, per library
wide() {  # wide LIBRARY KERNEL
  case "$1" in
    oneDNN) [[ "$2" == avx2* || "$2" == avx512* ]] ;;
    OpenBLAS) [[ "$2" =~ ^(Haswell|Zen|SkylakeX|Cooperlake|SapphireRapids)$ ]] ;;
    *) false ;;
  esac
}
for p in auto $providers; do
  out=$("$xfrun" info --gemm "$p" 2>&1)
  line=$(printf '%s\n' "$out" | grep -m1 '^xfrun: GEMM: ')
  lib=$(printf '%s' "$line" | sed -n 's/^xfrun: GEMM: \([A-Za-z]*\) .*/\1/p')
  kernel=$(printf '%s' "$line" | sed -n 's/^xfrun: GEMM: [^,]*, \([^ ]*\) kernels.*/\1/p')
  if [ -z "$line" ]; then
    bad "--gemm $p: no GEMM line: $out"
  elif [ "$isa" = sse ]; then
    ok "--gemm $p: $line (no AVX2 on this CPU: any kernel is right)"
  elif wide "$lib" "$kernel" && ! printf '%s' "$out" | grep -q warning; then
    ok "--gemm $p on a CPU with $isa: $line"
  elif [ "$p" != auto ] && ! wide "$lib" "$kernel" && printf '%s' "$out" | grep -q "warning: $lib runs its .*$kernel"; then
    ok "--gemm $p on a CPU with $isa runs a generic kernel, and says so: $out"  # chosen by hand, not the default
  else
    bad "--gemm $p on a CPU with $isa: a generic kernel by default, or unreported: $out"
  fi
done
# auto is oneDNN when the build has it
case " $providers " in
  *" onednn "*) "$xfrun" info | grep -q '^xfrun: GEMM: oneDNN' && ok "auto picks oneDNN" || bad "auto does not pick oneDNN: $("$xfrun" info)" ;;
esac

# the detection itself: each library forced to its generic kernel is reported, with the remedy
if [ "$isa" != sse ]; then
  case " $providers " in *" openblas "*)
    out=$(OPENBLAS_CORETYPE=Prescott "$xfrun" info --gemm openblas 2>&1)
    printf '%s' "$out" | grep -q 'warning: OpenBLAS runs its generic Prescott kernel on a CPU with .*OPENBLAS_CORETYPE=' &&
      ok "OpenBLAS forced to Prescott: reported as generic with the remedy" || bad "OpenBLAS on Prescott not reported: $out" ;;
  esac
  case " $providers " in *" onednn "*)
    out=$(ONEDNN_MAX_CPU_ISA=SSE41 "$xfrun" info --gemm onednn 2>&1)
    printf '%s' "$out" | grep -q 'warning: oneDNN runs its sse41 kernels on a CPU with .*unset it' &&
      ok "oneDNN limited to SSE4.1: reported as generic with the remedy" || bad "oneDNN on SSE4.1 not reported: $out" ;;
  esac
else
  echo "skip: the generic-kernel warnings need a CPU with AVX2 (this one has $isa)"
fi

# errors, and the line at the start of training
expect_usage "--gemm with an unknown provider" "--gemm mkl: expected auto, onednn or openblas" "$xfrun" info --gemm mkl
"$xfc" examples/me.xf -D vocab=256 -D layers=1 -D d=16 -D ffn=32 -D context=16 -o "$tmp/me.so" || bad "compile me"
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. ' * 400)" > "$tmp/text.txt"
"$xfrun" train "$tmp/me.so" --data "$tmp/text.txt" --tokenizer bytes --steps 2 --batch 2 --threads 2 2> "$tmp/train.err" > /dev/null
grep -q '^xfrun: GEMM: .*, 2 threads (CPU: ' "$tmp/train.err" && ok "xfrun train prints: $(grep -m1 'GEMM:' "$tmp/train.err")" ||
  bad "xfrun train prints no GEMM line: $(cat "$tmp/train.err")"
expect_usage "xfrun train --gemm bogus" "--gemm bogus: expected" "$xfrun" train "$tmp/me.so" --gemm bogus

# --precision=bf16 on the CPU: bf16 products where the CPU has AVX512_BF16
# (the curve within 2^-8 of float32's over 30 steps, and not equal to it;
# the scratches and the parameters' bf16 copies in the memory line: the
# copies current after every update, or the curve would leave float32's),
# else float32 and the reason, the curve
# float32's bit for bit
small=(-D layers=2 -D d=32 -D ffn=64 -D heads=4 -D vocab=256 -D context=32)
"$xfc" examples/transformer.xf "${small[@]}" --precision=bf16 -o "$tmp/bf16.so" &&
  "$xfc" examples/transformer.xf "${small[@]}" -o "$tmp/fp32.so" || bad "compile the transformer"
for pr in bf16 fp32; do
  "$xfrun" train "$tmp/$pr.so" --data "$tmp/text.txt" --tokenizer bytes --steps 30 --batch 8 --threads 2 --seed 3 \
    --log "$tmp/$pr.csv" 2> "$tmp/$pr.err" > /dev/null || bad "train --precision=$pr: $(tail -2 "$tmp/$pr.err")"
done
worst=$(python3 - "$tmp/bf16.csv" "$tmp/fp32.csv" <<'PY'
import csv, sys
a = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
b = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))]
assert len(a) == len(b) == 30, (len(a), len(b))
print("%.2e" % max(abs(x - y) / abs(y) for x, y in zip(a, b)))
PY
)
if grep -qw avx512_bf16 /proc/cpuinfo; then
  # the memory line's bf16 GEMM operands: what xfc --stats reports beside
  # the plan, the copies and a scratch per thread (2 threads)
  want=$("$xfc" examples/transformer.xf "${small[@]}" --precision=bf16 --stats |
    awk '/parameters. bf16 copies/ { c = $(NF - 4) } /per pool thread/ { t = $(NF - 1) } END { printf "%.1f", c + 2 * t }')
  got=$(sed -n 's/.*bf16 GEMM operands \([0-9.]*\) MiB.*/\1/p' "$tmp/bf16.err")
  grep -q '^xfrun: CPU GEMMs: bf16 (activations stored in bf16; parameters, moments and sums in float32)$' "$tmp/bf16.err" &&
    awk -v w="$want" -v g="$got" 'BEGIN { exit !(w > 40 && g == w) }' &&
    ok "--precision=bf16: bf16 products and storage; bf16 GEMM operands $got MiB at 2 threads, as xfc --stats reports" ||
    bad "--precision=bf16 on a CPU with AVX512_BF16: $(grep -E 'CPU GEMMs|memory' "$tmp/bf16.err"); xfc --stats: $want MiB"
  awk -v w="$worst" 'BEGIN { exit !(w > 1e-7 && w < 3.9e-3) }' &&
    ok "--precision=bf16: the 30-step curve within 2^-8 of float32's and rounded ($worst)" ||
    bad "--precision=bf16: the curve against float32's: $worst (expected in (1e-7, 3.9e-3))"
  # AdamW rewrites the copies with the parameters (XfModel.adamw_twin): 15
  # steps, then resumed to 30 (the copies made afresh from the loaded
  # parameters), give the 30-step curve's losses bit for bit
  "$xfrun" train "$tmp/bf16.so" --data "$tmp/text.txt" --tokenizer bytes --steps 15 --batch 8 --threads 2 --seed 3 \
    --save "$tmp/half.st" > /dev/null 2> "$tmp/half.err" &&
    "$xfrun" train "$tmp/bf16.so" --resume "$tmp/half.st" --steps 30 --log "$tmp/rest.csv" > /dev/null 2>> "$tmp/half.err" ||
    bad "--precision=bf16 resumed at step 15: $(tail -2 "$tmp/half.err")"
  if [ "$(cut -d, -f1,2 "$tmp/rest.csv" | tail -n 15)" = "$(cut -d, -f1,2 "$tmp/bf16.csv" | tail -n 15)" ]; then
    ok "--precision=bf16: resumed at step 15, steps 16-30 lose what the uninterrupted run loses, bit for bit"
  else
    bad "--precision=bf16: resumed at step 15, the losses differ: $(diff <(cut -d, -f1,2 "$tmp/rest.csv" | tail -n 15) <(cut -d, -f1,2 "$tmp/bf16.csv" | tail -n 15) | head -4)"
  fi
else
  grep -q '^xfrun: CPU GEMMs: float32 (model.so asks for bf16 products, but .*); activations stored in bf16$' "$tmp/bf16.err" &&
    ok "--precision=bf16 without AVX512_BF16: $(grep 'CPU GEMMs' "$tmp/bf16.err")" ||
    bad "--precision=bf16 without AVX512_BF16 does not say so: $(head -3 "$tmp/bf16.err")"
  awk -v w="$worst" 'BEGIN { exit !(w > 1e-7 && w < 3.9e-3) }' &&
    ok "--precision=bf16 without AVX512_BF16: bf16 storage, the curve within 2^-8 of float32's ($worst)" ||
    bad "--precision=bf16 without AVX512_BF16: the curve against float32's: $worst (expected in (1e-7, 3.9e-3))"
fi
grep -q 'CPU GEMMs' "$tmp/fp32.err" && bad "the default precision names the CPU's GEMMs" || ok "the default precision: no GEMM note"

# bf16 storage in the memory plan: the 18-layer Table 1 transformer at batch
# 64 (xfc --stats) needs at most 0.6x float32's; at 2 layers at least 85 %
# of the activations' bytes are bf16 (--emit=schedule marks them: all but
# row statistics and terms, codegen/storage.c), none under float32
mem() { "$xfc" examples/transformer.xf -D layers=18 --batch 64 --stats "$@" | sed -n 's/^  total  *\([0-9.]*\) MiB$/\1/p'; }
m32=$(mem) m16=$(mem --precision=bf16)
awk -v a="$m16" -v b="$m32" 'BEGIN { exit !(b > 0 && a / b <= 0.6) }' &&
  ok "--precision=bf16: the 18-layer transformer's step plan $m16 MiB, float32's $m32 MiB" ||
  bad "--precision=bf16: the 18-layer transformer's step plan $m16 MiB against float32's $m32 MiB (aim <= 0.6x)"
"$xfc" examples/transformer.xf -D layers=2 --emit=schedule > "$tmp/s32.txt" &&
  "$xfc" examples/transformer.xf -D layers=2 --precision=bf16 --emit=schedule > "$tmp/s16.txt" || bad "--emit=schedule"
share=$(awk '/ act .*live/ { all += $4; if ($NF == "bf16") h += $4 } END { printf "%.3f", all ? h / all : 0 }' "$tmp/s16.txt")
awk -v s="$share" 'BEGIN { exit !(s >= 0.85) }' && ! grep -q ' bf16$' "$tmp/s32.txt" &&
  ok "--emit=schedule: $share of the activations' bytes stored in bf16; none under float32" ||
  bad "--emit=schedule: $share of the activations' bytes in bf16 (aim >= 0.85); under float32: $(grep -c ' bf16$' "$tmp/s32.txt")"
# with --target=cuda the same storage serves both targets (codegen/storage.c):
# at least 85 % of the activations' bytes in bf16 too; the GPU's products of
# an activation by a weight read that parameter's bf16 twin (stage= a buffer
# of role twin, one per weight), which AdamW rewrites (the CUDA C's
# xf_adamw stores seg[lo].h), so no kernel copies a weight; and the 18-layer
# plan at most 0.6x float32's
"$xfc" examples/transformer.xf -D layers=2 --precision=bf16 --target=cuda --emit=schedule > "$tmp/sc.txt" &&
  "$xfc" examples/transformer.xf -D layers=2 --precision=bf16 --target=cuda --emit=cuda > "$tmp/sc.cu" 2>/dev/null ||
  bad "--target=cuda --emit=schedule, --emit=cuda"
share=$(awk '/ act .*live/ { all += $4; if ($NF == "bf16") h += $4 } END { printf "%.3f", all ? h / all : 0 }' "$tmp/sc.txt")
stages=$(grep -c 'stage=' "$tmp/sc.txt")
twins=$(awk '$2 == "twin" { t[$1] = 1 } /stage=b/ { match($0, /stage=b[0-9]+/); s[substr($0, RSTART + 6, RLENGTH - 6)] = 1 }
             END { n = 0; for (b in s) { if (!(b in t)) { print -1; exit } n++ } print n }' "$tmp/sc.txt")
copies=$(grep -c '_stage(' "$tmp/sc.cu")
g32=$(mem --target=cuda) g16=$(mem --target=cuda --precision=bf16)
awk -v s="$share" -v n="$stages" -v t="$twins" -v c="$copies" -v a="$g16" -v b="$g32" \
    'BEGIN { exit !(s >= 0.85 && n > 0 && t > 0 && c == 0 && b > 0 && a / b <= 0.6) }' && grep -q 'S[0-9]*\[o_0\] = xf_bf16_st(w_' "$tmp/sc.cu" &&
  ok "--target=cuda --precision=bf16: $share of the activations' bytes in bf16, $stages products read $twins weights' bf16 twins, no staging kernel, 18 layers $g16 MiB against $g32" ||
  bad "--target=cuda --precision=bf16: $share of the activations' bytes in bf16 (aim >= 0.85), $stages staged products reading $twins twins (-1: a staged buffer is no twin), $copies staging kernels (aim 0), AdamW writing the twins: $(grep -c 'xf_bf16_st(w_' "$tmp/sc.cu"), 18 layers $g16 MiB against $g32 (aim <= 0.6x)"
finish
