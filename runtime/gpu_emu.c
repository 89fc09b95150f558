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
// The scratch is allocated once, at load, for the largest product of the
// model's launch tables (xf_cuda_gemm_operands at max_b, max_t).
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gemm.h"
#include "gpu.h"

#ifndef XF_CUDA_EMU_HEADER
#define XF_CUDA_EMU_HEADER "runtime/cuda_emu.h"
#endif

typedef void (*EmuEntry)(const void *args, unsigned grid, unsigned block, unsigned shmem, int fibers);

typedef struct {
  void *lib;
  EmuEntry *entries;
  int nentries;
  int precision;       // XF_PRECISION_*
  float *scratch;      // BF16: op(A_i) then op(B_i), rounded, packed
  int64_t scratch_n;   // its elements: m k + k n of every GEMM fits
} Emu;

// Round to nearest, ties to even, on the float32 bit pattern: bf16 keeps the
// upper 16 bits (sign, 8 exponent bits, 7 mantissa bits). Adding 0x7fff plus
// the lowest kept bit carries into the kept bits exactly when the dropped
// 16 bits exceed half an ulp, or equal it with the kept part odd; a carry
// out of the mantissa steps the exponent (up to infinity), as IEEE rounding
// does. NaN stays NaN: its quiet bit is set, since dropping the low bits
// could leave an all-zero mantissa (infinity).
float xf_bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
  else u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, sizeof x);
  return x;
}

// The rows x cols matrix at src (leading dimension ld), rounded to bf16,
// packed into dst (leading dimension cols).
static void round_matrix(const float *src, int64_t rows, int64_t cols, int64_t ld, float *dst) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < cols; j++) dst[r * cols + j] = xf_bf16_round(src[r * ld + j]);
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
static bool e_copy(XfGpu *g, void *dst, const void *src, size_t bytes) {
  (void)g;
  memcpy(dst, src, bytes);
  return true;
}
static bool e_fill(XfGpu *g, void *dst, int byte, size_t bytes) {
  (void)g;
  memset(dst, byte, bytes);
  return true;
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
  if (c->precision == XF_PRECISION_BF16) {
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
  if (fn < 0 || fn >= e->nentries) return snprintf(g->err, sizeof g->err, "cuda-emulation: no kernel %d", fn), false;
  e->entries[fn](a, grid, block, shmem, sync);
  return true;
}

static bool e_gemm(XfGpu *g, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                   int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b, float beta, float *c, int64_t ldc,
                   int64_t stride_c, int64_t count) {
  Emu *e = g->impl;
  bool bf16 = e->precision == XF_PRECISION_BF16;
  if (bf16 && m * k + k * n > e->scratch_n)
    return snprintf(g->err, sizeof g->err,
                    "internal error: cuda-emulation: a %lldx%lldx%lld GEMM exceeds the bf16 scratch planned at load (%lld floats)",
                    (long long)m, (long long)n, (long long)k, (long long)e->scratch_n),
           false;
  for (int64_t i = 0; i < count; i++) {
    const float *ai = a + i * stride_a, *bi = b + i * stride_b;
    int64_t ldai = lda, ldbi = ldb;
    if (bf16 && k > 0) {  // op(A_i) is m x k, op(B_i) k x n
      float *ra = e->scratch, *rb = e->scratch + m * k;
      ldai = ta ? m : k, ldbi = tb ? k : n;
      round_matrix(ai, ta ? k : m, ldai, lda, ra);
      round_matrix(bi, tb ? n : k, ldbi, ldb, rb);
      ai = ra, bi = rb;
    }
    xf_sgemm(ta, tb, m, n, k, alpha, ai, ldai, bi, ldbi, beta, c + i * stride_c, ldc);
  }
  return true;
}

static bool e_finish(XfGpu *g) {
  (void)g;
  return true;
}

static void e_close(XfGpu *g) {
  Emu *e = g->impl;
  if (e) {
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
  *g = (XfGpu){.name = "cuda-emulation", .impl = e, .alloc = e_alloc, .release = e_release, .upload = e_copy,
               .download = e_copy, .fill = e_fill, .load = e_load, .launch = e_launch, .gemm = e_gemm, .finish = e_finish,
               .close = e_close};
  snprintf(g->desc, sizeof g->desc, "GPU %d emulated on the CPU (XF_CUDA_EMULATE)", device);
  return g;
}
