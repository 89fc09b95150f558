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
finish
