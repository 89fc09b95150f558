// llvm.c: the CPU backend. Schedule -> LLVM IR (through the LLVM C API);
// model.c packages it: the descriptor, the object, model.so.
//
// Requires: a Schedule (kernel.h) of a verified graph with its backward pass.
// Guarantees: a module with one function per kernel class (kernel.h),
//   void xf_kN(i8** slots, i64 B, i64 T, i64 seed, i32 step, i64 lo, i64 hi, i8* api)
// computing the kernel's outer indices [lo, hi) on the operands in slots
// (KS_*); three program functions
//   void xf_prog_{train,eval,sample}(i8* api, i8** bufs, i64 B, i64 T, i64 seed, i32 step)
// that fill each kernel's slots from the buffer table and hand its class
// function to api->parallel_for in order; xf_adamw, the optimizer's update
// (the same signature, elements [lo, hi) of one parameter); and (model.c)
// the constant `xf_model` (runtime/xf_abi.h) describing the model. The
// generated code calls only libm and the XfApi functions (sgemm, parallel_for).
//
// Every function prints the class's form in the LModule (LlvmOptions.module):
// an LKernel (emit_lkernel), an LGemm (emit_gemm), an LConv's loop nest
// (emit_conv) or LSteps (the GPU's chunked forms, where the tests print
// the GPU's forms). Both compute what the reference interpreter (interp/interp.c) does in float32;
// the tests compare the two.
#include "llvm.h"

#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Target.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/xf_abi.h"
#include "loops.h"

#include "llvm_impl.h"


// ---- the ABI structs (runtime/xf_abi.h) -----------------------------------------
// Each struct's LLVM type is built from its field list, one LLVM type per
// field type tag; its fields are addressed by their XF_<S>_F_* index.

typedef struct {
  XfAbiTag tag;
  int n;          // array length; 0: a single value
  size_t offset;  // offsetof in the C struct
  const char *name;
} AbiField;

typedef struct {
  const char *name;
  const AbiField *fields;
  int nfields;
  size_t size, align;  // of the C struct
} AbiStruct;

#define ABI_FIELD(T, tag, name) {XF_TAG_##tag, 0, offsetof(T, name), #name},
#define ABI_ARRAY(T, tag, name, n) {XF_TAG_##tag, n, offsetof(T, name), #name},
#define ABI_FIELDS(T, P) static const AbiField fields_##T[] = {P##_FIELDS(ABI_FIELD, ABI_ARRAY, T)};
#define ABI_STRUCT(T, P) [P] = {#T, fields_##T, P##_NFIELDS, sizeof(T), _Alignof(T)},
XF_ABI_STRUCTS(ABI_FIELDS)
ABI_FIELDS(LaunchRec, LAUNCH_REC)
static const AbiStruct abi_structs[ABI_NSTRUCTS] = {XF_ABI_STRUCTS(ABI_STRUCT) ABI_STRUCT(LaunchRec, LAUNCH_REC)};

// Bytes of one value of each tag in C.
#define TAG_SIZE(tag, ctype) sizeof(ctype),
static const size_t tag_size[XF_NTAGS] = {XF_ABI_TAGS(TAG_SIZE)};


// The LLVM type of a field type tag.
Ty emit_tag_type(Emit *e, XfAbiTag tag) {
  switch (tag) {
  case XF_TAG_I32: case XF_TAG_U32: return e->i32;
  case XF_TAG_I64: case XF_TAG_U64: return e->i64;
  case XF_TAG_F32: return e->f32;
  case XF_TAG_F64: return e->f64;
  case XF_TAG_PTR: case XF_TAG_STR: return e->i8p;
  case XF_TAG_P_STR: return e->i8pp;
  case XF_TAG_P_I32: return e->i32p;
  case XF_TAG_SYM: return emit_abi_type(e, XF_SYM);
  case XF_TAG_P_CONFIG: return LLVMPointerType(emit_abi_type(e, XF_CONFIG_ENTRY), 0);
  case XF_TAG_P_BUFFER: return LLVMPointerType(emit_abi_type(e, XF_BUFFER), 0);
  case XF_TAG_P_LAUNCH: return LLVMPointerType(emit_abi_type(e, XF_LAUNCH), 0);
  case XF_TAG_P_CUDA: return LLVMPointerType(emit_abi_type(e, XF_CUDA), 0);
  case XF_TAG_FN_KERNEL: return LLVMPointerType(e->kernel_t, 0);
  case XF_TAG_FN_PARALLEL_FOR: return LLVMPointerType(e->pfor_t, 0);
  case XF_TAG_FN_SGEMM: return LLVMPointerType(e->sgemm_t, 0);
  case XF_TAG_FN_GEMM_EX: return LLVMPointerType(e->gemm_ex_t, 0);
  case XF_TAG_FN_KERNEL_DONE: return LLVMPointerType(e->done_t, 0);
  case XF_TAG_FN_PROGRAM: return LLVMPointerType(e->program_t, 0);
  case XF_NTAGS: break;
  }
  return NULL;
}

// The LLVM struct of ABI struct s (XfAbiStruct or LAUNCH_REC): its fields in
// order, an array of n for a field of n > 0.
Ty emit_abi_type(Emit *e, int s) {
  if (e->abi[s]) return e->abi[s];
  const AbiStruct *a = &abi_structs[s];
  Ty *f = calloc((size_t)a->nfields, sizeof(Ty));
  for (int i = 0; i < a->nfields; i++) {
    Ty t = emit_tag_type(e, a->fields[i].tag);
    f[i] = a->fields[i].n ? LLVMArrayType(t, (unsigned)a->fields[i].n) : t;
  }
  e->abi[s] = LLVMStructTypeInContext(e->C, f, (unsigned)a->nfields, 0);
  free(f);
  return e->abi[s];
}

static _Noreturn void abi_internal(const AbiStruct *a, int i, const char *what) {
  fprintf(stderr, "xfc: internal error: llvm.c: %s.%s %s\n", a->name, a->fields[i].name, what);
  abort();
}

// The constant of ABI struct s from f[XF_<S>_F_*], every field set.
V emit_abi_const(Emit *e, int s, V *f) {
  const AbiStruct *a = &abi_structs[s];
  for (int i = 0; i < a->nfields; i++)
    if (!f[i]) abi_internal(a, i, "has no value");
  return LLVMConstNamedStruct(emit_abi_type(e, s), f, (unsigned)a->nfields);
}


// The constant of the tag's C value at p (numbers and structs of numbers).
static V tag_value(Emit *e, XfAbiTag tag, const char *p, const AbiStruct *a, int i) {
  switch (tag) {
  case XF_TAG_I32: { int32_t v; memcpy(&v, p, sizeof v); return ci32(e, v); }
  case XF_TAG_U32: { uint32_t v; memcpy(&v, p, sizeof v); return LLVMConstInt(e->i32, v, 0); }
  case XF_TAG_I64: { int64_t v; memcpy(&v, p, sizeof v); return ci64(e, v); }
  case XF_TAG_U64: { uint64_t v; memcpy(&v, p, sizeof v); return LLVMConstInt(e->i64, v, 0); }
  case XF_TAG_F32: { float v; memcpy(&v, p, sizeof v); return LLVMConstReal(e->f32, v); }
  case XF_TAG_F64: { double v; memcpy(&v, p, sizeof v); return LLVMConstReal(e->f64, v); }
  case XF_TAG_SYM: return emit_abi_value(e, XF_SYM, p);
  default: abi_internal(a, i, "is no number: no constant of its C value");
  }
}

// The constant of ABI struct s holding the C struct at c, field by field
// (structs whose fields are numbers or such structs: XfSym, XfLaunch).
V emit_abi_value(Emit *e, int s, const void *c) {
  const AbiStruct *a = &abi_structs[s];
  V *f = calloc((size_t)a->nfields, sizeof(V));
  for (int i = 0; i < a->nfields; i++) {
    const AbiField *fl = &a->fields[i];
    const char *p = (const char *)c + fl->offset;
    if (!fl->n) {
      f[i] = tag_value(e, fl->tag, p, a, i);
      continue;
    }
    V *el = calloc((size_t)fl->n, sizeof(V));
    for (int j = 0; j < fl->n; j++) el[j] = tag_value(e, fl->tag, p + (size_t)j * tag_size[fl->tag], a, i);
    f[i] = LLVMConstArray(emit_tag_type(e, fl->tag), el, (unsigned)fl->n);
    free(el);
  }
  V v = emit_abi_const(e, s, f);
  free(f);
  return v;
}

static V dim(Emit *e, Dim d) {
  if (d.kind == DIM_T && dim_tdiv(d) > 1) return LLVMBuildUDiv(e->b, e->T, ci64(e, dim_tdiv(d)), "");
  return d.kind == DIM_B ? e->B : d.kind == DIM_T ? e->T : ci64(e, d.n);
}

// coef * B^pb * T^pt / tdiv
static V sym(Emit *e, SymSize z) {
  V v = ci64(e, z.coef);
  for (int i = 0; i < z.pb; i++) v = LLVMBuildMul(e->b, v, e->B, "");
  for (int i = 0; i < z.pt; i++) v = LLVMBuildMul(e->b, v, e->T, "");
  if (symsize_den(z) > 1) v = LLVMBuildUDiv(e->b, v, ci64(e, symsize_den(z)), "");
  return v;
}

// prod of dims [from, to) of shape s
static V dprod(Emit *e, const Shape *s, int from, int to) {
  V r = ci64(e, 1);
  for (int i = from; i < to; i++) r = LLVMBuildMul(e->b, r, dim(e, s->d[i]), "");
  return r;
}

// Pointer of type pt to the elements of operand `slot` (KS_*) of the call:
// float, int32 (is_int) or, for bf16 storage, i16.
static V buf_as(Emit *e, int slot, Ty pt) {
  V idx = ci64(e, slot);
  V p = LLVMBuildLoad2(e->b, e->i8p, LLVMBuildGEP2(e->b, e->i8p, e->bufs, &idx, 1, ""), "");
  return LLVMBuildBitCast(e->b, p, pt, "");
}
static V buf(Emit *e, int slot, bool is_int) { return buf_as(e, slot, is_int ? e->i32p : e->f32p); }
static V buf_bf16(Emit *e, int slot) { return buf_as(e, slot, e->i16p); }

// The call's immediate operand (KS_IMM) as an i32.
static V imm32(Emit *e) { return LLVMBuildTrunc(e->b, LLVMBuildPtrToInt(e->b, buf_as(e, KS_IMM, e->i8p), e->i64, ""), e->i32, ""); }

static V load(Emit *e, V base, V idx) {
  return LLVMBuildLoad2(e->b, e->f32, LLVMBuildGEP2(e->b, e->f32, base, &idx, 1, ""), "");
}
static V load_i(Emit *e, V base, V idx) {
  return LLVMBuildLoad2(e->b, e->i32, LLVMBuildGEP2(e->b, e->i32, base, &idx, 1, ""), "");
}
static V store(Emit *e, V base, V idx, V v) { return LLVMBuildStore(e->b, v, LLVMBuildGEP2(e->b, e->f32, base, &idx, 1, "")); }

// bf16 storage (Buffer.bf16): an element is the upper half of a float32.
// Widening is exact; narrowing rounds to nearest even, and a NaN stays a
// quiet NaN (as vcvtneps2bf16 and runtime/gemm_bf16.c).
static V load_bf16(Emit *e, V base, V idx, V *inst) {
  V h = *inst = LLVMBuildLoad2(e->b, e->i16, LLVMBuildGEP2(e->b, e->i16, base, &idx, 1, ""), "");
  V w = LLVMBuildShl(e->b, LLVMBuildZExt(e->b, h, e->i32, ""), LLVMConstInt(e->i32, 16, 0), "");
  return LLVMBuildBitCast(e->b, w, e->f32, "");
}
// The bf16 bits of f32 v (in the low half of an i32).
static V bf16_bits(Emit *e, V v) {
  LLVMBuilderRef b = e->b;
  V u = LLVMBuildBitCast(b, v, e->i32, ""), hi = LLVMBuildLShr(b, u, LLVMConstInt(e->i32, 16, 0), "");
  V odd = LLVMBuildAnd(b, hi, LLVMConstInt(e->i32, 1, 0), "");
  V r = LLVMBuildLShr(b, LLVMBuildAdd(b, u, LLVMBuildAdd(b, odd, LLVMConstInt(e->i32, 0x7fff, 0), ""), ""), LLVMConstInt(e->i32, 16, 0), "");
  V nan = LLVMBuildICmp(b, LLVMIntUGT, LLVMBuildAnd(b, u, LLVMConstInt(e->i32, 0x7fffffff, 0), ""), LLVMConstInt(e->i32, 0x7f800000, 0), "");
  return LLVMBuildSelect(b, nan, LLVMBuildOr(b, hi, LLVMConstInt(e->i32, 0x40, 0), ""), r, "");
}
static V store_bf16(Emit *e, V base, V idx, V v) {
  return LLVMBuildStore(e->b, LLVMBuildTrunc(e->b, bf16_bits(e, v), e->i16, ""), LLVMBuildGEP2(e->b, e->i16, base, &idx, 1, ""));
}
// LX_BF16: v rounded to bf16, widened back.
static V round_bf16(Emit *e, V v) {
  return LLVMBuildBitCast(e->b, LLVMBuildShl(e->b, bf16_bits(e, v), LLVMConstInt(e->i32, 16, 0), ""), e->f32, "");
}

// A float variable: an alloca in the entry block (mem2reg makes it a register).
static V var(Emit *e, Ty t) {
  LLVMBuilderRef b = LLVMCreateBuilderInContext(e->C);
  LLVMValueRef first = LLVMGetFirstInstruction(e->entry);
  if (first) LLVMPositionBuilderBefore(b, first);
  else LLVMPositionBuilderAtEnd(b, e->entry);
  V v = LLVMBuildAlloca(b, t, "");
  LLVMDisposeBuilder(b);
  return v;
}

// ---- loops -------------------------------------------------------------------

typedef struct {
  LLVMBasicBlockRef head, exit;
  V phi, next_src;
} Loop;

// for (i = lo; i < hi; i++): returns i; the body follows until loop_end.
static V loop_begin(Emit *e, Loop *L, V lo, V hi) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(e->b);
  L->head = LLVMAppendBasicBlockInContext(e->C, e->fn, "loop");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(e->C, e->fn, "body");
  L->exit = LLVMAppendBasicBlockInContext(e->C, e->fn, "done");
  LLVMBuildBr(e->b, L->head);
  LLVMPositionBuilderAtEnd(e->b, L->head);
  L->phi = LLVMBuildPhi(e->b, e->i64, "i");
  LLVMAddIncoming(L->phi, &lo, &pre, 1);
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, L->phi, hi, ""), body, L->exit);
  LLVMPositionBuilderAtEnd(e->b, body);
  return L->phi;
}

// Closes loop L: the increment and the back edge (returned), then the
// builder at the exit.
static V loop_latch(Emit *e, Loop *L) {
  V next = LLVMBuildAdd(e->b, L->phi, ci64(e, 1), "");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(e->b);
  LLVMAddIncoming(L->phi, &next, &latch, 1);
  V br = LLVMBuildBr(e->b, L->head);
  LLVMPositionBuilderAtEnd(e->b, L->exit);
  return br;
}
static void loop_end(Emit *e, Loop *L) { loop_latch(e, L); }


// ---- math --------------------------------------------------------------------

static V call_f32(Emit *e, const char *name, V x) {
  Ty ft = LLVMFunctionType(e->f32, &e->f32, 1, 0);
  V f = LLVMGetNamedFunction(e->M, name);
  if (!f) f = LLVMAddFunction(e->M, name, ft);
  return LLVMBuildCall2(e->b, ft, f, &x, 1, "");
}

static V select_f(Emit *e, V cond, V a, V b) { return LLVMBuildSelect(e->b, cond, a, b, ""); }
// x > y ? x : y (relu, max reductions, softmax maxima)
static V max_f(Emit *e, V x, V y) { return select_f(e, LLVMBuildFCmp(e->b, LLVMRealOGT, x, y, ""), x, y); }

// e^x in float32 as straight-line code, so that loops using it vectorise
// (a libm call stops the vectoriser): x = n ln2 + r with |r| <= ln2/2
// (ln2 split in two for an exact product), e^r by the Cephes expf
// polynomial (relative error about 1e-7), 2^n through the exponent bits.
// Below -87.34 the result is 0 (float32 underflow), above 88.72 +inf; NaN
// stays NaN.
static V exp_f32(Emit *e, V x) {
  LLVMBuilderRef b = e->b;
  const double lo = -87.3365447505531, hi = 88.7228391116729;
  V xc = select_f(e, LLVMBuildFCmp(b, LLVMRealOGT, x, cf32(e, hi), ""), cf32(e, hi), x);
  xc = select_f(e, LLVMBuildFCmp(b, LLVMRealOLT, xc, cf32(e, lo), ""), cf32(e, lo), xc);
  V n = call_f32(e, "llvm.floor.f32", LLVMBuildFAdd(b, LLVMBuildFMul(b, xc, cf32(e, 1.44269504088896341), ""), cf32(e, 0.5), ""));
  V r = LLVMBuildFSub(b, xc, LLVMBuildFMul(b, n, cf32(e, 0.693359375), ""), "");
  r = LLVMBuildFSub(b, r, LLVMBuildFMul(b, n, cf32(e, -2.12194440e-4), ""), "");
  static const double c[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2, 1.6666665459E-1,
                             5.0000001201E-1};
  V p = cf32(e, c[0]);
  for (int i = 1; i < 6; i++) p = LLVMBuildFAdd(b, LLVMBuildFMul(b, p, r, ""), cf32(e, c[i]), "");
  V y = LLVMBuildFAdd(b, LLVMBuildFAdd(b, LLVMBuildFMul(b, p, LLVMBuildFMul(b, r, r, ""), ""), r, ""), cf32(e, 1), "");
  V bits = LLVMBuildShl(b, LLVMBuildAdd(b, LLVMBuildFPToSI(b, n, e->i32, ""), LLVMConstInt(e->i32, 127, 0), ""),
                        LLVMConstInt(e->i32, 23, 0), "");
  V res = LLVMBuildFMul(b, y, LLVMBuildBitCast(b, bits, e->f32, ""), "");
  res = select_f(e, LLVMBuildFCmp(b, LLVMRealOLT, x, cf32(e, lo), ""), cf32(e, 0), res);
  return select_f(e, LLVMBuildFCmp(b, LLVMRealOGT, x, cf32(e, hi), ""), cf32(e, INFINITY), res);
}

// erf(x) in float32 as straight-line code (vectorises, as exp_f32): for
// |x| < 3.92, x P(x^2) / Q(x^2), a rational fit of degrees 4 and 6 to
// erf(x) / x on [0, 3.92] (relative error 3.2e-8 in exact arithmetic, at
// most 3.4e-7 evaluated in float32); beyond it +-1 (erf(3.92) rounds to 1
// in float32); NaN stays NaN (every comparison with it false).
static V erf_f32(Emit *e, V x) {
  LLVMBuilderRef b = e->b;
  const double X = 3.92;
  static const double p[] = {2.2823636064336813e-04, 3.4953366479635157e-03, 5.1226844215067194e-02, 1.8772133470184912e-01,
                             1.1283791572597335};
  static const double q[] = {-1.1319270428676024e-07, 2.3128225837422954e-05, 1.0329092331298043e-03, 1.4252468775776010e-02,
                             1.1196746950075492e-01, 4.9969649068739547e-01, 1.0};
  V xc = select_f(e, LLVMBuildFCmp(b, LLVMRealOGT, x, cf32(e, X), ""), cf32(e, X), x);
  xc = select_f(e, LLVMBuildFCmp(b, LLVMRealOLT, xc, cf32(e, -X), ""), cf32(e, -X), xc);
  V z = LLVMBuildFMul(b, xc, xc, ""), P = cf32(e, p[0]), Q = cf32(e, q[0]);
  for (int i = 1; i < 5; i++) P = LLVMBuildFAdd(b, LLVMBuildFMul(b, P, z, ""), cf32(e, p[i]), "");
  for (int i = 1; i < 7; i++) Q = LLVMBuildFAdd(b, LLVMBuildFMul(b, Q, z, ""), cf32(e, q[i]), "");
  return LLVMBuildFDiv(b, LLVMBuildFMul(b, xc, P, ""), Q, "");
}

// The element t of a reduction over an index range, emitted where it is
// called (once per lane and once in the tail loop of row_reduce).
typedef V (*RowElem)(Emit *e, const void *ctx, V t);

// op (LX_ADD: sum from 0; LX_MAX: maximum from -inf, acc = x > acc ? x : acc)
// of elem(t) for t in [lo, hi). Eight independent partial results over lanes
// (t - lo) mod 8, then a fixed tree; the lanes are isomorphic straight-line
// code that the SLP vectoriser packs into vector registers. The order is
// fixed by the code, so results do not depend on threads.
#define RR_LANES 8
static V row_reduce(Emit *e, LExprKind op, V lo, V hi, RowElem elem, const void *ctx) {
  LLVMBuilderRef b = e->b;
  bool mx = op == LX_MAX;
  V acc[RR_LANES];
  V init = cf32(e, mx ? -INFINITY : 0);
  for (int u = 0; u < RR_LANES; u++) acc[u] = var(e, e->f32), LLVMBuildStore(b, init, acc[u]);
#define RR_STEP(u, t)                                                                \
  do {                                                                               \
    V x_ = elem(e, ctx, (t)), a_ = LLVMBuildLoad2(b, e->f32, acc[u], "");            \
    LLVMBuildStore(b, mx ? max_f(e, x_, a_) : LLVMBuildFAdd(b, a_, x_, ""), acc[u]); \
  } while (0)
  Loop lb, lt;
  V blocks = LLVMBuildSDiv(b, LLVMBuildSub(b, hi, lo, ""), ci64(e, RR_LANES), "");
  V blk = loop_begin(e, &lb, ci64(e, 0), blocks);
  V t0 = LLVMBuildAdd(b, lo, LLVMBuildMul(b, blk, ci64(e, RR_LANES), ""), "");
  for (int u = 0; u < RR_LANES; u++) RR_STEP(u, LLVMBuildAdd(b, t0, ci64(e, u), ""));
  loop_end(e, &lb);
  V t = loop_begin(e, &lt, LLVMBuildAdd(b, lo, LLVMBuildMul(b, blocks, ci64(e, RR_LANES), ""), ""), hi);
  RR_STEP(0, t);
  loop_end(e, &lt);
#undef RR_STEP
  V v[RR_LANES];
  for (int u = 0; u < RR_LANES; u++) v[u] = LLVMBuildLoad2(b, e->f32, acc[u], "");
  for (int w = RR_LANES / 2; w >= 1; w /= 2)
    for (int u = 0; u < w; u++) v[u] = mx ? max_f(e, v[u + w], v[u]) : LLVMBuildFAdd(b, v[u], v[u + w], "");
  return v[0];
}

// x[xbase + t] y[ybase + t]: the elements of a dot product, for row_reduce.
typedef struct {
  V x, xbase, y, ybase;
} RowDot;

static V row_dot_elem(Emit *e, const void *ctx, V t) {
  const RowDot *r = ctx;
  V x = load(e, r->x, LLVMBuildAdd(e->b, r->xbase, t, ""));
  return LLVMBuildFMul(e->b, x, load(e, r->y, LLVMBuildAdd(e->b, r->ybase, t, "")), "");
}

// ---- Philox4x32-10 in IR (runtime/rng.h): uniform in [0, 1) ----------------------

static V philox_uniform(Emit *e, V seed, V stream, V index, V step) {
  LLVMBuilderRef b = e->b;
  V x0 = LLVMBuildTrunc(b, index, e->i32, ""), x1 = LLVMBuildTrunc(b, LLVMBuildLShr(b, index, ci64(e, 32), ""), e->i32, "");
  V x2 = stream, x3 = step;
  V k0 = LLVMBuildTrunc(b, seed, e->i32, ""), k1 = LLVMBuildTrunc(b, LLVMBuildLShr(b, seed, ci64(e, 32), ""), e->i32, "");
  V m0 = LLVMConstInt(e->i64, 0xD2511F53u, 0), m1 = LLVMConstInt(e->i64, 0xCD9E8D57u, 0);
  for (int r = 0; r < 10; r++) {
    V p0 = LLVMBuildMul(b, m0, LLVMBuildZExt(b, x0, e->i64, ""), "");
    V p1 = LLVMBuildMul(b, m1, LLVMBuildZExt(b, x2, e->i64, ""), "");
    V hi0 = LLVMBuildTrunc(b, LLVMBuildLShr(b, p0, ci64(e, 32), ""), e->i32, ""), lo0 = LLVMBuildTrunc(b, p0, e->i32, "");
    V hi1 = LLVMBuildTrunc(b, LLVMBuildLShr(b, p1, ci64(e, 32), ""), e->i32, ""), lo1 = LLVMBuildTrunc(b, p1, e->i32, "");
    x0 = LLVMBuildXor(b, LLVMBuildXor(b, hi1, x1, ""), k0, "");
    x1 = lo1;
    x2 = LLVMBuildXor(b, LLVMBuildXor(b, hi0, x3, ""), k1, "");
    x3 = lo0;
    k0 = LLVMBuildAdd(b, k0, LLVMConstInt(e->i32, 0x9E3779B9u, 0), "");
    k1 = LLVMBuildAdd(b, k1, LLVMConstInt(e->i32, 0xBB67AE85u, 0), "");
  }
  V bits = LLVMBuildLShr(b, x0, LLVMConstInt(e->i32, 8, 0), "");
  return LLVMBuildFMul(b, LLVMBuildUIToFP(b, bits, e->f64, ""), LLVMConstReal(e->f64, 1.0 / 16777216.0), "");
}

// ---- products (LGemm) and the causal convolutions

// Field f (XF_API_F_*) of the XfApi at api (an i8*).
static V api_field(Emit *e, V api, int f) {
  Ty api_t = emit_abi_type(e, XF_API);
  V apip = LLVMBuildBitCast(e->b, api, LLVMPointerType(api_t, 0), "");
  return LLVMBuildLoad2(e->b, LLVMStructGetTypeAtIndex(api_t, (unsigned)f), LLVMBuildStructGEP2(e->b, api_t, apip, (unsigned)f, ""), "");
}

// api->sgemm(api, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
// With bf16 operands (Emit.gemm_types: XF_GEMM_*_BF16 bits):
// api->gemm_ex(api, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, types).
static void call_sgemm_a(Emit *e, int ta, int tb, V m, V n, V k, float alpha, V a, V lda, V b, V ldb, float beta, V c, V ldc) {
  if (e->gemm_types) {
    V fn = api_field(e, e->api, XF_API_F_gemm_ex);
    V args[] = {e->api, ci32(e, ta), ci32(e, tb), m, n, k, cf32(e, alpha), LLVMBuildBitCast(e->b, a, e->i8p, ""), lda,
                LLVMBuildBitCast(e->b, b, e->i8p, ""), ldb, cf32(e, beta), LLVMBuildBitCast(e->b, c, e->i8p, ""), ldc,
                ci32(e, e->gemm_types)};
    LLVMBuildCall2(e->b, e->gemm_ex_t, fn, args, 15, "");
    return;
  }
  V fn = api_field(e, e->api, XF_API_F_sgemm);
  V args[] = {e->api, ci32(e, ta), ci32(e, tb), m, n, k, cf32(e, alpha), a, lda, b, ldb, cf32(e, beta), c, ldc};
  LLVMBuildCall2(e->b, e->sgemm_t, fn, args, 14, "");
}
static void call_sgemm(Emit *e, int ta, int tb, V m, V n, V k, V a, V lda, V b, V ldb, float beta, V c, V ldc) {
  call_sgemm_a(e, ta, tb, m, n, k, 1, a, lda, b, ldb, beta, c, ldc);
}

// &base[off], in elements of base's type (f32, or i16 for bf16 storage).
static V gep(Emit *e, V base, V off) { return LLVMBuildGEP2(e->b, LLVMGetElementType(LLVMTypeOf(base)), base, &off, 1, ""); }

static void zero(Emit *e, V base, V from, V count) {
  Loop lz;
  V z = loop_begin(e, &lz, ci64(e, 0), count);
  store(e, base, LLVMBuildAdd(e->b, from, z, ""), cf32(e, 0));
  loop_end(e, &lz);
}

// The GEMMs of an LGemm (loops.h) for the kernel's outer indices [lo, hi):
// batch entries (the rows of [lo, hi) as one GEMM when folded), the
// columns of C (split_cols), or rows of A and C (split_rows: one GEMM).
// The step program's variant (Emit.win): rows [w0, w1) of each entry;
// folded, a window of one row is one GEMM over the entries (row w0 of
// each, m rows apart): the weights are read once for every stream, not
// once per stream.
static void emit_gemm_calls(Emit *e, const LGemm *gm);
static void emit_gemm(Emit *e, const LGemm *gm) {
  e->gemm_types = (gm->bf16[LG_A] ? XF_GEMM_A_BF16 : 0) | (gm->bf16[LG_B] ? XF_GEMM_B_BF16 : 0) | (gm->bf16[LG_C] ? XF_GEMM_C_BF16 : 0);
  emit_gemm_calls(e, gm);
  e->gemm_types = 0;
}
static void emit_gemm_calls(Emit *e, const LGemm *gm) {
  V A = gm->bf16[LG_A] ? buf_bf16(e, gm->slot[LG_A]) : buf(e, gm->slot[LG_A], false);
  V Bm = gm->bf16[LG_B] ? buf_bf16(e, gm->slot[LG_B]) : buf(e, gm->slot[LG_B], false);
  V C = gm->bf16[LG_C] ? buf_bf16(e, gm->slot[LG_C]) : buf(e, gm->slot[LG_C], false);
  V m = sym(e, gm->m), n = sym(e, gm->n), k = sym(e, gm->k);
  V lda = sym(e, gm->ld[LG_A]), ldb = sym(e, gm->ld[LG_B]), ldc = sym(e, gm->ld[LG_C]);
  if (gm->split_cols) {  // columns [lo, hi) of C and of B (not transposed)
    call_sgemm(e, gm->ta, gm->tb, m, LLVMBuildSub(e->b, e->hi, e->lo, ""), k, A, lda, gep(e, Bm, e->lo), ldb, 0,
               gep(e, C, e->lo), ldc);
    return;
  }
  if (gm->split_rows && !e->win) {  // rows [lo, hi) of the folded product
    call_sgemm(e, gm->ta, gm->tb, LLVMBuildSub(e->b, e->hi, e->lo, ""), n, k, gep(e, A, LLVMBuildMul(e->b, e->lo, lda, "")), lda,
               Bm, ldb, 0, gep(e, C, LLVMBuildMul(e->b, e->lo, ldc, "")), ldc);
    return;
  }
  V row0 = ci64(e, 0);
  LLVMBasicBlockRef after = NULL;
  if (e->win && gm->fold && !gm->ta) {  // one position of every entry: one GEMM over the entries' rows w0, lda apart
    LLVMBasicBlockRef one = LLVMAppendBasicBlockInContext(e->C, e->fn, "win1"),
                      each = LLVMAppendBasicBlockInContext(e->C, e->fn, "wineach");
    after = LLVMAppendBasicBlockInContext(e->C, e->fn, "windone");
    LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntEQ, LLVMBuildSub(e->b, e->w1, e->w0, ""), ci64(e, 1), ""), one, each);
    LLVMPositionBuilderAtEnd(e->b, one);
    V first = LLVMBuildAdd(e->b, LLVMBuildMul(e->b, e->lo, m, ""), e->w0, "");
    call_sgemm(e, gm->ta, gm->tb, LLVMBuildSub(e->b, e->hi, e->lo, ""), n, k, gep(e, A, LLVMBuildMul(e->b, first, lda, "")),
               LLVMBuildMul(e->b, m, lda, ""), Bm, ldb, 0, gep(e, C, LLVMBuildMul(e->b, first, ldc, "")),
               LLVMBuildMul(e->b, m, ldc, ""));
    LLVMBuildBr(e->b, after);
    LLVMPositionBuilderAtEnd(e->b, each);
  }
  if (e->win) row0 = e->w0, m = LLVMBuildSub(e->b, e->w1, e->w0, "");
  if (gm->fold && !e->win) {  // the entries' rows are contiguous in A and C, B is shared
    V first = LLVMBuildMul(e->b, e->lo, m, "");
    call_sgemm(e, gm->ta, gm->tb, LLVMBuildMul(e->b, LLVMBuildSub(e->b, e->hi, e->lo, ""), m, ""), n, k,
               gep(e, A, LLVMBuildMul(e->b, first, lda, "")), lda, Bm, ldb, 0, gep(e, C, LLVMBuildMul(e->b, first, ldc, "")), ldc);
    return;
  }
  Loop lb;
  V o = loop_begin(e, &lb, e->lo, e->hi);
  V off[3];
  if (gm->flat) {
    for (int x = 0; x < 3; x++) off[x] = LLVMBuildMul(e->b, o, sym(e, gm->flat_stride[x]), "");
  } else {  // o's coordinates in the batch shape
    V rem = o;
    off[0] = off[1] = off[2] = ci64(e, 0);
    for (int i = gm->nbatch - 1; i >= 0; i--) {
      V d = sym(e, gm->batch[i]), c = LLVMBuildSRem(e->b, rem, d, "");
      rem = LLVMBuildSDiv(e->b, rem, d, "");
      for (int x = 0; x < 3; x++)
        if (gm->stride[x][i].coef) off[x] = LLVMBuildAdd(e->b, off[x], LLVMBuildMul(e->b, c, sym(e, gm->stride[x][i]), ""), "");
    }
  }
  off[LG_A] = LLVMBuildAdd(e->b, off[LG_A], LLVMBuildMul(e->b, row0, lda, ""), "");
  off[LG_C] = LLVMBuildAdd(e->b, off[LG_C], LLVMBuildMul(e->b, row0, ldc, ""), "");
  call_sgemm(e, gm->ta, gm->tb, m, n, k, gep(e, A, off[LG_A]), lda, gep(e, Bm, off[LG_B]), ldb, 0, gep(e, C, off[LG_C]), ldc);
  loop_end(e, &lb);
  if (after) LLVMBuildBr(e->b, after), LLVMPositionBuilderAtEnd(e->b, after);
}

// A causal convolution (LCONV_FWD) and its input gradient (LCONV_DX).
// Matrix kind, one sequence b per outer index, one GEMM per lag k:
//   conv:  out[b, k:T] += x[b, 0:T-k] @ W_k          ([T-k, d] @ [d, e])
//   dx:    dx[b, 0:T-k] += dy[b, k:T] @ W_k^T         ([T-k, e] @ [e, d])
// Vector and scalar kinds, one output row (b, i) per outer index, the
// innermost loop over the contiguous feature axis:
//   conv:  out_i += x_j o w_{i-j}  for i - L < j <= i;   dx:  dx_i += dy_j o w_{j-i}  for i <= j < i + L
// (the lags k < L = min(T, L) in both).
static V imin_v(Emit *e, V a, V b) { return LLVMBuildSelect(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, a, b, ""), a, b, ""); }
static V imax_v(Emit *e, V a, V b) { return LLVMBuildSelect(e->b, LLVMBuildICmp(e->b, LLVMIntSGT, a, b, ""), a, b, ""); }
static void emit_conv(Emit *e, const LConv *cv) {
  bool fwd = cv->op == LCONV_FWD;
  V x = buf(e, KS_IN0, false), w = buf(e, KS_IN1, false), out = buf(e, KS_OUT, false);
  V T = dim(e, cv->T), din = dim(e, cv->din), dout = dim(e, cv->dout), L = ci64(e, cv->L);
  if (cv->kind == CONV_MATRIX) {
    Loop lb, lk;
    V b = loop_begin(e, &lb, e->lo, e->hi);
    V orow = LLVMBuildMul(e->b, b, T, "");
    if (e->win && fwd) {  // step program: output rows [w0, w1), out_i = sum_{k <= i} x_{i-k} W_k
      zero(e, out, LLVMBuildMul(e->b, LLVMBuildAdd(e->b, orow, e->w0, ""), dout, ""),
           LLVMBuildMul(e->b, LLVMBuildSub(e->b, e->w1, e->w0, ""), dout, ""));
      V lag = loop_begin(e, &lk, ci64(e, 0), imin_v(e, e->w1, L));
      V i0 = imax_v(e, lag, e->w0);
      V wk = gep(e, w, LLVMBuildMul(e->b, lag, LLVMBuildMul(e->b, din, dout, ""), ""));
      V a = gep(e, x, LLVMBuildMul(e->b, LLVMBuildSub(e->b, LLVMBuildAdd(e->b, orow, i0, ""), lag, ""), din, ""));
      V c = gep(e, out, LLVMBuildMul(e->b, LLVMBuildAdd(e->b, orow, i0, ""), dout, ""));
      call_sgemm(e, 0, 0, LLVMBuildSub(e->b, e->w1, i0, ""), dout, din, a, din, wk, dout, 1, c, dout);
      loop_end(e, &lk);
      loop_end(e, &lb);
      return;
    }
    zero(e, out, LLVMBuildMul(e->b, orow, dout, ""), LLVMBuildMul(e->b, T, dout, ""));
    V lag = loop_begin(e, &lk, ci64(e, 0), imin_v(e, T, L));
    V rows = LLVMBuildSub(e->b, T, lag, "");
    V wk = gep(e, w, LLVMBuildMul(e->b, lag, LLVMBuildMul(e->b, din, dout, ""), ""));
    if (fwd) {  // W_k is [din, dout]
      V a = gep(e, x, LLVMBuildMul(e->b, orow, din, ""));
      V c = gep(e, out, LLVMBuildMul(e->b, LLVMBuildAdd(e->b, orow, lag, ""), dout, ""));
      call_sgemm(e, 0, 0, rows, dout, din, a, din, wk, dout, 1, c, dout);
    } else {  // here x = dy [.., e = din], out = dx [.., d = dout], W_k is [dout, din]
      V a = gep(e, x, LLVMBuildMul(e->b, LLVMBuildAdd(e->b, orow, lag, ""), din, ""));
      V c = gep(e, out, LLVMBuildMul(e->b, orow, dout, ""));
      call_sgemm(e, 0, 1, rows, dout, din, a, din, wk, din, 1, c, dout);
    }
    loop_end(e, &lk);
    loop_end(e, &lb);
    return;
  }
  Loop lr, lj, lc;
  V row = loop_begin(e, &lr, e->lo, e->hi);  // row = b * T + i
  V i = LLVMBuildSRem(e->b, row, T, ""), b0 = LLVMBuildSub(e->b, row, i, "");
  V obase = LLVMBuildMul(e->b, row, dout, "");
  zero(e, out, obase, dout);
  V one = ci64(e, 1);
  V j = loop_begin(e, &lj, fwd ? imax_v(e, ci64(e, 0), LLVMBuildAdd(e->b, LLVMBuildSub(e->b, i, L, ""), one, "")) : i,
                   fwd ? LLVMBuildAdd(e->b, i, one, "") : imin_v(e, T, LLVMBuildAdd(e->b, i, L, "")));
  V lag = fwd ? LLVMBuildSub(e->b, i, j, "") : LLVMBuildSub(e->b, j, i, "");
  V xbase = LLVMBuildMul(e->b, LLVMBuildAdd(e->b, b0, j, ""), din, "");
  V ws = cv->kind == CONV_SCALAR ? load(e, w, lag) : NULL;
  V wbase = LLVMBuildMul(e->b, lag, dout, "");
  V c = loop_begin(e, &lc, ci64(e, 0), dout);
  V wv = ws ? ws : load(e, w, LLVMBuildAdd(e->b, wbase, c, ""));
  V oi = LLVMBuildAdd(e->b, obase, c, "");
  store(e, out, oi, LLVMBuildFAdd(e->b, load(e, out, oi), LLVMBuildFMul(e->b, load(e, x, LLVMBuildAdd(e->b, xbase, c, "")), wv, ""), ""));
  loop_end(e, &lc);
  loop_end(e, &lj);
  loop_end(e, &lr);
}

// Kernel gradient dw_k = sum_b sum_{i>=k} x_{b,i-k} (.) dy_{b,i}, one lag k per
// outer index (lags k >= T get zero). Matrix kind: dW_k += x[b, 0:T-k]^T @
// dy[b, k:T], one GEMM per sequence; vector kind: the feature axis innermost;
// scalar kind: the same sums reduced over features.
static void emit_conv_dw(Emit *e, const LConv *cv) {
  V x = buf(e, KS_IN0, false), dy = buf(e, KS_IN1, false), out = buf(e, KS_OUT, false);
  V T = dim(e, cv->T), d = dim(e, cv->din), ew = dim(e, cv->dout);
  V lead = dprod(e, cv->xs, 0, cv->xs->rank - 2);
  V per = cv->kind == CONV_SCALAR ? ci64(e, 1) : cv->kind == CONV_VECTOR ? d : LLVMBuildMul(e->b, d, ew, "");
  Loop lk, lb, li, lc;
  V lag = loop_begin(e, &lk, e->lo, e->hi);
  V obase = LLVMBuildMul(e->b, lag, per, "");
  zero(e, out, obase, per);
  V hi_i = imax_v(e, lag, T);  // empty when lag >= T
  V b = loop_begin(e, &lb, ci64(e, 0), lead);
  V bT = LLVMBuildMul(e->b, b, T, "");
  if (cv->kind == CONV_MATRIX) {
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(e->C, e->fn, "gemm"), next = LLVMAppendBasicBlockInContext(e->C, e->fn, "skip");
    LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, lag, T, ""), body, next);
    LLVMPositionBuilderAtEnd(e->b, body);
    V a = gep(e, x, LLVMBuildMul(e->b, bT, d, ""));
    V bb = gep(e, dy, LLVMBuildMul(e->b, LLVMBuildAdd(e->b, bT, lag, ""), ew, ""));
    call_sgemm(e, 1, 0, d, ew, LLVMBuildSub(e->b, T, lag, ""), a, d, bb, ew, 1, gep(e, out, obase), ew);
    LLVMBuildBr(e->b, next);
    LLVMPositionBuilderAtEnd(e->b, next);
  } else {
    V i = loop_begin(e, &li, lag, hi_i);
    V xr = LLVMBuildMul(e->b, LLVMBuildAdd(e->b, bT, LLVMBuildSub(e->b, i, lag, ""), ""), d, "");
    V yr = LLVMBuildMul(e->b, LLVMBuildAdd(e->b, bT, i, ""), ew, "");
    if (cv->kind == CONV_SCALAR) {  // dw_lag += x_{i-lag} . dy_i, a dot product in eight lanes
      store(e, out, obase, LLVMBuildFAdd(e->b, load(e, out, obase), row_reduce(e, LX_ADD, ci64(e, 0), d, row_dot_elem, &(RowDot){x, xr, dy, yr}), ""));
      loop_end(e, &li);
      loop_end(e, &lb);
      loop_end(e, &lk);
      return;
    }
    V c = loop_begin(e, &lc, ci64(e, 0), d);
    V p = LLVMBuildFMul(e->b, load(e, x, LLVMBuildAdd(e->b, xr, c, "")), load(e, dy, LLVMBuildAdd(e->b, yr, c, "")), "");
    V oi = cv->kind == CONV_VECTOR ? LLVMBuildAdd(e->b, obase, c, "") : obase;
    store(e, out, oi, LLVMBuildFAdd(e->b, load(e, out, oi), p, ""));
    loop_end(e, &lc);
    loop_end(e, &li);
  }
  loop_end(e, &lb);
  loop_end(e, &lk);
}

// ---- loop-level kernels (loops.h) ----------------------------------------------------
// An LKernel printed as IR: the loop over the outer index (variable 0), its
// statements as loop nests in the current function, its expressions as
// straight-line code at each use.

typedef struct {
  const LKernel *lk;
  V *vals;           // [nvars]: each variable's value where it is visible
  V slot[LK_LOCAL0 + LK_MAX_LOCALS];  // operand pointers (f32*, i32* where slot_int)
                     // of the slots the kernel reads or writes, loaded before its
                     // loops; then its local arrays (stack arrays of the function)
  V row0, pos0, imm;  // XfApi.row0, XfApi.pos0 (i64) and KS_IMM (i32), where the kernel uses them
} LPrint;

static _Noreturn void lk_internal(const char *what, int n) {
  fprintf(stderr, "xfc: internal error: llvm.c: LKernel: %s %d\n", what, n);
  abort();
}

// Marks load or store inst as an access to float32 values or (is_int) int32
// token ids. A kernel's slots hold one or the other, never both in one
// buffer, so a float store cannot change an id: a load of an id stays out of
// the loops that store floats, and they vectorise.
static void lk_tbaa(Emit *e, V inst, int kind) {
  if (!e->tbaa[0]) {
    LLVMMetadataRef root = LLVMMDNodeInContext2(e->C, (LLVMMetadataRef[]){LLVMMDStringInContext2(e->C, "xf", 2)}, 1);
    LLVMMetadataRef zero = LLVMValueAsMetadata(ci64(e, 0));
    static const char *const names[3] = {"float32", "int32", "bf16"};
    for (int i = 0; i < 3; i++) {
      LLVMMetadataRef name = LLVMMDStringInContext2(e->C, names[i], strlen(names[i]));
      LLVMMetadataRef type = LLVMMDNodeInContext2(e->C, (LLVMMetadataRef[]){name, root, zero}, 3);
      e->tbaa[i] = LLVMMDNodeInContext2(e->C, (LLVMMetadataRef[]){type, type, zero}, 3);
    }
  }
  LLVMSetMetadata(inst, LLVMGetMDKindIDInContext(e->C, "tbaa", 4), LLVMMetadataAsValue(e->C, e->tbaa[kind]));
}

// Marks an access to operand slot s (< KS_IMM) as disjoint from every other
// slot's: the memory plan gives the buffers a kernel reads and the one it
// writes disjoint storage (their lifetimes meet at the kernel), so a store
// to the output cannot change an input, and loops need no overlap checks.
static void lk_noalias(Emit *e, V inst, int s) {
  if (s < 0 || s >= KS_IMM) return;
  if (!e->slot_scope[0]) {
    LLVMMetadataRef tmp = LLVMTemporaryMDNode(e->C, NULL, 0);
    LLVMMetadataRef dom = LLVMMDNodeInContext2(e->C, (LLVMMetadataRef[]){tmp, LLVMMDStringInContext2(e->C, "xf.slots", 8)}, 2);
    LLVMMetadataReplaceAllUsesWith(tmp, dom);
    for (int i = 0; i < KS_IMM; i++) {
      char name[16];
      int n = snprintf(name, sizeof name, "slot%d", i);
      LLVMMetadataRef t = LLVMTemporaryMDNode(e->C, NULL, 0);
      LLVMMetadataRef sc = LLVMMDNodeInContext2(e->C, (LLVMMetadataRef[]){t, dom, LLVMMDStringInContext2(e->C, name, (size_t)n)}, 3);
      LLVMMetadataReplaceAllUsesWith(t, sc);
      e->slot_scope[i] = sc;
    }
    for (int i = 0; i < KS_IMM; i++) {
      LLVMMetadataRef others[KS_IMM];
      int m = 0;
      for (int j = 0; j < KS_IMM; j++)
        if (j != i) others[m++] = e->slot_scope[j];
      e->slot_noalias[i] = LLVMMDNodeInContext2(e->C, others, (size_t)m);
    }
  }
  LLVMMetadataRef own = LLVMMDNodeInContext2(e->C, &e->slot_scope[s], 1);
  LLVMSetMetadata(inst, LLVMGetMDKindIDInContext(e->C, "alias.scope", 11), LLVMMetadataAsValue(e->C, own));
  LLVMSetMetadata(inst, LLVMGetMDKindIDInContext(e->C, "noalias", 7), LLVMMetadataAsValue(e->C, e->slot_noalias[s]));
}

static V lslot(LPrint *p, int slot) {
  if (slot < 0 || slot >= LK_LOCAL0 + LK_MAX_LOCALS || !p->slot[slot]) lk_internal("access to a slot it does not mark read or written:", slot);
  return p->slot[slot];
}

// The value of x; arithmetic is integer or float as its operands are.
static V lexpr(Emit *e, LPrint *p, const LExpr *x) {
  LLVMBuilderRef b = e->b;
  V a[3] = {0};
  for (int i = 0; i < 3; i++)
    if (x->a[i]) a[i] = lexpr(e, p, x->a[i]);
  bool f = (x->a[0] ? x->a[0]->type : x->type) == LT_F32;
  switch (x->kind) {
  case LX_INT: return ci64(e, x->ival);
  case LX_FLT: return cf32(e, x->fval);
  case LX_DIM: return x->ival ? e->T : e->B;
  case LX_VAR: return p->vals[x->var];
  case LX_ROW0: return p->row0;
  case LX_POS0: return p->pos0;
  case LX_WIN:
    if (x->ival == 2) return e->win ? e->wk : ci64(e, 0);
    return e->win ? (x->ival ? e->w1 : e->w0) : x->ival ? e->T : ci64(e, 0);
  case LX_LOAD: {
    bool is_int = x->type == LT_I64, half = x->slot < KS_COUNT && p->lk->slot_bf16[x->slot];
    V inst = NULL;
    V v = is_int ? load_i(e, lslot(p, x->slot), a[0]) : half ? load_bf16(e, lslot(p, x->slot), a[0], &inst) : load(e, lslot(p, x->slot), a[0]);
    if (!half) inst = v;
    lk_tbaa(e, inst, is_int ? 1 : half ? 2 : 0);
    lk_noalias(e, inst, x->slot);
    return is_int ? LLVMBuildSExt(b, v, e->i64, "") : v;
  }
  case LX_NEG: return f ? LLVMBuildFNeg(b, a[0], "") : LLVMBuildNeg(b, a[0], "");
  case LX_EXP: return exp_f32(e, a[0]);
  case LX_LOG: return call_f32(e, "llvm.log.f32", a[0]);
  case LX_SQRT: return call_f32(e, "llvm.sqrt.f32", a[0]);
  case LX_SIN: return call_f32(e, "llvm.sin.f32", a[0]);
  case LX_COS: return call_f32(e, "llvm.cos.f32", a[0]);
  case LX_TANH: return call_f32(e, "tanhf", a[0]);
  case LX_ERF: return erf_f32(e, a[0]);
  case LX_ADD: return f ? LLVMBuildFAdd(b, a[0], a[1], "") : LLVMBuildAdd(b, a[0], a[1], "");
  case LX_SUB: return f ? LLVMBuildFSub(b, a[0], a[1], "") : LLVMBuildSub(b, a[0], a[1], "");
  case LX_MUL: return f ? LLVMBuildFMul(b, a[0], a[1], "") : LLVMBuildMul(b, a[0], a[1], "");
  case LX_DIV: return f ? LLVMBuildFDiv(b, a[0], a[1], "") : LLVMBuildSDiv(b, a[0], a[1], "");
  case LX_REM: return LLVMBuildSRem(b, a[0], a[1], "");
  case LX_MAX: return f ? max_f(e, a[0], a[1]) : select_f(e, LLVMBuildICmp(b, LLVMIntSGT, a[0], a[1], ""), a[0], a[1]);
  case LX_LT: return f ? LLVMBuildFCmp(b, LLVMRealOLT, a[0], a[1], "") : LLVMBuildICmp(b, LLVMIntSLT, a[0], a[1], "");
  case LX_GT: return f ? LLVMBuildFCmp(b, LLVMRealOGT, a[0], a[1], "") : LLVMBuildICmp(b, LLVMIntSGT, a[0], a[1], "");
  case LX_GE: return f ? LLVMBuildFCmp(b, LLVMRealOGE, a[0], a[1], "") : LLVMBuildICmp(b, LLVMIntSGE, a[0], a[1], "");
  case LX_EQ: return f ? LLVMBuildFCmp(b, LLVMRealOEQ, a[0], a[1], "") : LLVMBuildICmp(b, LLVMIntEQ, a[0], a[1], "");
  case LX_AND: return LLVMBuildAnd(b, a[0], a[1], "");
  case LX_SELECT: return select_f(e, a[0], a[1], a[2]);
  case LX_TOF: return LLVMBuildSIToFP(b, a[0], e->f32, "");
  case LX_TOI: return LLVMBuildFPToSI(b, a[0], e->i64, "");
  case LX_BF16: return round_bf16(e, a[0]);
  case LX_KEEP:  // in double, as runtime/rng.h
    return LLVMBuildFCmp(b, LLVMRealOGE, philox_uniform(e, e->seed, p->imm, a[0], e->step), LLVMConstReal(e->f64, x->fval), "");
  case LX_COUNT: break;
  }
  lk_internal("expression kind", (int)x->kind);
}

// The element of reduction s at index t: its value with s->ivar bound to t.
typedef struct {
  LPrint *p;
  const LStmt *s;
} LReduce;

static V reduce_elem(Emit *e, const void *ctx, V t) {
  const LReduce *r = ctx;
  r->p->vals[r->s->ivar] = t;
  return lexpr(e, r->p, r->s->val);
}

// A wide reduction: one serial loop over [lo, hi) in index order,
// accumulating in double, rounded to float32 at the end.
static V reduce_wide(Emit *e, LPrint *p, const LStmt *s, V lo, V hi) {
  LLVMBuilderRef b = e->b;
  V acc = var(e, e->f64);
  LLVMBuildStore(b, LLVMConstReal(e->f64, s->op == LX_MAX ? -INFINITY : 0), acc);
  Loop L;
  p->vals[s->ivar] = loop_begin(e, &L, lo, hi);
  V x = LLVMBuildFPExt(b, lexpr(e, p, s->val), e->f64, ""), a = LLVMBuildLoad2(b, e->f64, acc, "");
  LLVMBuildStore(b, s->op == LX_MAX ? max_f(e, x, a) : LLVMBuildFAdd(b, a, x, ""), acc);
  loop_end(e, &L);
  return LLVMBuildFPTrunc(b, LLVMBuildLoad2(b, e->f64, acc, ""), e->f32, "");
}

static void lblock(Emit *e, LPrint *p, const LStmt *s) {
  for (; s; s = s->next) {
    switch (s->kind) {
    case LS_LET: p->vals[s->var] = lexpr(e, p, s->val); continue;
    case LS_STORE: {
      V idx = lexpr(e, p, s->idx), v = lexpr(e, p, s->val);
      bool half = s->slot < KS_COUNT && p->lk->slot_bf16[s->slot];
      V st = half ? store_bf16(e, lslot(p, s->slot), idx, v) : store(e, lslot(p, s->slot), idx, v);
      lk_tbaa(e, st, half ? 2 : 0);
      lk_noalias(e, st, s->slot);
      continue;
    }
    case LS_FOR: {  // par loops too: the loop vectoriser finds their independence
      V lo = lexpr(e, p, s->lo), hi = lexpr(e, p, s->hi);
      Loop L;
      p->vals[s->var] = loop_begin(e, &L, lo, hi);
      lblock(e, p, s->body);
      loop_end(e, &L);
      continue;
    }
    case LS_CARRY: {  // allocas mem2reg makes registers: loaded at the top, stored at the latch
      V lo = lexpr(e, p, s->lo), hi = lexpr(e, p, s->hi);
      V *slot = arena_alloc(&e->arena, sizeof(V) * (size_t)s->ncarry);
      Ty *ty = arena_alloc(&e->arena, sizeof(Ty) * (size_t)s->ncarry);
      for (int c = 0; c < s->ncarry; c++) {
        V v = lexpr(e, p, s->init[c]);
        ty[c] = LLVMTypeOf(v), slot[c] = var(e, ty[c]);
        LLVMBuildStore(e->b, v, slot[c]);
      }
      Loop L;
      p->vals[s->var] = loop_begin(e, &L, lo, hi);
      for (int c = 0; c < s->ncarry; c++) p->vals[s->carry[c]] = LLVMBuildLoad2(e->b, ty[c], slot[c], "");
      lblock(e, p, s->body);
      for (int c = 0; c < s->ncarry; c++)  // step[] reads the values loaded above, not the slots
        LLVMBuildStore(e->b, lexpr(e, p, s->step[c]), slot[c]);
      loop_end(e, &L);
      for (int c = 0; c < s->ncarry; c++) p->vals[s->carry[c]] = LLVMBuildLoad2(e->b, ty[c], slot[c], "");
      continue;
    }
    case LS_REDUCE: {
      if (s->op != LX_ADD && s->op != LX_MAX) lk_internal("reduction op", (int)s->op);
      V lo = lexpr(e, p, s->lo), hi = lexpr(e, p, s->hi);
      p->vals[s->var] = s->wide ? reduce_wide(e, p, s, lo, hi) : row_reduce(e, s->op, lo, hi, reduce_elem, &(LReduce){p, s});
      continue;
    }
    case LS_GEMM: {  // skipped when C is empty
      const LCall *c = s->call;
      V m = lexpr(e, p, c->m), n = lexpr(e, p, c->n), k = lexpr(e, p, c->k), at[3], ld[3];
      for (int x = 0; x < 3; x++) at[x] = gep(e, lslot(p, c->slot[x]), lexpr(e, p, c->at[x])), ld[x] = lexpr(e, p, c->ld[x]);
      LLVMBasicBlockRef call = LLVMAppendBasicBlockInContext(e->C, e->fn, "gemm"), after = LLVMAppendBasicBlockInContext(e->C, e->fn, "nogemm");
      V some = LLVMBuildAnd(e->b, LLVMBuildICmp(e->b, LLVMIntSGT, m, ci64(e, 0), ""), LLVMBuildICmp(e->b, LLVMIntSGT, n, ci64(e, 0), ""), "");
      LLVMBuildCondBr(e->b, some, call, after);
      LLVMPositionBuilderAtEnd(e->b, call);
      static const int bit[3] = {XF_GEMM_A_BF16, XF_GEMM_B_BF16, XF_GEMM_C_BF16};
      for (int x = 0; x < 3; x++)  // an operand slot stored in bf16 (storage.c): xf_gemm_ex's types
        if (c->slot[x] >= 0 && c->slot[x] < KS_IMM && p->lk->slot_bf16[c->slot[x]]) e->gemm_types |= bit[x];
      call_sgemm_a(e, c->ta, c->tb, m, n, k, (float)c->alpha, at[LC_A], ld[LC_A], at[LC_B], ld[LC_B], (float)c->beta, at[LC_C], ld[LC_C]);
      e->gemm_types = 0;
      LLVMBuildBr(e->b, after);
      LLVMPositionBuilderAtEnd(e->b, after);
      continue;
    }
    case LS_COUNT: break;
    }
    lk_internal("statement kind", (int)s->kind);
  }
}

// lk's body for each outer index in [lo, hi), into the current function.
static void emit_lkernel(Emit *e, const LKernel *lk, V lo, V hi) {
  LPrint p = {.lk = lk, .vals = arena_alloc(&e->arena, (size_t)lk->nvars * sizeof(V))};
  for (int s = 0; s < KS_IMM; s++)
    if (lk->slot_read[s] || lk->slot_written[s]) p.slot[s] = lk->slot_bf16[s] ? buf_bf16(e, s) : buf(e, s, lk->slot_int[s]);
  for (int i = 0; i < lk->nlocals; i++) {
    if (lk->local_bf16[i]) lk_internal("a bf16 local array (a GPU form's) in CPU code, local", i);
    p.slot[LK_LOCAL0 + i] = LLVMBuildBitCast(e->b, var(e, LLVMArrayType(e->f32, (unsigned)lk->local_size[i])), e->f32p, "");
  }
  if (lstmt_has(lk->body, LX_ROW0)) p.row0 = api_field(e, e->api, XF_API_F_row0);
  if (lstmt_has(lk->body, LX_POS0)) p.pos0 = api_field(e, e->api, XF_API_F_pos0);
  if (lstmt_has(lk->body, LX_KEEP)) p.imm = imm32(e);
  Loop L;
  p.vals[0] = loop_begin(e, &L, lo, hi);
  lblock(e, &p, lk->body);
  loop_end(e, &L);
}

// ---- functions -------------------------------------------------------------------

// The kernel's LKernel after its GEMMs (gm, or NULL): an FG_MATMUL_MAP
// epilogue over the rows the product wrote (batch entries [lo, hi); the
// window's rows of each entry in the step program); else the outer indices [lo, hi).
static void emit_lowered(Emit *e, const LGemm *gm, const LKernel *lk) {
  if (!gm) {
    emit_lkernel(e, lk, e->lo, e->hi);
    return;
  }
  V rows = sym(e, gm->m);
  if (!e->win) {
    if (gm->split_rows) emit_lkernel(e, lk, e->lo, e->hi);  // [lo, hi) are rows
    else emit_lkernel(e, lk, LLVMBuildMul(e->b, e->lo, rows, ""), LLVMBuildMul(e->b, e->hi, rows, ""));
    return;
  }
  Loop lb;
  V base = LLVMBuildMul(e->b, loop_begin(e, &lb, e->lo, e->hi), rows, "");
  emit_lkernel(e, lk, LLVMBuildAdd(e->b, base, e->w0, ""), LLVMBuildAdd(e->b, base, e->w1, ""));
  loop_end(e, &lb);
}

// The steps of a kernel (loops.h LSteps: the GPU's chunked convolutions,
// printed only where the tests run the GPU's forms) one after the other in
// one call, an outer extent of 1: each LKernel over its outer indices, each
// LGemm over its batch entries.
static void emit_steps(Emit *e, const LSteps *st) {
  V lo = e->lo, hi = e->hi;
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(e->C, e->fn, "steps"), next = LLVMAppendBasicBlockInContext(e->C, e->fn, "after");
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, lo, hi, ""), body, next);
  LLVMPositionBuilderAtEnd(e->b, body);
  for (int i = 0; i < st->n; i++) {
    if (st->gm[i]) {
      e->lo = ci64(e, 0), e->hi = sym(e, st->gm[i]->count);
      emit_gemm(e, st->gm[i]);
      e->lo = lo, e->hi = hi;
    } else {
      emit_lkernel(e, st->lk[i], ci64(e, 0), sym(e, st->lk[i]->nouter));
    }
  }
  LLVMBuildBr(e->b, next);
  LLVMPositionBuilderAtEnd(e->b, next);
}

// The kernels neither a GEMM nor a loop description: the causal convolutions.
// The function of kernel class ki (its representative kernel).
// Opens XfKernelFn `name` (internal): its parameters in e, the builder in
// its body; fn_end closes it. Returns its block "start".
static LLVMBasicBlockRef fn_begin(Emit *e, const char *name, bool win) {
  V fn = LLVMAddFunction(e->M, name, e->kernel_t);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  e->fn = fn;
  e->entry = LLVMAppendBasicBlockInContext(e->C, fn, "entry");
  LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(e->C, fn, "start");
  LLVMPositionBuilderAtEnd(e->b, start);
  e->bufs = LLVMGetParam(fn, 0), e->B = LLVMGetParam(fn, 1), e->T = LLVMGetParam(fn, 2);
  e->seed = LLVMGetParam(fn, 3), e->step = LLVMGetParam(fn, 4), e->lo = LLVMGetParam(fn, 5);
  e->hi = LLVMGetParam(fn, 6), e->api = LLVMGetParam(fn, 7);
  e->win = win;
  return start;
}
static V fn_end(Emit *e, LLVMBasicBlockRef start) {
  LLVMBuildRetVoid(e->b);
  LLVMPositionBuilderAtEnd(e->b, e->entry);
  LLVMBuildBr(e->b, start);
  return e->fn;
}

// The function of an LKernel printed on its own (the optimizer's update):
// its outer indices [lo, hi).
static V lkernel_fn(Emit *e, const char *name, const LKernel *lk) {
  LLVMBasicBlockRef start = fn_begin(e, name, false);
  emit_lkernel(e, lk, e->lo, e->hi);
  return fn_end(e, start);
}

static V kernel_fn(Emit *e, int ki, bool train, bool win) {
  char name[32];
  snprintf(name, sizeof name, win ? "xf_k%d_step" : train ? "xf_k%d" : "xf_k%d_infer", ki);
  LLVMBasicBlockRef start = fn_begin(e, name, win);
  if (win)
    e->w0 = api_field(e, e->api, XF_API_F_win_lo), e->w1 = api_field(e, e->api, XF_API_F_win_hi),
    e->wk = api_field(e, e->api, XF_API_F_win_keep);
  const Kernel *k = &e->s->kernels[ki];
  e->k = k;
  const LClass *c = &e->mod->cls[k->cls];
  const LKernel *lk = train ? c->train : c->infer;
  e->outer[k->cls] = c->outer;
  if (win && c->gemm && c->gemm->split_rows) {  // rows [lo, hi): the entries whose first row is among them
    V m = sym(e, c->gemm->m), m1 = LLVMBuildSub(e->b, m, ci64(e, 1), "");
    e->lo = LLVMBuildSDiv(e->b, LLVMBuildAdd(e->b, e->lo, m1, ""), m, "");
    e->hi = LLVMBuildSDiv(e->b, LLVMBuildAdd(e->b, e->hi, m1, ""), m, "");
  }
  if (c->steps) emit_steps(e, c->steps);
  if (c->gemm) emit_gemm(e, c->gemm);
  if (lk) emit_lowered(e, c->gemm, lk);
  else if (c->conv && c->conv->op == LCONV_DW) emit_conv_dw(e, c->conv);
  else if (c->conv) emit_conv(e, c->conv);
  else if (c->err && !e->err[0]) snprintf(e->err, sizeof e->err, "%s", c->err);  // the first error
  return fn_end(e, start);
}


// A program is a constant table of launches (LaunchRec), one per kernel k in
// order, and a loop over it: fill the slots from the buffer table, call
// api->parallel_for(api, function, slots, B, T, seed, step, outer), then
// api->kernel_done(api, k) when the runtime set it. The code is the same for
// every model; the table grows with depth, the code does not.
static V program_fn(Emit *e, const char *name, int p, V *kfns, bool per_kernel) {
  Ty rec_t = emit_abi_type(e, LAUNCH_REC);
  int n = e->s->nprog[p];
  V *recs = calloc((size_t)n + 1, sizeof(V));
  for (int i = 0; i < n; i++) {
    int ki = e->s->prog[p][i];
    const Kernel *k = &e->s->kernels[ki];
    int ops[KS_IMM];
    kernel_slots(e->s, k, ops);
    V slot[KS_IMM];
    for (int j = 0; j < KS_IMM; j++) slot[j] = ci32(e, ops[j]);
    recs[i] = emit_abi_const(e, LAUNCH_REC,
                        (V[LAUNCH_REC_NFIELDS]){[LAUNCH_REC_F_fn] = kfns[per_kernel ? ki : k->cls],
                                                [LAUNCH_REC_F_slots] = LLVMConstArray(e->i32, slot, KS_IMM),
                                                [LAUNCH_REC_F_imm] = ci64(e, (int64_t)kernel_imm(e->s, k)),
                                                [LAUNCH_REC_F_coef] = ci64(e, e->outer[k->cls].coef),
                                                [LAUNCH_REC_F_pb] = ci32(e, e->outer[k->cls].pb),
                                                [LAUNCH_REC_F_pt] = ci32(e, e->outer[k->cls].pt),
                                                [LAUNCH_REC_F_tdiv] = ci64(e, symsize_den(e->outer[k->cls])), [LAUNCH_REC_F_kernel] = ci32(e, ki)});
  }
  char tname[64];
  snprintf(tname, sizeof tname, "%s_launches", name);
  V table = emit_const_array(e, rec_t, recs, n, tname);
  free(recs);

  V fn = LLVMAddFunction(e->M, name, e->program_t);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  e->fn = fn;
  e->entry = LLVMAppendBasicBlockInContext(e->C, fn, "entry");
  LLVMPositionBuilderAtEnd(e->b, e->entry);
  V api = LLVMGetParam(fn, 0), bufs = LLVMGetParam(fn, 1), B = LLVMGetParam(fn, 2), T = LLVMGetParam(fn, 3);
  V seed = LLVMGetParam(fn, 4), step = LLVMGetParam(fn, 5);
  V slots = LLVMBuildArrayAlloca(e->b, e->i8p, ci64(e, KS_COUNT), "slots");
  V pfor = api_field(e, api, XF_API_F_parallel_for), done = api_field(e, api, XF_API_F_kernel_done);
  V has_done = LLVMBuildICmp(e->b, LLVMIntNE, LLVMBuildPtrToInt(e->b, done, e->i64, ""), ci64(e, 0), "");
  Loop L;
  V i = loop_begin(e, &L, ci64(e, 0), ci64(e, n));
  V rec = LLVMBuildGEP2(e->b, rec_t, table, &i, 1, "");
#define FIELD(f) LLVMBuildStructGEP2(e->b, rec_t, rec, LAUNCH_REC_F_##f, "")
#define LOAD(f) LLVMBuildLoad2(e->b, LLVMStructGetTypeAtIndex(rec_t, LAUNCH_REC_F_##f), FIELD(f), "")
  V kfn = LOAD(fn);
  for (int j = 0; j < KS_IMM; j++) {
    V bidx = LLVMBuildLoad2(e->b, e->i32, LLVMBuildGEP2(e->b, LLVMArrayType(e->i32, KS_IMM), FIELD(slots), (V[]){ci64(e, 0), ci64(e, j)}, 2, ""), "");
    V none = LLVMBuildICmp(e->b, LLVMIntSLT, bidx, ci32(e, 0), "");
    V safe = LLVMBuildSExt(e->b, LLVMBuildSelect(e->b, none, ci32(e, 0), bidx, ""), e->i64, "");
    V ptr = LLVMBuildLoad2(e->b, e->i8p, LLVMBuildGEP2(e->b, e->i8p, bufs, &safe, 1, ""), "");
    LLVMBuildStore(e->b, LLVMBuildSelect(e->b, none, LLVMConstNull(e->i8p), ptr, ""),
                   LLVMBuildGEP2(e->b, e->i8p, slots, (V[]){ci64(e, j)}, 1, ""));
  }
  V imm = LOAD(imm);
  LLVMBuildStore(e->b, LLVMBuildIntToPtr(e->b, imm, e->i8p, ""), LLVMBuildGEP2(e->b, e->i8p, slots, (V[]){ci64(e, KS_IMM)}, 1, ""));
  V outer = var(e, e->i64);
  LLVMBuildStore(e->b, LOAD(coef), outer);
  V pb = LLVMBuildSExt(e->b, LOAD(pb), e->i64, "");
  V pt = LLVMBuildSExt(e->b, LOAD(pt), e->i64, "");
  V tdiv = LOAD(tdiv);
  V kid = LOAD(kernel);
#undef LOAD
#undef FIELD
  Loop Lb, Lt;
  loop_begin(e, &Lb, ci64(e, 0), pb);
  LLVMBuildStore(e->b, LLVMBuildMul(e->b, LLVMBuildLoad2(e->b, e->i64, outer, ""), B, ""), outer);
  loop_end(e, &Lb);
  loop_begin(e, &Lt, ci64(e, 0), pt);
  LLVMBuildStore(e->b, LLVMBuildMul(e->b, LLVMBuildLoad2(e->b, e->i64, outer, ""), T, ""), outer);
  loop_end(e, &Lt);
  LLVMBuildStore(e->b, LLVMBuildUDiv(e->b, LLVMBuildLoad2(e->b, e->i64, outer, ""), tdiv, ""), outer);
  V args[] = {api, kfn, slots, B, T, seed, step, LLVMBuildLoad2(e->b, e->i64, outer, "")};
  LLVMBuildCall2(e->b, e->pfor_t, pfor, args, 8, "");
  LLVMBasicBlockRef call = LLVMAppendBasicBlockInContext(e->C, fn, "done"), next = LLVMAppendBasicBlockInContext(e->C, fn, "next");
  LLVMBuildCondBr(e->b, has_done, call, next);
  LLVMPositionBuilderAtEnd(e->b, call);
  LLVMBuildCall2(e->b, e->done_t, done, (V[]){api, kid}, 2, "");
  LLVMBuildBr(e->b, next);
  LLVMPositionBuilderAtEnd(e->b, next);
  loop_end(e, &L);
  LLVMBuildRetVoid(e->b);
  return fn;
}

V emit_cstr(Emit *e, const char *s) {
  if (!s) s = "";
  V init = LLVMConstStringInContext(e->C, s, (unsigned)strlen(s), 0);
  V gv = LLVMAddGlobal(e->M, LLVMTypeOf(init), ".str");
  LLVMSetInitializer(gv, init);
  LLVMSetGlobalConstant(gv, 1);
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(gv, LLVMGlobalUnnamedAddr);
  return LLVMConstBitCast(gv, e->i8p);
}

V emit_const_array(Emit *e, Ty elem, V *items, int n, const char *name) {
  V arr = LLVMConstArray(elem, items, (unsigned)n);
  V gv = LLVMAddGlobal(e->M, LLVMTypeOf(arr), name);
  LLVMSetInitializer(gv, arr);
  LLVMSetGlobalConstant(gv, 1);
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  return LLVMConstBitCast(gv, LLVMPointerType(elem, 0));
}

// ---- the step program (incremental decoding) ------------------------------------
// Each kernel of the sampling program on its window (lower_window, loops.h):
// LW_OUTER, a wrapper calls the kernel on the outer indices in the window;
// LW_ROWS and LW_BODY, the kernel's windowed variant (Emit.win: its products
// on rows [w0, w1) of each batch entry, LX_WIN the window); LW_FULL, the
// kernel.

// xf_kN_w: base on the outer indices whose position is in the window.
static V wrap_fn(Emit *e, int ki, V base, LWindow w) {
  char name[32];
  snprintf(name, sizeof name, "xf_k%d_w", ki);
  V fn = LLVMAddFunction(e->M, name, e->kernel_t);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  e->fn = fn;
  e->entry = LLVMAppendBasicBlockInContext(e->C, fn, "entry");
  LLVMPositionBuilderAtEnd(e->b, e->entry);
  V P[8];
  for (int i = 0; i < 8; i++) P[i] = LLVMGetParam(fn, (unsigned)i);
  e->B = P[1], e->T = P[2];
  V w0 = api_field(e, P[7], XF_API_F_win_lo), w1 = api_field(e, P[7], XF_API_F_win_hi);
  // outer index o = (q extent + t) stride + r: the window is, for each q, the
  // contiguous range [(q extent + w0) stride, (q extent + w1) stride)
  V stride = sym(e, w.stride), td = sym(e, w.extent), block = LLVMBuildMul(e->b, td, stride, "");
  V qlo = LLVMBuildSDiv(e->b, P[5], block, "");
  V qhi = LLVMBuildAdd(e->b, LLVMBuildSDiv(e->b, LLVMBuildSub(e->b, P[6], ci64(e, 1), ""), block, ""), ci64(e, 1), "");
  Loop L;
  V q = loop_begin(e, &L, qlo, qhi);
  V qt = LLVMBuildMul(e->b, q, td, "");
  V lo = LLVMBuildMul(e->b, LLVMBuildAdd(e->b, qt, w0, ""), stride, "");
  V hi = LLVMBuildMul(e->b, LLVMBuildAdd(e->b, qt, w1, ""), stride, "");
  lo = LLVMBuildSelect(e->b, LLVMBuildICmp(e->b, LLVMIntSGT, lo, P[5], ""), lo, P[5], "");
  hi = LLVMBuildSelect(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, hi, P[6], ""), hi, P[6], "");
  LLVMBasicBlockRef call = LLVMAppendBasicBlockInContext(e->C, fn, "call"), next = LLVMAppendBasicBlockInContext(e->C, fn, "next");
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, lo, hi, ""), call, next);
  LLVMPositionBuilderAtEnd(e->b, call);
  V args[] = {P[0], P[1], P[2], P[3], P[4], lo, hi, P[7]};
  LLVMBuildCall2(e->b, e->kernel_t, base, args, 8, "");
  LLVMBuildBr(e->b, next);
  LLVMPositionBuilderAtEnd(e->b, next);
  loop_end(e, &L);
  LLVMBuildRetVoid(e->b);
  return fn;
}

static bool window_eq(LWindow a, LWindow b) {
  return a.kind == b.kind && symsize_eq(a.stride, b.stride) && symsize_eq(a.extent, b.extent);
}

// xf_prog_step: the sampling program with every kernel windowed.
static V step_program(Emit *e, V *kinf) {
  const Schedule *s = e->s;
  V *fns = calloc((size_t)s->nkernels + 1, sizeof(V)), *by_class = calloc((size_t)s->nkernels + 1, sizeof(V));
  LWindow *class_win = calloc((size_t)s->nkernels + 1, sizeof(LWindow));
  for (int i = 0; i < s->nprog[PROG_SAMPLE]; i++) {
    int ki = s->prog[PROG_SAMPLE][i];
    const Kernel *k = &s->kernels[ki];
    LWindow w = e->mod->window[ki];
    if (by_class[k->cls] && window_eq(class_win[k->cls], w)) {  // a class's kernels share their windowed function
      fns[ki] = by_class[k->cls];
      continue;
    }
    V f = kinf[k->cls];
    if (w.kind == LW_OUTER) f = wrap_fn(e, ki, kinf[k->cls], w);
    else if (w.kind == LW_ROWS || w.kind == LW_BODY) f = kernel_fn(e, k->cls, false, true);
    e->win = false;
    fns[ki] = f;
    if (!by_class[k->cls]) by_class[k->cls] = f, class_win[k->cls] = w;
  }
  V prog = program_fn(e, "xf_prog_step", PROG_SAMPLE, fns, true);
  free(fns), free(by_class), free(class_win);
  return prog;
}

static void emit_types(Emit *e, LLVMContextRef C) {
  e->C = C;
  e->void_t = LLVMVoidTypeInContext(C), e->i1 = LLVMInt1TypeInContext(C), e->i8 = LLVMInt8TypeInContext(C);
  e->i32 = LLVMInt32TypeInContext(C), e->i64 = LLVMInt64TypeInContext(C);
  e->f32 = LLVMFloatTypeInContext(C), e->f64 = LLVMDoubleTypeInContext(C);
  e->i8p = LLVMPointerType(e->i8, 0), e->i8pp = LLVMPointerType(e->i8p, 0);
  e->f32p = LLVMPointerType(e->f32, 0), e->i32p = LLVMPointerType(e->i32, 0);
  e->i16 = LLVMInt16TypeInContext(C), e->i16p = LLVMPointerType(e->i16, 0);
  e->kernel_t = LLVMFunctionType(e->void_t, (Ty[]){e->i8pp, e->i64, e->i64, e->i64, e->i32, e->i64, e->i64, e->i8p}, 8, 0);
  e->program_t = LLVMFunctionType(e->void_t, (Ty[]){e->i8p, e->i8pp, e->i64, e->i64, e->i64, e->i32}, 6, 0);
  e->pfor_t = LLVMFunctionType(e->void_t, (Ty[]){e->i8p, LLVMPointerType(e->kernel_t, 0), e->i8pp, e->i64, e->i64, e->i64, e->i32, e->i64}, 8, 0);
  e->done_t = LLVMFunctionType(e->void_t, (Ty[]){e->i8p, e->i32}, 2, 0);
  e->sgemm_t = LLVMFunctionType(e->void_t, (Ty[]){e->i8p, e->i32, e->i32, e->i64, e->i64, e->i64, e->f32, e->f32p, e->i64, e->f32p,
                                                  e->i64, e->f32, e->f32p, e->i64}, 14, 0);
  e->gemm_ex_t = LLVMFunctionType(e->void_t, (Ty[]){e->i8p, e->i32, e->i32, e->i64, e->i64, e->i64, e->f32, e->i8p, e->i64, e->i8p,
                                                    e->i64, e->f32, e->i8p, e->i64, e->i32}, 15, 0);
}

bool llvm_abi_check(LLVMContextRef C, LLVMTargetDataRef dl, char *err, size_t errlen) {
  Emit e = {0};
  emit_types(&e, C);
  for (int s = 0; s < ABI_NSTRUCTS; s++) {
    const AbiStruct *a = &abi_structs[s];
    Ty t = emit_abi_type(&e, s);
    for (int i = 0; i < a->nfields; i++) {
      unsigned long long off = LLVMOffsetOfElement(dl, t, (unsigned)i);
      if (off != a->fields[i].offset)
        return snprintf(err, errlen, "ABI: %s.%s: LLVM offset %llu, C %zu", a->name, a->fields[i].name, off,
                        a->fields[i].offset), false;
    }
    unsigned long long size = LLVMABISizeOfType(dl, t), align = LLVMABIAlignmentOfType(dl, t);
    if (size != a->size || align != a->align)
      return snprintf(err, errlen, "ABI: %s: LLVM size %llu, alignment %llu; C %zu, %zu", a->name, size, align, a->size,
                      a->align), false;
  }
  return true;
}

LLVMModuleRef llvm_emit_module(LLVMContextRef C, const Schedule *s, const LlvmOptions *o, char *err, size_t errlen) {
  if (!o || !o->module) return snprintf(err, errlen, "internal error: llvm_emit_module without a lowered module"), NULL;
  Emit e = {.s = s, .g = s->g, .forms = o->module->tgt, .mod = o->module};
  emit_types(&e, C);
  e.outer = calloc((size_t)s->nkernels + 1, sizeof(SymSize));
  for (int k = 0; k < s->nkernels; k++) e.outer[k] = s->kernels[k].outer;
  e.M = LLVMModuleCreateWithNameInContext(s->g->name, C);
  e.b = LLVMCreateBuilderInContext(C);
  V *kfns = calloc((size_t)s->nkernels + 1, sizeof(V)), *kinf = calloc((size_t)s->nkernels + 1, sizeof(V));
  for (int k = 0; k < s->nkernels; k++) {
    if (s->kernels[k].cls != k) continue;  // one function per class
    kfns[k] = kernel_fn(&e, k, true, false);
    kinf[k] = s->kernels[k].dropout >= 0 ? kernel_fn(&e, k, false, false) : kfns[k];
  }
  V progs[3] = {program_fn(&e, "xf_prog_train", PROG_TRAIN, kfns, false), program_fn(&e, "xf_prog_eval", PROG_EVAL, kinf, false),
                program_fn(&e, "xf_prog_sample", PROG_SAMPLE, kinf, false)};
  V step = o && o->time_axis ? step_program(&e, kinf) : LLVMConstNull(LLVMPointerType(e.program_t, 0));
  // the twin variant where the CPU's products read bf16 copies of the parameters
  V adamw[2] = {lkernel_fn(&e, "xf_adamw", o->module->adamw),
                o->precision == XF_PRECISION_BF16 ? lkernel_fn(&e, "xf_adamw_twin", o->module->adamw_twin)
                                                  : LLVMConstNull(LLVMPointerType(e.kernel_t, 0))};
  model_emit_descriptor(&e, progs, o, step, adamw);
  free(kfns);
  free(kinf);
  free(e.outer);
  LLVMDisposeBuilder(e.b);
  arena_free(&e.arena);
  if (e.err[0]) {
    snprintf(err, errlen, "%s", e.err);
    LLVMDisposeModule(e.M);
    return NULL;
  }
  return e.M;
}
