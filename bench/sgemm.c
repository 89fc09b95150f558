// xf-gemm-bench: the single-precision GEMM rate of the runtime's provider
// (runtime/gemm.h) on the products the models run, for bench/run.sh and
// docs/runtime.md; with --bf16 the rate of its bf16 products (xf_gemm_ex on
// A and B stored in bf16, float32 sums and C: what xfc --precision=bf16 runs
// on the CPU).
//
// Shapes: seed 001 Table 1 (d 128, FFN 512, vocab 5000, 32 heads) at batch
// 64 x seq 128 = 8192 rows of activations:
//   forward   x W1 (FFN fc1)         8192 x  512 x  128
//             x Wq (projections)     8192 x  128 x  128
//             x Whead (logits)       8192 x 5000 x  128
//             attention blocks       4096 x   32 x   32
//   backward  dW1 = x^T dy           128 x  512 x 8192  ta (A stored k x m)
//             dx = dy W1^T           8192 x  128 x  512  tb (B stored n x k)
//   reference                        1024 x 1024 x 1024  (not in the rate)
// and, not in the rate, the GPT-2-small class (examples/gpt2_small.xf: d 768,
// FFN 3072) at batch 4 x 256 = 1024 rows:
//   forward   x W1                   1024 x 3072 x  768
//   backward  dW1 = x^T dy            768 x 3072 x 1024  ta
//             dx = dy W1^T           1024 x  768 x 3072  tb
//
// Threads: split as the runtime's thread pool splits a GEMM (runtime.c
// parallel_for, codegen/llvm.c emit_matmul and emit_weight_grad): THREADS
// threads, the calling thread taking chunk 0, each calling
// xf_gemm_thread_init() once and then, per product, one xf_sgemm (xf_gemm_ex
// on its own XfBf16Scratch with --bf16) on its
// contiguous block of C's rows, ceil(items / THREADS) items each, an item
// being one row (the runtime splits a folded product over its rows); for the
// weight gradient (trans_a) the blocks are of C's columns instead. The
// threads are started once and meet at two barriers per product.
//
// Timing: CLOCK_MONOTONIC around the whole split product (both barriers), 2
// untimed warm-up products, then the best of at least 5 and until 0.5 s
// have been timed. GFLOP/s = 2 m n k / best seconds / 1e9.
//
// Check: A and B hold deterministic values in [-1, 1) (exact in bf16 too:
// multiples of 2^-7 with --bf16); after timing, one
// element of C in each thread's block is recomputed as a double-precision dot
// product and must agree to a relative error (to the sum of |a_i b_i|, the
// dot product's error bound) of 1e-3, so that a wrong kernel or a wrong split
// cannot be timed.
//
// Output: the xf_gemm_describe line (and its remedy line, if any), one line
// per product "m x n x k [ta tb]: G GFLOP/s", then "rate: X", the geometric
// mean over the Table 1 products (not 1024^3 nor GPT-2's). With --table, one line
// instead, for embedding in a table or a document.
//
// Usage: xf-gemm-bench [--gemm auto|onednn|openblas] [--threads N] [--table] [--bf16]
// Exit status: 0, 1 on a failed check or a system error, 2 on a usage error,
// a provider not linked into this build, or --bf16 where this CPU or build
// has no bf16 GEMM (the reason on stderr).
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gemm.h"
#include "xf_abi.h"

typedef struct {
  int64_t m, n, k;
  int ta, tb;
  int64_t unit;  // rows of C per parallel_for item (columns if ta)
  bool model;    // counted in the rate
} Shape;

static const Shape shapes[] = {
    {8192, 512, 128, 0, 0, 1, true}, {8192, 128, 128, 0, 0, 1, true}, {8192, 5000, 128, 0, 0, 1, true},
    {4096, 32, 32, 0, 0, 1, true},   {128, 512, 8192, 1, 0, 1, true}, {8192, 128, 512, 0, 1, 1, true},
    {1024, 1024, 1024, 0, 0, 1, false},
    {1024, 3072, 768, 0, 0, 1, false},   {768, 3072, 1024, 1, 0, 1, false}, {1024, 768, 3072, 0, 1, 1, false},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

static const char usage[] = "usage: xf-gemm-bench [--gemm auto|onednn|openblas] [--threads N] [--table] [--bf16]\n";
static bool bf16;  // --bf16: A and B stored in bf16, xf_gemm_ex's bf16 products

static void die(const char *what) {
  fprintf(stderr, "xf-gemm-bench: %s\n", what);
  exit(1);
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes);
  if (!p) {
    fprintf(stderr, "xf-gemm-bench: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// A deterministic value in [-1, 1) for element i of matrix `salt`; a multiple
// of 2^-15 (of 2^-7 with --bf16), so exact in float (and in bf16).
static float value(uint64_t i, uint32_t salt) {
  uint32_t x = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)(i >> 32) ^ salt * 0x85EBCA6Bu;
  x ^= x >> 15, x *= 0x2C1B3C6Du, x ^= x >> 12, x *= 0x297A2D39u, x ^= x >> 15;
  return bf16 ? (float)(x & 0xFF) / 128.0f - 1.0f : (float)(x & 0xFFFF) / 32768.0f - 1.0f;
}

// ---- one product, split over the threads ----------------------------------------

typedef struct {
  const Shape *s;
  const float *a, *b;
  const uint16_t *ha, *hb;  // --bf16: A and B in bf16
  float *c;
  int64_t lda, ldb, ldc;
} Product;

static Product product_new(const Shape *s) {
  Product p = {.s = s, .lda = s->ta ? s->m : s->k, .ldb = s->tb ? s->k : s->n, .ldc = s->n};
  size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->k * s->n), nc = (size_t)(s->m * s->n);
  float *a = xmalloc(na * sizeof *a), *b = xmalloc(nb * sizeof *b), *c = xmalloc(nc * sizeof *c);
  for (size_t i = 0; i < na; i++) a[i] = value(i, 1);
  for (size_t i = 0; i < nb; i++) b[i] = value(i, 2);
  memset(c, 0, nc * sizeof *c);
  p.a = a, p.b = b, p.c = c;
  if (bf16) {
    uint16_t *ha = xmalloc(na * sizeof *ha), *hb = xmalloc(nb * sizeof *hb);
    for (size_t i = 0; i < na; i++) ha[i] = xf_bf16_bits(a[i]);
    for (size_t i = 0; i < nb; i++) hb[i] = xf_bf16_bits(b[i]);
    p.ha = ha, p.hb = hb;
  }
  return p;
}

static void product_free(Product *p) {
  free((void *)p->a);
  free((void *)p->b);
  free(p->c);
  free((void *)p->ha);
  free((void *)p->hb);
}

// Chunk `index` of `nthreads`: [lo, hi) of C's rows (columns if ta), as the
// runtime's run_chunk, in items of s->unit.
static void chunk(const Shape *s, int nthreads, int index, int64_t *lo, int64_t *hi) {
  int64_t len = s->ta ? s->n : s->m, items = (len + s->unit - 1) / s->unit;
  int64_t per = (items + nthreads - 1) / nthreads;
  *lo = per * index * s->unit < len ? per * index * s->unit : len;
  *hi = *lo + per * s->unit < len ? *lo + per * s->unit : len;
}

static void run_chunk(const Product *p, int nthreads, int index, XfBf16Scratch *scratch) {
  const Shape *s = p->s;
  int64_t lo, hi;
  chunk(s, nthreads, index, &lo, &hi);
  if (lo >= hi) return;
  if (bf16 && s->ta)
    xf_gemm_ex(scratch, s->ta, s->tb, s->m, hi - lo, s->k, 1.0f, p->ha, p->lda, p->hb + (s->tb ? lo * p->ldb : lo), p->ldb,
               0.0f, p->c + lo, p->ldc, XF_GEMM_A_BF16 | XF_GEMM_B_BF16);
  else if (bf16)
    xf_gemm_ex(scratch, s->ta, s->tb, hi - lo, s->n, s->k, 1.0f, p->ha + lo * p->lda, p->lda, p->hb, p->ldb, 0.0f,
               p->c + lo * p->ldc, p->ldc, XF_GEMM_A_BF16 | XF_GEMM_B_BF16);
  else if (s->ta)  // columns [lo, hi) of B and C
    xf_sgemm(s->ta, s->tb, s->m, hi - lo, s->k, 1.0f, p->a, p->lda, p->b + (s->tb ? lo * p->ldb : lo), p->ldb, 0.0f,
             p->c + lo, p->ldc);
  else  // rows [lo, hi) of A and C
    xf_sgemm(s->ta, s->tb, hi - lo, s->n, s->k, 1.0f, p->a + lo * p->lda, p->lda, p->b, p->ldb, 0.0f,
             p->c + lo * p->ldc, p->ldc);
}

// ---- the threads: started once, two barriers per product ---------------------------

typedef struct {
  int nthreads;
  pthread_t *threads;
  pthread_barrier_t start, done;
  const Product *job;  // NULL: quit
  struct Worker *workers;
} Pool;

typedef struct Worker {
  Pool *pool;
  int index;
  XfBf16Scratch scratch;  // --bf16: operands read in place, nothing staged
} Worker;

static void *worker_main(void *arg) {
  Worker *w = arg;
  Pool *pool = w->pool;
  xf_gemm_thread_init();
  for (;;) {
    pthread_barrier_wait(&pool->start);
    if (!pool->job) break;
    run_chunk(pool->job, pool->nthreads, w->index, &w->scratch);
    pthread_barrier_wait(&pool->done);
  }
  return NULL;
}

static void pool_start(Pool *pool, Worker *workers, int nthreads) {
  pool->nthreads = nthreads;
  pool->workers = workers;
  for (int i = 0; i < nthreads; i++) workers[i] = (Worker){.pool = pool, .index = i, .scratch = {.products = true}};
  pool->threads = xmalloc((size_t)nthreads * sizeof *pool->threads);
  pool->job = NULL;
  if (pthread_barrier_init(&pool->start, NULL, (unsigned)nthreads) ||
      pthread_barrier_init(&pool->done, NULL, (unsigned)nthreads))
    die("pthread_barrier_init failed");
  xf_gemm_thread_init();
  for (int i = 1; i < nthreads; i++) {
    if (pthread_create(&pool->threads[i], NULL, worker_main, &workers[i])) die("pthread_create failed");
  }
}

static void pool_run(Pool *pool, const Product *p) {
  pool->job = p;
  pthread_barrier_wait(&pool->start);
  run_chunk(p, pool->nthreads, 0, &pool->workers[0].scratch);
  pthread_barrier_wait(&pool->done);
}

static void pool_stop(Pool *pool) {
  pool->job = NULL;
  pthread_barrier_wait(&pool->start);
  for (int i = 1; i < pool->nthreads; i++) pthread_join(pool->threads[i], NULL);
  pthread_barrier_destroy(&pool->start);
  pthread_barrier_destroy(&pool->done);
  free(pool->threads);
}

// ---- timing and the check ------------------------------------------------------------

// Best seconds for one split product.
static double best_time(Pool *pool, const Product *p) {
  for (int rep = 0; rep < 2; rep++) pool_run(pool, p);
  double best = INFINITY, spent = 0;
  for (int rep = 0; rep < 5 || (spent < 0.5 && rep < 1000); rep++) {
    double t0 = now();
    pool_run(pool, p);
    double dt = now() - t0;
    spent += dt;
    if (dt < best) best = dt;
  }
  return best;
}

static void shape_name(const Shape *s, char *buf, size_t len) {
  snprintf(buf, len, "%lld x %lld x %lld%s%s", (long long)s->m, (long long)s->n, (long long)s->k, s->ta ? " ta" : "",
           s->tb ? " tb" : "");
}

// One element of C in each thread's block against a double-precision dot
// product; exits 1 on a mismatch.
static void check(const Product *p, int nthreads) {
  const Shape *s = p->s;
  for (int t = 0; t < nthreads; t++) {
    int64_t lo, hi;
    chunk(s, nthreads, t, &lo, &hi);
    if (lo >= hi) continue;
    int64_t other = s->ta ? s->m : s->n, spread = (int64_t)(t * 7919 + 3) % other;
    int64_t i = s->ta ? spread : hi - 1, j = s->ta ? hi - 1 : spread;
    double ref = 0, mag = 0;
    for (int64_t q = 0; q < s->k; q++) {
      double x = p->a[s->ta ? q * p->lda + i : i * p->lda + q], y = p->b[s->tb ? j * p->ldb + q : q * p->ldb + j];
      ref += x * y, mag += fabs(x * y);
    }
    double got = p->c[i * p->ldc + j], err = fabs(got - ref) / (mag > 0 ? mag : 1);
    if (!(err <= 1e-3)) {
      char name[64];
      shape_name(s, name, sizeof name);
      fprintf(stderr, "xf-gemm-bench: %s: C[%lld, %lld] = %.6g, expected %.6g (relative error %.1e): wrong result\n",
              name, (long long)i, (long long)j, got, ref, err);
      exit(1);
    }
  }
}

int main(int argc, char **argv) {
  XfGemmKind kind = XF_GEMM_AUTO;
  long nthreads = sysconf(_SC_NPROCESSORS_ONLN);
  bool table = false;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(arg, "--table")) {
      table = true;
    } else if (!strcmp(arg, "--bf16")) {
      bf16 = true;
    } else if (!strcmp(arg, "--gemm") || !strcmp(arg, "--threads")) {
      if (i + 1 == argc) {
        fprintf(stderr, "xf-gemm-bench: %s needs a value\n%s", arg, usage);
        return 2;
      }
      const char *v = argv[++i];
      char *end;
      if (!strcmp(arg, "--gemm") && !xf_gemm_parse(v, &kind)) {
        fprintf(stderr, "xf-gemm-bench: --gemm %s: not auto, onednn or openblas\n%s", v, usage);
        return 2;
      }
      if (!strcmp(arg, "--threads") && ((nthreads = strtol(v, &end, 10)) < 1 || nthreads > 1024 || *end || end == v)) {
        fprintf(stderr, "xf-gemm-bench: --threads %s: not a number from 1 to 1024\n%s", v, usage);
        return 2;
      }
    } else {
      fprintf(stderr, "xf-gemm-bench: unknown argument '%s'\n%s", arg, usage);
      return 2;
    }
  }
  if (nthreads < 1) nthreads = 1;

  XfGemmInfo info;
  char err[256], line[256], remedy[256];
  if (!xf_gemm_select(kind, &info, err, sizeof err)) {
    fprintf(stderr, "xf-gemm-bench: %s\n", err);
    return 2;
  }
  if (bf16 && !xf_gemm_bf16_ready(err, sizeof err)) {
    fprintf(stderr, "xf-gemm-bench: --bf16: %s\n", err);
    return 2;
  }
  xf_gemm_describe(&info, (int)nthreads, line, sizeof line, remedy, sizeof remedy);
  if (!table) {
    printf("%s\n", line);
    if (remedy[0]) printf("%s\n", remedy);
    fflush(stdout);
  } else if (remedy[0]) {
    fprintf(stderr, "%s\n", remedy);
  }

  Pool pool;
  Worker *workers = xmalloc((size_t)nthreads * sizeof *workers);
  pool_start(&pool, workers, (int)nthreads);
  double gflops[NSHAPES], log_sum = 0;
  int nmodel = 0;
  for (int i = 0; i < NSHAPES; i++) {
    const Shape *s = &shapes[i];
    Product p = product_new(s);
    double t = best_time(&pool, &p);
    check(&p, (int)nthreads);
    product_free(&p);
    gflops[i] = 2.0 * (double)s->m * (double)s->n * (double)s->k / t / 1e9;
    if (s->model) log_sum += log(gflops[i]), nmodel++;
    if (!table) {
      char name[64];
      shape_name(s, name, sizeof name);
      printf("%s: %.1f GFLOP/s\n", name, gflops[i]);
      fflush(stdout);
    }
  }
  pool_stop(&pool);
  free(workers);
  double rate = exp(log_sum / nmodel);

  if (!table) {
    printf("rate: %.1f\n", rate);
    return 0;
  }
  // e.g. "oneDNN 2.6.3 (avx512_core_bf16), 2 threads, GFLOP/s: 8192x512x128 101.2, ...,
  // 128x512x8192 ta 95.0, ...; geomean 90.1; 1024x1024x1024 120.4; 1024x3072x768 ..."
  printf("%s (%s), %ld thread%s, %sGFLOP/s:", info.library, info.kernel, nthreads, nthreads == 1 ? "" : "s",
         bf16 ? "bf16 products, " : "");
  for (int i = 0, first = 1; i < NSHAPES; i++) {
    const Shape *s = &shapes[i];
    if (!s->model) continue;
    printf("%s %lldx%lldx%lld%s%s %.1f", first ? "" : ",", (long long)s->m, (long long)s->n, (long long)s->k,
           s->ta ? " ta" : "", s->tb ? " tb" : "", gflops[i]);
    first = 0;
  }
  printf("; geomean %.1f", rate);
  for (int i = 0; i < NSHAPES; i++)
    if (!shapes[i].model)
      printf("; %lldx%lldx%lld%s%s %.1f", (long long)shapes[i].m, (long long)shapes[i].n, (long long)shapes[i].k,
             shapes[i].ta ? " ta" : "", shapes[i].tb ? " tb" : "", gflops[i]);
  printf("\n");
  return 0;
}
