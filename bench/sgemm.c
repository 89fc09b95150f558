// Single-precision GEMM rate of OpenBLAS (the BLAS that xf's runtime calls),
// for bench/run.sh: C = A B with n x n matrices on the given number of
// threads, best of a few runs. Prints GFLOP/s (2 n^3 flops per product).
// Usage: sgemm THREADS [N]    build: cc -O2 bench/sgemm.c -o sgemm -lopenblas
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

extern void openblas_set_num_threads(int);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1, n = argc > 2 ? atoi(argv[2]) : 1024;
  if (threads < 1 || n < 1) {
    fprintf(stderr, "usage: sgemm THREADS [N]\n");
    return 2;
  }
  openblas_set_num_threads(threads);
  size_t nn = (size_t)n * (size_t)n;
  float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
  if (!a || !b || !c) return 1;
  for (size_t i = 0; i < nn; i++) {
    a[i] = (float)(i % 7) * 0.25f - 0.75f;
    b[i] = (float)(i % 5) * 0.5f - 1.0f;
  }
  double best = 1e30;
  for (int rep = 0; rep < 23; rep++) {  // the first 3 warm up
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double dt = now() - t0;
    if (rep >= 3 && dt < best) best = dt;
  }
  printf("%.1f\n", 2.0 * n * n * (double)n / best / 1e9);
  free(a);
  free(b);
  free(c);
  return 0;
}
