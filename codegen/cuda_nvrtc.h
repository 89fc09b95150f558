// cuda_nvrtc.h: CUDA C -> PTX through NVRTC (codegen/cuda_nvrtc.c).
#ifndef XF_CUDA_NVRTC_H
#define XF_CUDA_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

// Compiles `source` (named `name` in messages) to PTX for the virtual
// architecture `arch` (e.g. "compute_80"). Returns the PTX, NUL-terminated
// and malloc'd; NULL on failure with a one-line message in err ("NVRTC:
// <call>: <error string>") and, when NVRTC produced one, its compile log in
// *log (malloc'd; NULL otherwise). Without the CUDA toolkit (XF_HAVE_CUDA
// undefined) it fails saying that xfc was built without it.
char *nvrtc_compile(const char *source, const char *name, const char *arch, char **log, char *err, size_t errlen);
// The same to SASS for the real architecture `sm` (e.g. "sm_90"): a CUBIN,
// malloc'd, *size its bytes. ptxas runs verbose: *log (NULL when unwanted)
// holds its resource lines per kernel (nvrtc_resources reads them).
unsigned char *nvrtc_cubin(const char *source, const char *name, const char *sm, size_t *size, char **log, char *err,
                           size_t errlen);

// What ptxas reported in a verbose log: the kernels, the largest register
// count (and its kernel), the spill stores and loads in bytes over all
// kernels, the largest static shared memory.
typedef struct {
  int kernels, max_regs;
  char max_regs_kernel[64];
  long spill_stores, spill_loads, max_smem;
} NvrtcResources;
NvrtcResources nvrtc_resources(const char *log);

// "NVRTC <major>.<minor>", or "none" without the toolkit.
const char *nvrtc_version(void);

#endif
