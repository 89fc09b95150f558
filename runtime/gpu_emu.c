// gpu_emu.c: the XfGpu of the CUDA emulation (gpu.h, runtime/cuda_emu.h).
//
// Device memory is host memory; load() compiles the module's CUDA C source
// for the host with the emulation header ($XF_CXX, default c++) into a
// private temporary directory, dlopens it and finds <kernel>_emu for every
// entry point; launch() calls it over the grid; GEMMs go to the CPU BLAS.
// Nothing here is a GPU: it checks the generated source's numerics and the
// host code that drives a GPU, on machines without one.
//
// The GEMMs' arithmetic (XfCuda.precision): FP32 and TF32 are float32 GEMMs
// (TF32's 10-bit products are not modelled); BF16 rounds every element of
// A_i and B_i to bf16 (xf_bf16_round) into scratch copies, then multiplies
// those in float32 with float32 sums: a product of two bf16 values is exact
// in float32, so that is the GPU's arithmetic up to the order of the sums.
// Operands stored in bf16 (gpu.h gemm's types) are widened into the same
// copies; a bf16 C is computed in float32 and rounded to nearest even.
// The scratch is allocated once, at load, for the largest product of the
// model's launch tables (xf_cuda_gemm_operands at max_b, max_t).
//
// Everything runs when it is issued, so the host never waits; syncs counts
// the calls that wait on a GPU (upload, download, finish; every launch and
// GEMM under XF_CUDA_SYNC), as gpu_cuda.c does. Pinned memory is plain host
// memory. A capture records each launch and GEMM (EmuOp: every argument
// copied, the XfKernelArgs included) and a replay runs the records in order;
// any other call during a capture fails, as it would break a CUDA capture.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gemm.h"
#include "gpu.h"

#ifndef XF_CUDA_EMU_HEADER
#define XF_CUDA_EMU_HEADER "runtime/cuda_emu.h"
#endif

typedef void (*EmuEntry)(const void *args, unsigned grid, unsigned block, unsigned shmem, int fibers);

// One recorded launch (kind XF_LAUNCH_KERNEL) or GEMM (XF_LAUNCH_GEMM).
typedef struct {
  int kind;
  int fn;
  unsigned grid, block, shmem;
  bool sync;
  XfKernelArgs args;
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, count;
  float alpha, beta;
  const void *a, *b;
  void *c;
  int types;  // XF_GEMM_*_BF16
} EmuOp;

typedef struct {
  EmuOp *ops;
  int n, cap;
} EmuGraph;

typedef struct {
  void *lib;
  EmuEntry *entries;
  int nentries;
  int precision;       // XF_PRECISION_*
  float *scratch;      // BF16: op(A_i) then op(B_i), rounded, packed
  int64_t scratch_n;   // its elements: m k + k n of every GEMM fits
  EmuGraph *capture;   // non-NULL between capture_begin and capture_end
  bool capture_failed; // a launch or GEMM of the capture failed
  double *marks;       // the profile's clock (timer_open): the host's, nmarks
  int nmarks;
} Emu;

// False with err when a capture is in progress: `call` would not be recorded.
static bool not_capturing(XfGpu *g, const char *call) {
  Emu *e = g->impl;
  if (!e->capture) return true;
  e->capture_failed = true;
  snprintf(g->err, sizeof g->err, "internal error: cuda-emulation: %s during a graph capture", call);
  return false;
}

static bool record(XfGpu *g, const EmuOp *op) {
  Emu *e = g->impl;
  EmuGraph *gr = e->capture;
  if (gr->n == gr->cap) {
    int cap = gr->cap ? 2 * gr->cap : 256;
    EmuOp *ops = realloc(gr->ops, sizeof *ops * (size_t)cap);
    if (!ops) {
      e->capture_failed = true;
      return snprintf(g->err, sizeof g->err, "cuda-emulation: out of memory recording a graph"), false;
    }
    gr->ops = ops, gr->cap = cap;
  }
  gr->ops[gr->n++] = *op;
  return true;
}

// Round to nearest, ties to even, on the float32 bit pattern: bf16 keeps the
// upper 16 bits (sign, 8 exponent bits, 7 mantissa bits). Adding 0x7fff plus
// the lowest kept bit carries into the kept bits exactly when the dropped
// 16 bits exceed half an ulp, or equal it with the kept part odd; a carry
// out of the mantissa steps the exponent (up to infinity), as IEEE rounding
// does. NaN stays NaN: its quiet bit is set, since dropping the low bits
// could leave an all-zero mantissa (infinity).
float xf_bf16_round(float x) { return xf_bf16_float(xf_bf16_bits(x)); }

// The rows x cols matrix at src (leading dimension ld), rounded to bf16 and
// widened, packed into dst (leading dimension cols); bf16: src holds bf16
// elements (widened exactly).
static void round_matrix(const void *src, bool bf16, int64_t rows, int64_t cols, int64_t ld, float *dst) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < cols; j++)
      dst[r * cols + j] = bf16 ? xf_bf16_float(((const uint16_t *)src)[r * ld + j]) : xf_bf16_round(((const float *)src)[r * ld + j]);
}

static bool e_alloc(XfGpu *g, void **p, size_t bytes) {
  *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63 ? (bytes + 63) & ~(size_t)63 : 64);
  if (!*p) snprintf(g->err, sizeof g->err, "cuda-emulation: cannot allocate %zu bytes", bytes);
  return *p != NULL;
}
static void e_release(XfGpu *g, void *p) {
  (void)g;
  free(p);
}
static bool e_upload(XfGpu *g, void *dst, const void *src, size_t bytes) {
  if (!not_capturing(g, "upload")) return false;
  memcpy(dst, src, bytes);
  g->syncs++;
  return true;
}
static bool e_download(XfGpu *g, void *dst, const void *src, size_t bytes) {
  if (!not_capturing(g, "download")) return false;
  memcpy(dst, src, bytes);
  g->syncs++;
  return true;
}
static bool e_upload_async(XfGpu *g, void *dst, const void *src, size_t bytes) {
  if (!not_capturing(g, "upload_async")) return false;
  memcpy(dst, src, bytes);
  return true;
}
static bool e_download_async(XfGpu *g, void *dst, const void *src, size_t bytes) {
  if (!not_capturing(g, "download_async")) return false;
  memcpy(dst, src, bytes);
  return true;
}
static bool e_fill(XfGpu *g, void *dst, int byte, size_t bytes) {
  if (!not_capturing(g, "fill")) return false;
  memset(dst, byte, bytes);
  return true;
}
static bool e_copy2d(XfGpu *g, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
  if (!not_capturing(g, "copy2d")) return false;
  for (size_t i = 0; i < height; i++) memcpy((char *)dst + i * dpitch, (const char *)src + i * spitch, width);
  return true;
}
static bool e_host_alloc(XfGpu *g, void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1);
  if (!*p) snprintf(g->err, sizeof g->err, "cuda-emulation: cannot allocate %zu bytes of pinned host memory", bytes);
  return *p != NULL;
}
static void e_host_free(XfGpu *g, void *p) {
  (void)g;
  free(p);
}

static bool write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  bool ok = fputs(text, f) >= 0;
  return fclose(f) == 0 && ok;
}

// The first line of the compiler's messages that says "error", else the first.
static void first_error(const char *path, char *out, size_t len) {
  FILE *f = fopen(path, "r");
  char line[512];
  out[0] = 0;
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (!out[0]) snprintf(out, len, "%s", line);
    if (strstr(line, "error")) {
      snprintf(out, len, "%s", line);
      break;
    }
  }
  if (f) fclose(f);
}

static bool e_load(XfGpu *g, const XfCuda *c, int64_t max_b, int64_t max_t) {
  Emu *e = g->impl;
  e->precision = c->precision;
  size_t n = strlen(g->desc);
  const char *gemms = c->precision == XF_PRECISION_TF32 ? "float32 (TF32 is not emulated)" : xf_precision_name(c->precision);
  snprintf(g->desc + n, sizeof g->desc - n, ", GEMMs in %s", gemms);
  if (c->precision == XF_PRECISION_BF16) {  // also what bf16 storage needs (only under bf16)
    e->scratch_n = xf_cuda_gemm_operands(c, max_b, max_t);
    if (e->scratch_n > 0 && !(e->scratch = malloc(sizeof(float) * (size_t)e->scratch_n)))
      return snprintf(g->err, sizeof g->err, "cuda-emulation: cannot allocate %lld floats for the bf16 GEMMs' operands",
                      (long long)e->scratch_n), false;
  }
  const char *cxx = getenv("XF_CXX"), *header = getenv("XF_CUDA_EMU_HEADER"), *tmp = getenv("TMPDIR");
  if (!cxx || !*cxx) cxx = "c++";
  if (!header || !*header) header = XF_CUDA_EMU_HEADER;
  if (!tmp || !*tmp) tmp = "/tmp";
  char dir[512], src[600], so[600], log[600];
  snprintf(dir, sizeof dir, "%s/xf-cuda-emu-XXXXXX", tmp);
  if (!mkdtemp(dir)) return snprintf(g->err, sizeof g->err, "cuda-emulation: cannot create a directory in %.400s: %s", tmp, strerror(errno)), false;
  snprintf(src, sizeof src, "%s/kernels.cu", dir);
  snprintf(so, sizeof so, "%s/kernels.so", dir);
  snprintf(log, sizeof log, "%s/compiler.log", dir);
  if (!write_file(src, c->source)) return snprintf(g->err, sizeof g->err, "cuda-emulation: cannot write %.400s", src), false;
  pid_t pid = fork();
  if (pid < 0) return snprintf(g->err, sizeof g->err, "cuda-emulation: cannot start %s: fork failed", cxx), false;
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, 2), dup2(fd, 1);
    execlp(cxx, cxx, "-std=c++17", "-O1", "-fPIC", "-shared", "-w", "-DXF_EMULATION", "-include", header, "-x", "c++", src,
           "-o", so, "-lm", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char first[600];
    first_error(log, first, sizeof first);
    snprintf(g->err, sizeof g->err, "cuda-emulation: compiling the kernels with %.100s failed (%s %.300s): %.500s", cxx,
             WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "not found; source in" : "source and log in", dir, first);
    return false;
  }
  e->lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!e->lib) return snprintf(g->err, sizeof g->err, "cuda-emulation: dlopen %.400s: %.400s", so, dlerror()), false;
  unlink(src), unlink(so), unlink(log), rmdir(dir);  // the library stays mapped
  e->entries = calloc((size_t)c->nnames + 1, sizeof *e->entries);
  if (!e->entries) return snprintf(g->err, sizeof g->err, "cuda-emulation: out of memory"), false;
  e->nentries = c->nnames;
  for (int i = 0; i < c->nnames; i++) {
    char sym[256];
    snprintf(sym, sizeof sym, "%s_emu", c->names[i]);
    void *p = dlsym(e->lib, sym);
    if (!p) return snprintf(g->err, sizeof g->err, "cuda-emulation: the source has no kernel %s", c->names[i]), false;
    memcpy(&e->entries[i], &p, sizeof p);
  }
  return true;
}

static bool e_launch(XfGpu *g, int fn, unsigned grid, unsigned block, unsigned shmem, bool sync, const XfKernelArgs *a) {
  Emu *e = g->impl;
  if (fn < 0 || fn >= e->nentries) {
    e->capture_failed = e->capture != NULL;
    return snprintf(g->err, sizeof g->err, "cuda-emulation: no kernel %d", fn), false;
  }
  if (e->capture)
    return record(g, &(EmuOp){.kind = XF_LAUNCH_KERNEL, .fn = fn, .grid = grid, .block = block, .shmem = shmem, .sync = sync,
                              .args = *a});
  e->entries[fn](a, grid, block, shmem, sync);
  if (g->sync_each) g->syncs++;
  return true;
}

// The product of record o (its kind XF_LAUNCH_GEMM): with BF16 arithmetic
// or bf16 operands, op(A_i) and op(B_i) rounded (widened) into the scratch,
// a float32 GEMM, and a bf16 C rounded from a float32 one in the scratch.
static void run_gemm(Emu *e, const EmuOp *o) {
  bool round = e->precision == XF_PRECISION_BF16 || o->types;
  int64_t m = o->m, n = o->n, k = o->k;
  size_t ea = o->types & XF_GEMM_A_BF16 ? 2 : 4, eb = o->types & XF_GEMM_B_BF16 ? 2 : 4, ec = o->types & XF_GEMM_C_BF16 ? 2 : 4;
  for (int64_t i = 0; i < o->count; i++) {
    const void *ai = (const char *)o->a + (size_t)(i * o->stride_a) * ea, *bi = (const char *)o->b + (size_t)(i * o->stride_b) * eb;
    void *ci = (char *)o->c + (size_t)(i * o->stride_c) * ec;
    int64_t ldai = o->lda, ldbi = o->ldb;
    if (round && k > 0) {  // op(A_i) is m x k, op(B_i) k x n
      float *ra = e->scratch, *rb = e->scratch + m * k;
      ldai = o->ta ? m : k, ldbi = o->tb ? k : n;
      round_matrix(ai, ea == 2, o->ta ? k : m, ldai, o->lda, ra);
      round_matrix(bi, eb == 2, o->tb ? n : k, ldbi, o->ldb, rb);
      ai = ra, bi = rb;
    }
    if (ec == 4) {
      xf_sgemm(o->ta, o->tb, m, n, k, o->alpha, ai, ldai, bi, ldbi, o->beta, ci, o->ldc);
      continue;
    }
    float *rc = e->scratch + m * k + k * n;  // beta is 0 (e_gemm)
    xf_sgemm(o->ta, o->tb, m, n, k, o->alpha, ai, ldai, bi, ldbi, 0, rc, n);
    for (int64_t r = 0; r < m; r++)
      for (int64_t j = 0; j < n; j++) ((uint16_t *)ci)[r * o->ldc + j] = xf_bf16_bits(rc[r * n + j]);
  }
}

static bool e_gemm(XfGpu *g, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                   int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, float beta, void *c, int64_t ldc,
                   int64_t stride_c, int64_t count, int types) {
  Emu *e = g->impl;
  bool ab16 = types & XF_GEMM_A_BF16;
  const char *why = ab16 != ((types & XF_GEMM_B_BF16) != 0) || (!ab16 && types) ? "A and B not bf16 alike"
                    : (types & XF_GEMM_C_BF16) && beta != 0                      ? "a bf16 C with beta not 0"
                                                                                  : NULL;
  int64_t need = m * k + k * n + (types & XF_GEMM_C_BF16 ? m * n : 0);
  if (!why && (e->precision == XF_PRECISION_BF16 || types) && need > e->scratch_n)
    why = "more elements than the bf16 scratch planned at load";
  if (why) {
    e->capture_failed = e->capture != NULL;
    return snprintf(g->err, sizeof g->err, "internal error: cuda-emulation: a %lldx%lldx%lld GEMM (storage %d): %s (%lld floats)",
                    (long long)m, (long long)n, (long long)k, types, why, (long long)e->scratch_n),
           false;
  }
  EmuOp op = {.kind = XF_LAUNCH_GEMM, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = alpha, .a = a, .lda = lda,
              .stride_a = stride_a, .b = b, .ldb = ldb, .stride_b = stride_b, .beta = beta, .c = c, .ldc = ldc,
              .stride_c = stride_c, .count = count, .types = types};
  if (e->capture) return record(g, &op);
  run_gemm(e, &op);
  if (g->sync_each) g->syncs++;
  return true;
}

static bool e_finish(XfGpu *g) {
  if (!not_capturing(g, "finish")) return false;
  g->syncs++;
  return true;
}

static void e_graph_free(XfGpu *g, void *graph) {
  (void)g;
  EmuGraph *gr = graph;
  if (gr) free(gr->ops);
  free(gr);
}

static bool e_capture_begin(XfGpu *g) {
  Emu *e = g->impl;
  if (e->capture) return snprintf(g->err, sizeof g->err, "internal error: cuda-emulation: a capture within a capture"), false;
  if (!(e->capture = calloc(1, sizeof *e->capture)))
    return snprintf(g->err, sizeof g->err, "cuda-emulation: out of memory starting a graph capture"), false;
  e->capture_failed = false;
  return true;
}

static bool e_capture_end(XfGpu *g, void **graph) {
  Emu *e = g->impl;
  *graph = NULL;
  if (!e->capture) return snprintf(g->err, sizeof g->err, "internal error: cuda-emulation: no capture to end"), false;
  EmuGraph *gr = e->capture;
  e->capture = NULL;
  if (e->capture_failed) return e_graph_free(g, gr), false;  // err: the failed call's
  *graph = gr;
  g->captures++;
  return true;
}

static bool e_replay(XfGpu *g, void *graph) {
  Emu *e = g->impl;
  if (!not_capturing(g, "replay")) return false;
  const EmuGraph *gr = graph;
  for (int i = 0; i < gr->n; i++) {
    const EmuOp *op = &gr->ops[i];
    if (op->kind == XF_LAUNCH_KERNEL) e->entries[op->fn](&op->args, op->grid, op->block, op->shmem, op->sync);
    else run_gemm(e, op);
  }
  g->replays++;
  return true;
}

static bool e_timer_open(XfGpu *g, int n) {
  Emu *e = g->impl;
  if (e->marks) return snprintf(g->err, sizeof g->err, "internal error: cuda-emulation: the profile's clock opened twice"), false;
  if (n < 2 || !(e->marks = calloc((size_t)n, sizeof *e->marks)))
    return snprintf(g->err, sizeof g->err, "cuda-emulation: out of memory for %d marks", n), false;
  e->nmarks = n;
  return true;
}

// Every launch has run when it returns: the clock now is the mark's.
static bool e_timer_mark(XfGpu *g, int i) {
  Emu *e = g->impl;
  if (i < 0 || i >= e->nmarks)
    return snprintf(g->err, sizeof g->err, "internal error: cuda-emulation: mark %d of %d", i, e->nmarks), false;
  if (!not_capturing(g, "a profile mark")) return false;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  e->marks[i] = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  return true;
}

static bool e_timer_read(XfGpu *g, int n, double *dt) {
  Emu *e = g->impl;
  if (n < 1 || n > e->nmarks)
    return snprintf(g->err, sizeof g->err, "internal error: cuda-emulation: %d marks of %d", n, e->nmarks), false;
  for (int i = 1; i < n; i++) dt[i] = e->marks[i] - e->marks[i - 1];
  return true;
}

static void e_close(XfGpu *g) {
  Emu *e = g->impl;
  if (e) {
    free(e->marks);
    e_graph_free(g, e->capture);
    if (e->lib) dlclose(e->lib);
    free(e->entries);
    free(e->scratch);
    free(e);
  }
  free(g);
}

XfGpu *xf_gpu_emu_open(int device, char *err, size_t errlen) {
  XfGpu *g = calloc(1, sizeof *g);
  Emu *e = calloc(1, sizeof *e);
  if (!g || !e) {
    free(g), free(e);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  *g = (XfGpu){.name = "cuda-emulation", .impl = e, .alloc = e_alloc, .release = e_release, .upload = e_upload,
               .download = e_download, .fill = e_fill, .copy2d = e_copy2d, .load = e_load, .launch = e_launch, .gemm = e_gemm, .finish = e_finish,
               .close = e_close, .host_alloc = e_host_alloc, .host_free = e_host_free, .upload_async = e_upload_async,
               .download_async = e_download_async, .capture_begin = e_capture_begin, .capture_end = e_capture_end, .replay = e_replay,
               .graph_free = e_graph_free, .timer_open = e_timer_open, .timer_mark = e_timer_mark, .timer_read = e_timer_read};
  const char *sync = getenv("XF_CUDA_SYNC");
  g->sync_each = sync && *sync && strcmp(sync, "0");
  snprintf(g->desc, sizeof g->desc, "GPU %d emulated on the CPU (XF_CUDA_EMULATE)%s", device,
           g->sync_each ? ", every launch waited for (XF_CUDA_SYNC)" : "");
  return g;
}
