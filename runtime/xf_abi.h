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

#define XF_ABI_VERSION 5u

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
  // The step program's window: positions [win_lo, win_hi) are computed,
  // earlier ones are in the buffers from earlier calls (XfModel.step).
  int64_t win_lo, win_hi;
  // Data-parallel training: the global batch row of local row 0, so that
  // dropout draws from the global element index (the same masks as one
  // process over the whole batch). 0 in a single process.
  int64_t row0;
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

// ---- the CUDA target (xfc --target=cuda, codegen/cuda.c) -----------------------
// A model.so compiled for CUDA carries, beside its CPU code, the CUDA C source
// of its kernels, the PTX NVRTC made of it, and per program a table of
// launches that the runtime walks (runtime/cuda_host.c): a generated kernel,
// or a strided-batched GEMM (cuBLAS on a device).

// Operand slots of a kernel (codegen/kernel.h: KS_OUT, KS_IN0.., KS_SCRATCH).
#define XF_NSLOTS 10

// The one argument of every generated kernel, passed by value. The generated
// source declares the same struct from XF_KERNEL_ARGS_FIELDS (with its own
// names for the integer types, since NVRTC has no <stdint.h>).
#define XF_KERNEL_ARGS_FIELDS(I64, U64, U32) \
  void *slot[XF_NSLOTS];   /* storage of each operand (NULL: none) */      \
  I64 B, T;                /* the step's batch and sequence length */      \
  I64 n;                   /* work items: elements, rows or sequences */    \
  I64 row0;                /* global batch row of local row 0 (XfApi.row0) */ \
  U64 seed;                /* dropout: seed, mask stream, step */           \
  U32 imm, step;
typedef struct {
  XF_KERNEL_ARGS_FIELDS(int64_t, uint64_t, uint32_t)
} XfKernelArgs;

// coef * B^pb * T^pt at the step's B and T
typedef struct {
  int64_t coef;
  int32_t pb, pt;
} XfSym;

enum { XF_LAUNCH_KERNEL = 1, XF_LAUNCH_GEMM };

typedef struct {
  int32_t kind;          // XF_LAUNCH_*
  int32_t kernel;        // its kernel in the global order (XfBuffer.first/last)
  int32_t last;          // 1: the last launch of that kernel (kernel_done after it)
  int32_t slots[XF_NSLOTS];  // buffer (storage root) of each slot, -1: none
  uint32_t imm;          // KS_IMM: the dropout mask stream
  // XF_LAUNCH_KERNEL: function fn of XfCuda.names over `items` work items,
  // `per_block` items per block of `threads` threads, `shmem` bytes of
  // dynamic shared memory; the kernels loop grid-stride over the items, so
  // any grid computes the same values. sync: the kernel synchronises its
  // block (__syncthreads, warp shuffles).
  int32_t fn;
  XfSym items;
  int32_t per_block, threads, shmem, sync;
  // XF_LAUNCH_GEMM, row-major, for i < count:
  //   C_i = alpha op(A_i) op(B_i) + beta C_i,  X_i = slot sX + i * stride_X
  int32_t ta, tb, sa, sb, sc;
  XfSym m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, count;
  float alpha, beta;
} XfLaunch;

typedef struct {
  const char *source;    // the CUDA C source NVRTC compiled
  const char *ptx;       // its PTX, NUL-terminated
  const char *arch;      // the virtual architecture, e.g. "compute_80"
  int32_t nnames;
  const char *const *names;  // kernel entry points (extern "C")
  int32_t nlaunch[3];        // XF_PROG_*
  const XfLaunch *launch[3];
  int32_t adamw;             // the AdamW kernel: names[adamw], slots w, m, v, g
} XfCuda;

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
  const XfCuda *cuda;       // NULL: CPU code only
  // The incremental decoder (passes/causal.c, llvm.c): the sampling program
  // over buffers laid out at T = context that keep every earlier position,
  // computing only positions [api->win_lo, api->win_hi) (run it with T =
  // context). NULL when the logits are not provably causal; step_note says
  // which op and where. step_bufs: the storage roots it touches (beside the
  // parameters), each needing storage of its own.
  XfProgramFn step;
  const char *step_note;
  int32_t nstep_bufs;
  const int32_t *step_bufs;
} XfModel;

#endif
