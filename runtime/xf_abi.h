// xf_abi.h: the contract between a compiled model.so and the runtime.
//
// model.so exports one symbol, `xf_model`, of type XfModel: everything the
// runtime needs to know (configuration, parameters with their initialisers,
// the buffer size table) and the entry points of the three programs. The
// generated code calls nothing but libc/libm and the functions the runtime
// hands it in XfApi (BLAS, the thread pool). Bump XF_ABI_VERSION on any
// change to these structs or to the meaning of a field.
#ifndef XF_ABI_H
#define XF_ABI_H

#include <stdint.h>

#define XF_ABI_VERSION 2u

struct XfApi;

// One kernel over the outer index range [lo, hi).
typedef void (*XfKernelFn)(void **bufs, int64_t B, int64_t T, uint64_t seed, uint32_t step, int64_t lo,
                           int64_t hi, const struct XfApi *api);

typedef struct XfApi {
  void *ctx;
  // Runs fn over [0, n) split across the pool; returns when all are done.
  void (*parallel_for)(const struct XfApi *api, XfKernelFn fn, void **bufs, int64_t B, int64_t T, uint64_t seed,
                       uint32_t step, int64_t n);
  // Row-major C = alpha op(A) op(B) + beta C, as cblas_sgemm.
  void (*sgemm)(const struct XfApi *api, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
  // Optional (NULL: not called): after kernel `kernel` (index in the global
  // kernel order of XfBuffer.first/last) has finished. The runtime's debug
  // mode poisons the storage of the buffers that die there.
  void (*kernel_done)(const struct XfApi *api, int32_t kernel);
} XfApi;

typedef void (*XfProgramFn)(const XfApi *api, void **bufs, int64_t B, int64_t T, uint64_t seed, uint32_t step);

enum { XF_BUF_PARAM, XF_BUF_GRAD, XF_BUF_INPUT, XF_BUF_ACT, XF_BUF_OUTPUT };
enum { XF_INIT_NORMAL = 1, XF_INIT_UNIFORM, XF_INIT_ZEROS, XF_INIT_ONES };
enum { XF_PROG_TRAIN, XF_PROG_EVAL, XF_PROG_SAMPLE };

typedef struct {
  const char *name;
  int32_t is_float;
  double value;
} XfConfigEntry;

// Elements of a buffer: coef * B^pow_b * T^pow_t.
typedef struct {
  const char *name;   // params, grads (grad.<param>), inputs, outputs; "" for scratch
  int32_t role;       // XF_BUF_*
  int32_t is_int;     // token ids (int32) rather than float
  int64_t coef;
  int32_t pow_b, pow_t;
  int32_t alias_of;   // >= 0: shares that buffer's storage
  int32_t rank;
  int64_t dims[6];    // 0 = B, -1 = T, else the size
  int32_t init;       // params: XF_INIT_*
  double init_a, init_b;
  // Lifetime in the global kernel order, inclusive: the kernels that first
  // write and last read it (storage roots only; -1, -1 if no kernel touches
  // it; outputs: last = nkernels). Every program runs a subsequence of that
  // order, so buffers of disjoint lifetimes may share storage.
  int32_t first, last;
} XfBuffer;

typedef struct {
  uint32_t abi_version;
  const char *name;
  int64_t context;    // T <= context
  int32_t nconfig;
  const XfConfigEntry *config;
  int32_t nbuffers;
  const XfBuffer *buffers;
  XfProgramFn programs[3];  // XF_PROG_*
  int32_t nkernels;
} XfModel;

#endif
