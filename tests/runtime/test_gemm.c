// The runtime's GEMM (runtime/gemm.h) on every provider in the build:
// row-major C = alpha op(A) op(B) + beta C for the four transpose cases,
// leading dimensions wider than the matrices, beta 0 (C not read: NaN there
// stays out), beta 1 and 0.5, k = 0, against a double-precision oracle; and
// the same products split over two threads by rows, as the runtime's pool
// splits them, each thread after xf_gemm_thread_init. The bf16 products
// (xf_sgemm_bf16) against a double-precision oracle of the operands rounded
// to bf16 (to nearest even), with scratches small enough to split k, m and
// n into panels; skipped, saying why, where xf_gemm_bf16_ready says no.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "xf_abi.h"

static int failures;

static float val(int64_t i, int salt) { return (float)((i * 37 + salt * 11) % 17) * 0.125f - 1.0f; }

// max |C - oracle| / (1 + |oracle|) over the m x n block
static double check(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, const float *c0, const float *c, int64_t ldc) {
  double worst = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++) s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * (double)(tb ? b[j * ldb + p] : b[p * ldb + j]);
      double want = alpha * s + (beta == 0 ? 0 : beta * (double)c0[i * ldc + j]);
      double e = fabs((double)c[i * ldc + j] - want) / (1 + fabs(want));
      if (!(e <= worst)) worst = e;  // NaN counts as the worst
    }
  return worst;
}

typedef struct {
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc, lo, hi;
  float alpha, beta;
  const float *a, *b;
  float *c;
} Job;

static void run_rows(const Job *j) {  // rows [lo, hi) of C
  const float *a = j->ta ? j->a + j->lo : j->a + j->lo * j->lda;
  xf_sgemm(j->ta, j->tb, j->hi - j->lo, j->n, j->k, j->alpha, a, j->lda, j->b, j->ldb, j->beta, j->c + j->lo * j->ldc, j->ldc);
}

static void *worker(void *p) {
  xf_gemm_thread_init();
  run_rows(p);
  return NULL;
}

static void one(const char *prov, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, int pad,
                bool threads) {
  int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
  float *a = malloc(sizeof(float) * (size_t)(ar * lda + 1)), *b = malloc(sizeof(float) * (size_t)(br * ldb + 1));
  float *c0 = malloc(sizeof(float) * (size_t)(m * ldc + 1)), *c = malloc(sizeof(float) * (size_t)(m * ldc + 1));
  if (!a || !b || !c0 || !c) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (int64_t i = 0; i < ar * lda; i++) a[i] = val(i, 1);
  for (int64_t i = 0; i < br * ldb; i++) b[i] = val(i, 2);
  for (int64_t i = 0; i < m * ldc; i++) c0[i] = beta == 0 ? NAN : val(i, 3);
  memcpy(c, c0, sizeof(float) * (size_t)(m * ldc));
  Job j0 = {ta, tb, m, n, k, lda, ldb, ldc, 0, m, alpha, beta, a, b, c};
  if (threads) {
    Job j1 = j0;
    j0.hi = j1.lo = m / 2;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, &j1)) {
      fprintf(stderr, "cannot start a thread\n");
      exit(1);
    }
    run_rows(&j0);
    pthread_join(t, NULL);
  } else {
    run_rows(&j0);
  }
  double e = check(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, c, ldc);
  bool pad_ok = true;  // the padding columns of C are not written
  for (int64_t i = 0; i < m && beta != 0; i++)
    for (int64_t jj = n; jj < ldc; jj++) pad_ok &= c[i * ldc + jj] == c0[i * ldc + jj];
  bool ok = e < 1e-4 && pad_ok;
  printf("%s %-8s %c%c m %3lld n %3lld k %3lld alpha %4.1f beta %3.1f pad %d%s: max rel err %.2e%s\n", ok ? "ok  " : "FAIL",
         prov, ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, alpha, beta, pad,
         threads ? ", 2 threads" : "", e, pad_ok ? "" : ", padding written");
  failures += !ok;
  free(a), free(b), free(c0), free(c);
}

// x rounded to bf16, to nearest even (the oracle's rounding)
static float bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

// values with more than bf16's 8 significant bits
static float val_fine(int64_t i, int salt) { return val(i, salt) + (float)((i * 13 + salt) % 7) * 1.37e-3f; }

// The bf16 bits of x rounded to nearest even.
static uint16_t bf16_bits(float x) {
  x = bf16_round(x);
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}

enum { COPY_B = 1, COPY_A = 2, COPY_SHORT = 4 };
// copies (COPY_*): A and/or B also given as bf16 copies (XfBf16Copies)
// holding the rounded values times -1 (A) and 2 (B), so that the result
// shows which was read: the copies when they cover the operand, the float32
// values when they stop one element short of its last (COPY_SHORT).
static void one_bf16(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, int pad, int64_t cap, int copies) {
  int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
  size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(m * ldc);
  float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb), *ra = malloc(sizeof(float) * na),
        *rb = malloc(sizeof(float) * nb), *c0 = malloc(sizeof(float) * nc), *c = malloc(sizeof(float) * nc);
  XfBf16Scratch s = {.buf = malloc(sizeof(uint16_t) * (size_t)cap), .cap = cap, .products = true};
  if (!a || !b || !ra || !rb || !c0 || !c || !s.buf) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < na; i++) a[i] = val_fine((int64_t)i, 1), ra[i] = bf16_round(a[i]);
  for (size_t i = 0; i < nb; i++) b[i] = val_fine((int64_t)i, 2), rb[i] = bf16_round(b[i]);
  for (size_t i = 0; i < nc; i++) c0[i] = beta == 0 ? NAN : val((int64_t)i, 3);
  memcpy(c, c0, sizeof(float) * nc);
  // the copies, in address order, each of the whole array (or one short of it)
  uint16_t *copy_a = malloc(sizeof(uint16_t) * na), *copy_b = malloc(sizeof(uint16_t) * nb);
  const float *src[2];
  int64_t len[2];
  const uint16_t *cp[2];
  XfBf16Copies cs = {0, src, len, cp};
  bool short_ = copies & COPY_SHORT;
  if (!copy_a || !copy_b) exit(1);
  for (size_t i = 0; i < na; i++) copy_a[i] = bf16_bits(-a[i]);
  for (size_t i = 0; i < nb; i++) copy_b[i] = bf16_bits(2 * b[i]);
  for (int w = 0; w < 2; w++) {
    bool first_a = (const void *)a < (const void *)b;
    bool is_a = w == 0 ? first_a : !first_a;
    if (!(copies & (is_a ? COPY_A : COPY_B))) continue;
    src[cs.n] = is_a ? a : b, len[cs.n] = (int64_t)(is_a ? na : nb) - short_ - (is_a ? (ta ? lda - m : lda - k) : (tb ? ldb - k : ldb - n));
    cp[cs.n++] = is_a ? copy_a : copy_b;
  }
  s.copies = &cs;
  for (size_t i = 0; !short_ && (copies & COPY_A) && i < na; i++) ra[i] = -ra[i];
  for (size_t i = 0; !short_ && (copies & COPY_B) && i < nb; i++) rb[i] = 2 * rb[i];
  xf_sgemm_bf16(&s, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  double e = check(ta, tb, m, n, k, alpha, ra, lda, rb, ldb, beta, c0, c, ldc);   // against the rounded operands
  for (size_t i = 0; !short_ && (copies & COPY_A) && i < na; i++) a[i] = -a[i];
  for (size_t i = 0; !short_ && (copies & COPY_B) && i < nb; i++) b[i] = 2 * b[i];
  double e32 = check(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, c, ldc);  // against float32's: the rounding seen
  bool pad_ok = true;
  for (int64_t i = 0; i < m && beta != 0; i++)
    for (int64_t jj = n; jj < ldc; jj++) pad_ok &= c[i * ldc + jj] == c0[i * ldc + jj];
  bool ok = e < 1e-5 && e32 > 1e-4 && pad_ok;
  printf("%s bf16     %c%c m %3lld n %3lld k %3lld alpha %4.1f beta %3.1f pad %d scratch %6lld copies %s%s%s: max rel err %.2e "
         "(against float32 operands %.2e)%s\n",
         ok ? "ok  " : "FAIL", ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, alpha, beta, pad,
         (long long)cap, copies & COPY_A ? "A" : "", copies & COPY_B ? "B" : "", !(copies & 3) ? "-" : short_ ? " (short)" : "",
         e, e32, pad_ok ? "" : ", padding written");
  failures += !ok;
  free(a), free(b), free(ra), free(rb), free(c0), free(c), free(s.buf), free(copy_a), free(copy_b);
}

// Products with operands of mixed storage (xf_gemm_ex, types XF_GEMM_*_BF16
// of xf_abi.h): the bf16 operands hold the rounded values, C bf16 gets the
// result rounded (relative error up to 2^-9 beyond the products'); bf16
// products (products) or float32 ones of the widened operands, whose
// float32 operands are then read as they are. cap: the staged panels,
// ccap: a bf16 C's float32 rows.
static void one_mixed(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, int pad, int64_t cap, int64_t ccap,
                      int types, bool products) {
  int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
  size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(m * ldc);
  float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb), *ra = malloc(sizeof(float) * na),
        *rb = malloc(sizeof(float) * nb), *c0 = malloc(sizeof(float) * nc), *c = malloc(sizeof(float) * nc);
  uint16_t *ha = malloc(sizeof(uint16_t) * na), *hb = malloc(sizeof(uint16_t) * nb), *hc = malloc(sizeof(uint16_t) * nc);
  XfBf16Scratch s = {.buf = malloc(sizeof(uint16_t) * (size_t)cap), .cap = cap, .products = products,
                     .cbuf = malloc(sizeof(float) * (size_t)ccap), .ccap = ccap};
  if (!a || !b || !ra || !rb || !c0 || !c || !ha || !hb || !hc || !s.buf || !s.cbuf) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  bool abf = types & XF_GEMM_A_BF16, bbf = types & XF_GEMM_B_BF16, cbf = types & XF_GEMM_C_BF16;
  for (size_t i = 0; i < na; i++) a[i] = val_fine((int64_t)i, 1), ha[i] = bf16_bits(a[i]), ra[i] = abf || products ? bf16_round(a[i]) : a[i];
  for (size_t i = 0; i < nb; i++) b[i] = val_fine((int64_t)i, 2), hb[i] = bf16_bits(b[i]), rb[i] = bbf || products ? bf16_round(b[i]) : b[i];
  for (size_t i = 0; i < nc; i++) c0[i] = beta == 0 ? NAN : val((int64_t)i, 3), hc[i] = beta == 0 ? 0x7fc0 : bf16_bits(c0[i]);
  memcpy(c, c0, sizeof(float) * nc);
  xf_gemm_ex(&s, ta, tb, m, n, k, alpha, abf ? (const void *)ha : a, lda, bbf ? (const void *)hb : b, ldb, beta, cbf ? (void *)hc : c,
             ldc, types);
  if (cbf)
    for (size_t i = 0; i < nc; i++) {
      uint32_t u = (uint32_t)hc[i] << 16;
      memcpy(&c[i], &u, 4);
    }
  double e = check(ta, tb, m, n, k, alpha, ra, lda, rb, ldb, beta, c0, c, ldc);
  bool pad_ok = true;
  for (int64_t i = 0; i < m && beta != 0; i++)
    for (int64_t jj = n; jj < ldc; jj++) pad_ok &= c[i * ldc + jj] == c0[i * ldc + jj];
  bool ok = e < (cbf ? 4e-3 : 1e-5) && pad_ok;
  printf("%s mixed    %c%c m %3lld n %3lld k %3lld alpha %4.1f beta %3.1f pad %d scratch %6lld C rows %6lld bf16 %s%s%s "
         "%s products: max rel err %.2e%s\n",
         ok ? "ok  " : "FAIL", ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, alpha, beta, pad,
         (long long)cap, (long long)ccap, abf ? "A" : "", bbf ? "B" : "", cbf ? "C" : "", products ? "bf16" : "float32", e,
         pad_ok ? "" : ", padding written");
  failures += !ok;
  free(a), free(b), free(ra), free(rb), free(c0), free(c), free(ha), free(hb), free(hc), free(s.buf), free(s.cbuf);
}

int main(void) {
  char avail[64], err[200];
  snprintf(avail, sizeof avail, "%s", xf_gemm_available());
  int nprov = 0;
  for (char *p = strtok(avail, " "); p; p = strtok(NULL, " ")) {
    XfGemmKind kind;
    XfGemmInfo info;
    if (!xf_gemm_parse(p, &kind) || !xf_gemm_select(kind, &info, err, sizeof err)) {
      printf("FAIL %s: %s\n", p, err);
      failures++;
      continue;
    }
    nprov++;
    xf_gemm_thread_init();
    printf("%s: %s, %s kernels\n", p, info.library, info.kernel);
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        one(p, ta, tb, 37, 29, 53, 1, 0, 0, false);
        one(p, ta, tb, 64, 96, 128, -0.5f, 1, 3, false);
        one(p, ta, tb, 130, 17, 9, 1, 0.5f, 5, true);
      }
    one(p, 0, 0, 8, 8, 0, 1, 0.5f, 1, false);  // k = 0: C = beta C
    one(p, 0, 0, 8, 8, 0, 1, 0, 0, false);     // k = 0, beta 0: C = 0
  }
  if (nprov == 0) printf("FAIL no GEMM provider in the build\n"), failures++;
  char why[160];
  bool ready = xf_gemm_bf16_ready(why, sizeof why);
  for (int pr = 0; pr < 1 + ready; pr++)  // float32 products of widened operands everywhere; bf16 ones where ready
    for (int ty = 1; ty < 8; ty++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          one_mixed(ta, tb, 37, 29, 53, 1, 0, 0, 1 << 20, 1 << 16, ty, pr);         // whole
          one_mixed(ta, tb, 130, 70, 40, -0.5f, 0.5f, 5, 60 * 40, 70 * 16, ty, pr);  // panels; C in rows of 16
        }
  if (!ready) {
    printf("skip bf16 products: %s\n", why);
  } else {
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        one_bf16(ta, tb, 37, 29, 53, 1, 0, 0, 1 << 20, 0);      // whole
        one_bf16(ta, tb, 64, 96, 200, -0.5f, 1, 3, 160 * 64, 0);  // k in panels of 64 (beta on the first)
        one_bf16(ta, tb, 130, 70, 40, 1, 0.5f, 5, 60 * 40, 0);   // k in panels of 16, m in halves
        one_bf16(ta, tb, 300, 33, 70, 1, 0, 2, 40 * 16, 0);      // k in panels of 16, m in 16 chunks, n in 2
        for (int cp = COPY_B; cp <= (COPY_A | COPY_B); cp++) {   // copies read in place, whole or in panels
          one_bf16(ta, tb, 37, 29, 53, 1, 0, 2, 1 << 20, cp);
          one_bf16(ta, tb, 130, 70, 40, 1, 0.5f, 5, 60 * 40, cp);
          one_bf16(ta, tb, 37, 29, 53, 1, 0, 2, 1 << 20, cp | COPY_SHORT);  // not covered: converted
        }
      }
  }
  printf("%d failures\n", failures);
  return failures != 0;
}
