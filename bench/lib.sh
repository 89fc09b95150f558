# bench/lib.sh: what the benchmarks share (sourced from the repo root).

# The release build of xf (xfc, xfrun, xf-gemm-bench) in build-release; the
# log in $out/build.log, its tail and exit 1 if it fails.
release_build() {
  if ! { cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release && cmake --build build-release -j"$(nproc)"; } \
       >"$out/build.log" 2>&1; then
    tail -n 20 "$out/build.log" >&2
    echo "bench: the release build failed (log: $out/build.log)" >&2
    exit 1
  fi
}

# peak_rss FILE cmd...: runs cmd, writes its peak RSS in MiB to FILE.
peak_rss() {
  local f=$1
  shift
  /usr/bin/time -f %M -o "$f.kb" "$@" || return 1
  awk '{ printf "%.0f", $1 / 1024 }' "$f.kb" > "$f"
}
# ratio A B: A/B to 2 decimals, or "-" unless both are positive.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
