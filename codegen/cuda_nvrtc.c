// cuda_nvrtc.c: CUDA C -> PTX through NVRTC (see cuda_nvrtc.h).
//
// Options: --gpu-architecture=<arch> (a virtual architecture, so the PTX is
// JIT-compiled by the driver for the GPU it meets), -std=c++17, and
// --fmad=true (NVRTC's default, stated: contractions into fused multiply-add
// are allowed, as in any CUDA build; the tests' tolerances cover them).
#include "cuda_nvrtc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef XF_HAVE_CUDA
#include <nvrtc.h>

#define CHECK(call)                                                                                 \
  do {                                                                                              \
    nvrtcResult r_ = (call);                                                                        \
    if (r_ != NVRTC_SUCCESS) {                                                                      \
      snprintf(err, errlen, "NVRTC: %s: %s (compiling %s for %s)", #call, nvrtcGetErrorString(r_), \
               name, arch);                                                                         \
      goto fail;                                                                                    \
    }                                                                                               \
  } while (0)

// The program's log (NULL when empty or unavailable).
static char *program_log(nvrtcProgram prog) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return NULL;
  char *log = malloc(n + 1);
  if (!log) return NULL;
  if (nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) {
    free(log);
    return NULL;
  }
  log[n] = 0;
  return log;
}

char *nvrtc_compile(const char *source, const char *name, const char *arch, char **log, char *err, size_t errlen) {
  nvrtcProgram prog = NULL;
  char *ptx = NULL, opt_arch[64];
  if (log) *log = NULL;
  snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
  const char *opts[] = {opt_arch, "-std=c++17", "--fmad=true"};
  CHECK(nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL));
  nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
  if (log) *log = program_log(prog);
  if (r != NVRTC_SUCCESS) {
    snprintf(err, errlen, "NVRTC: nvrtcCompileProgram: %s (compiling %s for %s)", nvrtcGetErrorString(r), name, arch);
    goto fail;
  }
  size_t n = 0;
  CHECK(nvrtcGetPTXSize(prog, &n));
  ptx = malloc(n + 1);
  if (!ptx) {
    snprintf(err, errlen, "NVRTC: out of memory for %zu bytes of PTX", n);
    goto fail;
  }
  CHECK(nvrtcGetPTX(prog, ptx));
  ptx[n] = 0;
  nvrtcDestroyProgram(&prog);
  return ptx;
fail:
  free(ptx);
  if (prog) nvrtcDestroyProgram(&prog);
  return NULL;
}

const char *nvrtc_version(void) {
  static char v[32];
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "NVRTC (version unknown)";
  snprintf(v, sizeof v, "NVRTC %d.%d", major, minor);
  return v;
}

#else

char *nvrtc_compile(const char *source, const char *name, const char *arch, char **log, char *err, size_t errlen) {
  (void)source, (void)name, (void)arch;
  if (log) *log = NULL;
  snprintf(err, errlen, "xfc was built without the CUDA toolkit (NVRTC): --target=cuda is not available");
  return NULL;
}

const char *nvrtc_version(void) { return "none"; }

#endif
