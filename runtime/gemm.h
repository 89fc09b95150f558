// gemm.h: the runtime's one single-precision GEMM, from the provider chosen
// at start by the CPU's features.
//
// Providers (each linked when its Debian package was found at build time):
//   oneDNN (libdnnl-dev): dnnl_sgemm, JIT kernels picked from cpuid (what
//     PyTorch's CPU build uses for the same job); the default.
//   OpenBLAS (libopenblas-dev): cblas_sgemm, with the core its dynamic
//     dispatch picked when it was loaded (OPENBLAS_CORETYPE forces one).
// Measured on the products the models run (bench/sgemm.c; docs/runtime.md):
// oneDNN is at least as fast as OpenBLAS on its best core on every shape,
// and OpenBLAS 0.3.21 runs its generic Prescott kernel on CPUs newer than it
// knows, so `auto` is oneDNN when linked.
//
// Threads: every call computes on the calling thread alone. The runtime's
// thread pool splits each GEMM's rows (or, for weight gradients, columns)
// across its workers, so two threads give two independent one-thread GEMMs
// and the libraries never start threads of their own.
#ifndef XF_GEMM_H
#define XF_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  XF_GEMM_AUTO,      // oneDNN if linked, else OpenBLAS
  XF_GEMM_ONEDNN,    // dnnl_sgemm
  XF_GEMM_OPENBLAS,  // cblas_sgemm
} XfGemmKind;

// What runs: shown at the start of xfrun and in bench/run.sh.
typedef struct {
  XfGemmKind kind;     // never XF_GEMM_AUTO once selected
  char library[48];    // "oneDNN 2.6.3", "OpenBLAS 0.3.21"
  char kernel[48];     // the ISA or core it runs: "avx512_core_bf16", "SkylakeX", "Prescott"
  char cpu[96];        // the CPU's model name
  char cpu_isa[16];    // the CPU's widest vector ISA: "avx512", "avx2", "avx", "sse"
  bool generic;        // the kernel does not use AVX2 although the CPU has it
} XfGemmInfo;

// Selects the provider for the whole process (the first call decides; a
// later call with another kind switches). False, with a message, if that
// provider was not linked into this build.
bool xf_gemm_select(XfGemmKind want, XfGemmInfo *info, char *err, size_t errlen);

// The provider selected (selecting `auto` if none was).
const XfGemmInfo *xf_gemm_info(void);

// One line: "GEMM: oneDNN 2.6.3, avx512_core_bf16 kernels, on N threads
// (CPU: AMD EPYC, avx512)". remedy: when info->generic, a second line saying
// what to do; "" otherwise.
void xf_gemm_describe(const XfGemmInfo *info, int threads, char *line, size_t len, char *remedy, size_t rlen);

// Parses "auto", "onednn", "openblas"; false if none.
bool xf_gemm_parse(const char *s, XfGemmKind *kind);

// Names of the providers linked into this build, space-separated.
const char *xf_gemm_available(void);

// Makes the calling thread's GEMMs run on that thread alone (the OpenMP
// runtime under oneDNN keeps a thread count per thread). Called by the
// runtime on each pool worker and on the thread that starts the pool.
void xf_gemm_thread_init(void);

// Row-major C = alpha op(A) op(B) + beta C, as cblas_sgemm; on the provider
// selected. A: m x k (k x m if trans_a), B: k x n (n x k if trans_b), C: m x n.
void xf_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

// bf16 products (xfc --precision=bf16 on the CPU, gemm_bf16.c): the same
// C = alpha op(A) op(B) + beta C with every element of A and B rounded to
// bf16 (to nearest even) and float32 sums, through oneDNN's bf16 GEMM (about
// twice dnnl_sgemm's rate on AVX512_BF16). The operands are converted into
// the caller's scratch of `cap` bf16 elements (one per thread: the runtime
// allocates XF_BF16_SCRATCH per pool thread up front), in panels of k, m
// and n when they do not fit whole.
enum { XF_BF16_SCRATCH = 1 << 23 };
// bf16 copies of float32 arrays that products read again and again (the
// runtime's: the parameters, read by every step's forward and input-gradient
// products), kept current by their owner: an operand lying wholly inside
// src[i] is read from copy[i] at the same element offset, not converted.
// Sorted by address, disjoint.
typedef struct {
  int n;
  const float **src;       // [n]
  const int64_t *len;      // [n] elements
  const uint16_t **copy;   // [n]
} XfBf16Copies;
// A pool thread's scratch for products with bf16 in them: the staged
// operand panels (cap bf16 elements, or cap / 2 floats), and for a bf16 C
// its rows in float32 (ccap floats; only where the model stores bf16).
typedef struct {
  uint16_t *buf;
  int64_t cap;
  const XfBf16Copies *copies;  // or NULL
  bool products;               // bf16 products (xf_gemm_bf16_ready); else float32 ones
  float *cbuf;
  int64_t ccap;
} XfBf16Scratch;
enum { XF_BF16_CSCRATCH = 1 << 20 };
// What the CPU runtime allocates beside the memory plan for bf16 GEMMs
// (runtime.c; xfc --stats reports the same): per pool thread its staged
// panels and, where activations are stored in bf16, a C's float32 rows;
// with bf16 products, each parameter's bf16 copy of n elements, rounded up
// to the plan's 64 bytes.
static inline int64_t xf_bf16_thread_bytes(bool storage) {
  return XF_BF16_SCRATCH * (int64_t)sizeof(uint16_t) + (storage ? XF_BF16_CSCRATCH * (int64_t)sizeof(float) : 0);
}
static inline int64_t xf_bf16_copy_bytes(int64_t n) { return (2 * n + 63) / 64 * 64; }
// dst[i] = bf16(src[i]) for i < n, to nearest even (vcvtneps2bf16): what a
// product converts, for the owner of an XfBf16Copies. Only where
// xf_gemm_bf16_ready.
void xf_bf16_convert(uint16_t *dst, const float *src, int64_t n);
// Whether xf_sgemm_bf16 can run here; else why not (the runtime then runs
// float32 GEMMs and says so).
bool xf_gemm_bf16_ready(char *why, size_t len);
// C = alpha op(A) op(B) + beta C with operands of mixed storage (types:
// XF_GEMM_*_BF16 of runtime/xf_abi.h): bf16 operands are read as they are
// (s->products) or widened exactly to float32 panels; float32 operands are
// rounded to bf16 panels (s->products) or read as they are; a bf16 C gets
// the float32 result of each panel of its rows rounded to nearest even.
void xf_gemm_ex(XfBf16Scratch *s, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc, int types);
void xf_sgemm_bf16(XfBf16Scratch *s, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

#endif
