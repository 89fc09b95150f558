// gemm.c: the GEMM providers behind xf_sgemm (see gemm.h) and what the CPU
// offers them.
#include "gemm.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef XF_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef XF_HAVE_OPENBLAS
#include <cblas.h>
extern void openblas_set_num_threads(int);
#endif

typedef void (*SgemmFn)(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

static struct {
  bool selected;
  XfGemmInfo info;
  SgemmFn fn;
  void (*set_threads)(int);  // omp_set_num_threads of oneDNN's OpenMP runtime, if loaded
} g_gemm;

// ---- the CPU -----------------------------------------------------------------------

// The brand string of cpuid leaves 0x80000002..4, trimmed.
static void cpu_model(char *out, size_t len) {
  unsigned r[12] = {0}, top = __get_cpuid_max(0x80000000u, NULL);
  snprintf(out, len, "unknown x86-64 CPU");
  if (top < 0x80000004u) return;
  for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
  char brand[49];
  memcpy(brand, r, 48);
  brand[48] = 0;
  char *s = brand;
  while (*s == ' ') s++;
  size_t n = strlen(s);
  while (n > 0 && s[n - 1] == ' ') s[--n] = 0;
  if (*s) snprintf(out, len, "%s", s);
}

// The widest vector ISA the CPU and the OS support (libgcc checks XCR0).
static const char *cpu_isa(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  if (__builtin_cpu_supports("avx")) return "avx";
  return "sse";
}

static bool has_avx2(const XfGemmInfo *in) { return !strcmp(in->cpu_isa, "avx512") || !strcmp(in->cpu_isa, "avx2"); }

// ---- oneDNN ------------------------------------------------------------------------

#ifdef XF_HAVE_ONEDNN
static void onednn_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (st != dnnl_success) {
    fprintf(stderr, "xf: internal error: dnnl_sgemm(%c%c, m %lld, n %lld, k %lld, lda %lld, ldb %lld, ldc %lld) failed with status %d\n",
            ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, (long long)lda, (long long)ldb,
            (long long)ldc, (int)st);
    abort();
  }
}

static const char *onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch ((int)isa) {
  case dnnl_cpu_isa_sse41: return "sse41";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
  case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "reference (no JIT)";
  }
}

static void onednn_info(XfGemmInfo *in) {
  const dnnl_version_t *v = dnnl_version();
  snprintf(in->library, sizeof in->library, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  snprintf(in->kernel, sizeof in->kernel, "%s", onednn_isa_name(isa));
  // the ISA values are nested bit sets: avx2 = 0x7 is contained in every wider one
  in->generic = has_avx2(in) && ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx2) != (unsigned)dnnl_cpu_isa_avx2;
}
#endif

// ---- OpenBLAS ----------------------------------------------------------------------

#ifdef XF_HAVE_OPENBLAS
static void openblas_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
              alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

static void openblas_info(XfGemmInfo *in) {
  const char *cfg = openblas_get_config(), *ver = strstr(cfg, "OpenBLAS ");
  int len = 0;
  if (ver) {
    ver += 9;
    while (ver[len] && ver[len] != ' ') len++;
  }
  snprintf(in->library, sizeof in->library, "OpenBLAS %.*s", len ? len : 1, len ? ver : "?");
  snprintf(in->kernel, sizeof in->kernel, "%s", openblas_get_corename());
  // the dynamic-arch cores with AVX2 (or wider) kernels in OpenBLAS 0.3.x
  static const char *fast[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"};
  bool wide = false;
  for (size_t i = 0; i < sizeof fast / sizeof *fast; i++) wide |= !strcasecmp(in->kernel, fast[i]);
  in->generic = has_avx2(in) && !wide;
  openblas_set_num_threads(1);  // threads come from the runtime's pool
}
#endif

// ---- selection ---------------------------------------------------------------------

const char *xf_gemm_available(void) {
  return ""
#ifdef XF_HAVE_ONEDNN
         "onednn"
#endif
#if defined XF_HAVE_ONEDNN && defined XF_HAVE_OPENBLAS
         " "
#endif
#ifdef XF_HAVE_OPENBLAS
         "openblas"
#endif
      ;
}

bool xf_gemm_parse(const char *s, XfGemmKind *kind) {
  static const char *names[] = {"auto", "onednn", "openblas"};
  for (int i = 0; i < 3; i++)
    if (!strcmp(s, names[i])) return *kind = (XfGemmKind)i, true;
  return false;
}

bool xf_gemm_select(XfGemmKind want, XfGemmInfo *info, char *err, size_t errlen) {
  XfGemmInfo in = {0};
  cpu_model(in.cpu, sizeof in.cpu);
  snprintf(in.cpu_isa, sizeof in.cpu_isa, "%s", cpu_isa());
  SgemmFn fn = NULL;
  if (want == XF_GEMM_AUTO) {
#ifdef XF_HAVE_ONEDNN
    want = XF_GEMM_ONEDNN;
#else
    want = XF_GEMM_OPENBLAS;
#endif
  }
#ifdef XF_HAVE_ONEDNN
  if (want == XF_GEMM_ONEDNN) fn = onednn_sgemm, onednn_info(&in);
#endif
#ifdef XF_HAVE_OPENBLAS
  if (want == XF_GEMM_OPENBLAS) fn = openblas_sgemm, openblas_info(&in);
#endif
  if (!fn) {
    snprintf(err, errlen, "GEMM provider '%s' is not in this build (it has: %s)",
             want == XF_GEMM_ONEDNN ? "onednn" : "openblas", xf_gemm_available());
    return false;
  }
  in.kind = want;
  g_gemm.info = in, g_gemm.fn = fn, g_gemm.selected = true;
  g_gemm.set_threads = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  if (info) *info = in;
  return true;
}

const XfGemmInfo *xf_gemm_info(void) {
  if (!g_gemm.selected) {
    char err[200];
    if (!xf_gemm_select(XF_GEMM_AUTO, NULL, err, sizeof err)) {
      fprintf(stderr, "xf: %s\n", err);
      abort();
    }
  }
  return &g_gemm.info;
}

void xf_gemm_describe(const XfGemmInfo *in, int threads, char *line, size_t len, char *remedy, size_t rlen) {
  snprintf(line, len, "GEMM: %s, %s kernels, %d thread%s (CPU: %s, %s)", in->library, in->kernel, threads,
           threads == 1 ? "" : "s", in->cpu, in->cpu_isa);
  if (!in->generic) {
    if (rlen) remedy[0] = 0;
  } else if (in->kind == XF_GEMM_OPENBLAS) {
    snprintf(remedy, rlen,
             "warning: OpenBLAS runs its generic %s kernel on a CPU with %s, several times slower: use --gemm onednn "
             "(libdnnl-dev), or set OPENBLAS_CORETYPE=%s",
             in->kernel, in->cpu_isa, !strcmp(in->cpu_isa, "avx512") ? "SkylakeX" : "Haswell");
  } else {
    const char *env = getenv("ONEDNN_MAX_CPU_ISA");
    snprintf(remedy, rlen, "warning: oneDNN runs its %s kernels on a CPU with %s, several times slower: %s%s%s", in->kernel,
             in->cpu_isa, env ? "ONEDNN_MAX_CPU_ISA=" : "its CPU dispatch does not know this CPU; try --gemm openblas",
             env ? env : "", env ? " limits it; unset it" : "");
  }
}

void xf_gemm_thread_init(void) {
  // oneDNN's OpenMP runtime keeps a thread count per calling thread
  if (!g_gemm.selected) xf_gemm_info();
  if (g_gemm.set_threads) g_gemm.set_threads(1);
}

void xf_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
              int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0) {  // C = beta C, without reading A or B
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
    return;
  }
  if (!g_gemm.selected) xf_gemm_info();
  g_gemm.fn(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
