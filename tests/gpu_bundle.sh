#!/usr/bin/env bash
# gpu_bundle: `scripts/gpu-check --bundle DIR` (scripts/gpu-bundle) from the
# build under test, for one example at one layer count (EXAMPLES=me LAYERS=2
# STEPS=5, NO_BUILD=1; the bf16 table's row BF16_ROWS=me:2:4:64), then:
#   1. its size: `tar czf` of DIR at most 40 MB, DIR itself under 60 MiB
#      (what travels to the GPU machine);
#   2. `env -i PATH=/usr/bin:/bin DIR/run` (no GPU here): exit status 2 and
#      exactly one line, saying so; it unpacked the payload into
#      $TMPDIR/xf-bundle-<checksum> (x below), not into DIR;
#   3. every binary, library and model of x resolves with LD_LIBRARY_PATH
#      holding only x/lib and the CUDA library folder, each library from the
#      bundle, glibc or that CUDA folder (CUDA's own: cudart, cublas, nvrtc...);
#   4. a library missing on the GPU machine: DIR/run prints one line naming it
#      and exits 1;
#   5. the bundle's test_cuda_backend (LLVM linked statically, the standard
#      library at the relative path stdlib/) compiles and checks one example
#      through the emulation from x/, its models linked by the bundled ld.gold
#      (XF_CC=bin/xf-cc);
#   6. the bundle's xfrun trains on the CPU from the bundled books and token
#      cache (nothing encoded or trained again) and gives the bundled CPU curve.
# Skipped (77) when the build has no CUDA backend, is a sanitizer build, or
# is not a Makefile build (the bundle relinks from CMake's link lines).
#
# Usage: tests/gpu_bundle.sh BUILD_DIR   (from the repository root)
set -uo pipefail
build=$(cd "${1:?usage: tests/gpu_bundle.sh BUILD_DIR}" && pwd) || exit 1
cd "$(dirname "$0")/.." || exit 1
fail() { echo "FAIL gpu_bundle: $*"; exit 1; }
skip() { echo "skipped: $*"; exit 77; }
deps=$(ldd "$build/xfrun" 2> /dev/null)
grep -q libcudart <<< "$deps" || skip "no CUDA toolkit in $build"
grep -qE 'libasan|libubsan' <<< "$deps" && skip "a sanitizer build"
[ -f "$build/tests/cuda/CMakeFiles/test_cuda_backend.dir/link.txt" ] || skip "not a Makefile build of CMake"
cuda_lib=$(dirname "$(readlink -f "$(sed -n 's/^CUDA_cudart_LIBRARY:[A-Z]*=//p' "$build/CMakeCache.txt")")")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/xf-gpu-bundle-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
b=$tmp/bundle x=$tmp/x

# ---- the bundle ----------------------------------------------------------------------------
t0=$(date +%s)
EXAMPLES=me LAYERS=2 STEPS=5 BF16_ROWS=me:2:4:64 NO_BUILD=1 BUILD=$build JOBS=2 scripts/gpu-check --bundle "$b" \
  > "$tmp/bundle.log" 2>&1 || { cat "$tmp/bundle.log"; fail "scripts/gpu-check --bundle failed"; }
echo "ok   bundle made in $(( $(date +%s) - t0 )) s: $(tail -2 "$tmp/bundle.log" | head -1)"

# ---- 1. size ------------------------------------------------------------------------------------
gz=$(tar -C "$tmp" -czf - bundle | wc -c)
size=$(du -sb "$b" | cut -f1)
[ "$gz" -le 40000000 ] || fail "tar czf of the bundle is $gz bytes, more than 40 MB"
[ "$size" -lt $((60 * 1048576)) ] || fail "the bundle is $size bytes, not under 60 MiB"
echo "ok   size: $size bytes, tar czf $gz bytes"

# ---- 2. no GPU: one line, status 2 ----------------------------------------------------------------
gpu_here=false
command -v nvidia-smi > /dev/null 2>&1 && timeout 60 nvidia-smi > /dev/null 2>&1 && gpu_here=true
if $gpu_here; then
  echo "note: a GPU is here: the bundle's run is not started (it would run the GPU checks)"
  xz -dc "$b/payload.tar.xz" | { mkdir -p "$x" && tar -xf - -C "$x"; } || fail "cannot unpack the payload"
else
  out=$(env -i PATH=/usr/bin:/bin TMPDIR="$tmp" "$b/run" 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] || fail "run without a GPU: status $rc, expected 2; it said: $out"
  if [ "$(wc -l <<< "$out")" -ne 1 ] || ! grep -q "no NVIDIA GPU" <<< "$out"; then
    fail "run without a GPU must print one line saying so; it printed: $out"
  fi
  for d in "$tmp"/xf-bundle-*; do [ -x "$d/bin/xfrun" ] && mv "$d" "$x"; done
  [ -x "$x/bin/xfrun" ] || fail "run did not unpack the payload into $tmp/xf-bundle-<checksum>"
  [ "$(ls "$b")" = "$(printf '%s\n' README.md gpu-steps.sh payload.tar.xz run)" ] || fail "run wrote into the bundle: $(ls "$b")"
  echo "ok   run without a GPU: '$out', status 2"
fi

# ---- 3. every library resolves from the bundle, glibc or CUDA ---------------------------------------
is_glibc() { case $1 in linux-vdso.so.1 | ld-linux-x86-64.so.2 | libc.so.6 | libm.so.6 | libpthread.so.0 | librt.so.1 | \
                       libdl.so.2 | libutil.so.1 | libresolv.so.2 | libmvec.so.1 | libanl.so.1) return 0 ;; esac; return 1; }
n=0
for f in "$x"/bin/* "$x"/lib/* "$x"/models/*.so; do
  [ "${f##*/}" = xf-cc ] && continue
  n=$((n + 1))
  while read -r name path; do
    case $path in
      "$x"/lib/* | "$x"/bin/../lib/* | "$cuda_lib"/*) ;;
      *) is_glibc "$name" || fail "${f#"$x"/} loads $name from ${path:-nowhere} (LD_LIBRARY_PATH=$x/lib:$cuda_lib)" ;;
    esac
  done < <(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$x/lib:$cuda_lib" ldd "$f" 2>&1 |
           awk '/=>/ { print $1, ($3 == "not" ? "" : $3); next } NF { k = split($1, p, "/"); print p[k], $1 }')
done
for f in xfrun test_cuda_backend; do [ -x "$x/bin/$f" ] || fail "bin/$f is missing"; done
cc_env=(XF_CC="$x/bin/xf-cc")
if ! command -v ld.gold > /dev/null 2>&1; then
  echo "note: no ld.gold here: the bundle has no linker of its own; the test binary links with cc"
  cc_env=()
fi
[ "${#cc_env[@]}" -eq 0 ] || [ -x "$x/bin/xf-cc" ] || fail "bin/xf-cc is missing"
echo "ok   ldd: $n files resolve from the bundle, glibc and $cuda_lib"
# the bf16 table's row (BF16_ROWS): its model, its cost estimate and op
# counts at 4 x 64, and the row in bundle.env for the GPU machine's run
if ! [ -f "$x/models/me-bf16-L2.so" ] || ! grep -q '^total:' "$x/cost/me-bf16-L2.txt" ||
   ! grep -q 'ops per token' "$x/stats/me-bf16-L2.txt" || ! grep -q '^BUNDLE_BF16_ROWS=me:2:4:64$' "$x/bundle.env"; then
  fail "the bf16 row me:2:4:64: model, cost, stats or bundle.env missing"
fi
echo "ok   the bf16 row: model, cost at 4 x 64 ($(awk '/^total:/ { for (i = 1; i < NF; i++) if ($i == "estimated") print $(i + 1), "us" }' "$x/cost/me-bf16-L2.txt")), stats, bundle.env"

# ---- 4. a library missing: one line, status 1 --------------------------------------------------
if ! $gpu_here; then
  echo 'int xf_missing(void) { return 1; }' > "$tmp/missing.c"
  echo 'int xf_missing(void); int xf_fake(void) { return xf_missing(); }' > "$tmp/fake.c"
  cc -shared -fPIC -Wl,-soname,libxfmissing.so.1 -o "$tmp/libxfmissing.so.1" "$tmp/missing.c" || fail "cannot build a library"
  cc -shared -fPIC -o "$x/lib/libxffake.so" "$tmp/fake.c" "$tmp/libxfmissing.so.1" || fail "cannot build a library"
  out=$(env -i PATH=/usr/bin:/bin XF_BUNDLE_X="$x" "$b/run" 2>&1)
  rc=$?
  rm -f "$x/lib/libxffake.so"
  if [ "$rc" -ne 1 ] || [ "$out" != "run: missing library libxfmissing.so.1 (needed by lib/libxffake.so)" ]; then
    fail "a missing library: status $rc, expected 1 and one line naming it; it said: $out"
  fi
  echo "ok   a missing library: '$out', status 1"
fi

# ---- 5. the bundle's test binary, through the emulation, the bundle's linker -------------------------
out=$(cd "$x" && env -i PATH=/usr/bin:/bin HOME="$tmp" "${cc_env[@]}" LD_LIBRARY_PATH="$cuda_lib" \
      timeout 300 bin/test_cuda_backend examples/me.xf 2>&1)
rc=$?
if [ "$rc" -ne 0 ] || ! grep -qE '^[0-9]+ passed, 0 failed' <<< "$out"; then
  fail "the bundle's test_cuda_backend examples/me.xf: status $rc: $(grep -m1 -E '^FAIL|error' <<< "$out" || tail -1 <<< "$out")"
fi
echo "ok   bundle's test_cuda_backend examples/me.xf (emulation, ${cc_env[*]:-cc}): $(tail -1 <<< "$out")"

# ---- 6. the bundle's xfrun: the bundled cache, the bundled CPU curve ------------------------------
before=$(ls -l --time-style=+%s.%N "$x/cache")
out=$(env -i PATH=/usr/bin:/bin HOME="$tmp" LD_LIBRARY_PATH="$cuda_lib" timeout 300 "$x/bin/xfrun" train "$x/models/me-fp32-L2.so" \
      --device cpu --data "$x/data/children" --cache "$x/cache" --batch 16 --seq 64 --seed 3 --eval-batches 1 --steps 5 \
      --log "$tmp/me.csv" 2>&1) || fail "the bundle's xfrun: $(grep -m1 error <<< "$out")"
[ "$before" = "$(ls -l --time-style=+%s.%N "$x/cache")" ] || fail "the bundle's token cache was written again: $out"
python3 - "$x/cpu/me.cpu.csv" "$tmp/me.csv" <<'PY' || fail "the bundle's xfrun gave another curve than the bundled CPU curve"
import csv, sys
a = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
b = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))]
assert len(a) == len(b) == 5 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)
PY
echo "ok   bundle's xfrun: the bundled cache read, not written; the bundled CPU curve"
echo "gpu_bundle: passed"
