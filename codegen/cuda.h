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
  XfLaunch *launch[PROG_COUNT];
  int nlaunch[PROG_COUNT];
  int adamw;                  // names[adamw]: the AdamW update
  int *name_line;             // first source line of names[i]'s function
  int *name_kernel;           // the kernel whose class names[i] computes (-1: AdamW)
  const char *error;          // NULL, or the first op without a lowering (file:line:col:
                              // error: ...); the source is then not to be compiled
} CudaModule;

// Renders every kernel class of s (a verified graph's schedule) as CUDA C,
// with the launches of each program. Memory from a.
CudaModule *cuda_render(Arena *a, const Schedule *s);
// The kernel (index into s->kernels) whose code is at source line `line`
// (1-based), or -1: maps an NVRTC message back to an IR node.
int cuda_kernel_at_line(const CudaModule *m, int line);

#endif
