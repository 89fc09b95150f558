// gpu_cuda.c: the XfGpu of an NVIDIA GPU (gpu.h) on the CUDA runtime API and
// cuBLAS. One device, one stream; every call checked, failures name the call
// and what it was for, with the runtime's error string.
//
// Kernels come from the model's PTX: cudaLibraryLoadData JIT-compiles it for
// the device, cudaLibraryGetKernel finds each entry point, and
// cudaLaunchKernel takes the cudaKernel_t as its function. GEMMs are
// row-major: C = op(A) op(B) is, read column-major, C^T = op(B)^T op(A)^T, so
// cuBLAS gets B before A and n before m.
//
// The GEMMs' arithmetic (XfCuda.precision), float32 storage and sums in
// each: FP32, cublasSgemmStridedBatched under CUBLAS_PEDANTIC_MATH; TF32,
// the same call under CUBLAS_TF32_TENSOR_OP_MATH; BF16,
// cublasGemmStridedBatchedEx on float32 A, B, C with compute type
// CUBLAS_COMPUTE_32F_FAST_16BF: the tensor cores multiply the operands
// rounded to bf16 and sum in float32 (cuBLAS may also pick TF32 there, which
// is closer to float32). A product with bf16 operands (types, bf16
// storage: xfc --precision=bf16) is cublasGemmStridedBatchedEx on
// CUDA_R_16BF A and B, C CUDA_R_16BF or CUDA_R_32F, compute type
// CUBLAS_COMPUTE_32F: float32 sums of the bf16 products.
//
// Graphs: stream capture (cudaStreamBeginCapture, ThreadLocal mode: only this
// thread's unsafe calls would break it) records the kernels and cuBLAS's
// GEMMs issued on the stream; cudaGraphInstantiate makes the executable graph
// that cudaGraphLaunch replays. cuBLAS works in a workspace of our own
// (cublasSetWorkspace at open, for eager and captured GEMMs alike): NVIDIA's
// advice for graphs, since cuBLAS's default one could be allocated during a
// capture. upload_async copies from pinned memory (cudaHostAlloc); a copy
// from pageable memory would wait for the stream first.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

#ifdef XF_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

typedef struct {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  cudaLibrary_t lib;
  cudaKernel_t *kernels;
  const XfCuda *module;
  int nkernels;
  size_t max_shmem;  // dynamic shared memory a block may opt in to
  unsigned *optin;   // per kernel: the dynamic shared memory it has been allowed so far
  void *workspace;   // cuBLAS's (cublasSetWorkspace)
  int sm;            // compute capability, 10 major + minor (90: sm_90)
  int precision;     // XF_PRECISION_*
  cudaEvent_t *marks; // the profile's clock (timer_open): nmarks events
  int nmarks;
} Cuda;

static bool cuda_ok(XfGpu *g, cudaError_t e, const char *call, const char *what) {
  if (e == cudaSuccess) return true;
  snprintf(g->err, sizeof g->err, "cuda: %s (%s): %s", call, what, cudaGetErrorString(e));
  return false;
}

static const char *blas_status(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "cuBLAS error";
  }
}

static bool c_alloc(XfGpu *g, void **p, size_t bytes) {
  char what[64];
  snprintf(what, sizeof what, "%zu bytes", bytes);
  return cuda_ok(g, cudaMalloc(p, bytes ? bytes : 1), "cudaMalloc", what);
}

static void c_release(XfGpu *g, void *p) {
  (void)g;
  cudaFree(p);
}

static bool c_upload(XfGpu *g, void *dst, const void *src, size_t bytes) {
  Cuda *c = g->impl;
  char what[64];
  snprintf(what, sizeof what, "%zu bytes to the device", bytes);
  g->syncs++;
  return cuda_ok(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "cudaMemcpyAsync", what) &&
         cuda_ok(g, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", what);
}

static bool c_upload_async(XfGpu *g, void *dst, const void *src, size_t bytes) {
  Cuda *c = g->impl;
  char what[64];
  snprintf(what, sizeof what, "%zu bytes to the device from pinned memory", bytes);
  return cuda_ok(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "cudaMemcpyAsync", what);
}

static bool c_download_async(XfGpu *g, void *dst, const void *src, size_t bytes) {
  Cuda *c = g->impl;
  char what[64];
  snprintf(what, sizeof what, "%zu bytes from the device to pinned memory", bytes);
  return cuda_ok(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "cudaMemcpyAsync", what);
}

static bool c_host_alloc(XfGpu *g, void **p, size_t bytes) {
  char what[64];
  snprintf(what, sizeof what, "%zu bytes of pinned host memory", bytes);
  return cuda_ok(g, cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocDefault), "cudaHostAlloc", what);
}

static void c_host_free(XfGpu *g, void *p) {
  (void)g;
  cudaFreeHost(p);
}

static bool c_download(XfGpu *g, void *dst, const void *src, size_t bytes) {
  Cuda *c = g->impl;
  char what[64];
  snprintf(what, sizeof what, "%zu bytes from the device", bytes);
  g->syncs++;
  return cuda_ok(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "cudaMemcpyAsync", what) &&
         cuda_ok(g, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", what);
}

static bool c_fill(XfGpu *g, void *dst, int byte, size_t bytes) {
  Cuda *c = g->impl;
  return cuda_ok(g, cudaMemsetAsync(dst, byte, bytes, c->stream), "cudaMemsetAsync", "device storage");
}

static bool c_copy2d(XfGpu *g, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
  Cuda *c = g->impl;
  char what[80];
  snprintf(what, sizeof what, "%zu rows of %zu bytes on the device", height, width);
  return cuda_ok(g, cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, c->stream),
                 "cudaMemcpy2DAsync", what);
}

// The SASS the device runs natively: the newest sm_XY of the model with the
// device's major version and a minor version up to its own; else the PTX,
// JIT-compiled by the driver.
static bool c_load(XfGpu *g, const XfCuda *m, int64_t max_b, int64_t max_t) {
  (void)max_b, (void)max_t;
  Cuda *c = g->impl;
  int pick = -1;
  for (int i = 0; i < 2; i++)
    if (m->sass_size[i] && m->sass_sm[i] / 10 == c->sm / 10 && m->sass_sm[i] <= c->sm &&
        (pick < 0 || m->sass_sm[i] > m->sass_sm[pick]))
      pick = i;
  char what[64];
  if (pick >= 0) snprintf(what, sizeof what, "SASS for sm_%d", m->sass_sm[pick]);
  else snprintf(what, sizeof what, "PTX for %s", m->arch);
  const void *code = pick >= 0 ? m->sass[pick] : (const void *)m->ptx;
  if (!cuda_ok(g, cudaLibraryLoadData(&c->lib, code, NULL, NULL, 0, NULL, NULL, 0), "cudaLibraryLoadData", what))
    return false;
  size_t n = strlen(g->desc);
  snprintf(g->desc + n, sizeof g->desc - n, ", %s%s, GEMMs in %s", what, pick >= 0 ? "" : " (JIT)",
           xf_precision_name(m->precision));
  // BF16 names its compute type in every call; the math mode is for FP32 and TF32
  c->precision = m->precision;
  cublasMath_t mode = m->precision == XF_PRECISION_TF32   ? CUBLAS_TF32_TENSOR_OP_MATH
                      : m->precision == XF_PRECISION_BF16 ? CUBLAS_DEFAULT_MATH
                                                          : CUBLAS_PEDANTIC_MATH;
  cublasStatus_t st = cublasSetMathMode(c->blas, mode);
  if (st != CUBLAS_STATUS_SUCCESS) {
    snprintf(g->err, sizeof g->err, "cuda: cublasSetMathMode (%s GEMMs): %s", xf_precision_name(m->precision), blas_status(st));
    return false;
  }
  c->kernels = calloc((size_t)m->nnames + 1, sizeof *c->kernels);
  c->optin = calloc((size_t)m->nnames + 1, sizeof *c->optin);
  if (!c->kernels || !c->optin) return snprintf(g->err, sizeof g->err, "cuda: out of host memory"), false;
  c->nkernels = m->nnames, c->module = m;
  for (int i = 0; i < m->nnames; i++)
    if (!cuda_ok(g, cudaLibraryGetKernel(&c->kernels[i], c->lib, m->names[i]), "cudaLibraryGetKernel", m->names[i]))
      return false;
  return true;
}

static bool c_launch(XfGpu *g, int fn, unsigned grid, unsigned block, unsigned shmem, bool sync, const XfKernelArgs *a) {
  (void)sync;
  Cuda *c = g->impl;
  if (fn < 0 || fn >= c->nkernels) return snprintf(g->err, sizeof g->err, "cuda: no kernel %d", fn), false;
  const char *name = c->module->names[fn];
  const void *k = (const void *)c->kernels[fn];
  if (shmem > 48 * 1024 && shmem > c->optin[fn]) {  // not a stream operation: allowed during a capture
    if (shmem > c->max_shmem) {
      snprintf(g->err, sizeof g->err,
               "cuda: kernel %s needs %u bytes of shared memory per block for its local arrays, the device allows %zu "
               "(the attention forms' tiles grow with the context and the head width; docs/cuda.md)",
               name, shmem, c->max_shmem);
      return false;
    }
    if (!cuda_ok(g, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem), "cudaFuncSetAttribute", name))
      return false;
    c->optin[fn] = shmem;
  }
  if (g->sync_each) g->syncs++;
  void *args[] = {(void *)a};
  dim3 gd = {grid, 1, 1}, bd = {block, 1, 1};
  return cuda_ok(g, cudaLaunchKernel(k, gd, bd, args, shmem, c->stream), "cudaLaunchKernel", name) &&
         cuda_ok(g, cudaGetLastError(), "cudaLaunchKernel", name) &&
         (!g->sync_each || cuda_ok(g, cudaStreamSynchronize(c->stream), "kernel", name));
}

static bool c_gemm(XfGpu *g, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                   int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, float beta, void *cc, int64_t ldc,
                   int64_t stride_c, int64_t count, int types) {
  Cuda *c = g->impl;
  cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const char *call;
  cublasStatus_t s;
  bool ab16 = types & XF_GEMM_A_BF16;
  if (ab16 != ((types & XF_GEMM_B_BF16) != 0) || (!ab16 && types) || ((types & XF_GEMM_C_BF16) && beta != 0))
    return snprintf(g->err, sizeof g->err, "internal error: cuda: a GEMM with operand storage %d (A and B bf16 alike, C bf16 only with beta 0)",
                    types), false;
  if (ab16) {
    call = "cublasGemmStridedBatchedEx (bf16 operands, CUBLAS_COMPUTE_32F)";
    cudaDataType_t ct = types & XF_GEMM_C_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    s = cublasGemmStridedBatchedEx(c->blas, opb, opa, (int)n, (int)m, (int)k, &alpha, b, CUDA_R_16BF, (int)ldb, stride_b, a,
                                   CUDA_R_16BF, (int)lda, stride_a, &beta, cc, ct, (int)ldc, stride_c, (int)count,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  } else if (c->precision == XF_PRECISION_BF16) {
    call = "cublasGemmStridedBatchedEx (CUBLAS_COMPUTE_32F_FAST_16BF)";
    s = cublasGemmStridedBatchedEx(c->blas, opb, opa, (int)n, (int)m, (int)k, &alpha, b, CUDA_R_32F, (int)ldb, stride_b, a,
                                   CUDA_R_32F, (int)lda, stride_a, &beta, cc, CUDA_R_32F, (int)ldc, stride_c, (int)count,
                                   CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT);
  } else {
    call = "cublasSgemmStridedBatched";
    s = cublasSgemmStridedBatched(c->blas, opb, opa, (int)n, (int)m, (int)k, &alpha, b, (int)ldb, stride_b, a, (int)lda,
                                  stride_a, &beta, cc, (int)ldc, stride_c, (int)count);
  }
  if (s == CUBLAS_STATUS_SUCCESS) return !g->sync_each || (g->syncs++, cuda_ok(g, cudaStreamSynchronize(c->stream), call, "the GEMM"));
  snprintf(g->err, sizeof g->err, "cuda: %s (%lldx%lldx%lld, %lld batches): %s", call, (long long)m, (long long)n, (long long)k,
           (long long)count, blas_status(s));
  return false;
}

static bool c_finish(XfGpu *g) {
  Cuda *c = g->impl;
  g->syncs++;
  return cuda_ok(g, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", "the step");
}

static bool c_capture_begin(XfGpu *g) {
  Cuda *c = g->impl;
  return cuda_ok(g, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture",
                 "a graph of the step");
}

// Ends the capture whatever happened during it (a failed launch invalidates
// it: cudaStreamEndCapture then fails and returns no graph).
static bool c_capture_end(XfGpu *g, void **graph) {
  Cuda *c = g->impl;
  cudaGraph_t gr = NULL;
  cudaGraphExec_t ex = NULL;
  *graph = NULL;
  bool ok = cuda_ok(g, cudaStreamEndCapture(c->stream, &gr), "cudaStreamEndCapture", "a graph of the step") &&
            cuda_ok(g, cudaGraphInstantiate(&ex, gr, 0), "cudaGraphInstantiate", "a graph of the step");
  // the executable graph does not refer to the graph it was made from
  if (gr) {
    cudaError_t e = cudaGraphDestroy(gr);
    if (ok && !cuda_ok(g, e, "cudaGraphDestroy", "the captured graph, instantiated")) {
      cudaGraphExecDestroy(ex);
      return false;
    }
  }
  if (!ok) return false;
  *graph = ex;
  g->captures++;
  return true;
}

static bool c_replay(XfGpu *g, void *graph) {
  Cuda *c = g->impl;
  if (!cuda_ok(g, cudaGraphLaunch((cudaGraphExec_t)graph, c->stream), "cudaGraphLaunch", "the step's graph")) return false;
  g->replays++;
  return true;
}

static void c_graph_free(XfGpu *g, void *graph) {
  (void)g;
  if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static bool c_timer_open(XfGpu *g, int n) {
  Cuda *c = g->impl;
  if (c->marks) return snprintf(g->err, sizeof g->err, "internal error: cuda: the profile's clock opened twice"), false;
  if (n < 2 || !(c->marks = calloc((size_t)n, sizeof *c->marks)))
    return snprintf(g->err, sizeof g->err, "cuda: out of host memory for %d events", n), false;
  for (; c->nmarks < n; c->nmarks++)
    if (!cuda_ok(g, cudaEventCreate(&c->marks[c->nmarks]), "cudaEventCreate", "the kernel profile")) return false;
  return true;
}

static bool c_timer_mark(XfGpu *g, int i) {
  Cuda *c = g->impl;
  if (i < 0 || i >= c->nmarks) return snprintf(g->err, sizeof g->err, "internal error: cuda: mark %d of %d", i, c->nmarks), false;
  return cuda_ok(g, cudaEventRecord(c->marks[i], c->stream), "cudaEventRecord", "the kernel profile");
}

static bool c_timer_read(XfGpu *g, int n, double *dt) {
  Cuda *c = g->impl;
  if (n < 1 || n > c->nmarks) return snprintf(g->err, sizeof g->err, "internal error: cuda: %d marks of %d", n, c->nmarks), false;
  g->syncs++;
  if (!cuda_ok(g, cudaEventSynchronize(c->marks[n - 1]), "cudaEventSynchronize", "the kernel profile")) return false;
  for (int i = 1; i < n; i++) {
    float ms = 0;
    if (!cuda_ok(g, cudaEventElapsedTime(&ms, c->marks[i - 1], c->marks[i]), "cudaEventElapsedTime", "the kernel profile"))
      return false;
    dt[i] = 1e-3 * (double)ms;
  }
  return true;
}

static void c_close(XfGpu *g) {
  Cuda *c = g->impl;
  if (c) {
    for (int i = 0; i < c->nmarks; i++) cudaEventDestroy(c->marks[i]);
    free(c->marks);
    if (c->blas) cublasDestroy(c->blas);
    if (c->workspace) cudaFree(c->workspace);
    if (c->lib) cudaLibraryUnload(c->lib);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->kernels), free(c->optin);
    free(c);
  }
  free(g);
}

XfGpu *xf_gpu_cuda_open(int device, char *err, size_t errlen) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  // no driver (or one too old for this runtime), or no GPU: the machine's
  // state, said as such; other failures name the CUDA runtime's error
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
    snprintf(err, errlen, "no NVIDIA GPU or driver on this machine (cudaGetDeviceCount: %s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "the driver lists none");
    return NULL;
  }
  if (e != cudaSuccess) {
    snprintf(err, errlen, "no CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return NULL;
  }
  if (device < 0 || device >= n) {
    snprintf(err, errlen, "no CUDA device %d: this machine has %d", device, n);
    return NULL;
  }
  XfGpu *g = calloc(1, sizeof *g);
  Cuda *c = calloc(1, sizeof *c);
  if (!g || !c) {
    free(g), free(c);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  *g = (XfGpu){.name = "cuda", .impl = c, .alloc = c_alloc, .release = c_release, .upload = c_upload, .download = c_download,
               .fill = c_fill, .copy2d = c_copy2d, .load = c_load, .launch = c_launch, .gemm = c_gemm, .finish = c_finish, .close = c_close,
               .host_alloc = c_host_alloc, .host_free = c_host_free, .upload_async = c_upload_async,
               .download_async = c_download_async, .capture_begin = c_capture_begin, .capture_end = c_capture_end, .replay = c_replay,
               .graph_free = c_graph_free, .timer_open = c_timer_open, .timer_mark = c_timer_mark, .timer_read = c_timer_read};
  c->device = device;
  const char *sync = getenv("XF_CUDA_SYNC");
  g->sync_each = sync && *sync && strcmp(sync, "0");
  int optin = 0;
  struct cudaDeviceProp prop;
  char which[32];
  snprintf(which, sizeof which, "device %d", device);
  bool ok = cuda_ok(g, cudaSetDevice(device), "cudaSetDevice", which) &&
            cuda_ok(g, cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", which) &&
            cuda_ok(g, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute",
                    "shared memory per block") &&
            cuda_ok(g, cudaStreamCreate(&c->stream), "cudaStreamCreate", "the stream");
  c->max_shmem = (size_t)optin;
  g->stream = c->stream;
  if (ok) c->sm = 10 * prop.major + prop.minor;
  if (ok) snprintf(g->desc, sizeof g->desc, "GPU %d: %.120s, sm_%d%d%s", device, prop.name, prop.major, prop.minor,
                   g->sync_each ? ", every launch waited for (XF_CUDA_SYNC)" : "");
  if (ok) {
    const char *call = "cublasCreate";
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s == CUBLAS_STATUS_SUCCESS) call = "cublasSetStream", s = cublasSetStream(c->blas, c->stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
      snprintf(g->err, sizeof g->err, "cuda: %s: %s", call, blas_status(s));
      ok = false;
    }
  }
  // cuBLAS's workspace: the size NVIDIA advises for graphs (32 MiB on sm_90 and later, else 4 MiB)
  size_t ws = (size_t)(c->sm >= 90 ? 32 : 4) << 20;
  ok = ok && cuda_ok(g, cudaMalloc(&c->workspace, ws), "cudaMalloc", "cuBLAS's workspace");
  if (ok) {
    cublasStatus_t s = cublasSetWorkspace(c->blas, c->workspace, ws);
    if (s != CUBLAS_STATUS_SUCCESS) {
      snprintf(g->err, sizeof g->err, "cuda: cublasSetWorkspace (%zu MiB for the GEMMs): %s", ws >> 20, blas_status(s));
      ok = false;
    }
  }
  if (!ok) {
    snprintf(err, errlen, "%s", g->err);
    c_close(g);
    return NULL;
  }
  return g;
}

#else

XfGpu *xf_gpu_cuda_open(int device, char *err, size_t errlen) {
  (void)device;
  snprintf(err, errlen, "no CUDA device: this xfrun was built without the CUDA toolkit");
  return NULL;
}

#endif
