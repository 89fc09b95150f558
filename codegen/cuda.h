// cuda.h: the CUDA backend. Schedule -> CUDA C source and launch tables
// (codegen/cuda.c); the source goes to NVRTC (codegen/cuda_nvrtc.c) and, with
// the PTX, into model.so beside the CPU code (llvm.c emits XfCuda).
#ifndef XF_CUDA_H
#define XF_CUDA_H

#include "../runtime/xf_abi.h"
#include "kernel.h"

typedef struct {
  char *source;               // the CUDA C text of every kernel class
  const char **names;         // entry points; XfLaunch.fn indexes them
  int nnames;
  XfLaunch *launch[XF_PROG_STEP + 1];  // XF_PROG_*: PROG_* (kernel.h), then the
  int nlaunch[XF_PROG_STEP + 1];       // step program (empty without a time axis)
  int adamw;                  // names[adamw]: the AdamW update
  int *name_line;             // first source line of names[i]'s function
  int *name_kernel;           // the kernel whose class names[i] computes (-1: AdamW)
  const char *error;          // NULL, or the first op without a lowering (file:line:col:
                              // error: ...); the source is then not to be compiled
} CudaModule;

_Static_assert((int)XF_PROG_STEP == (int)PROG_COUNT && (int)XF_PROG_SAMPLE == (int)PROG_SAMPLE, "the CUDA tables follow kernel.h's programs");

// Renders every kernel class of s (a verified graph's schedule) as CUDA C,
// with the launches of each program; with time_axis (causal_analyze), the
// step program's too: the sampling program's launches on their windows
// (lower_window). Memory from a.
CudaModule *cuda_render(Arena *a, const Schedule *s, const int *time_axis);
// The kernel (index into s->kernels) whose code is at source line `line`
// (1-based), or -1: maps an NVRTC message back to an IR node.
int cuda_kernel_at_line(const CudaModule *m, int line);

#endif
