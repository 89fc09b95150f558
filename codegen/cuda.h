// cuda.h: the CUDA backend. Schedule -> CUDA C source and launch tables
// (codegen/cuda.c); the source goes to NVRTC (codegen/cuda_nvrtc.c) and, with
// the PTX, into model.so beside the CPU code (llvm.c emits XfCuda).
#ifndef XF_CUDA_H
#define XF_CUDA_H

#include "../runtime/xf_abi.h"
#include "loops.h"

// What launch i of a program prints (CudaModule.desc): its LKernel (a kernel
// launch lower.c describes), or its LGemm (a GEMM record, or the direct
// product of a batch that is not flat), and its step in the kernel's LSteps
// (0 for a launch that is not a step; CUDA_STEP_STAGE for a product's
// staged copy, LClass.stage).
typedef struct {
  const LKernel *lk;
  const LGemm *gm;
  int step;
} CudaLaunchDesc;
enum { CUDA_STEP_STAGE = -3 };

typedef struct {
  char *source;               // the CUDA C text of every kernel class
  const char **names;         // entry points; XfLaunch.fn indexes them
  int nnames;
  XfLaunch *launch[XF_PROG_STEP + 1];  // XF_PROG_*: PROG_* (kernel.h), then the
  int nlaunch[XF_PROG_STEP + 1];       // step program (empty without a time axis)
  CudaLaunchDesc *desc[XF_PROG_STEP + 1];  // [nlaunch[p]]: what each launch prints
  int adamw;                  // names[adamw]: the AdamW update
  int grad_accum, grad_norm, grad_norm_sum;  // the optimizer's other kernels (xf_abi.h XfCuda)
  int *name_line;             // first source line of names[i]'s function
  int *name_kernel;           // the kernel whose class names[i] computes (-1: an optimizer kernel)
  const char *error;          // NULL, or the first op without a lowering (file:line:col:
                              // error: ...); the source is then not to be compiled
} CudaModule;

_Static_assert((int)XF_PROG_STEP == (int)PROG_COUNT && (int)XF_PROG_SAMPLE == (int)PROG_SAMPLE, "the CUDA tables follow kernel.h's programs");

// Renders every kernel class of s (a verified graph's schedule) as CUDA C
// from mod, its lowering for LTARGET_GPU (lower_module), with the launches
// of each program; where mod has windows (a time axis), the step program's
// too: the sampling program's launches on their windows. Memory from a.
CudaModule *cuda_render(Arena *a, const Schedule *s, const LModule *mod);
// The kernel (index into s->kernels) whose code is at source line `line`
// (1-based), or -1: maps an NVRTC message back to an IR node.
int cuda_kernel_at_line(const CudaModule *m, int line);

// cuda_cost.c: the estimated time of a training step on an H100 SXM, per
// kernel class (per step of a class with steps; AdamW last), from the launch
// table and the descriptions the launches print (loops.h).
typedef struct {
  int cls, step;         // kernel class; its step (LSteps), 0, or -1 (a GEMM record), -2 (a direct product)
  const char *what;      // the description's name ("conv_dw_partial", "gemm", "adamw")
  const Node *node;      // the IR node of the class's first kernel (its source location)
  int launches;          // per training step
  bool gemm;             // a cuBLAS record
  int64_t grid, items;   // blocks of one launch (capped as cuda_host.c caps them), work items
  int block;             // threads per block (0: a GEMM record)
  double chain;          // dependent iterations on the longest thread's path
  double bytes, flops;   // of one launch: every buffer read or written once; float operations
  double mem_us, flop_us, issue_us, lat_us;  // the bounds of one launch (issue: all SMs)
  double shm_us, shm_ideal_us;  // shared-memory wavefronts at one per clock on the SMs used; without bank conflicts
  double l1_us;          // global accesses' 128-byte lines at one per clock through L1 on the SMs used
  double us;             // the estimate of one launch
  bool few_blocks;       // a cliff: over 20 us on fewer blocks than SMs
  bool serial;           // a cliff: over 20 us and over 4x max(mem, flop, issue, shared memory)
  bool banks;            // a cliff: over 20 us, over half of it shared-memory bank conflicts
} CudaCostRow;

typedef struct {
  int64_t B, T;
  CudaCostRow *rows;
  int nrows, nkernels, ngemms;
  double total_us;       // the step: every launch, AdamW included
} CudaCost;

// The cost of m's training program at batch B, length T, GEMMs in
// precision (XF_PRECISION_*); NULL with err set on an internal mismatch.
CudaCost *cuda_cost(Arena *a, const Schedule *s, const CudaModule *m, int64_t B, int64_t T, int precision,
                    char *err, size_t errlen);
// xfc --emit=cost: the table, "cliffs: N" and the line
// "total: N kernel launches, M GEMMs, estimated X us per training step".
void cuda_cost_print(FILE *f, const CudaCost *c);

#endif
