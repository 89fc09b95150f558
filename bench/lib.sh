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
