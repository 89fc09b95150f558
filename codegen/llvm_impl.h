// llvm_impl.h: what the files of the LLVM backend share (llvm.c prints
// the kernels and programs, model.c packages them): the emitter's state
// (Emit) and the helpers model.c calls. Not a public interface: llvm.h is.
#ifndef XF_LLVM_IMPL_H
#define XF_LLVM_IMPL_H

#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>

#include "../runtime/xf_abi.h"
#include "llvm.h"
#include "loops.h"

typedef LLVMValueRef V;
typedef LLVMTypeRef Ty;

// The launch record of a program's table (program_fn), private to the
// generated code; a field list as those of runtime/xf_abi.h. Its C twin only
// gives abi_structs a C layout to describe.
#define LAUNCH_REC_FIELDS(F, A, P)                                                                               \
  F(P, FN_KERNEL, fn)       /* the kernel's class function */                                                    \
  A(P, I32, slots, KS_IMM)  /* storage roots of the slots KS_OUT..KS_SCRATCH, -1: none */                        \
  F(P, I64, imm)            /* KS_IMM */                                                                         \
  F(P, I64, coef)           /* outer extent coef * B^pb * T^pt / tdiv */                                         \
  F(P, I32, pb)                                                                                                  \
  F(P, I32, pt)                                                                                                  \
  F(P, I64, tdiv)                                                                                                \
  F(P, I32, kernel)         /* its index in the global kernel order (kernel_done) */
XF_STRUCT_TYPEDEF(LaunchRec, LAUNCH_REC)
// Ids of the structs llvm.c builds: XfAbiStruct, then the launch record.
enum { LAUNCH_REC = XF_NSTRUCTS, ABI_NSTRUCTS };

typedef struct {
  LLVMContextRef C;
  LLVMModuleRef M;
  LLVMBuilderRef b;
  const Schedule *s;
  const Graph *g;
  Ty void_t, i1, i8, i16, i32, i64, f32, f64, i8p, i8pp, f32p, i32p, i16p;
  Ty kernel_t, program_t, pfor_t, sgemm_t, gemm_ex_t, done_t;
  Ty abi[ABI_NSTRUCTS];  // LLVM types of the ABI structs, built on first use (abi_type)
  V fn;                // function being emitted
  const Kernel *k;     // kernel being emitted
  V bufs, B, T, seed, step, lo, hi, api;
  LTarget forms;      // LlvmOptions.forms
  const LModule *mod;  // the schedule lowered for forms (lower_module): what each class prints
  SymSize *outer;     // per class: the outer extent its function runs over
  // the step program's variant: rows of the time axis restricted to [w0, w1)
  bool win;
  V w0, w1, wk;
  LLVMBasicBlockRef entry;
  Arena arena;    // the LKernels of lower_kernel and the printer's tables
  int gemm_types;           // the product being printed: XF_GEMM_*_BF16 of its bf16 operands (emit_gemm)
  LLVMMetadataRef tbaa[3];  // access tags of float32 values, int32 ids and bf16 values (lk_tbaa)
  // per operand slot: !alias.scope {its scope} and !noalias {every other
  // slot's} (lk_noalias)
  LLVMMetadataRef slot_scope[KS_IMM], slot_noalias[KS_IMM];
  char err[512];  // the first op without a lowering here (unlowered), located
} Emit;

static inline V ci64(Emit *e, int64_t v) { return LLVMConstInt(e->i64, (unsigned long long)v, 1); }
static inline V ci32(Emit *e, int64_t v) { return LLVMConstInt(e->i32, (unsigned long long)v, 1); }
static inline V cf32(Emit *e, double v) { return LLVMConstReal(e->f32, v); }

// LLVM types and constants of the ABI structs (runtime/xf_abi.h; llvm.c).
Ty emit_abi_type(Emit *e, int s);
Ty emit_tag_type(Emit *e, XfAbiTag tag);
V emit_abi_const(Emit *e, int s, V *f);
V emit_abi_value(Emit *e, int s, const void *c);
// A private constant array of n items, and a C string constant (llvm.c).
V emit_const_array(Emit *e, Ty elem, V *items, int n, const char *name);
V emit_cstr(Emit *e, const char *s);

// The xf_model descriptor (XfModel) over the programs, with the CUDA code
// of LlvmOptions.cuda embedded (model.c).
void model_emit_descriptor(Emit *e, V *progs, const LlvmOptions *o, V step, const V adamw[2]);

#endif
