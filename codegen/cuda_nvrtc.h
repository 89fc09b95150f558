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
// "NVRTC <major>.<minor>", or "none" without the toolkit.
const char *nvrtc_version(void);

#endif
