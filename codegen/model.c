// model.c: the packager of model.so: the xf_model descriptor (XfModel of
// runtime/xf_abi.h) over the printed programs, the CUDA code of
// --target=cuda embedded beside them (XfCuda), the object file, and the
// shared object.
#include "llvm_impl.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// XfCuda of --target=cuda: source, PTX, entry names and the launch tables.
// Returns a pointer constant, or null.
static V emit_cuda(Emit *e, const LlvmOptions *o) {
  const CudaModule *m = o ? o->cuda : NULL;
  Ty cuda_t = emit_abi_type(e, XF_CUDA), launch_t = emit_abi_type(e, XF_LAUNCH);
  if (!m) return LLVMConstNull(LLVMPointerType(cuda_t, 0));
  V tables[XF_PROG_STEP + 1], counts[XF_PROG_STEP + 1];
  for (int p = 0; p <= XF_PROG_STEP; p++) {
    V *recs = calloc((size_t)m->nlaunch[p] + 1, sizeof(V));
    for (int i = 0; i < m->nlaunch[p]; i++) recs[i] = emit_abi_value(e, XF_LAUNCH, &m->launch[p][i]);
    char name[32];
    snprintf(name, sizeof name, "xf_cuda_launch%d", p);
    tables[p] = emit_const_array(e, launch_t, recs, m->nlaunch[p], name);
    counts[p] = ci32(e, m->nlaunch[p]);
    free(recs);
  }
  V *names = calloc((size_t)m->nnames + 1, sizeof(V));
  for (int i = 0; i < m->nnames; i++) names[i] = emit_cstr(e, m->names[i]);
  V sass[2], sass_size[2], sass_sm[2];
  for (int i = 0; i < 2; i++) {
    sass[i] = LLVMConstNull(e->i8p), sass_size[i] = ci64(e, 0), sass_sm[i] = ci32(e, 0);
    if (!o->sass_size[i]) continue;
    V bytes = LLVMConstStringInContext(e->C, (const char *)o->sass[i], (unsigned)o->sass_size[i], 1);
    V gv = LLVMAddGlobal(e->M, LLVMTypeOf(bytes), "xf_cuda_sass");
    LLVMSetInitializer(gv, bytes);
    LLVMSetGlobalConstant(gv, 1);
    LLVMSetLinkage(gv, LLVMPrivateLinkage);
    LLVMSetAlignment(gv, 8);
    sass[i] = LLVMConstBitCast(gv, e->i8p), sass_size[i] = ci64(e, (int64_t)o->sass_size[i]), sass_sm[i] = ci32(e, o->sass_sm[i]);
  }
  V init = emit_abi_const(e, XF_CUDA,
                     (V[XF_CUDA_NFIELDS]){[XF_CUDA_F_source] = emit_cstr(e, m->source), [XF_CUDA_F_ptx] = emit_cstr(e, o->ptx),
                                          [XF_CUDA_F_arch] = emit_cstr(e, o->gpu_arch), [XF_CUDA_F_nnames] = ci32(e, m->nnames),
                                          [XF_CUDA_F_sass] = LLVMConstArray(e->i8p, sass, 2),
                                          [XF_CUDA_F_sass_size] = LLVMConstArray(e->i64, sass_size, 2),
                                          [XF_CUDA_F_sass_sm] = LLVMConstArray(e->i32, sass_sm, 2),
                                          [XF_CUDA_F_precision] = ci32(e, o->precision),
                                          [XF_CUDA_F_names] = emit_const_array(e, e->i8p, names, m->nnames, "xf_cuda_names"),
                                          [XF_CUDA_F_nlaunch] = LLVMConstArray(e->i32, counts, XF_PROG_STEP + 1),
                                          [XF_CUDA_F_launch] = LLVMConstArray(LLVMPointerType(launch_t, 0), tables, XF_PROG_STEP + 1),
                                          [XF_CUDA_F_adamw] = ci32(e, m->adamw),
                                          [XF_CUDA_F_grad_accum] = ci32(e, m->grad_accum),
                                          [XF_CUDA_F_grad_norm] = ci32(e, m->grad_norm),
                                          [XF_CUDA_F_grad_norm_sum] = ci32(e, m->grad_norm_sum)});
  free(names);
  V gv = LLVMAddGlobal(e->M, cuda_t, "xf_cuda");
  LLVMSetInitializer(gv, init);
  LLVMSetGlobalConstant(gv, 1);
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  return gv;
}

// The exported descriptor `xf_model` (XfModel).
void model_emit_descriptor(Emit *e, V *progs, const LlvmOptions *o, V step, const V adamw[2]) {
  const Graph *g = e->g;
  V *cfgs = calloc((size_t)g->nconfig + 1, sizeof(V));
  for (int i = 0; i < g->nconfig; i++)
    cfgs[i] = emit_abi_const(e, XF_CONFIG_ENTRY,
                        (V[XF_CONFIG_ENTRY_NFIELDS]){[XF_CONFIG_ENTRY_F_name] = emit_cstr(e, g->config[i].name),
                                                     [XF_CONFIG_ENTRY_F_is_float] = ci32(e, g->config[i].is_float),
                                                     [XF_CONFIG_ENTRY_F_value] = LLVMConstReal(e->f64, g->config[i].value)});
  V *bufs = calloc((size_t)e->s->nbufs + 1, sizeof(V));
  for (int i = 0; i < e->s->nbufs; i++) {
    const Buffer *b = &e->s->bufs[i];
    const Node *n = &g->nodes[b->node];
    static const int roles[] = {[BUF_PARAM] = XF_BUF_PARAM, [BUF_GRAD] = XF_BUF_GRAD, [BUF_INPUT] = XF_BUF_INPUT,
                                [BUF_ACT] = XF_BUF_ACT, [BUF_OUTPUT] = XF_BUF_OUTPUT, [BUF_TWIN] = XF_BUF_TWIN};
    // a kernel's scratch (cross-entropy's row losses, a chunked convolution's
    // U, Y, S, W^T) is not its node's value: no shape
    int rank = symsize_eq(b->size, symsize_prod(&n->shape, 0, n->shape.rank)) ? n->shape.rank : 0;
    V d[6];
    for (int k = 0; k < 6; k++)
      d[k] = ci64(e, k >= n->shape.rank ? 1 : n->shape.d[k].kind == DIM_B ? 0 : n->shape.d[k].kind == DIM_T ? -dim_tdiv(n->shape.d[k]) : n->shape.d[k].n);
    _Static_assert((int)INIT_NORMAL == XF_INIT_NORMAL && (int)INIT_UNIFORM == XF_INIT_UNIFORM && (int)INIT_ZEROS == XF_INIT_ZEROS &&
                       (int)INIT_ONES == XF_INIT_ONES && (int)INIT_CONSTANT == XF_INIT_CONSTANT &&
                       (int)INIT_TRUNC_NORMAL == XF_INIT_TRUNC_NORMAL,
                   "InitKind is numbered as XF_INIT_*");
    int init = n->op != OP_PARAM || b->role != BUF_PARAM ? 0 : n->init.kind == INIT_NONE ? XF_INIT_ZEROS : (int)n->init.kind;
    bufs[i] = emit_abi_const(e, XF_BUFFER,
                        (V[XF_BUFFER_NFIELDS]){[XF_BUFFER_F_name] = emit_cstr(e, b->name), [XF_BUFFER_F_role] = ci32(e, roles[b->role]),
                                               [XF_BUFFER_F_is_int] = ci32(e, b->dtype == DT_I32),
                                               [XF_BUFFER_F_bf16] = ci32(e, b->bf16),
                                               [XF_BUFFER_F_twin_of] = ci32(e, b->role == BUF_TWIN ? schedule_root(e->s, e->s->buf_of[b->node]) : -1),
                                               [XF_BUFFER_F_coef] = ci64(e, b->size.coef), [XF_BUFFER_F_pow_b] = ci32(e, b->size.pb),
                                               [XF_BUFFER_F_pow_t] = ci32(e, b->size.pt), [XF_BUFFER_F_tdiv] = ci64(e, symsize_den(b->size)),
                                               [XF_BUFFER_F_alias_of] = ci32(e, b->alias_of),
                                               [XF_BUFFER_F_rank] = ci32(e, rank),
                                               [XF_BUFFER_F_dims] = LLVMConstArray(e->i64, d, 6), [XF_BUFFER_F_init] = ci32(e, init),
                                               [XF_BUFFER_F_init_a] = LLVMConstReal(e->f64, n->init.a),
                                               [XF_BUFFER_F_init_b] = LLVMConstReal(e->f64, n->init.b),
                                               [XF_BUFFER_F_first] = ci32(e, b->first), [XF_BUFFER_F_last] = ci32(e, b->last)});
  }
  // the storage roots the step program touches, caches and workspace (stepmem.c)
  int nstep = 0;
  StepBuf *st = calloc((size_t)e->s->nbufs + 1, sizeof *st);
  V *sv[4];
  for (int f = 0; f < 4; f++) sv[f] = calloc((size_t)e->s->nbufs + 1, sizeof(V));
  int64_t frame = 0;
  if (st && o && o->time_axis) nstep = step_buffers(e->s, o->time_axis, st), frame = step_frame(e->s, st, nstep);
  for (int i = 0; i < nstep; i++)
    sv[0][i] = ci32(e, st[i].buf), sv[1][i] = ci32(e, st[i].cache), sv[2][i] = ci32(e, st[i].first),
    sv[3][i] = ci32(e, st[i].last);
  if (nstep < 0) nstep = 0;
  V step_bufs = emit_const_array(e, e->i32, sv[0], nstep, "xf_step_bufs"), step_cache = emit_const_array(e, e->i32, sv[1], nstep, "xf_step_cache"),
    step_first = emit_const_array(e, e->i32, sv[2], nstep, "xf_step_first"), step_last = emit_const_array(e, e->i32, sv[3], nstep, "xf_step_last");
  for (int f = 0; f < 4; f++) free(sv[f]);
  free(st);
  V *labels = calloc((size_t)e->s->nkernels + 1, sizeof(V));
  for (int k = 0; k < e->s->nkernels; k++) {
    char l[512];
    schedule_kernel_label(e->s, k, l, sizeof l);
    labels[k] = emit_cstr(e, l);
  }
  V kernel_labels = emit_const_array(e, e->i8p, labels, e->s->nkernels, "xf_kernel_labels");
  free(labels);
  V init = emit_abi_const(
      e, XF_MODEL,
      (V[XF_MODEL_NFIELDS]){[XF_MODEL_F_abi_version] = ci32(e, XF_ABI_VERSION), [XF_MODEL_F_name] = emit_cstr(e, g->name),
                            [XF_MODEL_F_context] = ci64(e, g->t_max), [XF_MODEL_F_nconfig] = ci32(e, g->nconfig),
                            [XF_MODEL_F_config] = emit_const_array(e, emit_abi_type(e, XF_CONFIG_ENTRY), cfgs, g->nconfig, "xf_config"),
                            [XF_MODEL_F_nbuffers] = ci32(e, e->s->nbufs),
                            [XF_MODEL_F_buffers] = emit_const_array(e, emit_abi_type(e, XF_BUFFER), bufs, e->s->nbufs, "xf_buffers"),
                            [XF_MODEL_F_programs] = LLVMConstArray(emit_tag_type(e, XF_TAG_FN_PROGRAM), progs, 3),
                            [XF_MODEL_F_nkernels] = ci32(e, e->s->nkernels), [XF_MODEL_F_kernel_labels] = kernel_labels,
                            [XF_MODEL_F_cuda] = emit_cuda(e, o),
                            [XF_MODEL_F_adamw] = adamw[0], [XF_MODEL_F_adamw_twin] = adamw[1],
                            [XF_MODEL_F_step] = step,
                            [XF_MODEL_F_step_note] = o && o->step_note ? emit_cstr(e, o->step_note) : LLVMConstNull(e->i8p),
                            [XF_MODEL_F_nstep_bufs] = ci32(e, nstep), [XF_MODEL_F_step_bufs] = step_bufs,
                            [XF_MODEL_F_step_cache] = step_cache, [XF_MODEL_F_step_first] = step_first,
                            [XF_MODEL_F_step_last] = step_last, [XF_MODEL_F_step_frame] = ci64(e, nstep > 0 ? frame : 0),
                            [XF_MODEL_F_t_multiple] = ci64(e, ir_t_multiple(e->s->g)),
                            [XF_MODEL_F_train_ops] = LLVMConstReal(e->f64, o ? o->train_ops : 0),
                            [XF_MODEL_F_precision] = ci32(e, o ? o->precision : XF_PRECISION_FP32)});
  V gv = LLVMAddGlobal(e->M, emit_abi_type(e, XF_MODEL), "xf_model");
  LLVMSetInitializer(gv, init);
  LLVMSetGlobalConstant(gv, 1);
  free(cfgs);
  free(bufs);
}

// The types of e in context C: numbers, pointers and the function types of the ABI.

// ---- object and shared object ------------------------------------------------------

static bool fail(char *err, size_t errlen, const char *what, char *llvm_msg) {
  snprintf(err, errlen, "%s: %s", what, llvm_msg ? llvm_msg : "unknown LLVM error");
  if (llvm_msg) LLVMDisposeMessage(llvm_msg);
  return false;
}

bool llvm_compile(const Schedule *s, const LlvmOptions *o, char *err, size_t errlen) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMContextRef C = LLVMContextCreate();
  LLVMModuleRef M = llvm_emit_module(C, s, o, err, errlen);
  if (!M) {
    LLVMContextDispose(C);
    return false;
  }
  char *msg = NULL, *triple = LLVMGetDefaultTargetTriple(), *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
  LLVMTargetRef target;
  bool ok = true;
  if (LLVMGetTargetFromTriple(triple, &target, &msg)) ok = fail(err, errlen, "LLVMGetTargetFromTriple", msg);
  LLVMTargetMachineRef tm = NULL;
  if (ok) {
    tm = LLVMCreateTargetMachine(target, triple, cpu, features, o->opt_level ? LLVMCodeGenLevelDefault : LLVMCodeGenLevelNone,
                                 LLVMRelocPIC, LLVMCodeModelDefault);
    if (!tm) ok = fail(err, errlen, "LLVMCreateTargetMachine", NULL);
  }
  if (ok) {
    LLVMSetTarget(M, triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(M, dl);
    char abi_err[256];
    bool abi_ok = llvm_abi_check(C, dl, abi_err, sizeof abi_err);
    LLVMDisposeTargetData(dl);
    if (!abi_ok) ok = false, snprintf(err, errlen, "internal error: %s", abi_err);
    else if (LLVMVerifyModule(M, LLVMReturnStatusAction, &msg)) ok = fail(err, errlen, "internal error: generated LLVM IR is invalid", msg);
    else if (msg) LLVMDisposeMessage(msg), msg = NULL;
  }
  if (ok && o->opt_level) {
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMErrorRef perr = LLVMRunPasses(M, "default<O2>", tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (perr) ok = fail(err, errlen, "LLVMRunPasses", LLVMGetErrorMessage(perr));
  }
  if (ok && o->llvm_ir) {
    char *ir = LLVMPrintModuleToString(M);
    fputs(ir, o->llvm_ir);
    LLVMDisposeMessage(ir);
  }
  if (ok && o->object_path) {
    if (LLVMTargetMachineEmitToFile(tm, M, (char *)o->object_path, LLVMObjectFile, &msg))
      ok = fail(err, errlen, "LLVMTargetMachineEmitToFile", msg);
  }
  if (tm) LLVMDisposeTargetMachine(tm);
  LLVMDisposeMessage(triple), LLVMDisposeMessage(cpu), LLVMDisposeMessage(features);
  LLVMDisposeModule(M);
  LLVMContextDispose(C);
  return ok;
}

bool link_shared(const char *object, const char *so, char *err, size_t errlen) {
  const char *cc = getenv("XF_CC");
  if (!cc || !*cc) cc = "cc";
  pid_t pid = fork();
  if (pid < 0) return snprintf(err, errlen, "cannot start the linker: fork failed"), false;
  if (pid == 0) {
    execlp(cc, cc, "-shared", "-o", so, object, "-lm", (char *)NULL);
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(err, errlen, "linking %s with '%s -shared' failed (status %d); set XF_CC to a C compiler driver", so, cc,
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return false;
  }
  return true;
}
