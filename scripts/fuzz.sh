#!/usr/bin/env bash
# Fuzzes every reader of user files with libFuzzer, $1 seconds per target
# (default 60):
#   parser      the front end (fuzz/fuzz_parser.c, dictionary fuzz/xf.dict;
#               seeded from examples/, stdlib/, tests/errors/, tests/fuzz_regress/)
#   tokenizer   JSON, tokenizer.json, encode/decode (fuzz/fuzz_tokenizer.c)
#   checkpoint  safetensors checkpoints: open, check, load, round trip
#   cache       token cache files
#   model       model descriptors: the checks, then load, step, checkpoint, sample
# The runtime targets are seeded from fuzz/regress/<target>/ (every finding
# lands there) and from seeds each target writes itself (XF_FUZZ_SEEDS).
# Targets are built with clang, AddressSanitizer and UndefinedBehaviorSanitizer
# in build-fuzz/; corpora live in fuzz-corpus/<target>/ (ignored by git, kept
# between runs). XF_FUZZ_TARGETS="parser model" picks targets.
#
# Exits 0 when the time is up with nothing found. On a crash, sanitizer
# report, leak, timeout or out-of-memory it exits non-zero and leaves the
# input in fuzz-corpus/crashes/ (crash-*, leak-*, timeout-*, oom-*);
# reproduce it with  build-fuzz/fuzz_<target> FILE  (the parser also with
# build-fuzz/xfc FILE). Further arguments go to libFuzzer (e.g. -seed=1).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
case $secs in
  '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [seconds per target] [libFuzzer options]" >&2; exit 2 ;;
esac
all="parser tokenizer checkpoint cache model"
targets=${XF_FUZZ_TARGETS:-$all}

cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DXF_FUZZ=ON -DXF_SANITIZE=ON >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target xfc $(printf " fuzz_%s" $targets) >/dev/null

crashes=fuzz-corpus/crashes
mkdir -p "$crashes"
# halt_on_error etc.: the sanitizers abort on the first report so libFuzzer
# saves the input. Leak checking is on by default under libFuzzer.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for target in $targets; do
  corpus=fuzz-corpus/$target
  mkdir -p "$corpus"
  case $target in
    parser)
      for f in examples/*.xf stdlib/*.xf tests/errors/*.xf tests/fuzz_regress/*.xf; do
        [ -e "$f" ] || continue
        # No .xf in the name: the fuzzer must not be able to import its corpus.
        cp -f "$f" "$corpus/seed-$(basename "$(dirname "$f")")-$(basename "$f" .xf)"
      done
      opts=(-dict=fuzz/xf.dict -max_len=4096) ;;
    tokenizer | checkpoint | cache | model)
      if compgen -G "fuzz/regress/$target/*" >/dev/null; then cp -f "fuzz/regress/$target"/* "$corpus"/; fi
      XF_FUZZ_SEEDS=$corpus "build-fuzz/fuzz_$target" -runs=0 "$corpus" >/dev/null 2>&1 || true
      opts=(-max_len=8192) ;;
    *) echo "fuzz.sh: unknown target '$target' ($all)" >&2; exit 2 ;;
  esac
  echo "fuzz.sh: fuzzing $target for $secs s; corpus $corpus, crashes in $crashes/"
  status=0
  "build-fuzz/fuzz_$target" "$corpus" "${opts[@]}" -timeout=10 -rss_limit_mb=2048 \
    -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$crashes/" "$@" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "fuzz.sh: the fuzzer found a problem in $target (exit status $status); input saved in $crashes/:" >&2
    ls -t "$crashes" | head -5 >&2
    exit 1
  fi
  echo "fuzz.sh: no problem found in $target in $secs s"
done
