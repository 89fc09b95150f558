// llvm.h: the CPU backend (LLVM C API). See llvm.c.
#ifndef XF_LLVM_H
#define XF_LLVM_H

#include <stdbool.h>
#include <stdio.h>

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>

#include "cuda.h"
#include "kernel.h"
#include "loops.h"

typedef struct {
  int opt_level;            // 0: no optimisation; else default<O2> with vectorisation
  FILE *llvm_ir;            // if set, the optimised module's text (--emit=llvm)
  const char *object_path;  // if set, the native object written here
  // --target=cuda: the rendered kernels and their PTX, embedded as XfCuda
  const CudaModule *cuda;
  const char *ptx, *gpu_arch;
  const unsigned char *sass[2];  // XfCuda.sass: CUBINs for sass_sm[i] (size 0: none)
  size_t sass_size[2];
  int sass_sm[2];
  int precision;                 // XfModel.precision and XfCuda.precision: XF_PRECISION_*
  // the step program (incremental decoding): time_axis from causal_analyze,
  // or NULL with step_note saying why there is none
  const int *time_axis;
  const char *step_note;
  // the schedule lowered (lower_module) for the forms to print: LTARGET_CPU
  // (xfc); LTARGET_GPU only in tests, which run the GPU's descriptions on
  // the CPU against the interpreter. Required.
  const LModule *module;
  double train_ops;  // XfModel.train_ops
} LlvmOptions;

// Checks the LLVM type of every ABI struct (runtime/xf_abi.h) against its C
// layout under dl: size, alignment and the offset of each field. false with
// err set at the first difference.
bool llvm_abi_check(LLVMContextRef C, LLVMTargetDataRef dl, char *err, size_t errlen);
// Emits the module for s (kernels, programs, the xf_model descriptor); NULL
// with err set (file:line:col) when an op has no lowering in this backend.
LLVMModuleRef llvm_emit_module(LLVMContextRef C, const Schedule *s, const LlvmOptions *o, char *err, size_t errlen);
// Emits, verifies, optimises and writes the object (and/or the IR text).
bool llvm_compile(const Schedule *s, const LlvmOptions *o, char *err, size_t errlen);
// Links an object into a shared library with the system C driver ($XF_CC or cc).
bool link_shared(const char *object, const char *so, char *err, size_t errlen);

#endif
