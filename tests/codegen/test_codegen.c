// test_codegen.c: generated CPU code against the reference interpreter.
//
// For every example at small sizes (and the op models of tests/grad), the
// model is compiled to a shared object through LLVM, loaded with dlopen and
// run with the interpreter's float32 parameters and the same tokens, seed and
// step (dropout on, so the Philox masks of the generated code are checked
// too). The loss and every gradient must equal the interpreter's (float32
// mode) within 1e-4 relative (max-norm per tensor). Examples are checked with
// the fused schedule and with --no-fuse; two also with the descriptions
// lower.c gives a GPU. Buffers live where the memory plan
// puts them (memplan over the lifetimes in the model descriptor), and the
// storage of every buffer is filled with NaN as soon as its lifetime ends,
// so a plan that shares storage too early shows up as a wrong loss.
#include <dlfcn.h>
#include <glob.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/TargetMachine.h>

#include "../examples.h"
#include "../model_so.h"
#include "cuda.h"
#include "passes.h"
#include "interp.h"
#include "lower_impl.h"
#include "xf_abi.h"

static int passed, failed;

// The outer indices in three uneven parts, one call each, in order: every
// kernel must give the same values whatever the pool's split (a product
// split over its rows is split inside a sequence).
static void serial_for(const XfApi *api, XfKernelFn fn, void **bufs, int64_t B, int64_t T, uint64_t seed,
                       uint32_t step, int64_t n) {
  int64_t cut[4] = {0, n / 3, n - n / 5, n};
  for (int i = 0; i < 3; i++)
    if (cut[i] < cut[i + 1]) fn(bufs, B, T, seed, step, cut[i], cut[i + 1], api);
}

static void naive_sgemm(const XfApi *api, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  (void)api;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t t = 0; t < k; t++)
        acc += (double)(ta ? a[t * lda + i] : a[i * lda + t]) * (tb ? b[j * ldb + t] : b[t * ldb + j]);
      c[i * ldc + j] = (float)(alpha * acc + (beta != 0 ? beta * c[i * ldc + j] : 0));  // BLAS: C is not read when beta = 0
    }
}

// XfApi.gemm_ex: operands of mixed storage widened, the sums in double, a
// bf16 C rounded to nearest even.
static float widen(const void *p, int64_t i, bool h) { return h ? xf_bf16_float(((const uint16_t *)p)[i]) : ((const float *)p)[i]; }
static void naive_gemm_ex(const XfApi *api, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                          int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc, int32_t types) {
  (void)api;
  bool ha = types & XF_GEMM_A_BF16, hb = types & XF_GEMM_B_BF16, hc = types & XF_GEMM_C_BF16;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t t = 0; t < k; t++)
        acc += (double)widen(a, ta ? t * lda + i : i * lda + t, ha) * widen(b, tb ? j * ldb + t : t * ldb + j, hb);
      float v = (float)(alpha * acc + (beta != 0 ? beta * widen(c, i * ldc + j, hc) : 0));
      if (hc) ((uint16_t *)c)[i * ldc + j] = xf_bf16_bits(v);
      else ((float *)c)[i * ldc + j] = v;
    }
}

// kernel_done: NaN into every planned buffer whose lifetime ends at `kernel`.
static const XfModel *poison_model;
static void **poison_bufs;
static int64_t *poison_numel;
static int poisoned;
static void poison_dead(const XfApi *api, int32_t kernel) {
  (void)api;
  if (getenv("XF_TEST_DEBUG"))
    for (int i = 0; i < poison_model->nbuffers; i++)
      if (poison_model->buffers[i].first == kernel) {
        int nan = 0;
        for (int64_t k = 0; k < poison_numel[i]; k++) nan += isnan(widen(poison_bufs[i], k, poison_model->buffers[i].bf16));
        if (nan) fprintf(stderr, "kernel %d wrote b%d with %d NaN of %lld\n", kernel, i, nan, (long long)poison_numel[i]);
      }
  for (int i = 0; i < poison_model->nbuffers; i++) {
    const XfBuffer *b = &poison_model->buffers[i];
    if (b->alias_of >= 0 || b->role != XF_BUF_ACT || b->last != kernel) continue;
    memset(poison_bufs[i], 0xff, (size_t)(poison_numel[i] * (b->bf16 ? 2 : 4)));  // NaN in float32 and in bf16
    poisoned++;
  }
}

// Bytes of the planned buffers if each had storage of its own.
static int64_t total_act_bytes(const XfModel *m, const int64_t *numel) {
  int64_t t = 0;
  for (int i = 0; i < m->nbuffers; i++)
    if (m->buffers[i].alias_of < 0 && m->buffers[i].first >= 0 &&
        (m->buffers[i].role == XF_BUF_ACT || m->buffers[i].role == XF_BUF_OUTPUT))
      t += (numel[i] * (m->buffers[i].bf16 ? 2 : 4) + 63) / 64 * 64;
  return t;
}

static double rel_err(const float *got, const double *want, int64_t n) {
  double maxw = 0, maxe = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(got[i]) && isfinite(want[i])) return INFINITY;
    maxw = fmax(maxw, fabs(want[i]));
    maxe = fmax(maxe, fabs(got[i] - want[i]));
  }
  return maxw > 0 ? maxe / maxw : maxe;
}

static double abs_err(const float *got, const double *want, int64_t n) {
  double maxe = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(got[i]) && isfinite(want[i])) return INFINITY;
    maxe = fmax(maxe, fabs(got[i] - want[i]));
  }
  return maxe;
}

// With an argument, test_codegen runs only the model checks whose path
// contains it ("bf16": the checks of bf16 storage).
static const char *only;

static void check_model(const char *path, const Define *defs, int ndefs, int64_t B, int64_t T, bool fuse) {
  if (only && !strstr(path, only) && !(model_so_bf16 && strstr("bf16", only))) return;
  char err[1024], so[64];
  Arena a = {0};
  Schedule *s;
  Graph *g = build_model_so(&a, path, defs, ndefs, fuse, &s, so, err, sizeof err);
  if (!g) {
    printf("FAIL %s: %s\n", path, err), failed++;
    arena_free(&a);
    return;
  }
  // the oracle
  // with bf16 storage, the interpreter rounds the values the code stores in bf16
  bool *stored_bf16 = NULL;
  if (model_so_bf16) {
    stored_bf16 = arena_alloc(&a, sizeof(bool) * ((size_t)g->nnodes + 1));
    for (int b = 0; b < s->nbufs; b++)
      if (s->bufs[b].bf16) stored_bf16[s->bufs[b].node] = true;
    for (int k = 0; k < s->nkernels; k++)  // a product's C before its epilogue
      if (s->kernels[k].fusion == FG_MATMUL_MAP && s->bufs[s->kernels[k].out].bf16) stored_bf16[s->kernels[k].matmul] = true;
  }
  InterpConfig ic = {.B = B, .T = T, .f32 = true, .bf16 = stored_bf16, .training = true, .seed = 99, .step = 7};
  Interp *in = interp_new(g, ic, err, sizeof err);
  interp_init_params(in, 5);
  // larger weights than normal(0, 0.01), so every path matters: a normal
  // initialiser's draws scaled to std 0.3 (x30 at 0.01; not past it, where
  // the softmaxes saturate, the loss reaches hundreds and the float32
  // gradients of a temperature are cancellations of that size)
  for (int i = 0; i < g->nforward; i++) {
    const Init *init = &g->nodes[i].init;
    if (g->nodes[i].op != OP_PARAM || init->kind != INIT_NORMAL || !(init->b > 0)) continue;
    // (0.1 with bf16 storage: at 0.3 a rounding flip of a stored value moves
    // GLA's gradients by 3e-2)
    double scale = init->b < 0.3 ? (model_so_bf16 ? 0.1 : 0.3) / init->b : 1;
    for (int64_t k = 0; k < interp_numel(in, i); k++) interp_param(in, i)[k] = (double)(float)(interp_param(in, i)[k] * scale);
  }
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * T));
  for (int i = 0; i < g->nforward; i++) {
    if (g->nodes[i].op != OP_INPUT) continue;
    int64_t lim = interp_input_limit(g, i);
    for (int64_t k = 0; k < B * T; k++) ids[k] = (int32_t)((k * 7 + i * 3 + 1) % lim);
    interp_set_input(in, g->nodes[i].name, ids, err, sizeof err);
  }
  if (!interp_run(in, 0, err, sizeof err)) {
    printf("FAIL %s: interpreter: %s\n", path, err), failed++;
    unlink(so);
    goto out;
  }
  // the generated code
  int nfused = 0;
  for (int k = 0; k < s->nkernels; k++) nfused += s->kernels[k].fusion != FG_NONE;
  void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  unlink(so);
  const XfModel *m = lib ? dlsym(lib, "xf_model") : NULL;
  if (!m || m->abi_version != XF_ABI_VERSION || m->nbuffers != s->nbufs) {
    printf("FAIL %s: cannot load the generated model (%s)\n", path, lib ? "descriptor" : dlerror()), failed++;
    if (lib) dlclose(lib);
    goto out;
  }
  void **bufs = calloc((size_t)m->nbuffers, sizeof *bufs);
  int64_t *numel = calloc((size_t)m->nbuffers, sizeof *numel), *off = calloc((size_t)m->nbuffers, sizeof *off);
  PlanItem *items = calloc((size_t)m->nbuffers, sizeof *items);
  int64_t pers = 0;
  for (int i = 0; i < m->nbuffers; i++) {
    const XfBuffer *b = &m->buffers[i];
    numel[i] = b->coef;
    for (int k = 0; k < b->pow_b; k++) numel[i] *= B;
    for (int k = 0; k < b->pow_t; k++) numel[i] *= T;
    if (b->tdiv > 1) numel[i] /= b->tdiv;  // time axes T / s
    if (b->alias_of >= 0) continue;
    if (b->role == XF_BUF_ACT || b->role == XF_BUF_OUTPUT) items[i] = (PlanItem){numel[i] * (b->bf16 ? 2 : 4), b->first, b->last};
    else off[i] = pers, pers += (numel[i] * 4 + 64) / 64 * 64;
  }
  int64_t *planned = calloc((size_t)m->nbuffers, sizeof *planned);
  int64_t arena_bytes = memplan(items, m->nbuffers, planned);
  char *arena = calloc((size_t)(pers + arena_bytes + 64), 1);
  for (int i = 0; i < m->nbuffers; i++) {
    int r = i;
    while (m->buffers[r].alias_of >= 0) r = m->buffers[r].alias_of;
    bufs[i] = arena + (items[r].bytes > 0 && planned[r] >= 0 ? pers + planned[r] : off[r]);
  }
  for (int i = 0; i < m->nbuffers; i++) {
    const XfBuffer *b = &m->buffers[i];
    int64_t n = numel[i];
    const Node *nd = &g->nodes[s->bufs[i].node];
    if (b->role == XF_BUF_PARAM)
      for (int64_t k = 0; k < n; k++) ((float *)bufs[i])[k] = (float)interp_value(in, s->bufs[i].node)[k];
    if (b->role == XF_BUF_INPUT)
      for (int64_t k = 0; k < n; k++) ((int32_t *)bufs[i])[k] = (int32_t)interp_value(in, s->bufs[i].node)[k];
    (void)nd;
  }
  int nbf16 = 0;
  for (int i = 0; i < m->nbuffers; i++) nbf16 += m->buffers[i].alias_of < 0 && m->buffers[i].bf16;
  XfApi api = {.ctx = NULL, .parallel_for = serial_for, .sgemm = naive_sgemm, .gemm_ex = naive_gemm_ex, .kernel_done = getenv("XF_TEST_NO_POISON") ? NULL : poison_dead};
  poison_model = m, poison_bufs = bufs, poison_numel = numel, poisoned = 0;
  m->programs[XF_PROG_TRAIN](&api, bufs, B, T, 99, 7);
  // float32: the max-norm error of each output relative to its own max-norm;
  // bf16 storage: a gradient's relative to the largest gradient (one that is a sum
  // of rounded terms cancelling to near 0 has no relative accuracy left)
  double worst = 0, scale = 0;
  const char *worst_name = "";
  for (int o = 0; model_so_bf16 && o < g->noutputs; o++) {
    if (!strcmp(g->outputs[o].name, "logits") || !strcmp(g->outputs[o].name, "loss")) continue;
    const double *w = interp_value(in, g->outputs[o].node);
    for (int64_t k = 0; k < interp_numel(in, g->outputs[o].node); k++) scale = fmax(scale, fabs(w[k]));
  }
  for (int o = 0; o < g->noutputs; o++) {
    if (!strcmp(g->outputs[o].name, "logits")) continue;  // not computed by the train program
    int node = g->outputs[o].node;
    double e = rel_err(bufs[s->buf_of[node]], interp_value(in, node), interp_numel(in, node));
    if (model_so_bf16 && scale > 0 && strcmp(g->outputs[o].name, "loss")) e = abs_err(bufs[s->buf_of[node]], interp_value(in, node), interp_numel(in, node)) / scale;
    if (!(e <= worst)) worst = e, worst_name = g->outputs[o].name;
  }
  // eval: the loss without dropout, against the interpreter in inference mode
  interp_set_training(in, false);
  interp_run(in, g->nforward, err, sizeof err);
  int loss = interp_output_node(g, "loss");
  m->programs[XF_PROG_EVAL](&api, bufs, B, T, 99, 7);
  double e_eval = rel_err(bufs[s->buf_of[loss]], interp_value(in, loss), 1);
  // bf16 storage, against the interpreter rounding what the code stores in
  // bf16 (gradients relative to the largest): unfused within 1e-3 (isolated
  // flips, where float32 and double results an ulp apart straddle a bf16
  // midpoint), fused within 2e-2 (contractions into FMAs and exp's
  // polynomial inside a kernel make more); a store that kept float32 or
  // rounded wrongly moves unfused gradients by 1e-2 and more
  double tol = !model_so_bf16 ? 1e-4 : fuse ? 2e-2 : 1e-3;
  bool ok = worst < tol && e_eval < tol && (!model_so_bf16 || nbf16 > 0);
  if (fuse && strstr(path, "examples/") && nfused == 0) ok = false;  // every example has weight gradients to fuse
  if (poisoned == 0) ok = false;  // the poisoning must have run
  printf("%s %s (%s%s%s, %d fused kernels, %d kernels in %d functions, plan %lld of %lld bytes, %d poisoned): "
         "train loss %.6f vs %.6f, worst relative error %.2e (%s), eval %.2e\n",
         ok ? "ok  " : "FAIL", path, fuse ? "fused" : "--no-fuse", model_so_remat ? ", --remat" : "",
         model_so_bf16 ? arena_printf(&a, ", bf16 storage of %d buffers", nbf16) : "", nfused, s->nkernels, s->nclasses,
         (long long)arena_bytes, (long long)total_act_bytes(m, numel), poisoned,
         ((float *)bufs[s->buf_of[loss]])[0], interp_value(in, loss)[0], worst, worst_name, e_eval);
  ok ? passed++ : failed++;
  free(arena), free(bufs), free(numel), free(off), free(items), free(planned);
  dlclose(lib);
out:
  free(ids);
  interp_free(in);
  arena_free(&a);
}

// Every ABI struct as llvm.c builds it for the generated code against the C
// struct of runtime/xf_abi.h, under the host's data layout: size, alignment
// and each field's offset (both come from the same field list; a field
// whose tag differs in width between C and LLVM shows up here).
static void check_abi_layout(void) {
  LLVMInitializeNativeTarget();
  char *triple = LLVMGetDefaultTargetTriple(), *msg = NULL, err[256] = "";
  LLVMTargetRef target;
  bool ok = !LLVMGetTargetFromTriple(triple, &target, &msg);
  if (!ok) snprintf(err, sizeof err, "%s", msg ? msg : "no target");
  LLVMTargetMachineRef tm = ok ? LLVMCreateTargetMachine(target, triple, "", "", LLVMCodeGenLevelNone, LLVMRelocPIC,
                                                         LLVMCodeModelDefault)
                               : NULL;
  if (ok && !tm) ok = false, snprintf(err, sizeof err, "no target machine for %s", triple);
  if (ok) {
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMContextRef C = LLVMContextCreate();
    ok = llvm_abi_check(C, dl, err, sizeof err);
    LLVMContextDispose(C);
    LLVMDisposeTargetData(dl);
  }
  printf("%s ABI layout (%s)%s%s\n", ok ? "ok  " : "FAIL", triple, ok ? "" : ": ", err);
  ok ? passed++ : failed++;
  if (tm) LLVMDisposeTargetMachine(tm);
  if (msg) LLVMDisposeMessage(msg);
  LLVMDisposeMessage(triple);
}

// An op a backend has no lowering for, where it stands, is a located error
// in both backends (lower.c's, which both print), never an identity: the first fused map member of the
// transformer (an elementwise op) relabelled as `embed`.
static void check_unlowered(void) {
  jmp_buf on_error;
  Arena a = {0};
  Diag d = {.arena = &a, .out = stderr, .on_error = &on_error};
  SearchPath sp = {NULL, 0, XF_STDLIB_DIR};
  char err[1024] = "";
  if (setjmp(on_error)) {
    printf("FAIL unlowered op: examples/transformer.xf does not compile\n"), failed++;
    arena_free(&a);
    return;
  }
  Define defs[] = {{"layers", "1"}, {"d", "8"}, {"context", "6"}, {"vocab", "11"}, {"ffn", "12"}, {"heads", "2"}};
  Graph *g = elaborate(&d, load_program(&d, "examples/transformer.xf", &sp), defs, 6);
  bool ok = autodiff(g, err, sizeof err);
  Schedule *s = ok ? schedule_build(&a, g, true, false) : NULL;
  int victim = -1;
  for (int i = 0; s && i < g->nnodes && victim < 0; i++)
    if (s->group[i] >= 0 && ir_op_info[g->nodes[i].op].cat == OPC_BINARY) victim = i;
  if (victim < 0) {
    printf("FAIL unlowered op: no fused elementwise member to relabel (%s)\n", err), failed++;
    arena_free(&a);
    return;
  }
  g->nodes[victim].op = OP_EMBED;
  char want[512];
  const Loc *l = &g->nodes[victim].loc;
  snprintf(want, sizeof want, "%s:%d:%d: error: no loop lowering for op 'embed'", l->file, l->line, l->col);
  LLVMContextRef C = LLVMContextCreate();
  LLVMModuleRef M = llvm_emit_module(C, s, &(LlvmOptions){.module = lower_module(&a, s, LTARGET_CPU, NULL)}, err, sizeof err);
  bool llvm_ok = !M && strstr(err, want);
  if (M) LLVMDisposeModule(M);
  LLVMContextDispose(C);
  printf("%s unlowered op, LLVM: %s\n", llvm_ok ? "ok  " : "FAIL", M ? "compiled" : err);
  llvm_ok ? passed++ : failed++;
  CudaModule *cm = cuda_render(&a, s, lower_module(&a, s, LTARGET_GPU, NULL));
  snprintf(want, sizeof want, "%s:%d:%d: error: no loop lowering for op 'embed'", l->file, l->line, l->col);
  bool cuda_ok = cm->error && strstr(cm->error, want);
  printf("%s unlowered op, CUDA: %s\n", cuda_ok ? "ok  " : "FAIL", cm->error ? cm->error : "rendered");
  cuda_ok ? passed++ : failed++;
  arena_free(&a);
}

// lkernel_ranges (lower_ranges.c) on a description built by hand, outer
// B x T, t_max 1024: what a backend may compute in 32 bits and what it may not.
static void check_ranges(void) {
  Arena a = {0};
  LKernel *lk = arena_alloc(&a, sizeof *lk);
  Lo L = {.a = &a, .lk = lk};
  L.tail[0] = &lk->body;
  lk->name = "ranges";
  lk->shape = LK_ROWS;
  lk->slot_int[KS_IN0] = true;
  new_var(&L, LT_I64, "o");
  LExpr *B = ex(&L, LX_DIM, LT_I64), *T = ex(&L, LX_DIM, LT_I64);
  T->ival = 1;
  lk->outer = imul(&L, B, T);
  int q = let(&L, x2(&L, LX_REM, xvar(&L, 0), xi(&L, 64)), "q");        // [0, 63], of a 64-bit o
  int b = let(&L, x2(&L, LX_DIV, xvar(&L, 0), xi(&L, 64)), "b");        // unbounded
  int n = let(&L, imul(&L, T, xi(&L, 64)), "n");                         // <= 65536
  int t3 = let(&L, imul(&L, imul(&L, T, T), T), "t3");                   // <= 2^30
  int t4 = let(&L, imul(&L, xvar(&L, t3), T), "t4");                     // <= 2^40
  int ng = let(&L, x2(&L, LX_SUB, xi(&L, 0), xvar(&L, n)), "ng");        // >= -65536
  int id = let(&L, load(&L, KS_IN0, xvar(&L, b)), "id");                 // a token id: any int32
  int x = for_begin(&L, xi(&L, 0), xvar(&L, n), true, "x");
  int sq = let(&L, imul(&L, xvar(&L, x), xvar(&L, x)), "sq");             // up to 2^32: 64 bits
  LExpr *at = iadd(&L, imul(&L, x2(&L, LX_DIV, xvar(&L, x), xi(&L, 64)), xi(&L, 69)), x2(&L, LX_REM, xvar(&L, x), xi(&L, 64)));
  int tile = let(&L, at, "at");
  int w = for_begin(&L, xi(&L, 0), xvar(&L, b), false, "w");             // bounded by b: 64 bits
  for_end(&L);
  for_end(&L);
  lkernel_ranges(&a, lk, 1024);
  struct {
    int var;
    bool narrow;
  } want[] = {{0, false}, {q, true}, {b, false}, {n, true}, {t3, true}, {t4, false}, {ng, true},
              {id, false}, {x, true}, {sq, false}, {tile, true}, {w, false}};
  int bad = 0;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (lk->narrow[want[i].var] != want[i].narrow)
      printf("  variable %s: narrow %d, want %d\n", lk->names[want[i].var], lk->narrow[want[i].var], want[i].narrow), bad++;
  // q's value fits, its operation (o % 64 of a 64-bit o) does not; at's does
  if (at->narrow != true || lk->body->val->narrow != false) printf("  expression flags: at %d, o %% 64 %d\n", at->narrow, lk->body->val->narrow), bad++;
  printf("%s ranges: %d of %zu variables as expected\n", bad ? "FAIL" : "ok  ", (int)(sizeof want / sizeof want[0]) - bad,
         sizeof want / sizeof want[0]);
  bad ? failed++ : passed++;
  arena_free(&a);
}

int main(int argc, char **argv) {
  only = argc > 1 ? argv[1] : NULL;
  check_abi_layout();
  check_unlowered();
  check_ranges();
  Define small[] = {{"layers", "2"}, {"d", "8"}, {"context", "6"}, {"vocab", "11"}, {"ffn", "12"}, {"heads", "2"},
                    {"dropout", "0.1"}};
  for (size_t i = 0; i < NTEST_EXAMPLES; i++) {
    char path[256];
    snprintf(path, sizeof path, "examples/%s.xf", test_examples[i]);
    Define defs[7];
    int n = example_defs(test_examples[i], small, 7, defs);
    check_model(path, defs, n, 3, 5, true);
    check_model(path, defs, n, 3, 5, false);
  }
  check_model("tests/golden/sinusoidal.xf", NULL, 0, 2, 8, true);
  check_model("tests/grad/recurrent_blocks.xf", NULL, 0, 3, 6, true);
  check_model("tests/grad/recurrent_blocks.xf", NULL, 0, 2, 4, false);
  // rematerialisation (xfc --remat): the same losses and gradients
  model_so_remat = true;
  for (size_t i = 0; i < 3; i++) {
    char path[256];
    snprintf(path, sizeof path, "examples/%s.xf", test_examples[i]);
    Define defs[7];
    int n = example_defs(test_examples[i], small, 7, defs);
    check_model(path, defs, n, 3, 5, true);
  }
  model_so_remat = false;
  // bf16 storage (xfc --precision=bf16 on the CPU): every example fused and
  // unfused; the blocked attention of heads of 32, whose own GEMM calls
  // read bf16 q, k, v, dO and write a bf16 dQ (xf_gemm_ex's types) and
  // accumulate float32 dK, dV
  model_so_bf16 = true;
  for (size_t i = 0; i < NTEST_EXAMPLES; i++) {
    char path[256];
    snprintf(path, sizeof path, "examples/%s.xf", test_examples[i]);
    Define defs[7];
    int n = example_defs(test_examples[i], small, 7, defs);
    check_model(path, defs, n, 3, 5, i % 2 == 0);
  }
  {
    Define bl[] = {{"layers", "1"}, {"d", "64"}, {"context", "300"}, {"vocab", "11"}, {"ffn", "12"}, {"heads", "2"},
                   {"dropout", "0"}};
    check_model("examples/transformer.xf", bl, 7, 2, 300, true);
  }
  model_so_bf16 = false;
  // the descriptions lower.c gives a GPU (attention: a (sequence, head) per
  // block, key tiles, the online softmax in carried registers), printed by
  // llvm.c: over several key tiles (64 rows) at T 150; vocabulary 96, so the
  // embedding gradient takes its tiled form (two tiles of 48 rows)
  model_so_forms = LTARGET_GPU;
  {
    Define defs[] = {{"layers", "1"}, {"d", "8"}, {"context", "150"}, {"vocab", "96"}, {"ffn", "12"}, {"heads", "2"},
                     {"dropout", "0.1"}};
    check_model("examples/transformer.xf", defs, 7, 2, 150, true);
    check_model("examples/macaron.xf", defs, 7, 2, 5, true);
  }
  check_model("tests/fusion/attn_fixed_v.xf", NULL, 0, 3, 6, true);  // attention_grad's combined output
  // the chunked convolutions (loops.h LSteps: unfold, strided-batched GEMM,
  // shifted sum; dW's shift and GEMM into dW): context 32, chunk 16, 2 chunks,
  // at T 32 and at T 21 (not a multiple of the chunk, fewer positions than
  // lags); context 40, chunk 8, 5 chunks, at T 27
  {
    Define ch[] = {{"layers", "1"}, {"d", "8"}, {"context", "32"}, {"vocab", "11"}, {"ffn", "12"}, {"dropout", "0.1"}};
    check_model("examples/she.xf", ch, 6, 2, 32, true);
    check_model("examples/she.xf", ch, 6, 2, 21, true);
    ch[2].value = "40";
    check_model("examples/she.xf", ch, 6, 3, 27, true);
    check_model("examples/macaron_she.xf", ch, 6, 2, 27, false);
  }
  // linear attention at context 300, against the interpreter's step-by-step
  // recurrences: fused (scan_read, a [16, 16] state per head in a local
  // array) at T 2 and 257, and with --no-fuse at T 300, a scan of 512
  // states per position (2 heads of 16 x 16): two outer blocks of 256
  // states per sequence on a CPU, sixteen of 32 on a GPU
  {
    Define la[] = {{"layers", "1"}, {"d", "32"}, {"context", "300"}, {"vocab", "11"}, {"ffn", "12"}, {"heads", "2"},
                   {"dropout", "0"}};
    for (int form = 0; form < 2; form++) {
      model_so_forms = form ? LTARGET_GPU : LTARGET_CPU;
      check_model("examples/linear_attention.xf", la, 7, 2, 2, true);  // (at T 1 dq is 0: att = v)
      check_model("examples/linear_attention.xf", la, 7, 2, 257, true);
      check_model("examples/linear_attention.xf", la, 7, 1, 300, false);
    }
  }
  // the chunked scan_read (lower_scan_chunk.c) against the interpreter's
  // step-by-step recurrences, in the CPU's and the GPU's forms: chunks of 4
  // (T 2: one partial chunk; T 23: six, the last of 3) and 16 (T 23: a full
  // chunk and one of 7); one decay per position (retention, linear
  // attention's 1) and one per key row (GLA's sigmoid gates); constant
  // decays of either sign, 0 and -1.15 (tests/fusion/scan_signs.xf) at chunks
  // of 4, 5 and 8
  {
    Define sc[] = {{"layers", "1"}, {"d", "16"}, {"context", "24"}, {"vocab", "11"}, {"ffn", "12"}, {"heads", "2"},
                   {"dropout", "0"}};
    static const char *const rec[] = {"examples/retnet.xf", "examples/gla.xf", "examples/linear_attention.xf"};
    static const int chunk[] = {4, 16};
    for (int m = 0; m < 3; m++)
      for (int c = 0; c < 2; c++) {
        model_so_scan_chunk = chunk[c];
        model_so_forms = c ? LTARGET_GPU : LTARGET_CPU;
        check_model(rec[m], sc, 7, 2, c ? 23 : 2, true);
        check_model(rec[m], sc, 7, 3, 23, true);
      }
    for (int c = 4; c <= 8; c++) {
      if (c == 6 || c == 7) continue;
      model_so_scan_chunk = c;
      model_so_forms = c == 5 ? LTARGET_GPU : LTARGET_CPU;
      check_model("tests/fusion/scan_signs.xf", NULL, 0, 2, 23, true);
    }
    model_so_scan_chunk = -1;
    model_so_forms = LTARGET_CPU;
  }
  for (int form = 0; form < 2; form++) {  // the attention variants of stdlib/attention.xf; score biases
    model_so_forms = form ? LTARGET_GPU : LTARGET_CPU;
    check_model("tests/grad/attention_variants.xf", NULL, 0, 2, 7, true);
    check_model("tests/fusion/attn_bias.xf", NULL, 0, 2, 9, true);
    check_model("tests/fusion/attn_padding.xf", NULL, 0, 2, 9, true);
    check_model("tests/fusion/attn_temp_bias.xf", NULL, 0, 2, 6, true);
    check_model("tests/grad/modern.xf", NULL, 0, 2, 12, true);
    check_model("tests/grad/moe.xf", NULL, 0, 2, 12, true);
    check_model("tests/grad/mamba.xf", NULL, 0, 2, 12, true);
    check_model("tests/grad/language.xf", NULL, 0, 2, 8, true);
  }
  model_so_forms = LTARGET_CPU;
  // the CPU's routed products take an expert's rows 128 at a time
  // (lower_route.c rt_chunk) in each of ROUTE_SPLIT parts of the rows: at
  // B 2, T 600 each of the 4 experts has about 150 of a part's 600 routed
  // rows, a full chunk and a partial one; the weight gradient's parts split
  // ffn 12 in columns of 6
  {
    Define mo[] = {{"context", "600"}};
    check_model("tests/grad/moe.xf", mo, 1, 2, 600, true);
    check_model("tests/grad/moe.xf", mo, 1, 2, 600, false);
  }
  // the CPU's blocked attention (heads of 32 and 16: schedule_att_block):
  // at T 300 the forward's second key block and a partial last query block,
  // at T 70 a partial second query block; grouped queries (G 2), a
  // temperature and a learned relative bias (its gradient blocked too) among
  // the variants
  {
    Define bl[] = {{"layers", "1"}, {"d", "64"}, {"context", "300"}, {"vocab", "11"}, {"ffn", "12"}, {"heads", "2"},
                   {"dropout", "0"}};
    check_model("examples/transformer.xf", bl, 7, 2, 300, true);
    check_model("examples/transformer.xf", bl, 7, 3, 70, true);
    Define va[] = {{"d", "64"}, {"heads", "4"}, {"context", "80"}};
    check_model("tests/grad/attention_variants.xf", va, 3, 2, 80, true);
    va[2].value = "300";  // the window of 3: key blocks before it skipped (forward: of 256 keys)
    check_model("tests/grad/attention_variants.xf", va, 3, 1, 300, true);
    check_model("tests/grad/attention_variants.xf", va, 3, 2, 70, true);  // T < context: query blocks past T empty
    // the score biases of attn_bias.xf at T 150, three query blocks (the
    // learned one's gradient in lower_attention_dbias_blocked)
    Define ab[] = {{"d", "64"}, {"context", "150"}};
    check_model("tests/fusion/attn_bias.xf", ab, 2, 2, 150, true);
  }
  // the CPU row form's gradient of a bias per head inside the attention's
  // gradient (schedule_att_dbias_heads): 32 heads of 4 at context 12, two
  // groups of 16 heads, each over both sequences (the relative bias's w)
  {
    Define hg[] = {{"d", "128"}, {"heads", "32"}};
    check_model("tests/grad/attention_variants.xf", hg, 2, 2, 12, true);
    check_model("tests/grad/attention_variants.xf", hg, 2, 2, 7, true);  // T < context
  }
  // the CPU row form's keys-outer gradient (lower_attention_keys.c: at least
  // 8 heads of at most 8 features, no score bias): 16 heads of 4, grouped
  // queries (G 2 and 4), a temperature, the window of 3 (queries past it
  // skipped) beside the biased variants' one-pass row gradient; T < context
  {
    Define kf[] = {{"d", "64"}, {"heads", "16"}, {"context", "40"}};
    check_model("tests/grad/attention_variants.xf", kf, 3, 2, 40, true);
    check_model("tests/grad/attention_variants.xf", kf, 3, 3, 23, true);
    Define tf[] = {{"layers", "2"}, {"d", "64"}, {"heads", "16"}, {"context", "33"}, {"vocab", "11"}, {"ffn", "12"}, {"dropout", "0"}};
    check_model("examples/transformer.xf", tf, 7, 2, 33, true);
  }
  // heads of 4 in the CPU's blocked form (schedule_att_block: BQ 64) with a
  // per-head temperature and a bias of positions in the score expression
  {
    Define h4[] = {{"d", "8"}};
    check_model("tests/fusion/attn_temp_bias.xf", h4, 1, 2, 6, true);
    check_model("tests/fusion/attn_variants.xf", h4, 1, 2, 6, true);
  }
  // a time axis T / 2 (stdlib/sequence.xf) at T 6 of context 8 (three
  // groups), both forms, fused and not (the op models run it at T 4 below)
  {
    Define c8[] = {{"context", "8"}};
    for (int form = 0; form < 2; form++) {
      model_so_forms = form ? LTARGET_GPU : LTARGET_CPU;
      check_model("tests/grad/op_pool.xf", c8, 1, 2, 6, true);
      check_model("tests/grad/op_pool.xf", c8, 1, 3, 8, false);
    }
    Define hg[] = {{"layers", "1"}, {"d", "8"}, {"context", "6"}, {"vocab", "11"}, {"ffn", "12"}, {"heads", "2"}, {"dropout", "0.1"}};
    check_model("examples/hourglass.xf", hg, 7, 3, 6, true);
    check_model("examples/hourglass.xf", hg, 7, 2, 4, false);
    model_so_forms = LTARGET_CPU;
  }
  check_model("tests/fusion/attn_user.xf", NULL, 0, 3, 6, true);
  check_model("tests/fusion/attn_user.xf", NULL, 0, 3, 6, false);
  check_model("tests/fusion/attn_near.xf", NULL, 0, 3, 6, true);
  check_model("tests/fusion/attn_fixed_v.xf", NULL, 0, 3, 6, true);
  check_model("tests/fusion/scan_near.xf", NULL, 0, 3, 6, true);  // scan_read with an exp decay per key row
  check_model("tests/fusion/scan_near.xf", NULL, 0, 2, 5, false);
  glob_t ops;  // every op's own model, so a new op is checked without an edit here
  if (glob("tests/grad/op_*.xf", 0, NULL, &ops) != 0 || ops.gl_pathc < 30) {
    printf("FAIL tests/grad/op_*.xf: expected at least 30 op models\n");
    failed++;
  }
  for (size_t i = 0; i < ops.gl_pathc; i++) check_model(ops.gl_pathv[i], NULL, 0, 2, 4, true);
  globfree(&ops);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
