// gpu.h: what the runtime needs of a CUDA device, behind one table of
// functions with two implementations:
//   - gpu_cuda.c: an NVIDIA GPU through the CUDA runtime API and cuBLAS
//     (built when CMake finds the CUDA toolkit, XF_HAVE_CUDA);
//   - gpu_emu.c: the emulation, for machines without a GPU: the very CUDA C
//     source NVRTC compiled is compiled for the host against
//     runtime/cuda_emu.h and its kernels run over the whole grid, every GPU
//     thread of a block as a fiber; GEMMs go to the CPU BLAS.
// runtime/cuda_host.c drives either one from a model's launch tables
// (xf_abi.h: XfCuda), so the emulation checks the host code too.
//
// Pointers from alloc are device pointers: only upload, download, fill,
// launch and gemm touch them. Every function returns false on failure with
// a one-line message in err saying what failed and where (the CUDA call or
// the command, and its error string).
//
// Work is issued in order on one stream; the host waits for it only in
// upload, download and finish (and after every launch and GEMM under
// XF_CUDA_SYNC), and syncs counts those waits. upload_async does not wait:
// its source is pinned host memory (host_alloc) that the caller leaves
// unchanged until the next wait has returned; nor does download_async, whose
// destination (pinned) holds the data once the next wait has returned.
//
// A graph (CUDA stream capture): between capture_begin and capture_end, launch
// and gemm record their work with their arguments (by value: the pointers,
// not what they point to) instead of running it, and nothing else is called;
// replay runs the recorded work in order, as issued, on the stream.
// capture_end after a failed launch or gemm still ends the capture; what it
// returns then is moot (a graph or none): the caller drops any graph and
// reports the failed call's message.
#ifndef XF_GPU_H
#define XF_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xf_abi.h"

typedef struct XfGpu XfGpu;
struct XfGpu {
  const char *name;  // "cuda" or "cuda-emulation"
  char desc[192];    // which device: "GPU 0: <its name>, sm_90", or the emulation
  void *stream;      // the cudaStream_t all work is issued on (NULL: the emulation)
  char err[1024];
  void *impl;
  bool (*alloc)(XfGpu *g, void **p, size_t bytes);
  void (*release)(XfGpu *g, void *p);
  bool (*upload)(XfGpu *g, void *dst, const void *src, size_t bytes);    // host -> device
  bool (*download)(XfGpu *g, void *dst, const void *src, size_t bytes);  // device -> host
  bool (*fill)(XfGpu *g, void *dst, int byte, size_t bytes);
  // Device -> device: height rows of width bytes, row i from src + i spitch
  // to dst + i dpitch; source and destination do not overlap.
  bool (*copy2d)(XfGpu *g, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height);
  // Makes the kernels of c callable: loads c->ptx (device) or compiles
  // c->source (emulation). Kernel fn of launch is c->names[fn]. Every
  // program of c will run at B <= max_b and T <= max_t (what the emulation
  // sizes its GEMM scratch for). Sets the GEMMs' arithmetic, c->precision.
  bool (*load)(XfGpu *g, const XfCuda *c, int64_t max_b, int64_t max_t);
  bool (*launch)(XfGpu *g, int fn, unsigned grid, unsigned block, unsigned shmem, bool sync, const XfKernelArgs *a);
  // Row-major, as cblas_sgemm, for i < count:
  //   C_i = alpha op(A_i) op(B_i) + beta C_i,  X_i = X + i * stride_X
  // in the precision load() set (XF_PRECISION_*; float32 sums). types
  // (XF_GEMM_*_BF16): the operands holding bf16 elements (strides and
  // leading dimensions in elements); A and B both bf16 or both float32, and
  // a bf16 C needs beta 0: the sums in float32, rounded to nearest even.
  bool (*gemm)(XfGpu *g, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
               int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, float beta, void *c, int64_t ldc,
               int64_t stride_c, int64_t count, int types);
  bool (*finish)(XfGpu *g);  // waits until all work issued so far is done
  void (*close)(XfGpu *g);   // frees everything, g included
  bool (*host_alloc)(XfGpu *g, void **p, size_t bytes);  // pinned host memory
  void (*host_free)(XfGpu *g, void *p);
  bool (*upload_async)(XfGpu *g, void *dst, const void *src, size_t bytes);  // src: from host_alloc
  // dst: from host_alloc, to be read only after the next wait has returned
  bool (*download_async)(XfGpu *g, void *dst, const void *src, size_t bytes);
  bool (*capture_begin)(XfGpu *g);
  bool (*capture_end)(XfGpu *g, void **graph);  // *graph: the executable graph
  bool (*replay)(XfGpu *g, void *graph);
  void (*graph_free)(XfGpu *g, void *graph);
  // The kernel profile's clock: n marks (timer_open, once, outside a step),
  // mark i recorded on the stream when the work issued before it is done
  // (a CUDA event; the emulation, which runs each launch when issued, reads
  // the host's clock); timer_read waits for mark n - 1 and gives dt[i], the
  // seconds from mark i - 1 to mark i, for 0 < i < n.
  bool (*timer_open)(XfGpu *g, int n);
  bool (*timer_mark)(XfGpu *g, int i);
  bool (*timer_read)(XfGpu *g, int n, double *dt);
  bool sync_each;      // XF_CUDA_SYNC=1: every launch and GEMM is waited for
  uint64_t syncs;      // the host's waits for the device so far
  uint64_t captures;   // graphs captured so far
  uint64_t replays;    // graph replays so far
};

// Device `device` (0: the first). NULL with "no NVIDIA GPU or driver on this
// machine (cudaGetDeviceCount: <reason>)" in err when there is no GPU or no
// driver (or one too old for the runtime), "no CUDA device: <reason>" for
// another failure, or "no CUDA device: this xfrun was built without the CUDA
// toolkit" when XF_HAVE_CUDA is not defined. With XF_CUDA_SYNC=1 in the
// environment every launch and GEMM is waited for, so that a fault is
// reported under the name of the kernel that made it (not by the next copy).
XfGpu *xf_gpu_cuda_open(int device, char *err, size_t errlen);
// The emulation. The C++ compiler is $XF_CXX (default c++), the header
// $XF_CUDA_EMU_HEADER (default: runtime/cuda_emu.h of the source tree).
// `device` only names it in desc.
XfGpu *xf_gpu_emu_open(int device, char *err, size_t errlen);

// The bf16 value nearest x (ties to even), widened back to float32: what
// the GPU's bf16 GEMMs multiply (gpu_emu.c).
float xf_bf16_round(float x);

// cuda_host.c: the most elements the operands of one product take together,
// m k + k n (op(A_i) and op(B_i)), and m n more where C is bf16, over the
// GEMM records of every program of c at (B, T); the sizes grow with B and T.
int64_t xf_cuda_gemm_operands(const XfCuda *c, int64_t B, int64_t T);

// cuda_host.c: runs program `prog` (XF_PROG_*) of m->cuda on g at (B, T)
// (the step program computes positions [w0, w1), as XfApi.win_lo/win_hi,
// keeps its scan states at wk, and counts positions from pos0, as
// XfApi.win_keep and pos0; other programs ignore them; vars: device storage of the XfStepVars its
// kernels read, which must hold the step's values when they run: the step,
// the batch row of row 0):
// every launch record in order, operand slots from dev[] (the device storage
// of each buffer, aliases resolved); done(ctx, k) after the last launch of
// kernel k when done is set. False with g->err on the first failure.
bool xf_cuda_program(XfGpu *g, const XfModel *m, int prog, void *const *dev, int64_t B, int64_t T, int64_t w0, int64_t w1, int64_t wk, int64_t pos0,
                     uint64_t seed, const XfStepVars *vars, void (*done)(void *ctx, int32_t kernel), void *ctx);

// The optimizer of a training program on the device (codegen/cuda.c
// render_optimizer; device storage, planned at open): the XfAdamSeg table
// of every parameter with a gradient (nsegs, nchunks chunks of
// XF_ADAM_CHUNK in all), the XF_NHP doubles, nchunks doubles of the norm's
// partial sums, and the step's XfStepVars.
typedef struct {
  const XfAdamSeg *segs;
  double *hyper;
  double *partials;
  const XfStepVars *vars;
  int nsegs;
  int64_t nchunks;
} XfCudaOptimizer;
// cuda_host.c: XfCuda.grad_accum over every segment (the micro-batches'
// sums: XfOptions.accum > 1, every training program).
bool xf_cuda_accumulate(XfGpu *g, const XfCuda *c, const XfCudaOptimizer *o);
// cuda_host.c: grad_norm, grad_norm_sum and adamw, in order (they act on the
// step's last micro-batch only: XfStepVars). Nothing to launch without
// segments.
bool xf_cuda_update(XfGpu *g, const XfCuda *c, const XfCudaOptimizer *o);

#endif
