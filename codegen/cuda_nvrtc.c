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

// One NVRTC compilation for `arch`: a virtual architecture gives PTX
// (NUL-terminated), a real one (sm) a CUBIN, ptxas verbose. *size: its bytes.
static char *compile(const char *source, const char *name, const char *arch, bool cubin, size_t *size, char **log, char *err,
                     size_t errlen) {
  nvrtcProgram prog = NULL;
  char *out = NULL, opt_arch[64];
  if (log) *log = NULL;
  *size = 0;
  snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
  const char *opts[] = {opt_arch, "-std=c++17", "--fmad=true", "--ptxas-options=-v"};
  CHECK(nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL));
  nvrtcResult r = nvrtcCompileProgram(prog, cubin ? 4 : 3, opts);
  if (log) *log = program_log(prog);
  if (r != NVRTC_SUCCESS) {
    snprintf(err, errlen, "NVRTC: nvrtcCompileProgram: %s (compiling %s for %s)", nvrtcGetErrorString(r), name, arch);
    goto fail;
  }
  size_t n = 0;
  if (cubin) CHECK(nvrtcGetCUBINSize(prog, &n));
  else CHECK(nvrtcGetPTXSize(prog, &n));
  out = malloc(n + 1);
  if (!out) {
    snprintf(err, errlen, "NVRTC: out of memory for %zu bytes of %s", n, cubin ? "SASS" : "PTX");
    goto fail;
  }
  if (cubin) CHECK(nvrtcGetCUBIN(prog, out));
  else CHECK(nvrtcGetPTX(prog, out));
  out[n] = 0;
  *size = n;
  nvrtcDestroyProgram(&prog);
  return out;
fail:
  free(out);
  if (prog) nvrtcDestroyProgram(&prog);
  return NULL;
}

char *nvrtc_compile(const char *source, const char *name, const char *arch, char **log, char *err, size_t errlen) {
  size_t n;
  return compile(source, name, arch, false, &n, log, err, errlen);
}

unsigned char *nvrtc_cubin(const char *source, const char *name, const char *sm, size_t *size, char **log, char *err,
                           size_t errlen) {
  return (unsigned char *)compile(source, name, sm, true, size, log, err, errlen);
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

unsigned char *nvrtc_cubin(const char *source, const char *name, const char *sm, size_t *size, char **log, char *err,
                           size_t errlen) {
  (void)source, (void)name, (void)sm;
  if (log) *log = NULL;
  *size = 0;
  snprintf(err, errlen, "xfc was built without the CUDA toolkit (NVRTC): --target=cuda is not available");
  return NULL;
}

const char *nvrtc_version(void) { return "none"; }

#endif

// ptxas -v, per kernel:
//   ptxas info    : Compiling entry function 'xf_k3' for 'sm_80'
//   ptxas info    : Function properties for xf_k3
//       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 32 registers, 8192 bytes smem, 400 bytes cmem[0]
NvrtcResources nvrtc_resources(const char *log) {
  NvrtcResources r = {0};
  char fn[64] = "";
  for (const char *p = log; p && *p;) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
    const char *q;
    long a, b;
    int regs;
    if ((q = strstr(line, "Compiling entry function '"))) {
      q += strlen("Compiling entry function '");
      size_t n = strcspn(q, "'");
      snprintf(fn, sizeof fn, "%.*s", (int)(n < sizeof fn ? n : sizeof fn - 1), q);
      r.kernels++;
    } else if ((q = strstr(line, "bytes spill stores")) && sscanf(strstr(line, ", ") + 2, "%ld bytes spill stores, %ld", &a, &b) == 2) {
      r.spill_stores += a, r.spill_loads += b;
    } else if ((q = strstr(line, "Used ")) && sscanf(q, "Used %d registers", &regs) == 1) {
      if (regs > r.max_regs) r.max_regs = regs, snprintf(r.max_regs_kernel, sizeof r.max_regs_kernel, "%s", fn);
      const char *sm = strstr(line, "bytes smem");
      if (sm) {
        const char *d = sm;
        while (d > line && d[-1] == ' ') d--;
        while (d > line && d[-1] >= '0' && d[-1] <= '9') d--;
        long bytes = atol(d);
        if (bytes > r.max_smem) r.max_smem = bytes;
      }
    }
    p = eol ? eol + 1 : NULL;
  }
  return r;
}
