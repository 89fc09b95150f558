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

// The panels: the whole of k while (min(m, 256) + min(n, 256)) k fits the
// scratch, else k halved (multiples of 16); then m and n halved, the larger
// first, until (mc + nc) kp fits. Each panel's operands are converted once
// per use, C accumulated over the k panels (beta on the first).
void xf_sgemm_bf16(XfBf16Scratch *s, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0) {
    xf_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // an operand with a copy is read in place (its panels are offsets in it)
  const uint16_t *ca = find_copy(s->copies, a, ta ? (k - 1) * lda + m - 1 : (m - 1) * lda + k - 1);
  const uint16_t *cb = find_copy(s->copies, b, tb ? (n - 1) * ldb + k - 1 : (k - 1) * ldb + n - 1);
  int64_t kp = k, mc = m, nc = n;
  int64_t m0 = m < 256 ? m : 256, n0 = n < 256 ? n : 256;
  while (kp > 16 && (m0 + n0) * kp > s->cap) kp = (kp / 2 + 15) / 16 * 16;
  while ((mc + nc) * kp > s->cap && (mc > 1 || nc > 1)) {
    if (mc >= nc) mc = (mc + 1) / 2;
    else nc = (nc + 1) / 2;
  }
  if ((mc + nc) * kp > s->cap) {
    fprintf(stderr, "xf: internal error: bf16 GEMM scratch of %lld elements holds no panel of m %lld, n %lld, k %lld\n",
            (long long)s->cap, (long long)m, (long long)n, (long long)k);
    abort();
  }
  uint16_t *pa = s->buf, *pb = s->buf + mc * kp;
  for (int64_t k0 = 0; k0 < k; k0 += kp) {
    int64_t kn = k - k0 < kp ? k - k0 : kp;
    float bt = k0 == 0 ? beta : 1;
    for (int64_t j0 = 0; j0 < n; j0 += nc) {
      int64_t nn = n - j0 < nc ? n - j0 : nc;
      // op(B) rows [k0, k0 + kn), columns [j0, j0 + nn): stored k x n, or n x k
      int64_t ob = tb ? j0 * ldb + k0 : k0 * ldb + j0;
      const uint16_t *qb = cb ? cb + ob : pb;
      if (!cb) to_bf16(pb, b + ob, tb ? nn : kn, tb ? kn : nn, ldb);
      for (int64_t i0 = 0; i0 < m; i0 += mc) {
        int64_t mm = m - i0 < mc ? m - i0 : mc;
        int64_t oa = ta ? k0 * lda + i0 : i0 * lda + k0;
        const uint16_t *qa = ca ? ca + oa : pa;
        if (!ca) to_bf16(pa, a + oa, ta ? kn : mm, ta ? mm : kn, lda);
        int st = g_bf16.fn(ta ? 'T' : 'N', tb ? 'T' : 'N', mm, nn, kn, alpha, qa, ca ? lda : ta ? mm : kn, qb,
                           cb ? ldb : tb ? kn : nn, bt, c + i0 * ldc + j0, ldc);
        if (st != 0) {
          fprintf(stderr, "xf: internal error: dnnl_gemm_bf16bf16f32(%c%c, m %lld, n %lld, k %lld) failed with status %d\n",
                  ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)mm, (long long)nn, (long long)kn, st);
          abort();
        }
      }
    }
  }
}
