// gemm_bf16.c: the GEMM with bf16 products (xfc --precision=bf16 on the
// CPU; gemm.h xf_sgemm_bf16): A and B rounded to bf16 (round to nearest
// even), float32 sums and C, through oneDNN's dnnl_gemm_bf16bf16f32 where
// the CPU has AVX512_BF16.
#include <cpuid.h>
#include <dlfcn.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "xf_abi.h"

// oneDNN's bf16 GEMM (row-major, as dnnl_sgemm), exported by libdnnl 2.x
// though not declared in its 2.6 header: found with dlsym.
typedef int (*Bf16GemmFn)(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                          const uint16_t *b, int64_t ldb, float beta, float *c, int64_t ldc);

static struct {
  bool probed, ready;
  char why[160];
  Bf16GemmFn fn;
} g_bf16;

// cpuid leaf 7 subleaf 1, EAX bit 5: AVX512_BF16, with AVX512F, BW and VL
// as libgcc reports them (it checks that the OS keeps the AVX-512 state).
static bool cpu_has_avx512_bf16(void) {
  unsigned a, b, c, d;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
      __get_cpuid_max(0, NULL) < 7)
    return false;
  __cpuid_count(7, 1, a, b, c, d);
  (void)b, (void)c, (void)d;
  return (a >> 5) & 1;
}

bool xf_gemm_bf16_ready(char *why, size_t len) {
  if (!g_bf16.probed) {
    g_bf16.probed = true;
#ifdef XF_HAVE_ONEDNN
    g_bf16.fn = (Bf16GemmFn)dlsym(RTLD_DEFAULT, "dnnl_gemm_bf16bf16f32");
#endif
    if (!cpu_has_avx512_bf16())
      snprintf(g_bf16.why, sizeof g_bf16.why, "this CPU has no AVX512_BF16");
    else if (!g_bf16.fn)
      snprintf(g_bf16.why, sizeof g_bf16.why, "this build's GEMM library has no bf16 GEMM (oneDNN's dnnl_gemm_bf16bf16f32)");
    else
      g_bf16.ready = true;
  }
  if (why && len) snprintf(why, len, "%s", g_bf16.why);
  return g_bf16.ready;
}

// dst[r * cols + c] = bf16(src[r * ld + c]) for r < rows, c < cols: 16
// lanes at a time (vcvtneps2bf16: round to nearest even).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void to_bf16(uint16_t *dst, const float *src, int64_t rows,
                                                                    int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; r++) {
    const float *s = src + r * ld;
    uint16_t *d = dst + r * cols;
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) _mm256_storeu_si256((__m256i *)(d + c), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s + c)));
    if (c < cols) {
      __mmask16 k = (__mmask16)((1u << (cols - c)) - 1);
      __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, s + c));
      _mm256_mask_storeu_epi16(d + c, k, h);
    }
  }
}

void xf_bf16_convert(uint16_t *dst, const float *src, int64_t n) { to_bf16(dst, src, 1, n, n); }

// dst[r * ld + c] = bf16(src[r * cols + c]): to_bf16 into rows ld apart.
static void to_bf16_rows(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; r++) to_bf16(dst + r * ld, src + r * cols, 1, cols, cols);
}

// The copy of the operand at p whose last element is p[last], or NULL.
static const uint16_t *find_copy(const XfBf16Copies *c, const float *p, int64_t last) {
  if (!c) return NULL;
  int lo = 0, hi = c->n;  // the last src at or below p
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (c->src[mid] <= p) lo = mid;
    else hi = mid;
  }
  if (c->n == 0 || p < c->src[lo] || p - c->src[lo] + last >= c->len[lo]) return NULL;
  return c->copy[lo] + (p - c->src[lo]);
}

// dst[r * cols + c] = widen(src[r * ld + c]): bf16 elements to float32 (exact).
static void from_bf16(float *dst, const uint16_t *src, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = xf_bf16_float(src[r * ld + c]);
}

// dst[r * ld + c] = bf16(src[r * cols + c]) (xf_bf16_bits, as vcvtneps2bf16
// and the generated code's stores, codegen/llvm.c).
static void narrow_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[r * ld + c] = xf_bf16_bits(src[r * cols + c]);
}

// One operand of a product: its elements at p (float32, or bf16 when h),
// leading dimension ld, and where present its bf16 copy (XfBf16Copies).
typedef struct {
  const void *p;
  bool h;
  int64_t ld;
  const uint16_t *copy;
} Operand;

// Whether the product reads op in place: its storage is what the products
// take (bf16 for bf16 products, float32 for float32 ones), or a copy is.
static bool in_place(const Operand *op, bool bf16) { return bf16 ? op->h || op->copy : !op->h; }

// Stages the rows x cols panel of op at element offset off into dst
// (contiguous, cols per row): converted to what the products take.
static void stage(void *dst, const Operand *op, int64_t off, int64_t rows, int64_t cols, bool bf16) {
  if (bf16) to_bf16(dst, (const float *)op->p + off, rows, cols, op->ld);
  else from_bf16(dst, (const uint16_t *)op->p + off, rows, cols, op->ld);
}

// The panels: an operand read in place is not staged; the whole of k while
// the staged operands' (min(m, 256), min(n, 256)) rows of k fit the
// scratch, else k halved (multiples of 16); then the staged of m and n
// halved, the larger first, until their panels fit. Each staged panel is
// converted once per use, C accumulated over the k panels (beta on the
// first). bf16: bf16
// products (dnnl_gemm_bf16bf16f32), else float32 ones (xf_sgemm) of
// operands widened from bf16.
static void gemm_panels(XfBf16Scratch *s, bool bf16, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, Operand A,
                        Operand Bo, float beta, float *c, int64_t ldc) {
  bool ia = in_place(&A, bf16), ib = in_place(&Bo, bf16);
  int64_t cap = bf16 ? s->cap : s->cap / 2;  // staged elements
  int64_t kp = k, mc = m, nc = n;
  int64_t m0 = ia ? 0 : m < 256 ? m : 256, n0 = ib ? 0 : n < 256 ? n : 256;
  while (kp > 16 && (m0 + n0) * kp > cap) kp = (kp / 2 + 15) / 16 * 16;
  // the staged rows: (ia ? 0 : mc) + (ib ? 0 : nc), halving the larger staged one
  while (((ia ? 0 : mc) + (ib ? 0 : nc)) * kp > cap && ((!ia && mc > 1) || (!ib && nc > 1))) {
    if (!ia && (ib || mc >= nc) && mc > 1) mc = (mc + 1) / 2;
    else nc = (nc + 1) / 2;
  }
  if (((ia ? 0 : mc) + (ib ? 0 : nc)) * kp > cap) {
    fprintf(stderr, "xf: internal error: GEMM scratch of %lld elements holds no panel of m %lld, n %lld, k %lld\n",
            (long long)s->cap, (long long)m, (long long)n, (long long)k);
    abort();
  }
  size_t es = bf16 ? 2 : 4;
  char *pa = (char *)s->buf, *pb = pa + (size_t)(ia ? 0 : mc * kp) * es;
  for (int64_t k0 = 0; k0 < k; k0 += kp) {
    int64_t kn = k - k0 < kp ? k - k0 : kp;
    float bt = k0 == 0 ? beta : 1;
    for (int64_t j0 = 0; j0 < n; j0 += nc) {
      int64_t nn = n - j0 < nc ? n - j0 : nc;
      // op(B) rows [k0, k0 + kn), columns [j0, j0 + nn): stored k x n, or n x k
      int64_t ob = tb ? j0 * Bo.ld + k0 : k0 * Bo.ld + j0;
      const void *qb = pb;
      if (ib) qb = Bo.copy ? (const void *)(Bo.copy + ob) : Bo.h ? (const void *)((const uint16_t *)Bo.p + ob) : (const void *)((const float *)Bo.p + ob);
      else stage(pb, &Bo, ob, tb ? nn : kn, tb ? kn : nn, bf16);
      int64_t ldb = ib ? Bo.ld : tb ? kn : nn;
      for (int64_t i0 = 0; i0 < m; i0 += mc) {
        int64_t mm = m - i0 < mc ? m - i0 : mc;
        int64_t oa = ta ? k0 * A.ld + i0 : i0 * A.ld + k0;
        const void *qa = pa;
        if (ia) qa = A.copy ? (const void *)(A.copy + oa) : A.h ? (const void *)((const uint16_t *)A.p + oa) : (const void *)((const float *)A.p + oa);
        else stage(pa, &A, oa, ta ? kn : mm, ta ? mm : kn, bf16);
        int64_t lda = ia ? A.ld : ta ? mm : kn;
        if (!bf16) {
          xf_sgemm(ta, tb, mm, nn, kn, alpha, qa, lda, qb, ldb, bt, c + i0 * ldc + j0, ldc);
          continue;
        }
        int st = g_bf16.fn(ta ? 'T' : 'N', tb ? 'T' : 'N', mm, nn, kn, alpha, qa, lda, qb, ldb, bt, c + i0 * ldc + j0, ldc);
        if (st != 0) {
          fprintf(stderr, "xf: internal error: dnnl_gemm_bf16bf16f32(%c%c, m %lld, n %lld, k %lld) failed with status %d\n",
                  ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)mm, (long long)nn, (long long)kn, st);
          abort();
        }
      }
    }
  }
}

static int64_t last_elem(int t, int64_t rows, int64_t cols, int64_t ld) { return t ? (cols - 1) * ld + rows - 1 : (rows - 1) * ld + cols - 1; }

void xf_sgemm_bf16(XfBf16Scratch *s, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  xf_gemm_ex(s, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 0);
}

void xf_gemm_ex(XfBf16Scratch *s, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                const void *b, int64_t ldb, float beta, void *c, int64_t ldc, int types) {
  if (m <= 0 || n <= 0) return;
  if (types & XF_GEMM_C_BF16) {  // rows of C in float32 panels, rounded to bf16 after
    int64_t rows = s->ccap / n;
    if (rows < 1) {
      fprintf(stderr, "xf: internal error: GEMM C scratch of %lld floats holds no row of %lld\n", (long long)s->ccap, (long long)n);
      abort();
    }
    size_t ea = types & XF_GEMM_A_BF16 ? 2 : 4;
    for (int64_t i0 = 0; i0 < m; i0 += rows) {
      int64_t mm = m - i0 < rows ? m - i0 : rows;
      uint16_t *ch = (uint16_t *)c + i0 * ldc;
      if (beta != 0) from_bf16(s->cbuf, ch, mm, n, ldc);
      const char *ai = (const char *)a + (size_t)(ta ? i0 : i0 * lda) * ea;
      xf_gemm_ex(s, ta, tb, mm, n, k, alpha, ai, lda, b, ldb, beta, s->cbuf, n, types & ~XF_GEMM_C_BF16);
      if (g_bf16.ready) to_bf16_rows(ch, s->cbuf, mm, n, ldc);
      else narrow_bf16(ch, s->cbuf, mm, n, ldc);
    }
    return;
  }
  if (k <= 0 || alpha == 0 || (!s->products && !(types & (XF_GEMM_A_BF16 | XF_GEMM_B_BF16)))) {
    if (k <= 0 || alpha == 0) k = 0;  // C = beta C: neither operand is read
    xf_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  Operand A = {a, types & XF_GEMM_A_BF16, lda, NULL}, Bo = {b, (types & XF_GEMM_B_BF16) != 0, ldb, NULL};
  // an operand with a copy is read in place (its panels are offsets in it)
  if (s->products && !A.h) A.copy = find_copy(s->copies, a, last_elem(ta, m, k, lda));
  if (s->products && !Bo.h) Bo.copy = find_copy(s->copies, b, last_elem(tb, k, n, ldb));
  gemm_panels(s, s->products, ta, tb, m, n, k, alpha, A, Bo, beta, c, ldc);
}
