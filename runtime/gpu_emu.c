// gpu_emu.c: the XfGpu of the CUDA emulation (gpu.h, runtime/cuda_emu.h).
//
// Device memory is host memory; load() compiles the module's CUDA C source
// for the host with the emulation header ($XF_CXX, default c++) into a
// private temporary directory, dlopens it and finds <kernel>_emu for every
// entry point; launch() calls it over the grid; GEMMs go to the CPU BLAS.
// Nothing here is a GPU: it checks the generated source's numerics and the
// host code that drives a GPU, on machines without one.
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
} Emu;

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

static bool e_load(XfGpu *g, const XfCuda *c) {
  Emu *e = g->impl;
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
  (void)g;
  for (int64_t i = 0; i < count; i++)
    xf_sgemm(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
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
