// test_backend.c: the CUDA backend's generated source, run by the emulation
// (runtime/cuda_emu.h), against the LLVM backend, through the runtime API.
//
// For every example at small sizes (2 layers, d 16, context 8, dropout on;
// the transformer also at context 200; SHE also at contexts 32 and 40, its
// chunked convolutions over 2 and 5 chunks, T 21 and 27 not multiples of the chunk),
// the fusion models and every op model of tests/grad (these without tokens,
// so at the level of the launch tables: check_raw), one model.so carrying
// both targets is opened twice: on the CPU and on "CUDA" with
// XF_CUDA_EMULATE=1, which compiles the very source NVRTC compiled for the
// host and runs it over the whole grid, GEMMs on the CPU BLAS, through the
// same launch tables, device memory plan, AdamW and loss the runtime uses on
// a GPU. From the same parameters and tokens:
//   - the evaluation loss and the sampling logits agree within 1e-5 relative,
//   - after one training step (dropout on: the same Philox masks), the loss
//     and every gradient agree within 1e-5 relative (max-norm per tensor; a
//     gradient below 1e-6 of the largest, zero up to rounding, against that),
//   - 20 training steps give the same loss curve within 1e-4 relative.
// Before those, the training step's CUDA graph against the eager launches
// (check_graph: "graph" as the argument runs only it).
// Examples run fused and with --no-fuse; and fused with XF_PRECISION_BF16:
// activations stored in bf16 on both targets (codegen/storage.c) and bf16
// GEMMs, against the CPU code of the same model.so with its bf16 products
// (bf16_same_tol), or where the CPU has none, with float32 products
// (bf16_tol); the long-context transformer also with bf16 GEMMs alone
// (float32 storage) against float32 CPU code (bf16_tol). Before those, the
// emulation's bf16 rounding (xf_bf16_round) and its bf16 GEMM on their own
// ("bf16" as the argument: only these).
#include <cblas.h>
#include <dlfcn.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>

#include "frontend.h"
#include "../examples.h"
#include "kernel.h"
#include "llvm.h"
#include "passes.h"
#include "cuda.h"
#include "gemm.h"
#include "gpu.h"
#include "cuda_nvrtc.h"
#include "xf.h"

static int passed, failed;
static const char *device_name = "cuda-emulation";  // what XF_DEVICE_CUDA must give

// max |a - b| / max(max |a|, floor): the max-norm relative error.
static double rel_floor(const float *a, const float *b, int64_t n, double floor) {
  double num = 0, den = floor > 1e-30 ? floor : 1e-30;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= num)) num = d;  // NaN propagates
    if (fabs(a[i]) > den) den = fabs(a[i]);
  }
  return num / den;
}
static double rel_max(const float *a, const float *b, int64_t n) { return rel_floor(a, b, n, 0); }
static double max_abs(const float *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
  return m;
}

// model.so with CPU code and the CUDA module (PTX from NVRTC when the toolkit
// is there; the emulation runs the source, so without it the PTX is empty).
// XF_PRECISION_BF16 builds store activations in bf16 on both targets (xfc
// --precision=bf16: codegen/storage.c) unless products_only is set (the
// GEMMs alone in bf16, float32 storage: a schedule without storage).
static bool products_only;
// The seed of the parameters both sides start from.
static int init_seed = 3;

static bool build(const char *path, const Define *defs, int ndefs, bool fuse, int precision, char so[64], char *err,
                  size_t errlen) {
  Arena a = {0};
  jmp_buf on_error;
  Diag d = {.arena = &a, .out = stderr, .on_error = &on_error};
  SearchPath sp = {NULL, 0, XF_STDLIB_DIR};
  volatile bool ok = false;  // set after setjmp
  if (setjmp(on_error)) {
    snprintf(err, errlen, "%s does not compile", path);
    arena_free(&a);
    return false;
  }
  Graph *g = elaborate(&d, load_program(&d, path, &sp), defs, ndefs);
  if (fuse) fuse_attention(g, NULL, 0, NULL), fuse_scan(g);
  if (!autodiff(g, err, errlen)) goto out;
  Schedule *s = schedule_build(&a, g, fuse, true);
  if (precision == XF_PRECISION_BF16 && !products_only && schedule_storage(&a, s, true) == 0) {
    snprintf(err, errlen, "%s: no activation stored in bf16 (codegen/storage.c)", path);
    goto out;
  }
  // the step program (incremental decoding) of both targets, where the logits are causal
  int *ta = arena_alloc(&a, sizeof(int) * (size_t)(g->nnodes + 1)), bad;
  char why[256];
  bool causal = false;
  for (int i = 0; i < g->noutputs; i++)
    if (!strcmp(g->outputs[i].name, "logits")) causal = causal_analyze(g, ta, &bad, why, sizeof why);
  CudaModule *cm = cuda_render(&a, s, lower_module(&a, s, LTARGET_GPU, causal ? ta : NULL));
  if (cm->error) {
    snprintf(err, errlen, "%s", cm->error);
    goto out;
  }
  char *log = NULL, *ptx = NULL;
#ifdef XF_HAVE_CUDA
  ptx = nvrtc_compile(cm->source, "xf_kernels.cu", "compute_80", &log, err, errlen);
  if (!ptx) {
    fprintf(stderr, "%s\n", log ? log : "");
    free(log);
    goto out;
  }
#endif
  free(log);
  char obj[] = "/tmp/xf-cuda-test-XXXXXX.o";
  int fd = mkstemps(obj, 2);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create a temporary object");
    free(ptx);
    goto out;
  }
  close(fd);
  snprintf(so, 64, "%s.so", obj);
  LlvmOptions lo = {.opt_level = 2, .object_path = obj, .cuda = cm, .ptx = ptx ? ptx : "", .gpu_arch = "compute_80",
                   .precision = precision, .time_axis = causal ? ta : NULL,
                   .module = lower_module(&a, s, LTARGET_CPU, causal ? ta : NULL)};
  ok = llvm_compile(s, &lo, err, errlen) && link_shared(obj, so, err, errlen);
  unlink(obj);
  free(ptx);
out:
  arena_free(&a);
  return ok;
}

static void set_tokens(XfRuntime *rt, int64_t n, int64_t vocab, int step) {
  int32_t *tok = xf_tokens(rt), *tgt = xf_targets(rt);
  for (int64_t i = 0; i < n; i++) {
    tok[i] = (int32_t)((i * 7 + 3 * step + 1) % vocab);
    if (tgt) tgt[i] = (int32_t)((i * 5 + step + 2) % vocab);
  }
}

// What check() allows between the emulation and the LLVM backend (float32).
typedef struct {
  double loss;         // the eval loss, one step's loss, every loss of the 20-step curve: relative
  double curve;        // the 20-step curve instead, where it differs
  double values;       // logits (forward, step program) and gradients: max-norm relative, against floors:
  double logit_floor;  //   logits against max(max |logit|, logit_floor)
  double grad_floor;   //   a gradient against max(its max, grad_floor x the largest gradient element)
  double at_least;     // > 0: the logits, gradients and step program differ by more than this
} Tol;

// FP32: float32 on both sides, only the order of the sums differs. A
// gradient that is zero up to rounding (below 1e-6 of the largest one:
// saturated paths) is compared against that floor, not against itself.
static const Tol fp32_tol = {.loss = 1e-5, .curve = 1e-4, .values = 1e-5, .grad_floor = 1e-6};

// BF16: bf16 keeps 8 significand bits, so an operand rounded to nearest is
// within u = 2^-8 relative, and a product of two within 2u + u^2 < 2^-7; the
// float32 sums add about k 2^-24, negligible here. A GEMM's element is then
// within 2^-7 of the magnitude of its terms, sum_k |a_ik b_kj|, not of its
// own value: where the terms cancel (logits near 0, bias gradients summed
// over rows) the error is larger relative to the value, and a ReLU whose
// input moves across 0 switches a term of a gradient on or off. So:
//   - logits are compared in absolute terms up to magnitude 1 (floor 1): a
//     logit error d scales a softmax probability by e^d;
//   - a gradient against the largest gradient element of the model;
//   - both within 2^-5 = 8u: a value passes through several GEMMs in
//     sequence (per layer the mixer's, the FFN's two, the head; backward
//     their transposes), each adding up to 2u of its scale;
//   - the losses relative within u: a loss is a mean over B T positions
//     whose logit errors have both signs.
// The rounding is witnessed: logits, gradients and the step program's logits
// each differ by more than the FP32 tolerance, 1e-5 (the loss is no witness:
// its errors average out, to 5e-7 relative in some examples). Only under the
// emulation: on a GPU, CUBLAS_COMPUTE_32F_FAST_16BF allows cuBLAS to
// multiply in TF32 or float32 instead, which the tolerances cover.
static const Tol bf16_tol = {.loss = 0x1p-8, .curve = 0x1p-8, .values = 0x1p-5, .logit_floor = 1, .grad_floor = 1,
                             .at_least = 1e-5};

// BF16 storage (the default of BF16 builds, products_only unset) where the
// CPU has bf16 products (xf_gemm_bf16_ready): the CPU code of the same
// model.so with its bf16 products, so both sides store the same activations
// in bf16, rounded to nearest even, and multiply the same bf16 operands
// (the GPU's staged weights are the CPU's, rounded alike) exactly, with
// float32 sums in different orders. Without team GEMMs they agree to 1e-7
// (a value whose sums straddle a rounding boundary would differ by one bf16
// ulp). The team GEMMs (attention, the chunked scans) multiply in TF32 on
// the GPU and in bf16 on the CPU, and their differences move stored values
// across rounding boundaries: measured up to 9.3e-4 on logits, 6.3e-3 on
// gradients, 5.7e-3 on the step program, 6.2e-6 on losses. So values within
// 2^-6 of their scale (as bf16_tol's floors), one step's loss within 2e-5
// and the curve within 5e-4. A store that truncates instead of rounding
// moves SHE's gradients by 4.5e-2 and its loss by 3.7e-5, and fails. Where
// the CPU has no bf16 products, the comparison is bf16_tol's against its
// float32 products.
static const Tol bf16_same_tol = {.loss = 2e-5, .curve = 5e-4, .values = 0x1p-6, .logit_floor = 1, .grad_floor = 1};

// TF32: the emulation computes the GEMM records in float32 and rounds the
// operands of the team GEMMs (the blocked attention's, on the tensor cores:
// xf_tf32, 11 significand bits, u = 2^-11) as bf16's above with 8 u in place
// of 8 2^-8: values within 2^-8, losses within 2^-11; witnessed above 1e-6.
static const Tol tf32_tol = {.loss = 0x1p-11, .curve = 0x1p-11, .values = 0x1p-8, .logit_floor = 1, .grad_floor = 1,
                             .at_least = 1e-6};
// TF32 on a GPU (--gpu): cuBLAS also computes every GEMM record in TF32
// (the emulation in float32), so every product of the step rounds its
// operands to 11 bits: measured on an H200 (2026-11-29) up to 5.3e-3 on the
// gradients (examples/transformer.xf, one head of 64 at T 128, the first
// layer's fc1.W, at the end of the backward's chain of TF32 products), over
// the 2^-8 of tf32_tol. Values within 2^-6, as bf16_same_tol's, where each
// product's operands are rounded once too; losses and curves as tf32_tol.
static const Tol tf32_gpu_tol = {.loss = 0x1p-11, .curve = 0x1p-11, .values = 0x1p-6, .logit_floor = 1, .grad_floor = 1,
                                 .at_least = 1e-6};

// A model's CPU code against its CUDA source (emulated or real): the eval
// loss, the logits, one training step's loss and every gradient, then a
// loss curve of `steps` steps and, with program, the step program fed T + 2
// times; `steps` 1 and no program check the forward and gradient forms only.
static void check_steps(const char *path, const Define *defs, int ndefs, int64_t B, int64_t T, bool fuse, int precision,
                        int steps, bool program) {
  char so[64], err[1024];
  if (!build(path, defs, ndefs, fuse, precision, so, err, sizeof err)) {
    printf("FAIL %s: %s\n", path, err);
    failed++;
    return;
  }
  const Tol *tol = precision == XF_PRECISION_BF16   ? &bf16_tol
                   : precision == XF_PRECISION_TF32 ? (strcmp(device_name, "cuda") ? &tf32_tol : &tf32_gpu_tol)
                                                    : &fp32_tol;
  XfOptions o = {.batch = B, .seq = T, .threads = 1, .seed = 7, .device = XF_DEVICE_CPU, .fp32_gemms = true};
  char why[160];
  bool same = precision == XF_PRECISION_BF16 && !products_only && xf_gemm_bf16_ready(why, sizeof why);
  if (same) o.fp32_gemms = false, tol = &bf16_same_tol;
  XfRuntime *cpu = xf_open(so, &o, err, sizeof err), *gpu = NULL;
  o.device = XF_DEVICE_CUDA;
  if (cpu) gpu = xf_open(so, &o, err, sizeof err);
  unlink(so);
  if (!cpu || !gpu) {
    printf("FAIL %s: %s\n", path, err);
    failed++;
    xf_close(cpu);
    return;
  }
  bool ok = !strcmp(xf_device(gpu), device_name);
  int64_t vocab = xf_vocab(cpu), n = B * T;
  xf_init_params(cpu, init_seed), xf_init_params(gpu, init_seed);
  set_tokens(cpu, n, vocab, 0), set_tokens(gpu, n, vocab, 0);
  double e_eval = fabs((double)xf_eval_step(cpu) - xf_eval_step(gpu)) / fabs((double)xf_eval_step(cpu));
  double e_logits = 0;
  const float *lc = xf_forward(cpu, B, T);
  if (lc) {
    int64_t nl = n * vocab;
    float *keep = malloc(sizeof(float) * (size_t)nl);
    memcpy(keep, lc, sizeof(float) * (size_t)nl);
    e_logits = rel_floor(keep, xf_forward(gpu, B, T), nl, tol->logit_floor);
    free(keep);
  }
  ok = ok && e_eval <= tol->loss && e_logits <= tol->values;
  // one step: loss and every gradient
  float l0c = xf_train_step(cpu), l0g = xf_train_step(gpu);
  double e_loss = fabs((double)l0c - l0g) / fabs((double)l0c), e_grad = 0;
  const char *worst = "";
  double gscale = 0;
  for (int p = 0; p < xf_nparams(cpu); p++) {
    int64_t numel;
    xf_param(cpu, p, NULL, &numel);
    if (xf_grad(cpu, p)) gscale = fmax(gscale, max_abs(xf_grad(cpu, p), numel));
  }
  for (int p = 0; p < xf_nparams(cpu); p++) {
    const char *name;
    int64_t numel;
    xf_param(cpu, p, &name, &numel);
    const float *gc = xf_grad(cpu, p), *gg = xf_grad(gpu, p);
    if (!gc) continue;
    double e = rel_floor(gc, gg, numel, tol->grad_floor * gscale);
    if (getenv("XF_TEST_DEBUG")) printf("  %s: %.1e (|g| %g vs %g)\n", name, e, gc[0], gg[0]);
    if (!(e <= e_grad)) e_grad = e, worst = name;
  }
  ok = ok && e_loss <= tol->loss && e_grad <= tol->values;
  // 20 steps: the loss curves
  double e_curve = 0;
  for (int step = 1; step < steps; step++) {
    set_tokens(cpu, n, vocab, step), set_tokens(gpu, n, vocab, step);
    float lc2 = xf_train_step(cpu), lg2 = xf_train_step(gpu);
    double e = fabs((double)lc2 - lg2) / fabs((double)lc2);
    if (!(e <= e_curve)) e_curve = e;
  }
  ok = ok && e_curve <= tol->curve;
  // the step program: B sequences decoded incrementally, a 3-token prompt,
  // then one token at a time past the context (the context rule starts the
  // window over); each feed's logits as the forward's
  double e_step = 0;
  XfSampler *sc = xf_sampler_open(cpu, B, true, err, sizeof err), *sg = sc ? xf_sampler_open(gpu, B, true, err, sizeof err) : NULL;
  bool inc = sc && sg && xf_sampler_incremental(sc) == xf_sampler_incremental(sg);
  for (int f = 0; program && inc && f < (int)T + 2; f++) {
    int32_t tok[64];
    int64_t len = f == 0 ? 3 : 1;
    for (int64_t q = 0; q < B * len; q++) tok[q] = (int32_t)((q * 3 + 5 * f + 1) % vocab);
    const float *a = xf_sampler_feed(sc, tok, len);
    float *keep = a ? malloc(sizeof(float) * (size_t)(B * vocab)) : NULL;
    if (keep) memcpy(keep, a, sizeof(float) * (size_t)(B * vocab));
    const float *b = keep ? xf_sampler_feed(sg, tok, len) : NULL;
    double e = b ? rel_floor(keep, b, B * vocab, tol->logit_floor) : INFINITY;
    if (!(e <= e_step)) e_step = e;
    free(keep);
  }
  if (!sc || !sg) printf("  sampler: %s\n", err);
  ok = ok && inc && e_step <= tol->values;
  bool witnessed = e_logits >= tol->at_least && e_grad >= tol->at_least && (!program || e_step >= tol->at_least);
  ok = ok && (witnessed || strcmp(device_name, "cuda-emulation"));
  printf("%s %-40s %-9s eval %.1e logits %.1e loss %.1e grads %.1e (%s) %d-step curve %.1e step program%s %.1e%s\n",
         ok ? "ok  " : "FAIL", path, precision == XF_PRECISION_BF16 ? (products_only ? "bf16-gemm" : same ? "bf16-same" : "bf16") : precision == XF_PRECISION_TF32 ? "tf32" : fuse ? "fused" : "--no-fuse", e_eval, e_logits,
         e_loss, e_grad, worst, steps, e_curve, !program ? " (not run)" : sg && xf_sampler_incremental(sg) ? "" : " (recompute)", e_step,
         witnessed ? "" : " (no rounding seen)");
  xf_sampler_close(sc), xf_sampler_close(sg);
  ok ? passed++ : failed++;
  xf_close(cpu);
  xf_close(gpu);
}

static void check(const char *path, const Define *defs, int ndefs, int64_t B, int64_t T, bool fuse, int precision) {
  check_steps(path, defs, ndefs, B, T, fuse, precision, 20, true);
}

static void serial_for(const XfApi *api, XfKernelFn fn, void **bufs, int64_t B, int64_t T, uint64_t seed,
                       uint32_t step, int64_t n) {
  fn(bufs, B, T, seed, step, 0, n, api);
}
static void blas(const XfApi *api, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  (void)api;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha,
              a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

static int64_t numel_of(const XfBuffer *b, int64_t B, int64_t T) {
  int64_t v = b->coef;
  for (int i = 0; i < b->pow_b; i++) v *= B;
  for (int i = 0; i < b->pow_t; i++) v *= T;
  return b->tdiv > 1 ? v / b->tdiv : v;
}

// Models without tokens (the op models of tests/grad): the training program
// of the CPU code and the emulated launch table, each buffer in storage of
// its own; the loss and every gradient within 1e-5 relative.
// The training step as a graph (runtime.c device_train_graph) against the
// eager launches (XF_CUDA_GRAPH=0, the oracle) and XF_CUDA_SYNC=1 (eager: a
// wait after every launch), from the same parameters and tokens, dropout on
// so that the per-step values (XfStepVars) matter: the losses bit for bit,
// step after step, and every parameter after the steps at B, then at B - 1
// (a new graph), then at B again. The graph is really replayed (one capture per shape, one
// replay per step), and a graph step waits once (the loss read), as an
// eval step does.
static void check_graph(void) {
  static const char *const modes[3][2] = {{"XF_CUDA_GRAPH", "1"}, {"XF_CUDA_GRAPH", "0"}, {"XF_CUDA_SYNC", "1"}};
  Define defs[] = {{"layers", "2"}, {"d", "16"}, {"context", "8"}, {"vocab", "13"}, {"ffn", "24"}, {"heads", "2"},
                   {"dropout", "0.1"}};
  const char *path = "examples/transformer.xf";
  char so[64], err[1024];
  if (!build(path, defs, 7, true, XF_PRECISION_FP32, so, err, sizeof err)) {
    printf("FAIL graph %s: %s\n", path, err);
    failed++;
    return;
  }
  enum { B = 3, T = 8, STEPS = 4 };
  XfOptions o = {.batch = B, .seq = T, .threads = 1, .seed = 7, .device = XF_DEVICE_CUDA};
  XfRuntime *rt[3] = {NULL, NULL, NULL};
  bool ok = true;
  for (int r = 0; r < 3 && ok; r++) {
    setenv(modes[r][0], modes[r][1], 1);
    ok = (rt[r] = xf_open(so, &o, err, sizeof err)) != NULL;
    unsetenv(modes[r][0]);
  }
  unlink(so);
  if (!ok) {
    printf("FAIL graph %s: %s\n", path, err);
    failed++;
    for (int r = 0; r < 3; r++) xf_close(rt[r]);
    return;
  }
  int64_t vocab = xf_vocab(rt[0]);
  for (int r = 0; r < 3; r++) xf_init_params(rt[r], 3);
  const int64_t shapes[3] = {B, B - 1, B};
  const char *why = "";
  int step = 0;
  for (int s = 0; s < 3 && ok; s++) {
    for (int r = 0; r < 3; r++) ok = ok && xf_set_shape(rt[r], shapes[s], T);
    for (int i = 0; i < STEPS && ok; i++, step++) {
      float loss[3];
      uint64_t syncs[3];
      for (int r = 0; r < 3; r++) {
        set_tokens(rt[r], shapes[s] * T, vocab, step);
        uint64_t before = xf_device_counts(rt[r]).syncs;
        loss[r] = xf_train_step(rt[r]);
        syncs[r] = xf_device_counts(rt[r]).syncs - before;
      }
      if (memcmp(&loss[0], &loss[1], sizeof(float)) || memcmp(&loss[0], &loss[2], sizeof(float))) ok = false, why = "losses";
      // the first step after xf_param (the host may have written them) uploads the parameters too
      if (i > 0 && syncs[0] != 1) ok = false, why = "waits per graph step";
      if (!ok) printf("  step %d at B %lld: losses %.9g (graph) %.9g (eager) %.9g (XF_CUDA_SYNC), %llu waits\n", step + 1,
                      (long long)shapes[s], loss[0], loss[1], loss[2], (unsigned long long)syncs[0]);
    }
    for (int p = 0; p < xf_nparams(rt[0]) && ok; p++) {
      int64_t n;
      const float *w = xf_param(rt[0], p, NULL, &n);
      for (int r = 1; r < 3 && ok; r++)
        if (memcmp(w, xf_param(rt[r], p, NULL, &n), sizeof(float) * (size_t)n)) ok = false, why = "parameters";
    }
    XfDeviceCounts c = xf_device_counts(rt[0]);
    if (ok && (c.captures != (uint64_t)s + 1 || c.replays != (uint64_t)step)) ok = false, why = "captures or replays";
  }
  xf_eval_step(rt[0]);  // uploads the parameters xf_param exposed
  uint64_t before = xf_device_counts(rt[0]).syncs;
  float e0 = xf_eval_step(rt[0]), e1 = xf_eval_step(rt[1]);
  if (ok && (xf_device_counts(rt[0]).syncs - before != 1 || memcmp(&e0, &e1, sizeof e0))) ok = false, why = "eval step";
  XfDeviceCounts g = xf_device_counts(rt[0]), e = xf_device_counts(rt[1]), y = xf_device_counts(rt[2]);
  if (ok && (e.replays || e.captures || y.replays || y.captures)) ok = false, why = "a graph off the graph path";
  printf("%s graph %-34s %d steps at B %d, %d, %d: graph %s eager; %llu captures, %llu replays, %llu waits (eager %llu, "
         "XF_CUDA_SYNC %llu)%s%s\n",
         ok ? "ok  " : "FAIL", path, STEPS, B, B - 1, B, ok ? "==" : "!=", (unsigned long long)g.captures,
         (unsigned long long)g.replays, (unsigned long long)g.syncs, (unsigned long long)e.syncs,
         (unsigned long long)y.syncs, ok ? "" : ": ", why);
  ok ? passed++ : failed++;
  for (int r = 0; r < 3; r++) xf_close(rt[r]);
}

static void check_raw(const char *path, int64_t B, int64_t T) {
  char so[64], err[1024];
  if (!build(path, NULL, 0, true, XF_PRECISION_FP32, so, err, sizeof err)) {
    printf("FAIL %s: %s\n", path, err);
    failed++;
    return;
  }
  void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  unlink(so);
  const XfModel *m = lib ? dlsym(lib, "xf_model") : NULL;
  XfGpu *g = !m ? NULL : strcmp(device_name, "cuda") ? xf_gpu_emu_open(0, err, sizeof err) : xf_gpu_cuda_open(0, err, sizeof err);
  if (!g || !g->load(g, m->cuda, B, T)) {
    printf("FAIL %s: %s\n", path, g ? g->err : lib ? err : dlerror());
    failed++;
    if (g) g->close(g);
    if (lib) dlclose(lib);
    return;
  }
  int nb = m->nbuffers;
  void **host = calloc((size_t)nb, sizeof *host), **dev = calloc((size_t)nb, sizeof *dev);
  int64_t *numel = calloc((size_t)nb, sizeof *numel);
  bool ok = true;
  for (int i = 0; i < nb && ok; i++) {
    const XfBuffer *b = &m->buffers[i];
    numel[i] = numel_of(b, B, T);
    if (b->alias_of >= 0) continue;
    host[i] = calloc((size_t)numel[i] + 1, 4);
    ok = g->alloc(g, &dev[i], (size_t)numel[i] * 4 + 4);
    for (int64_t k = 0; k < numel[i]; k++) {
      if (b->role == XF_BUF_PARAM) ((float *)host[i])[k] = (float)sin(1.3 * (double)k + i);
      if (b->role == XF_BUF_INPUT) ((int32_t *)host[i])[k] = (int32_t)((k * 5 + 1) % 3);
    }
    ok = ok && g->upload(g, dev[i], host[i], (size_t)numel[i] * 4);
  }
  for (int i = 0; i < nb; i++) {
    int k = i;
    while (m->buffers[k].alias_of >= 0) k = m->buffers[k].alias_of;
    host[i] = host[k], dev[i] = dev[k];
  }
  XfApi api = {.parallel_for = serial_for, .sgemm = blas};
  m->programs[XF_PROG_TRAIN](&api, host, B, T, 99, 7);
  XfStepVars vars = {.step = 7};
  void *dvars = NULL;
  ok = ok && g->alloc(g, &dvars, sizeof vars) && g->upload(g, dvars, &vars, sizeof vars);
  ok = ok && xf_cuda_program(g, m, XF_PROG_TRAIN, dev, B, T, 0, T, 0, 0, 99, dvars, NULL, NULL);
  double worst = 0;
  const char *wname = "";
  for (int i = 0; i < nb && ok; i++) {
    const XfBuffer *b = &m->buffers[i];
    bool all = getenv("XF_TEST_DEBUG") && b->role == XF_BUF_ACT;
    if (b->alias_of >= 0 || (b->role != XF_BUF_GRAD && b->role != XF_BUF_OUTPUT && !all)) continue;
    float *got = malloc((size_t)numel[i] * 4 + 4);
    ok = g->download(g, got, dev[i], (size_t)numel[i] * 4);
    double e = rel_max(host[i], got, numel[i]);
    if (all && e > 1e-5) printf("  buffer b%d (first kernel %d): %.1e\n", i, b->first, e);
    if (all) continue;
    if (!(e <= worst)) worst = e, wname = b->name;
    free(got);
  }
  if (!ok) printf("  device: %s\n", g->err);
  ok = ok && worst <= 1e-5;
  printf("%s %-40s loss and gradients %.1e (%s)\n", ok ? "ok  " : "FAIL", path, worst, wname);
  ok ? passed++ : failed++;
  for (int i = 0; i < nb; i++)
    if (m->buffers[i].alias_of < 0) free(host[i]), g->release(g, dev[i]);
  free(host), free(dev), free(numel);
  if (dvars) g->release(g, dvars);
  g->close(g);
  dlclose(lib);
}

static float from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
static uint32_t to_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

// xf_bf16_round on the cases of its rule: exact values, ties to even both
// ways, above and below a tie, a carry into the exponent, overflow to
// infinity, subnormals, infinities, NaN with a payload only in the dropped
// bits (stays NaN, sign kept).
static void check_bf16_round(void) {
  static const uint32_t cases[][2] = {
      {0x3f800000u, 0x3f800000u},  // 1
      {0x3f808000u, 0x3f800000u},  // 1 + 2^-8, a tie: to the even 1
      {0x3f818000u, 0x3f820000u},  // 1 + 3 2^-8, a tie: to the even 1 + 2^-6
      {0x3f808001u, 0x3f810000u},  // just above a tie: up
      {0x3f807fffu, 0x3f800000u},  // just below a tie: down
      {0xbf808000u, 0xbf800000u},  // -(1 + 2^-8): to the even -1
      {0x3fffffffu, 0x40000000u},  // carries into the exponent: 2
      {0x7f7fffffu, 0x7f800000u},  // FLT_MAX: past the largest bf16 and a half ulp: infinity
      {0x7f7f7fffu, 0x7f7f0000u},  // below that half ulp: the largest bf16
      {0x00018000u, 0x00020000u},  // a subnormal tie, kept part odd: up
      {0x00008000u, 0x00000000u},  // a subnormal tie, kept part even (0): down
      {0x7f800000u, 0x7f800000u},  // infinity
      {0xff800000u, 0xff800000u},  // -infinity
      {0x80000000u, 0x80000000u},  // -0
  };
  bool ok = true;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    uint32_t got = to_bits(xf_bf16_round(from_bits(cases[i][0])));
    if (got != cases[i][1]) printf("  xf_bf16_round(0x%08x) = 0x%08x, expected 0x%08x\n", cases[i][0], got, cases[i][1]);
    ok = ok && got == cases[i][1];
  }
  static const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7f80ffffu};
  for (size_t i = 0; i < sizeof nans / sizeof *nans; i++) {
    uint32_t got = to_bits(xf_bf16_round(from_bits(nans[i])));
    bool nan = (got & 0x7fffffffu) > 0x7f800000u && (got & 0xffffu) == 0 && (got >> 31) == (nans[i] >> 31);
    if (!nan) printf("  xf_bf16_round(NaN 0x%08x) = 0x%08x: not a bf16 NaN of the same sign\n", nans[i], got);
    ok = ok && nan;
  }
  printf("%s xf_bf16_round: round to nearest even, overflow, subnormals, NaN\n", ok ? "ok  " : "FAIL");
  ok ? passed++ : failed++;
}

// The geometry of the emulated GEMM checks: GM x GN x GK products, GCOUNT of
// a strided batch, leading dimensions GPAD past the rows and strides one
// past the matrices, for transposition t (ta = t & 1, tb = t >> 1).
enum { GM = 5, GN = 6, GK = 7, GPAD = 3, GCOUNT = 2 };
typedef struct {
  int ta, tb;
  int64_t lda, ldb, ldc, sa, sb, sc;
} GemmGeom;
static GemmGeom gemm_geom(int t) {
  GemmGeom q = {.ta = t & 1, .tb = t >> 1};
  q.lda = (q.ta ? GM : GK) + GPAD, q.ldb = (q.tb ? GK : GN) + GPAD, q.ldc = GN + GPAD;
  q.sa = (q.ta ? GK : GM) * q.lda + 1, q.sb = (q.tb ? GN : GK) * q.ldb + 1, q.sc = GM * q.ldc + 1;
  return q;
}

// The emulated GPU loaded with one bf16-precision GEMM record of GM x GN x
// GK with operand storage `types` (rec and c the caller's, filled here), or
// NULL with the reason in err.
static XfGpu *emu_gemm_open(XfLaunch *rec, XfCuda *c, int types, char *err, size_t errlen) {
  *rec = (XfLaunch){.kind = XF_LAUNCH_GEMM, .m = {.coef = GM}, .n = {.coef = GN}, .k = {.coef = GK}, .types = types};
  *c = (XfCuda){.source = "", .ptx = "", .arch = "compute_80", .nlaunch = {1}, .launch = {rec}, .precision = XF_PRECISION_BF16};
  XfGpu *g = xf_gpu_emu_open(0, err, errlen);
  if (g && !g->load(g, c, 1, 1)) {
    snprintf(err, errlen, "%s", g->err);
    g->close(g);
    return NULL;
  }
  return g;
}

// The emulation's bf16 GEMM (gpu_emu.c) for every transposition, leading
// dimensions wider than the rows and two products of a strided batch:
// against double sums of the operands rounded by xf_bf16_round (within
// float32 summation, 1e-6 of the terms' magnitude), and further than 1e-4
// from the unrounded product (the rounding happened). A product larger than
// the scratch planned at load is refused.
static void check_bf16_gemm(void) {
  enum { M = GM, N = GN, K = GK, COUNT = GCOUNT };
  XfLaunch rec;
  XfCuda c;
  char err[1024];
  XfGpu *g = emu_gemm_open(&rec, &c, 0, err, sizeof err);
  bool ok = g != NULL;
  double worst = 0, moved = 0;
  for (int t = 0; ok && t < 4; t++) {
    GemmGeom q = gemm_geom(t);
    int ta = q.ta, tb = q.tb;
    int64_t lda = q.lda, ldb = q.ldb, ldc = q.ldc, sa = q.sa, sb = q.sb, sc = q.sc;
    float a[COUNT * 64 + 1], b[COUNT * 70 + 1], cc[COUNT * 50 + 1], c0[COUNT * 50 + 1];
    for (int i = 0; i < COUNT * 64 + 1; i++) a[i] = (float)(0.3 + sin(0.7 * i + t));
    for (int i = 0; i < COUNT * 70 + 1; i++) b[i] = (float)(cos(1.1 * i - t) - 0.2);
    for (int i = 0; i < COUNT * 50 + 1; i++) c0[i] = cc[i] = (float)sin(0.37 * i);
    float alpha = 0.75f, beta = 0.5f;
    ok = g->gemm(g, ta, tb, M, N, K, alpha, a, lda, sa, b, ldb, sb, beta, cc, ldc, sc, COUNT, 0);
    for (int q = 0; ok && q < COUNT; q++)
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double sum = 0, raw = 0, mag = fabs(beta * c0[q * sc + i * ldc + j]);
          for (int k = 0; k < K; k++) {
            float x = a[q * sa + (ta ? k * lda + i : i * lda + k)], y = b[q * sb + (tb ? j * ldb + k : k * ldb + j)];
            sum += (double)xf_bf16_round(x) * xf_bf16_round(y), raw += (double)x * y, mag += fabs(alpha * (double)x * y);
          }
          double want = alpha * sum + beta * c0[q * sc + i * ldc + j], got = cc[q * sc + i * ldc + j];
          worst = fmax(worst, fabs(got - want) / mag);
          moved = fmax(moved, fabs(got - (alpha * raw + beta * c0[q * sc + i * ldc + j])) / mag);
        }
  }
  if (ok) ok = worst <= 1e-6 && moved > 1e-4;
  // k 8 > 7: m k + k n exceeds what load planned
  float big[128] = {0};
  bool refused = g && !g->gemm(g, 0, 0, M, N, K + 1, 1, big, K + 1, 0, big, N, 0, 0, big, N, 0, 1, 0) &&
                 strstr(g->err, "than the bf16 scratch planned at load");
  printf("%s emulated bf16 GEMM: against rounded operands %.1e, against float32 ones %.1e, too large refused: %s%s%s\n",
         ok && refused ? "ok  " : "FAIL", worst, moved, refused ? "yes" : "no", g ? "" : " ", g ? "" : err);
  ok && refused ? passed++ : failed++;
  if (g) g->close(g);
}

// The emulation's products on bf16 operands (gpu.h gemm's types: bf16
// storage) for every transposition, strided batch and padding: A and B
// given as bf16 elements give bit for bit the product of the float32
// operands they round (the BF16 arithmetic above); a bf16 C holds that
// float32 result rounded to nearest even. Mixed A and B, and a bf16 C with
// beta not 0, are refused (cuBLAS has neither).
static void check_bf16_storage_gemm(void) {
  enum { M = GM, N = GN, K = GK, COUNT = GCOUNT };
  XfLaunch rec;
  XfCuda c;
  char err[1024];
  XfGpu *g = emu_gemm_open(&rec, &c, XF_GEMM_A_BF16 | XF_GEMM_B_BF16 | XF_GEMM_C_BF16, err, sizeof err);
  bool ok = g != NULL;
  int64_t differ = 0, checked = 0;
  for (int t = 0; ok && t < 4; t++) {
    GemmGeom q = gemm_geom(t);
    int ta = q.ta, tb = q.tb;
    int64_t lda = q.lda, ldb = q.ldb, ldc = q.ldc, sa = q.sa, sb = q.sb, sc = q.sc;
    float a[COUNT * 64 + 1], b[COUNT * 70 + 1], want[COUNT * 50 + 1], c32[COUNT * 50 + 1];
    uint16_t ha[COUNT * 64 + 1], hb[COUNT * 70 + 1], c16[COUNT * 50 + 1];
    for (int i = 0; i < COUNT * 64 + 1; i++) a[i] = (float)(0.3 + sin(0.7 * i + t)), ha[i] = xf_bf16_bits(a[i]);
    for (int i = 0; i < COUNT * 70 + 1; i++) b[i] = (float)(cos(1.1 * i - t) - 0.2), hb[i] = xf_bf16_bits(b[i]);
    for (int i = 0; i < COUNT * 50 + 1; i++) want[i] = c32[i] = 0, c16[i] = 0;
    ok = g->gemm(g, ta, tb, M, N, K, 0.75f, a, lda, sa, b, ldb, sb, 0, want, ldc, sc, COUNT, 0) &&
         g->gemm(g, ta, tb, M, N, K, 0.75f, ha, lda, sa, hb, ldb, sb, 0, c32, ldc, sc, COUNT, XF_GEMM_A_BF16 | XF_GEMM_B_BF16) &&
         g->gemm(g, ta, tb, M, N, K, 0.75f, ha, lda, sa, hb, ldb, sb, 0, c16, ldc, sc, COUNT,
                 XF_GEMM_A_BF16 | XF_GEMM_B_BF16 | XF_GEMM_C_BF16);
    for (int q = 0; ok && q < COUNT; q++)
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++, checked++) {
          int64_t at = q * sc + i * ldc + j;
          differ += memcmp(&want[at], &c32[at], sizeof(float)) != 0 || c16[at] != xf_bf16_bits(want[at]);
        }
  }
  float f[64] = {0};
  bool refused = g && !g->gemm(g, 0, 0, 2, 2, 2, 1, f, 2, 0, f, 2, 0, 0, f, 2, 0, 1, XF_GEMM_A_BF16) &&
                 !g->gemm(g, 0, 0, 2, 2, 2, 1, f, 2, 0, f, 2, 0, 1, f, 2, 0, 1, XF_GEMM_A_BF16 | XF_GEMM_B_BF16 | XF_GEMM_C_BF16);
  ok = ok && differ == 0 && checked == 4 * COUNT * M * N && refused;
  printf("%s emulated GEMM on bf16 storage: %lld of %lld elements as the rounded float32 product, mixed A B and a bf16 C with beta refused: %s%s%s\n",
         ok ? "ok  " : "FAIL", (long long)(checked - differ), (long long)checked, refused ? "yes" : "no", g ? "" : " ", g ? "" : err);
  ok ? passed++ : failed++;
  if (g) g->close(g);
}

int main(int argc, char **argv) {
  // --gpu: the same comparisons on a real device (ctest cuda_gpu), skipped without one
  bool gpu = argc > 1 && !strcmp(argv[1], "--gpu");
  if (gpu) {
    char why[1024];
    XfGpu *g = xf_gpu_cuda_open(0, why, sizeof why);
    if (!g) {
      printf("skipped: no GPU (%s)\n", why);
      return 77;
    }
    g->close(g);
    argc--, argv++;
    device_name = "cuda";
  } else {
    setenv("XF_CUDA_EMULATE", "1", 1);
  }
  const char *only = argc > 1 ? argv[1] : NULL;
  if (!gpu && (!only || !strcmp(only, "bf16"))) check_bf16_round(), check_bf16_gemm(), check_bf16_storage_gemm();  // the emulation's own
  if (!only || !strcmp(only, "graph")) check_graph();
  if (only && !strncmp(only, "raw:", 4)) {  // one model through check_raw (XF_TEST_DEBUG=1: every buffer)
    check_raw(only + 4, getenv("XF_TEST_B") ? atoi(getenv("XF_TEST_B")) : 2, getenv("XF_TEST_T") ? atoi(getenv("XF_TEST_T")) : 4);
    return failed != 0;
  }
  Define small[] = {{"layers", "2"}, {"d", "16"}, {"context", "8"}, {"vocab", "13"}, {"ffn", "24"}, {"heads", "2"},
                    {"dropout", "0.1"}};
  for (size_t i = 0; i < NTEST_EXAMPLES; i++) {
    char path[256];
    snprintf(path, sizeof path, "examples/%s.xf", test_examples[i]);
    if (only && !strstr(path, only)) continue;
    Define defs[7];
    int n = example_defs(test_examples[i], small, 7, defs);
    check(path, defs, n, 3, 8, true, XF_PRECISION_FP32);
    check(path, defs, n, 3, 8, false, XF_PRECISION_FP32);
    // top-k routing is discontinuous: with bf16 products a near-tie of two
    // experts' scores can go one way on one side and the other on the other
    // (their products round differently), a whole expert's gradient apart
    // (parameters of seed 3: tok.W's gradient 7.5e-2 from the CPU's with
    // bf16 products alone, float32 storage; 20 steps meet more ties). So
    // MoE's steps and step program are checked in float32 above only, and
    // in bf16 one step's forward and gradients (the routed steps' bf16
    // storage, codegen/storage.c) from parameters of seed 1, which meet none
    if (strcmp(test_examples[i], "moe")) check(path, defs, n, 3, 8, true, XF_PRECISION_BF16);
    else {
      init_seed = 1;
      check_steps(path, defs, n, 3, 8, true, XF_PRECISION_BF16, 1, false);
      init_seed = 3;
    }
  }
  // a key window of 3 (stdlib SlidingWindowAttention): the step program in a
  // frame of 3 positions that moves (runtime/sampler.c, XfGpu.copy2d), with
  // learned positions counted from the frame's first (XfKernelArgs.p0)
  if (!only || strstr("examples/sliding_window.xf", only)) {
    Define win[] = {{"layers", "2"}, {"d", "16"}, {"context", "8"}, {"vocab", "13"}, {"ffn", "24"}, {"heads", "2"},
                    {"dropout", "0.1"}, {"window", "3"}};
    check("examples/sliding_window.xf", win, 8, 3, 8, true, XF_PRECISION_FP32);
  }
  // attention over several key tiles (64 rows) and more rows than a block's
  // threads (128): the GPU form's tile and stride paths; vocabulary 96: the
  // embedding gradient in two tiles of 48 rows
  if (!only || strstr("examples/transformer.xf context 200", only)) {
    Define lng[] = {{"layers", "1"}, {"d", "16"}, {"context", "200"}, {"vocab", "96"}, {"ffn", "24"}, {"heads", "2"},
                    {"dropout", "0.1"}};
    check("examples/transformer.xf", lng, 7, 2, 200, true, XF_PRECISION_FP32);
    check("examples/transformer.xf", lng, 7, 2, 200, true, XF_PRECISION_BF16);
    products_only = true;
    check("examples/transformer.xf", lng, 7, 2, 200, true, XF_PRECISION_BF16);
    products_only = false;
  }
  // the chunked convolutions (Kernel.chunk) over several chunks: context 32,
  // chunk 16, 2 chunks, at T 32 and at T 21 (not a multiple of the chunk, fewer
  // positions than lags); context 40, chunk 8, 5 chunks, at T 27
  if (!only || strstr("examples/she.xf chunks", only)) {
    Define ch[] = {{"layers", "1"}, {"d", "16"}, {"context", "32"}, {"vocab", "13"}, {"ffn", "24"}, {"dropout", "0.1"}};
    check("examples/she.xf", ch, 6, 2, 32, true, XF_PRECISION_FP32);
    check("examples/she.xf", ch, 6, 2, 21, true, XF_PRECISION_FP32);
    ch[2].value = "40";
    check("examples/she.xf", ch, 6, 3, 27, true, XF_PRECISION_FP32);
  }
  // scan_read's chunked form (lower_scan_chunk.c), the GPU's default, over
  // several chunks: context 40, T 37: one decay per position in chunks of 32
  // (linear attention; retention with bf16 products: the team GEMMs on the
  // tensor cores), one per key row in chunks of 16 (GLA); the step program's
  // runs cut where it keeps the state
  if (!only || strstr("examples/linear_attention.xf examples/gla.xf examples/retnet.xf scan chunks", only)) {
    Define rc[] = {{"layers", "1"}, {"d", "16"}, {"context", "40"}, {"vocab", "13"}, {"ffn", "24"}, {"heads", "2"},
                   {"dropout", "0.1"}};
    check("examples/linear_attention.xf", rc, 7, 2, 37, true, XF_PRECISION_FP32);
    check("examples/gla.xf", rc, 7, 2, 37, true, XF_PRECISION_FP32);
    check("examples/retnet.xf", rc, 7, 2, 37, true, XF_PRECISION_BF16);
  }
  // the two-step conv_dw of the scalar and vector kinds (lower.c step_dw_*):
  // width 12 (column tiles of 6, two of them), T 11 of 16 lags (lags past
  // T sum nothing); the sorted embedding gradient over 3 sequences
  if (!only || strstr("examples/me.xf examples/we.xf conv_dw", only)) {
    Define dw[] = {{"layers", "1"}, {"d", "12"}, {"context", "16"}, {"vocab", "13"}, {"ffn", "24"}, {"dropout", "0.1"}};
    check("examples/me.xf", dw, 6, 3, 11, true, XF_PRECISION_FP32);
    check("examples/we.xf", dw, 6, 3, 11, true, XF_PRECISION_FP32);
  }
  // a matrix-kind convolution whose lags are not a multiple of 8: chunk 2
  // (lags 10), 5 chunks
  if (!only || strstr("examples/she.xf chunk 2", only)) {
    Define ch2[] = {{"layers", "1"}, {"d", "8"}, {"context", "10"}, {"vocab", "13"}, {"ffn", "24"}, {"dropout", "0.1"}};
    check("examples/she.xf", ch2, 6, 2, 10, true, XF_PRECISION_FP32);
    check("examples/she.xf", ch2, 6, 2, 7, true, XF_PRECISION_FP32);
  }
  static const char *models[] = {"tests/golden/sinusoidal.xf", "tests/fusion/attn_user.xf", "tests/fusion/attn_near.xf",
                                 "tests/fusion/attn_fixed_v.xf", "tests/fusion/attn_variants.xf",
                                 "tests/fusion/attn_bias.xf", "tests/grad/attention_variants.xf", "tests/grad/modern.xf",
                                 "tests/grad/language.xf", "tests/grad/moe.xf", "tests/grad/mamba.xf"};
  for (size_t i = 0; i < sizeof models / sizeof *models; i++)
    if (!only || strstr(models[i], only)) check(models[i], NULL, 0, 2, 6, true, XF_PRECISION_FP32);
  // the blocked forms (the (sequence, head) form's state does not fit shared
  // memory): heads of 64 at T 160 (3 query blocks of 64; the gradient's 16
  // rows) and of 128 at T 130, every stdlib variant, through xf_team_gemm in
  // float32 and on the (emulated) tensor cores, TF32, and bf16 (the staged
  // tiles in bf16, Schedule.tiles_bf16: packed pairs, rows 72 and 136 apart)
  if (!only || strstr("tests/grad/attention_variants.xf blocked", only)) {
    Define h64[] = {{"d", "128"}, {"heads", "2"}, {"context", "160"}}, h128[] = {{"d", "256"}, {"heads", "2"}, {"context", "130"}};
    check("tests/grad/attention_variants.xf", h64, 3, 1, 160, true, XF_PRECISION_FP32);
    check("tests/grad/attention_variants.xf", h64, 3, 1, 160, true, XF_PRECISION_TF32);
    check("tests/grad/attention_variants.xf", h64, 3, 1, 160, true, XF_PRECISION_BF16);
    check("tests/grad/attention_variants.xf", h128, 3, 1, 130, true, XF_PRECISION_FP32);
    check("tests/grad/attention_variants.xf", h128, 3, 1, 130, true, XF_PRECISION_TF32);
    check("tests/grad/attention_variants.xf", h128, 3, 1, 130, true, XF_PRECISION_BF16);
  }
  // scores that matter (tests/cuda/attn_sharp.xf: peaked softmax rows) at
  // heads of 64, T 160: the blocked forms in float32, TF32 and bf16 (bf16
  // tiles: a fragment pair read wrong moves the outputs here, where at the
  // library's init it hides under bf16's tolerance)
  if (!only || strstr("tests/cuda/attn_sharp.xf", only)) {
    check("tests/cuda/attn_sharp.xf", NULL, 0, 2, 160, true, XF_PRECISION_FP32);
    check("tests/cuda/attn_sharp.xf", NULL, 0, 2, 160, true, XF_PRECISION_TF32);
    check("tests/cuda/attn_sharp.xf", NULL, 0, 2, 160, true, XF_PRECISION_BF16);
  }
  // heads of 16 in float32: the blocked forms (att_gpu_rows_win) at context
  // 128 (2 query blocks) and 1024 (attention_dkdv, attention_dq: 16 key and
  // query blocks)
  if (!only || strstr("examples/transformer.xf heads of 16", only)) {
    Define h16[] = {{"layers", "1"}, {"d", "32"}, {"heads", "2"}, {"context", "128"}, {"vocab", "13"}, {"ffn", "24"}, {"dropout", "0"}};
    check("examples/transformer.xf", h16, 7, 2, 128, true, XF_PRECISION_FP32);
    h16[3].value = "1024";
    check("examples/transformer.xf", h16, 7, 1, 1024, true, XF_PRECISION_FP32);
  }
  // the tensor-core (TF32) forms for heads of 16, 64 and 128 at contexts 128
  // and 1024 (one head of d = 16, 64, 128): the forward and one step's
  // gradients (the step program's decoding reads no blocked form); heads of
  // 64 also in bf16 (GPT-2-small's: bf16 tiles, every GEMM's pairs packed or
  // not)
  if (!only || strstr("examples/transformer.xf tensor cores at 128 and 1024", only)) {
    static const char *const widths[] = {"16", "64", "128"}, *const contexts[] = {"128", "1024"};
    for (int w = 0; w < 3; w++)
      for (int c = 0; c < 2; c++) {
        Define tc[] = {{"layers", "1"}, {"d", widths[w]}, {"heads", "1"}, {"context", contexts[c]}, {"vocab", "13"},
                       {"ffn", "24"}, {"dropout", "0"}};
        check_steps("examples/transformer.xf", tc, 7, 1, atoi(contexts[c]), true, XF_PRECISION_TF32, 2, false);
        if (w == 1) check_steps("examples/transformer.xf", tc, 7, 1, atoi(contexts[c]), true, XF_PRECISION_BF16, 2, false);
      }
  }
  // heads of 40 (one head of d = 40): the team GEMMs' warp tiles of 4 mma
  // tiles with C's columns 40 (a tile of 4 with one in range), S's k 40 (a
  // last bf16 step of 8), and at T 130 blocks of 2 queries and keys (a k of
  // 2 in P V, dV and dK); TF32 and bf16 on the tensor cores
  if (!only || strstr("examples/transformer.xf warp tiles of heads of 40", only)) {
    Define w40[] = {{"layers", "1"}, {"d", "40"}, {"heads", "1"}, {"context", "130"}, {"vocab", "13"}, {"ffn", "24"},
                    {"dropout", "0"}};
    check_steps("examples/transformer.xf", w40, 7, 1, 130, true, XF_PRECISION_TF32, 2, false);
    check_steps("examples/transformer.xf", w40, 7, 1, 130, true, XF_PRECISION_BF16, 2, false);
    w40[3].value = "1024";
    check_steps("examples/transformer.xf", w40, 7, 1, 1024, true, XF_PRECISION_BF16, 2, false);
  }
  if (!only || strstr("tests/fusion/attn_padding.xf", only)) {  // no decoder (a key-padding bias of the tokens):
    Define c6[] = {{"context", "6"}};                                 // the sampler recomputes, within T = context
    check("tests/fusion/attn_padding.xf", c6, 1, 2, 6, true, XF_PRECISION_FP32);
  }
  glob_t ops;
  if (glob("tests/grad/op_*.xf", 0, NULL, &ops) == 0) {
    for (size_t i = 0; i < ops.gl_pathc; i++)
      if (!only || strstr(ops.gl_pathv[i], only)) check_raw(ops.gl_pathv[i], 2, 4);
    globfree(&ops);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
