// runtime_impl.h: what the files of the runtime share (runtime.c, pool.c,
// sampler.c): the runtime's state (struct XfRuntime), the thread pool, and
// the few internal functions one file calls in another. Not a public
// interface: xf.h is.
#ifndef XF_RUNTIME_IMPL_H
#define XF_RUNTIME_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gemm.h"
#include "gpu.h"
#include "xf.h"

#define fail xf_errorf

// ---- the thread pool (pool.c) ----------------------------------------------------
// parallel_for hands [0, n) to the workers in contiguous chunks, the calling
// thread taking the first one; it returns when every chunk is done.
//
// A step runs hundreds of kernels of a few microseconds each (decoding one
// token: about 15 per layer), so waking a sleeping thread per kernel (a futex
// wake and a context switch, 10-50 us) would cost more than the kernels.
// Workers and the caller therefore spin on the job counter for up to
// SPIN_NS before sleeping on the condition variables; a job is published by
// the generation counter (release) after its fields, and a worker reads them
// after seeing it (acquire). The caller waits for every worker before the
// next job, so a job's fields are never rewritten while read.

enum { SPIN_NS = 50000 };
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  int nthreads;
  pthread_t *threads;
  _Atomic uint64_t generation;
  _Atomic int pending;
  _Atomic bool quit;
  // the current job
  XfKernelFn fn;
  void **bufs;
  int64_t B, T, n;
  uint64_t seed;
  uint32_t step;
  const XfApi *api;
  struct XfRuntime *rt;
} Pool;

// Starts nthreads - 1 workers (the caller is the first); false if one fails.
bool xf_pool_start(Pool *p, int nthreads);
void xf_pool_stop(Pool *p);
// XfApi.parallel_for: fn over [0, n) in contiguous chunks, api->ctx a Pool.
void xf_pool_for(const XfApi *api, XfKernelFn fn, void **bufs, int64_t B, int64_t T, uint64_t seed, uint32_t step, int64_t n);
// The calling thread's index in the pool it works for: 0..nthreads - 1 (0:
// the thread that calls xf_pool_for).
int xf_pool_index(void);
// CLOCK_MONOTONIC in nanoseconds.
int64_t xf_now_ns(void);

// ---- the runtime (runtime.c) ------------------------------------------------------

struct XfRuntime;
// The parameters' bf16 copies made current (XfRuntime.copies); nothing
// without bf16 products or when they are current. Called before every CPU
// program runs (runtime.c, sampler.c).
void xf_bf16_current(struct XfRuntime *rt);

enum { PIN_NORM = 32 };  // the pinned staging's gradient norm (a double), after the XfStepVars
_Static_assert(sizeof(XfStepVars) <= PIN_NORM && PIN_NORM + sizeof(double) <= 64, "the pinned staging's first 64 bytes");

struct XfRuntime {
  void *lib;
  const XfModel *m;
  XfOptions opt;
  Pool pool;
  XfApi api;
  // xfc --precision=bf16 on the CPU: one scratch per pool thread for the
  // GEMMs' bf16 operands (gemm.h), allocated by xf_allocate; NULL: float32
  // GEMMs. gemms: what the CPU's GEMMs compute (xf_cpu_gemms).
  XfBf16Scratch *bf16;
  // with bf16: the parameters' bf16 copies, which the products read in
  // place of converting them (gemm.h XfBf16Copies); stale after anything
  // that may write a parameter (AdamW, xf_param, xf_init_params), made
  // current by xf_bf16_current before a program runs
  XfBf16Copies copies;
  uint16_t *copy_mem;
  size_t copy_bytes;
  bool copies_stale;
  char gemms[256];
  void **bufs;       // per buffer, aliases resolved
  int64_t *numel;    // per buffer
  int64_t step_b, step_t;  // B and T of the training and eval steps (xf_set_shape)
  int *params;       // buffer index of each parameter
  int *grads;        // buffer index of each parameter's gradient (-1 if none)
  float **adam_m, **adam_v;
  float **acc;       // XfOptions.accum > 1: per parameter, the sum of the step's micro-batches' gradients
  int micro;         // micro-batches of the current step done (< accum)
  float acc_loss;    // the sum of their losses
  double lr_now;     // the learning rate of the next AdamW update (xf_set_lr)
  double grad_norm;  // the last step's global gradient norm (NaN: none)
  int nparams;
  int tokens, targets, loss, logits;  // buffer indices (-1 if absent)
  uint32_t step;
  size_t bytes;
  size_t *offset;    // per storage root: its byte offset in arena (load_descriptor)
  void *arena;       // NULL until xf_allocate
  // XF_DEBUG_POISON=1: after kernel k, NaN fills the storage of every planned
  // buffer whose lifetime ends at k (dead[dead_at[k] .. dead_at[k+1]))
  int *dead_at, *dead;
  // the CUDA device (NULL: the CPU). dbufs[i]: buffer i's device storage, at
  // the offset of bufs[i] in arena from darena; the host arena keeps the
  // persistent buffers and moments as a mirror: host_dirty, the host copy
  // was written (upload before the next launch); dev_newer, the device's is
  // newer (download before the host reads).
  XfGpu *gpu;
  char *darena;
  void **dbufs;
  double *dhyper;    // the optimizer's XF_HP_* doubles (xf_abi.h), after the mirror
  XfAdamSeg *dsegs;  // the device's optimizer table (XfAdamSeg), after dhyper
  XfStepVars *dvars; // what the kernels read of the step (XfKernelArgs.vars), after dsegs
  double *dpart;     // [nchunks]: the gradient norm's partial sums, after dvars
  int nsegs;
  int64_t nchunks;   // XF_ADAM_CHUNK chunks of all segments
  size_t persist;    // bytes of [0, persist): params, gradients, inputs
  size_t moments_at; // moments from here to accum_at; [persist, moments_at): activations and outputs
  size_t accum_at;   // the gradient sums (XfOptions.accum > 1) from here to bytes
  bool host_dirty, dev_newer;
  // Pinned staging of a step's copies (XfGpu.host_alloc): the XfStepVars at
  // 0, the gradient norm downloaded at PIN_NORM, the tokens at pin_tokens,
  // the targets at pin_targets, each [batch, seq]. Invariant: written only
  // when no copy from it is pending, since every program that uploads from it
  // ends with a read that waits (the loss, the logits) before the call returns.
  char *pinned;
  size_t pin_tokens, pin_targets;
  // The training step as one graph (XF_CUDA_GRAPH, default on): the training
  // program and AdamW captured at (graph_b, graph_t), replayed at the same
  // B and T; re-captured when they change. What changes per step is read
  // from dvars. NULL: none captured yet.
  bool graph_on;
  void *graph;
  int64_t graph_b, graph_t;
  char note[1024];
  // data-parallel training: gradient buckets, in the order the backward
  // finishes them; bucket b holds grad_ptrs[bucket_at[b] .. bucket_at[b+1])
  // and starts after kernel bucket_ready[b] (-1: after the program)
  XfReducer reducer;
  bool parallel, in_train;
  // the kernel profile (xf_profile_start; profile.c): seconds and runs per
  // kernel (slot nkernels: the optimizer, on a device), the clock at the
  // last mark, the kernel_done hook it wraps; on a device the step's marks
  // so far (0: none recorded), the kernel ending at each, their intervals
  double *prof_s, prof_t0;
  int64_t *prof_n;
  void (*prof_next)(const XfApi *api, int32_t kernel);
  int prof_marks;
  int *prof_at;
  double *prof_dt;
  float **grad_ptrs;
  int64_t *grad_numel;
  int ngrads, nbuckets;
  int *bucket_at, *bucket_ready;
};

// The kernel profile's clock restarts (profile.c): before each program.
void xf_profile_mark(XfRuntime *rt);
// The kernel profile on a device (profile.c), each a no-op when not
// profiling: begin records mark 0 before the training program; mark, one
// after the last launch of kernel k (nkernels: the optimizer's launches);
// collect waits for the last mark and adds every interval to its kernel.
void xf_profile_gpu_begin(XfRuntime *rt);
void xf_profile_gpu_mark(XfRuntime *rt, int kernel);
void xf_profile_gpu_collect(XfRuntime *rt);
// The elements of buffer b at batch B, sequence T.
int64_t xf_buf_numel(const XfBuffer *b, int64_t B, int64_t T);
// Bytes per element of a buffer's storage: 2 for bf16 storage, else 4.
static inline int64_t xf_buf_esize(const XfBuffer *b) { return b->bf16 ? 2 : 4; }
// A failing device call mid-run: the message, then exit (runtime.c).
void xf_device_fail(XfRuntime *rt);
// The host mirror's newer parameters to the device (runtime.c).
void xf_device_push(XfRuntime *rt);

#endif
