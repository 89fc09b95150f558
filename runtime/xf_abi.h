// xf_abi.h: the contract between a compiled model.so and the runtime.
//
// model.so exports one symbol, `xf_model`, of type XfModel: everything the
// runtime needs to know (configuration, parameters with their initialisers,
// the buffer size table) and the entry points of the three programs. The
// generated code calls nothing but libc/libm and the functions the runtime
// hands it in XfApi (BLAS, the thread pool). Bump XF_ABI_VERSION on any
// change to these structs or to the meaning of a field.
//
// Each struct is written once, as a field list XF_<S>_FIELDS(F, A, P): in
// order, F(P, TAG, name) a field of type tag TAG, A(P, TAG, name, N) an array
// of N of them; P is handed through unchanged. From the lists come the C
// typedefs, the field indices XF_<S>_F_<name> (XF_<S>_NFIELDS of them), the
// struct ids of XfAbiStruct, the layout checks at the end of this file, and
// in codegen/llvm.c the LLVM types of the structs (one LLVM type per tag)
// and the constants of the generated descriptor, addressed by field index.
#ifndef XF_ABI_H
#define XF_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define XF_ABI_VERSION 24u

struct XfApi;

// One kernel over the outer index range [lo, hi).
typedef void (*XfKernelFn)(void **bufs, int64_t B, int64_t T, uint64_t seed, uint32_t step, int64_t lo,
                           int64_t hi, const struct XfApi *api);
// Runs fn over [0, n) split across the pool; returns when all are done.
typedef void (*XfParallelForFn)(const struct XfApi *api, XfKernelFn fn, void **bufs, int64_t B, int64_t T,
                                uint64_t seed, uint32_t step, int64_t n);
// Row-major C = alpha op(A) op(B) + beta C, as cblas_sgemm.
typedef void (*XfSgemmFn)(const struct XfApi *api, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                          int64_t ldc);
// After kernel `kernel` (index in the global kernel order of
// XfBuffer.first/last) has finished.
// The same product with operands of mixed storage (Buffer.bf16 of
// codegen/kernel.h): bit XF_GEMM_A_BF16 of types set, A holds bf16 elements
// (2 bytes, the upper half of a float32), else float32; so B and C. The
// products read the bf16 operands as they are; a bf16 C is the float32 sum
// rounded to nearest even.
enum { XF_GEMM_A_BF16 = 1, XF_GEMM_B_BF16 = 2, XF_GEMM_C_BF16 = 4 };
// A bf16 element: the upper 16 bits of float32 x rounded to nearest, ties
// to even (adding 0x7fff plus the lowest kept bit carries into the kept
// bits exactly when the dropped ones exceed half an ulp, or equal it with
// the kept part odd; a carry out of the mantissa steps the exponent, up to
// infinity); a NaN stays a NaN, its quiet bit set. Widening is exact.
static inline uint16_t xf_bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float xf_bf16_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
typedef void (*XfGemmExFn)(const struct XfApi *api, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *c,
                           int64_t ldc, int32_t types);
typedef void (*XfKernelDoneFn)(const struct XfApi *api, int32_t kernel);
typedef void (*XfProgramFn)(const struct XfApi *api, void **bufs, int64_t B, int64_t T, uint64_t seed, uint32_t step);

// The type tags of the fields: T(TAG, C type). XfAbi_TAG is the C type,
// XF_TAG_TAG its XfAbiTag.
#define XF_ABI_TAGS(T)                                                                                           \
  T(I32, int32_t) T(U32, uint32_t) T(I64, int64_t) T(U64, uint64_t) T(F32, float) T(F64, double)                \
  T(PTR, void *)                             /* untyped storage or context */                                    \
  T(STR, const char *)                       /* NUL-terminated */                                                \
  T(P_STR, const char *const *)                                                                                  \
  T(P_I32, const int32_t *)                                                                                      \
  T(SYM, struct XfSym)                                                                                           \
  T(P_CONFIG, const struct XfConfigEntry *)                                                                      \
  T(P_BUFFER, const struct XfBuffer *)                                                                           \
  T(P_LAUNCH, const struct XfLaunch *)                                                                           \
  T(P_CUDA, const struct XfCuda *)                                                                               \
  T(FN_KERNEL, XfKernelFn) T(FN_PARALLEL_FOR, XfParallelForFn) T(FN_SGEMM, XfSgemmFn)                           \
  T(FN_GEMM_EX, XfGemmExFn) T(FN_KERNEL_DONE, XfKernelDoneFn) T(FN_PROGRAM, XfProgramFn)

#define XF_TAG_TYPEDEF(tag, ctype) typedef ctype XfAbi_##tag;
#define XF_TAG_ID(tag, ctype) XF_TAG_##tag,
XF_ABI_TAGS(XF_TAG_TYPEDEF)
typedef enum { XF_ABI_TAGS(XF_TAG_ID) XF_NTAGS } XfAbiTag;

// XF_BUF_TWIN: a parameter's bf16 copy that a device's products read (xfc
// --target=cuda --precision=bf16, codegen/storage.c), persistent, its
// parameter XfBuffer.twin_of; the device's AdamW rewrites it with the
// parameter, the runtime whenever it uploads the parameters.
enum { XF_BUF_PARAM, XF_BUF_GRAD, XF_BUF_INPUT, XF_BUF_ACT, XF_BUF_OUTPUT, XF_BUF_TWIN };
// Initialisers (xf_init_draw): normal(a, b), uniform(a, b), zeros, ones,
// constant(a), trunc_normal(a, b) (within a +- 2 b).
enum { XF_INIT_NORMAL = 1, XF_INIT_UNIFORM, XF_INIT_ZEROS, XF_INIT_ONES, XF_INIT_CONSTANT, XF_INIT_TRUNC_NORMAL };
// The programs: XfModel.programs holds the first three; the step program
// (incremental decoding) is XfModel.step on the CPU, XfCuda.launch[XF_PROG_STEP]
// on CUDA.
enum { XF_PROG_TRAIN, XF_PROG_EVAL, XF_PROG_SAMPLE, XF_PROG_STEP };

// XfApi: what the runtime hands the generated code.
#define XF_API_FIELDS(F, A, P)                                                                                   \
  F(P, PTR, ctx)                                                                                                 \
  F(P, FN_PARALLEL_FOR, parallel_for)                                                                            \
  F(P, FN_SGEMM, sgemm)                                                                                          \
  F(P, FN_GEMM_EX, gemm_ex)  /* products with bf16 operands (XfBuffer.bf16) */                                  \
  /* Optional (NULL: not called). The runtime's debug mode poisons the storage                                   \
     of the buffers that die at the kernel. */                                                                   \
  F(P, FN_KERNEL_DONE, kernel_done)                                                                              \
  /* The step program's window: positions [win_lo, win_hi) are computed,                                         \
     earlier ones are in the buffers from earlier calls (XfModel.step). */                                       \
  F(P, I64, win_lo)                                                                                              \
  F(P, I64, win_hi)                                                                                              \
  /* The position the next run of the step program starts from (w0 < keep                                       \
     <= win_hi): a scan keeps its state h_{keep-1} (loops.h LX_WIN); 0: none */                                  \
  F(P, I64, win_keep)                                                                                            \
  /* Data-parallel training: the global batch row of local row 0, so that                                        \
     dropout draws from the global element index (the same masks as one                                          \
     process over the whole batch). 0 in a single process. */                                                    \
  F(P, I64, row0)                                                                                                \
  /* The position of row 0 along the time axis (loops.h LX_POS0): the first                                      \
     of the step program's frame (XfModel.step_frame), 0 otherwise */                                            \
  F(P, I64, pos0)

// XfConfigEntry: one configuration value of the model.
#define XF_CONFIG_ENTRY_FIELDS(F, A, P)                                                                          \
  F(P, STR, name)                                                                                                \
  F(P, I32, is_float)                                                                                            \
  F(P, F64, value)

// XfBuffer: elements of a buffer: coef * B^pow_b * T^pow_t / tdiv (tdiv > 1:
// it has time axes T / s, T a multiple of XfModel.t_multiple).
#define XF_BUFFER_FIELDS(F, A, P)                                                                                \
  F(P, STR, name)      /* params, grads (grad.<param>), inputs, outputs; "" for scratch */                       \
  F(P, I32, role)      /* XF_BUF_* */                                                                            \
  F(P, I32, is_int)    /* token ids (int32) rather than float */                                                 \
  F(P, I32, bf16)      /* stored as bf16, 2 bytes per element (xfc --precision=bf16): activations, twins */     \
  F(P, I32, twin_of)   /* XF_BUF_TWIN: the parameter it copies; else -1 */                                      \
  F(P, I64, coef)                                                                                                \
  F(P, I32, pow_b)                                                                                               \
  F(P, I32, pow_t)                                                                                               \
  F(P, I64, tdiv)      /* 0 or 1: none */                                                                        \
  F(P, I32, alias_of)  /* >= 0: shares that buffer's storage */                                                  \
  F(P, I32, rank)                                                                                                \
  A(P, I64, dims, 6)   /* 0 = B, -1 = T, -s = T / s, else the size */                                                        \
  F(P, I32, init)      /* params: XF_INIT_* */                                                                   \
  F(P, F64, init_a)                                                                                              \
  F(P, F64, init_b)                                                                                              \
  /* Lifetime in the global kernel order, inclusive: the kernels that first                                      \
     write and last read it (storage roots only; -1, -1 if no kernel touches                                     \
     it; outputs: last = nkernels). Every program runs a subsequence of that                                     \
     order, so buffers of disjoint lifetimes may share storage. */                                               \
  F(P, I32, first)                                                                                               \
  F(P, I32, last)

// ---- the CUDA target (xfc --target=cuda, codegen/cuda.c) -----------------------
// A model.so compiled for CUDA carries, beside its CPU code, the CUDA C source
// of its kernels, the PTX NVRTC made of it, and per program a table of
// launches that the runtime walks (runtime/cuda_host.c): a generated kernel,
// or a strided-batched GEMM (cuBLAS on a device).

// Operand slots of a kernel (codegen/kernel.h: KS_OUT, KS_IN0.., KS_SCRATCH,
// KS_OUT1..: the parts of a split output, or a chunked convolution's scratch;
// KS_STAGE: a GPU product's bf16 copy of an operand).
#define XF_NSLOTS 13

// XfKernelArgs: the one argument of every generated kernel, passed by value.
// The generated source declares the same struct from this list (codegen/cuda.c,
// with its own names for the integer types, since NVRTC has no <stdint.h>).
#define XF_KERNEL_ARGS_FIELDS(F, A, P)                                                                           \
  A(P, PTR, slot, XF_NSLOTS)  /* storage of each operand (NULL: none) */                                         \
  F(P, I64, B)                /* the step's batch and sequence length */                                         \
  F(P, I64, T)                                                                                                   \
  F(P, I64, n)                /* work items: elements, rows or sequences */                                      \
  F(P, U64, seed)             /* dropout: seed and mask stream (the step: vars) */                               \
  F(P, U32, imm)                                                                                                 \
  /* Device storage of the XfStepVars of the launch: what changes from step                                      \
     to step is read there, never passed by value, so that a captured graph                                      \
     of launches replays every step unchanged (runtime.c: the host updates it                                    \
     before each program). */                                                                                    \
  F(P, PTR, vars)                                                                                                \
  /* The step program's window (XfLaunch.win_*): work item i is item                                             \
     (i / wspan) wblock + wofs + i % wspan of the whole launch; wspan 0: item i */                               \
  F(P, I64, wspan)                                                                                               \
  F(P, I64, wblock)                                                                                              \
  F(P, I64, wofs)                                                                                                \
  /* The positions [w0, w1) the step program computes; 0 and T in the other                                     \
     programs (read by kernels that window their own body: loops.h LX_WIN) */                                    \
  F(P, I64, w0)                                                                                                  \
  F(P, I64, w1)                                                                                                  \
  /* The step program's keep position (XfApi.win_keep); 0 in the others */                                       \
  F(P, I64, wk)                                                                                                  \
  /* The position of row 0 along time (XfApi.pos0): the step program's                                           \
     frame's first; 0 in the others */                                                                           \
  F(P, I64, p0)                                                                                                  \
  /* The team GEMMs' arithmetic (xf_team_gemm, codegen/cuda.c): XF_MMA_* of                                    \
     XfCuda.precision (xf_team_mma) */                                                                         \
  F(P, U32, mma)

// XfStepVars: the values of a CUDA launch that change from step to step, in
// device memory (XfKernelArgs.vars). step: the steps taken, counting the
// current one (dropout's Philox counter, AdamW's bias correction); row0: the
// global batch row of local row 0 (XfApi.row0: dropout's element indices;
// it changes per micro-batch). A step of
// XfOptions.accum = N runs the training program once per micro-batch, micro
// = 0 .. N - 1 (accum = N): the optimizer kernels (XfCuda.grad_accum,
// grad_norm, grad_norm_sum, adamw) read them; those after the sums act only
// when micro + 1 >= accum (so zeroed vars, and N = 1, always update).
#define XF_STEP_VARS_FIELDS(F, A, P)                                                                             \
  F(P, U32, step)                                                                                                \
  F(P, U32, micro)                                                                                               \
  F(P, U32, accum)                                                                                               \
  F(P, I64, row0)

// XfAdamSeg: one parameter tensor of the device's AdamW launch (one launch
// for all of them: XfCuda.adamw over a table of segments). Its elements are
// cut into chunks of XF_ADAM_CHUNK, one work item each; block0 is the
// segment's first chunk in the launch, ascending over the table. The
// gradient-sum and norm kernels walk the same table and chunks.
#define XF_ADAM_SEG_FIELDS(F, A, P)                                                                              \
  F(P, PTR, w)                                                                                                   \
  F(P, PTR, m)                                                                                                   \
  F(P, PTR, v)                                                                                                   \
  F(P, PTR, g)                                                                                                   \
  F(P, PTR, s)         /* the micro-batches' gradient sum (XfOptions.accum > 1), else NULL */                    \
  F(P, PTR, h)         /* the parameter's bf16 twin (XF_BUF_TWIN), rewritten with w; else NULL */            \
  F(P, I64, n)                                                                                                   \
  F(P, I64, block0)                                                                                              \
  F(P, I32, decay)     /* 1: weight decay applies (runtime.c decays) */
enum { XF_ADAM_CHUNK = 4096, XF_OPT_THREADS = 256 };
// The AdamW update of one element as the generated code computes it
// (codegen/lower_optim.c, the one description both backends print: the CPU's
// XfModel.adamw over elements [lo, hi) of one parameter, the device's
// XfCuda.adamw over the segments): its operand slots (w, m, v updated in
// place, g read) and the step's constants, floats in the array of slot
// XF_ADAM_SLOT_STATE.
// XF_ADAM_SLOT_H: the parameter's bf16 twin, written from the updated w by
// the device's AdamW (lower_optim.c lower_adamw with a twin).
enum { XF_ADAM_SLOT_W, XF_ADAM_SLOT_G, XF_ADAM_SLOT_STATE, XF_ADAM_SLOT_M, XF_ADAM_SLOT_V, XF_ADAM_SLOT_H, XF_ADAM_NSLOTS };
enum {
  XF_ADAM_BC1,       // 1 - beta1^t
  XF_ADAM_SQRT_BC2,  // sqrt(1 - beta2^t)
  XF_ADAM_LR, XF_ADAM_B1, XF_ADAM_B2, XF_ADAM_EPS,
  XF_ADAM_DECAY,     // 1 - lr weight_decay, or 1 for a parameter without decay
  XF_ADAM_SCALE,     // the gradients' clipping factor
  XF_ADAM_NSTATE
};  // XF_OPT_THREADS: a block of each optimizer kernel, a power of 2
// The optimizer's doubles in device memory (slot 1 of its kernels): AdamW's
// hyper-parameters, the clip norm (0: none), and what xf_grad_norm_sum
// writes: the gradients' global L2 norm and the factor AdamW scales them by,
// min(1, clip / (norm + 1e-6)) when clipping, else 1.
enum { XF_HP_LR, XF_HP_BETA1, XF_HP_BETA2, XF_HP_EPS, XF_HP_DECAY, XF_HP_CLIP, XF_HP_NORM, XF_HP_SCALE, XF_NHP };

// XfSym: coef * B^pb * T^pt / tdiv at the step's B and T (tdiv 0 or 1: none)
#define XF_SYM_FIELDS(F, A, P)                                                                                   \
  F(P, I64, coef)                                                                                                \
  F(P, I32, pb)                                                                                                  \
  F(P, I32, pt)                                                                                                  \
  F(P, I64, tdiv)

enum { XF_LAUNCH_KERNEL = 1, XF_LAUNCH_GEMM };
// The GEMMs of the CUDA code (the records of XF_LAUNCH_GEMM), float32
// storage and float32 sums in every case; the products: float32 (FP32, the
// oracle), TF32 tensor-core products (10-bit mantissas), or bf16
// tensor-core products (each operand element rounded to bf16, 7-bit
// mantissas). Values are stored in model.so: append only.
enum { XF_PRECISION_FP32, XF_PRECISION_TF32, XF_PRECISION_BF16, XF_NPRECISIONS };
// The team GEMMs of the CUDA code (xf_team_gemm, XfKernelArgs.mma): float32
// FMAs, TF32 tensor-core products (mma.m16n8k8), or bf16 ones (mma.m16n8k16,
// operands rounded to nearest even as the CPU's bf16 products round them).
enum { XF_MMA_NONE, XF_MMA_TF32, XF_MMA_BF16 };
static inline uint32_t xf_team_mma(int precision) {
  return precision == XF_PRECISION_BF16 ? XF_MMA_BF16 : precision == XF_PRECISION_TF32 ? XF_MMA_TF32 : XF_MMA_NONE;
}
// A warp's tile of a tensor-core team GEMM (xf_team_gemm, codegen/cuda.c):
// 1 x XF_TEAM_TILE_N(kind) mma tiles of 16 x 8 entries of C, per k step A's
// fragment read and converted once for that many products. kind =
// XF_TEAM_TILE_EXPR of C's tm x tn mma tiles and the team's nw warps: the
// widest of 4, 2 and 1 tiles that still gives every warp a tile. The
// generated code's xf_team_tile is this expression, printed (XF_STR); the
// cost model calls xf_team_tile.
#define XF_TEAM_TILE_EXPR ((tn) >= 4 && (tm) * (((tn) + 3) / 4) >= (nw) ? 2 : (tn) >= 2 && (tm) * (((tn) + 1) / 2) >= (nw) ? 1 : 0)
#define XF_TEAM_TILE_N(kind) ((kind) == 2 ? 4 : (kind) == 1 ? 2 : 1)
static inline int xf_team_tile(int64_t tm, int64_t tn, int64_t nw) { return XF_TEAM_TILE_EXPR; }
#define XF_STR_(x) #x
#define XF_STR(x) XF_STR_(x)
// How xfrun names a precision ("GEMMs in %s").
static inline const char *xf_precision_name(int32_t p) {
  return p == XF_PRECISION_TF32 ? "TF32" : p == XF_PRECISION_BF16 ? "bf16 (float32 sums)" : "float32";
}

// XfLaunch: one launch of a program's table.
#define XF_LAUNCH_FIELDS(F, A, P)                                                                                \
  F(P, I32, kind)              /* XF_LAUNCH_* */                                                                 \
  F(P, I32, kernel)            /* its kernel in the global order (XfBuffer.first/last) */                        \
  F(P, I32, last)              /* 1: the last launch of that kernel (kernel_done after it) */                    \
  A(P, I32, slots, XF_NSLOTS)  /* buffer (storage root) of each slot, -1: none */                                \
  F(P, U32, imm)               /* KS_IMM: the dropout mask stream */                                             \
  /* XF_LAUNCH_KERNEL: function fn of XfCuda.names over `items` work items,                                      \
     `per_block` items per block of `threads` threads, `shmem` bytes of                                          \
     dynamic shared memory; the kernels loop grid-stride over the items, so                                      \
     any grid computes the same values. sync: the kernel synchronises its                                        \
     block (__syncthreads, warp shuffles). */                                                                    \
  F(P, I32, fn)                                                                                                  \
  F(P, SYM, items)                                                                                               \
  F(P, I32, per_block)                                                                                           \
  F(P, I32, threads)                                                                                             \
  F(P, I32, shmem)                                                                                               \
  F(P, I32, sync)                                                                                                \
  /* XF_LAUNCH_GEMM, row-major, for i < count:                                                                   \
       C_i = alpha op(A_i) op(B_i) + beta C_i,  X_i = slot sX + i * stride_X */                                  \
  F(P, I32, ta)                                                                                                  \
  F(P, I32, tb)                                                                                                  \
  F(P, I32, sa)                                                                                                  \
  F(P, I32, sb)                                                                                                  \
  F(P, I32, sc)                                                                                                  \
  F(P, SYM, m)                                                                                                   \
  F(P, SYM, n)                                                                                                   \
  F(P, SYM, k)                                                                                                   \
  F(P, SYM, lda)                                                                                                 \
  F(P, SYM, ldb)                                                                                                 \
  F(P, SYM, ldc)                                                                                                 \
  F(P, SYM, stride_a)                                                                                            \
  F(P, SYM, stride_b)                                                                                            \
  F(P, SYM, stride_c)                                                                                            \
  F(P, SYM, count)                                                                                               \
  F(P, F32, alpha)                                                                                               \
  F(P, F32, beta)                                                                                                \
  F(P, I32, types)             /* XF_GEMM_*_BF16: which of A, B, C hold bf16 elements */                          \
  /* The step program (launch[XF_PROG_STEP]), positions [w0, w1) computed                                        \
     (codegen/loops.h lower_window); win_extent.coef 0: the whole launch.                                        \
     XF_LAUNCH_KERNEL: of every block of win_extent * win_stride items, the                                      \
     items t win_stride + r, t in [w0, w1). XF_LAUNCH_GEMM: the rows of A and C                                  \
     are positions, m = win_extent of them: rows [w0, w1) of each product. */                                    \
  F(P, SYM, win_stride)                                                                                          \
  F(P, SYM, win_extent)

// XfCuda: the CUDA code of a model.so.
#define XF_CUDA_FIELDS(F, A, P)                                                                                  \
  F(P, STR, source)             /* the CUDA C source NVRTC compiled */                                           \
  F(P, STR, ptx)                /* its PTX, NUL-terminated */                                                    \
  F(P, STR, arch)               /* the virtual architecture, e.g. "compute_80" */                                \
  /* SASS (a CUBIN from NVRTC) of the same source for real architectures                                         \
     sass_sm[i] (80: sm_80), sass_size[i] bytes; size 0: none. The runtime                                       \
     loads the one a device runs natively, else the PTX (the driver's JIT). */                                   \
  A(P, PTR, sass, 2)                                                                                             \
  A(P, I64, sass_size, 2)                                                                                        \
  A(P, I32, sass_sm, 2)                                                                                          \
  F(P, I32, nnames)                                                                                              \
  F(P, P_STR, names)            /* kernel entry points (extern "C") */                                           \
  A(P, I32, nlaunch, 4)         /* XF_PROG_*, the step program's too (empty: none) */                            \
  A(P, P_LAUNCH, launch, 4)                                                                                      \
  F(P, I32, precision)          /* the GEMMs' arithmetic: XF_PRECISION_*                                         \
                                   (xfc --precision) */                                                        \
  /* The optimizer's kernels, each over the XfAdamSeg table (slot 0) and the                                    \
     XF_HP_* doubles (slot 1), imm the segments, n the chunks of all of them,                                    \
     a block of 256 threads per chunk (grid-stride), in this order per                                           \
     training program: grad_accum (XfOptions.accum > 1: s = g at micro 0,                                        \
     s += g, g = (s + g) / N at the last), grad_norm (per chunk, its sum of                                      \
     g^2 in double into slot 2 [n]), grad_norm_sum (one block: the norm and                                      \
     the scale from slot 2), adamw (w, m, v from g times the scale). */                                          \
  F(P, I32, adamw)                                                                                               \
  F(P, I32, grad_accum)                                                                                          \
  F(P, I32, grad_norm)                                                                                           \
  F(P, I32, grad_norm_sum)

// XfModel: the exported descriptor `xf_model`.
#define XF_MODEL_FIELDS(F, A, P)                                                                                 \
  F(P, U32, abi_version)                                                                                         \
  F(P, STR, name)                                                                                                \
  F(P, I64, context)            /* T <= context */                                                               \
  F(P, I32, nconfig)                                                                                             \
  F(P, P_CONFIG, config)                                                                                         \
  F(P, I32, nbuffers)                                                                                            \
  F(P, P_BUFFER, buffers)                                                                                        \
  A(P, FN_PROGRAM, programs, 3) /* XF_PROG_* */                                                                  \
  F(P, I32, nkernels)                                                                                            \
  /* nkernels names in the global order, "k<class> <op>[ fused=<kind>] <file>:<line>"                           \
     (xfc --emit=schedule's class and op): what xfrun's --profile groups by */                                   \
  F(P, P_STR, kernel_labels)                                                                                     \
  F(P, P_CUDA, cuda)            /* NULL: CPU code only */                                                        \
  F(P, FN_KERNEL, adamw)        /* the AdamW update (XF_ADAM_SLOT_*), elements [lo, hi) of one parameter */      \
  F(P, FN_KERNEL, adamw_twin)   /* the same, also writing bf16(w) to slot XF_ADAM_SLOT_H (the runtime's bf16  \
                                   copy of the parameter, xfc --precision=bf16); NULL: none */                     \
  /* The incremental decoder (xfc's causal.c, llvm.c): the sampling program                                      \
     over buffers laid out at T = context that keep every earlier position,                                      \
     computing only positions [api->win_lo, api->win_hi) (run it with T =                                        \
     context, or T = step_frame: see there). NULL when the logits are not provably causal; step_note says                                      \
     which op and where. step_bufs: the storage roots it touches (beside the                                     \
     parameters); step_cache[i] 1: a cache, read outside a later run's window                                    \
     (storage of its own, kept between runs), 0: workspace, written before                                      \
     it is read in every run, live over kernels [step_first[i],                                                  \
     step_last[i]] of the global order (codegen/stepmem.c), planned together. */                                 \
  F(P, FN_PROGRAM, step)                                                                                         \
  F(P, STR, step_note)                                                                                           \
  F(P, I32, nstep_bufs)                                                                                          \
  F(P, P_I32, step_bufs)                                                                                         \
  F(P, P_I32, step_cache)                                                                                        \
  F(P, P_I32, step_first)                                                                                        \
  F(P, P_I32, step_last)                                                                                         \
  /* > 0: the step program runs in a frame of step_frame positions (codegen/                                     \
     loops.h step_frame): one position a run, with T = step_frame, XfApi.pos0                                    \
     the frame's first position, the caches moved along after each run; 0:                                       \
     buffers at T = context */                                                                                   \
  F(P, I64, step_frame)                                                                                          \
  /* T a multiple of it in every program (a time axis T / s: ir_t_multiple) */                                  \
  F(P, I64, t_multiple)                                                                                          \
  /* training (forward + backward) operations per token at T = context, as                                      \
     xfc --stats counts them (its stats.c): model FLOP/s = train_ops x tokens/s */                              \
  F(P, F64, train_ops)                                                                                           \
  /* xfc --precision (XF_PRECISION_*): on the CPU, bf16 means every GEMM's                                      \
     operands rounded to bf16 with float32 sums and storage (gemm.h                                              \
     xf_sgemm_bf16), tf32 and fp32 float32 GEMMs; XfCuda.precision the same */                                  \
  F(P, I32, precision)

// Every struct of the ABI, S(C type, prefix of its field list), each after
// the structs its fields hold by value.
#define XF_ABI_STRUCTS(S)                                                                                        \
  S(XfApi, XF_API) S(XfConfigEntry, XF_CONFIG_ENTRY) S(XfBuffer, XF_BUFFER) S(XfKernelArgs, XF_KERNEL_ARGS)      \
  S(XfSym, XF_SYM) S(XfLaunch, XF_LAUNCH) S(XfCuda, XF_CUDA) S(XfModel, XF_MODEL) S(XfAdamSeg, XF_ADAM_SEG)      \
  S(XfStepVars, XF_STEP_VARS)

#define XF_C_FIELD(P, tag, name) XfAbi_##tag name;
#define XF_C_ARRAY(P, tag, name, n) XfAbi_##tag name[n];
#define XF_FIELD_ID(P, tag, name) P##_F_##name,
#define XF_ARRAY_ID(P, tag, name, n) P##_F_##name,
#define XF_STRUCT_ID(T, P) P,
#define XF_STRUCT_TYPEDEF(T, P)                                                                                  \
  typedef struct T { P##_FIELDS(XF_C_FIELD, XF_C_ARRAY, P) } T;                                                  \
  enum { P##_FIELDS(XF_FIELD_ID, XF_ARRAY_ID, P) P##_NFIELDS };

typedef enum { XF_ABI_STRUCTS(XF_STRUCT_ID) XF_NSTRUCTS } XfAbiStruct;
XF_ABI_STRUCTS(XF_STRUCT_TYPEDEF)

// The layout the field list implies, checked against the C compiler's: each
// field at the first offset aligned for its tag after the end of the field
// before it, and the size the end of the last field rounded up to the
// struct's alignment. That is the layout LLVM gives the same list (llvm.c
// checks its types against the target's data layout). XF_LAYOUT_NEXT closes
// the assertion the field before it opened, on the end of that field.
#define XF_LAYOUT_NEXT(T, tag, name, n)                                                                          \
  _Alignof(XfAbi_##tag) - 1) / _Alignof(XfAbi_##tag) * _Alignof(XfAbi_##tag) == offsetof(T, name),              \
      #T "." #name ": not where the field list puts it");                                                        \
  _Static_assert((offsetof(T, name) + sizeof(XfAbi_##tag) * (n) +
#define XF_LAYOUT_FIELD(T, tag, name) XF_LAYOUT_NEXT(T, tag, name, 1)
#define XF_LAYOUT_ARRAY(T, tag, name, n) XF_LAYOUT_NEXT(T, tag, name, n)
#define XF_LAYOUT(T, P)                                                                                          \
  _Static_assert((0 + P##_FIELDS(XF_LAYOUT_FIELD, XF_LAYOUT_ARRAY, T) _Alignof(T) - 1) / _Alignof(T) *           \
                     _Alignof(T) == sizeof(T),                                                                   \
                 #T ": not the size the field list implies");

XF_ABI_STRUCTS(XF_LAYOUT)

#endif
