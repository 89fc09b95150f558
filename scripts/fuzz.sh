#!/usr/bin/env bash
# Fuzzes the front end (fuzz/fuzz_parser.c) with libFuzzer for $1 seconds
# (default 60). Builds the target with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/, seeds the corpus in
# fuzz-corpus/corpus/ (ignored by git, kept between runs) from examples/,
# stdlib/, tests/errors/ and tests/fuzz_regress/, and runs one fuzzing
# process with the dictionary fuzz/xf.dict.
#
# Exits 0 when the time is up with nothing found. On a crash, sanitizer
# report, leak, timeout or out-of-memory it exits non-zero and leaves the
# input in fuzz-corpus/crashes/ (crash-*, leak-*, timeout-*, oom-*);
# reproduce it with  build-fuzz/fuzz_parser FILE  or  build-fuzz/xfc FILE.
# Further arguments go to libFuzzer (e.g. -seed=1).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
case $secs in
  '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [seconds] [libFuzzer options]" >&2; exit 2 ;;
esac

cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DXF_FUZZ=ON -DXF_SANITIZE=ON >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_parser xfc >/dev/null

corpus=fuzz-corpus/corpus
crashes=fuzz-corpus/crashes
mkdir -p "$corpus" "$crashes"
for f in examples/*.xf stdlib/*.xf tests/errors/*.xf tests/fuzz_regress/*.xf; do
  [ -e "$f" ] || continue
  # No .xf in the name: the fuzzer must not be able to import its corpus.
  cp -f "$f" "$corpus/seed-$(basename "$(dirname "$f")")-$(basename "$f" .xf)"
done

echo "fuzz.sh: fuzzing for $secs s; corpus $corpus, crashes in $crashes/"
# halt_on_error etc.: the sanitizers abort on the first report so libFuzzer
# saves the input. Leak checking is on by default under libFuzzer.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
build-fuzz/fuzz_parser "$corpus" \
  -dict=fuzz/xf.dict -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -max_total_time="$secs" -print_final_stats=1 \
  -artifact_prefix="$crashes/" "$@" || status=$?
if [ "$status" -ne 0 ]; then
  echo "fuzz.sh: the fuzzer found a problem (exit status $status); input saved in $crashes/:" >&2
  ls -t "$crashes" | head -5 >&2
  exit 1
fi
echo "fuzz.sh: no problem found in $secs s"
