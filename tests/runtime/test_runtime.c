// test_runtime.c: the runtime against the reference interpreter.
//   - xf_init_params gives bit for bit the interpreter's float32 parameters;
//   - one training step through the thread pool (2 threads) and OpenBLAS
//     gives the interpreter's loss and gradients within 1e-4 relative;
//   - 12 AdamW steps (betas 0.8 and 0.95, weight decay 0.1) follow
//     torch.optim.AdamW's algorithm, transcribed here in double precision
//     with its own parameters and moments and fed the runtime's gradients:
//     every parameter element and both moments after every step, within
//     float32 rounding; the same transcription with the betas swapped misses
//     by far more at some step t >= 2, so the check tells the betas apart.
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../model_so.h"
#include "interp.h"
#include "xf.h"

static int passed, failed;
#define CHECK(cond, ...)                     \
  do {                                       \
    if (cond) passed++;                      \
    else {                                   \
      failed++;                              \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                   \
      printf("\n");                          \
    }                                        \
  } while (0)

// The model at path compiled (fused) and opened with opt at batch 4 and T =
// its context; its graph in *g. NULL after a failed CHECK.
static XfRuntime *open_model(Arena *a, const char *path, Define *defs, int ndefs, XfOptions opt, Graph **g) {
  char err[1024], so[64];
  Schedule *s;
  *g = build_model_so(a, path, defs, ndefs, true, &s, so, err, sizeof err);
  CHECK(*g != NULL, "%s", err);
  if (!*g) return NULL;
  opt.batch = 4, opt.seq = (*g)->t_max;
  XfRuntime *rt = xf_open(so, &opt, err, sizeof err);
  unlink(so);
  CHECK(rt != NULL, "%s", err);
  return rt;
}

// tests/runtime/inits.xf: trunc_normal(0.1, 0.02 / sqrt(12)) within 0.1 +- 2 std
// (and spread: some beyond 1 std), constant(0.5) exactly.
static void check_inits(void) {
  Arena a = {0};
  Graph *g;
  XfRuntime *rt = open_model(&a, "tests/runtime/inits.xf", NULL, 0, (XfOptions){.threads = 1, .seed = 3}, &g);
  if (!rt) return;
  xf_init_params(rt, 5);
  double sd = 0.02 / sqrt(12.0);
  for (int p = 0; p < xf_nparams(rt); p++) {
    const char *name;
    int64_t n;
    float *w = xf_param(rt, p, &name, &n);
    int in = 0, wide = 0, exact = 0;
    for (int64_t k = 0; k < n; k++) {
      double z = (w[k] - 0.1) / sd;
      in += z >= -2.0001 && z <= 2.0001, wide += fabs(z) > 1, exact += w[k] == 0.5f;
    }
    if (!strcmp(name, "emb")) CHECK(in == n && wide > 0 && wide < n / 2, "trunc_normal: %d of %lld within 2 std, %d beyond 1", in, (long long)n, wide);
    if (!strcmp(name, "g")) CHECK(exact == n, "constant(0.5): %d of %lld exact", exact, (long long)n);
  }
  xf_close(rt);
  arena_free(&a);
}

static void check_model(const char *path, Define *defs, int ndefs) {
  char err[1024];
  Arena a = {0};
  Graph *g;
  XfRuntime *rt = open_model(&a, path, defs, ndefs, (XfOptions){.threads = 2, .seed = 3}, &g);
  if (!rt) goto out;
  const int64_t B = 4, T = g->t_max;
  Interp *in = interp_new(g, (InterpConfig){.B = B, .T = T, .f32 = true, .training = true, .seed = 3, .step = 1}, err, sizeof err);
  interp_init_params(in, 42);
  xf_init_params(rt, 42);
  // parameters: bit for bit
  int same = 0, total = 0;
  for (int p = 0; p < xf_nparams(rt); p++) {
    const char *name;
    int64_t n;
    float *w = xf_param(rt, p, &name, &n);
    for (int i = 0; i < g->nforward; i++)
      if (g->nodes[i].op == OP_PARAM && !strcmp(g->nodes[i].name, name)) {
        const double *v = interp_value(in, i);
        for (int64_t k = 0; k < n; k++) same += memcmp(&w[k], &(float){(float)v[k]}, 4) == 0, total++;
      }
  }
  CHECK(same == total && total > 0, "%s: %d of %d initial parameter values bit-identical", path, same, total);
  // one step: the runtime's loss and gradients vs the interpreter's
  int32_t *tok = xf_tokens(rt), *tgt = xf_targets(rt);
  int64_t vocab = xf_vocab(rt);
  for (int64_t k = 0; k < B * T; k++) tok[k] = (int32_t)((k * 5 + 1) % vocab), tgt[k] = (int32_t)((k * 3 + 2) % vocab);
  interp_set_input(in, "tokens", tok, err, sizeof err);
  interp_set_input(in, "targets", tgt, err, sizeof err);
  interp_run(in, 0, err, sizeof err);
  float loss = xf_train_step(rt);
  double want = interp_output_scalar(in, "loss");
  CHECK(fabs(loss - want) <= 1e-4 * fabs(want), "%s: loss %.7f vs interpreter %.7f", path, loss, want);
  double worst = 0;
  for (int p = 0; p < xf_nparams(rt); p++) {
    const char *name;
    int64_t n;
    xf_param(rt, p, &name, &n);
    const float *gr = xf_grad(rt, p);
    char gname[512];
    snprintf(gname, sizeof gname, "grad.%s", name);
    const double *gw = interp_value(in, interp_output_node(g, gname));
    double maxg = 0, maxe = 0;
    for (int64_t k = 0; k < n; k++) {
      maxg = fmax(maxg, fabs(gw[k]));
      maxe = fmax(maxe, fabs(gr[k] - gw[k]));
    }
    double e = maxg > 0 ? maxe / maxg : maxe;
    worst = fmax(worst, e);
  }
  CHECK(worst < 1e-4, "%s: worst gradient relative error %.2e", path, worst);
  printf("%s %s: init bit-identical (%d values), loss %.6f vs %.6f, gradients within %.1e\n",
         worst < 1e-4 && same == total ? "ok  " : "FAIL", path, total, loss, want, worst);
  interp_free(in);
  xf_close(rt);
out:
  arena_free(&a);
}

// torch.optim.AdamW's algorithm (amsgrad=False, maximize=False) in double
// precision, with its own parameters and moments, all parameters' elements
// concatenated; fed the gradients the runtime computed.
typedef struct {
  double lr, b1, b2, eps, wd;
  double *theta, *m, *v;
} Oracle;

static void oracle_step(Oracle *o, int64_t at, int64_t n, const float *g, int t) {
  double bc1 = 1 - pow(o->b1, t), bc2 = 1 - pow(o->b2, t);
  for (int64_t k = at; k < at + n; k++) {
    double gk = g[k - at];
    o->theta[k] -= o->lr * o->wd * o->theta[k];
    o->m[k] = o->b1 * o->m[k] + (1 - o->b1) * gk;
    o->v[k] = o->b2 * o->v[k] + (1 - o->b2) * gk * gk;
    double mhat = o->m[k] / bc1, vhat = o->v[k] / bc2;
    o->theta[k] -= o->lr * mhat / (sqrt(vhat) + o->eps);
  }
}

// Float32 rounding bound on the runtime's parameter after t steps. Each step
// rounds the decayed and the updated parameter and the decay factor (under
// 4 units of 2^-24 of |theta|), and the update, at most about 1.6 lr for
// these betas (|mhat| / sqrt(vhat) is bounded while b1^2 < b2), to within
// about 10 units: its roundings, and the float betas, whose 1 - b differs
// from the float bias corrections' 1 - b^t by up to 4 units. Steps add up.
static double adamw_tol(double theta, double lr, int t) { return t * 0x1p-24 * (4 * fabs(theta) + 32 * lr); }

// AdamW over ADAM_STEPS steps, every parameter element and moment after every
// step, against the oracle; and the same oracle with beta1 and beta2 swapped
// must miss the runtime by far more than the tolerance at some t >= 2 (at
// t = 1 bias correction cancels the betas: mhat = g, vhat = g^2).
enum { ADAM_STEPS = 12 };

static void check_adamw(const char *path, Define *defs, int ndefs) {
  Arena a = {0};
  Graph *g;
  const XfOptions opt = {.threads = 2, .seed = 5, .lr = 1e-2, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-8,
                         .weight_decay = 0.1};
  XfRuntime *rt = open_model(&a, path, defs, ndefs, opt, &g);
  if (!rt) goto out;
  const int64_t B = 4, T = g->t_max;
  xf_init_params(rt, 7);
  int np = xf_nparams(rt);
  int64_t *at = calloc((size_t)np + 1, sizeof *at);
  for (int p = 0; p < np; p++) {
    int64_t n;
    xf_param(rt, p, NULL, &n);
    at[p + 1] = at[p] + n;
  }
  const int64_t total = at[np];
  Oracle o[2];  // o[1]: beta1 and beta2 swapped
  for (int i = 0; i < 2; i++) {
    o[i] = (Oracle){.lr = opt.lr, .b1 = i ? opt.beta2 : opt.beta1, .b2 = i ? opt.beta1 : opt.beta2, .eps = opt.eps,
                    .wd = opt.weight_decay};
    o[i].theta = malloc(sizeof(double) * (size_t)total);
    o[i].m = calloc((size_t)total, sizeof(double));
    o[i].v = calloc((size_t)total, sizeof(double));
  }
  for (int p = 0; p < np; p++) {
    const float *w = xf_param(rt, p, NULL, NULL);
    for (int64_t k = 0; k < at[p + 1] - at[p]; k++) o[0].theta[at[p] + k] = o[1].theta[at[p] + k] = w[k];
  }
  int32_t *tok = xf_tokens(rt), *tgt = xf_targets(rt);
  int64_t vocab = xf_vocab(rt);
  double param_worst = 0, moment_worst = 0, swapped_first = 0, swapped_later = 0;
  int with_grad = 0;  // parameters with a gradient
  for (int t = 1; t <= ADAM_STEPS; t++) {
    // new tokens every step, so successive gradients differ
    for (int64_t k = 0; k < B * T; k++)
      tok[k] = (int32_t)((k * 5 + 3 * t + 1) % vocab), tgt[k] = (int32_t)((k * 7 + t * t + 2) % vocab);
    xf_train_step(rt);
    CHECK(xf_step_count(rt) == (uint32_t)t, "%s: step count %u after %d steps", path, xf_step_count(rt), t);
    double swapped = 0, pstep = 0, mstep = 0;
    const char *pworst = "", *mworst = "";
    for (int p = 0; p < np; p++) {
      int64_t n;
      const char *name;
      const float *w = xf_param(rt, p, &name, &n);
      // AdamW reads the gradient buffers and writes none: they still hold
      // this step's gradients. A parameter without one is left alone.
      const float *gr = xf_grad(rt, p);
      if (gr) {
        for (int i = 0; i < 2; i++) oracle_step(&o[i], at[p], n, gr, t);
        with_grad += t == 1;
      }
      const float *mom[2] = {xf_moment(rt, p, 0), xf_moment(rt, p, 1)};
      const double *want[2] = {o[0].m + at[p], o[0].v + at[p]};
      double perr = 0, serr = 0;
      for (int64_t k = 0; k < n; k++) {
        double tol = adamw_tol(o[0].theta[at[p] + k], opt.lr, t);
        perr = fmax(perr, fabs(w[k] - o[0].theta[at[p] + k]) / tol);
        serr = fmax(serr, fabs(w[k] - o[1].theta[at[p] + k]) / tol);
      }
      // moments: relative to the parameter's largest, 16 t units of 2^-24
      // (a few roundings per step, added up; an element's sum may cancel)
      double merr = 0;
      for (int i = 0; i < 2; i++) {
        double big = 0, e = 0;
        for (int64_t k = 0; k < n; k++) big = fmax(big, fabs(want[i][k])), e = fmax(e, fabs(mom[i][k] - want[i][k]));
        merr = fmax(merr, big > 0 ? e / big / (16.0 * t * 0x1p-24) : e > 0 ? INFINITY : 0);
      }
      if (perr > pstep) pstep = perr, pworst = name;
      if (merr > mstep) mstep = merr, mworst = name;
      swapped = fmax(swapped, serr);
    }
    CHECK(pstep <= 1, "%s: step %d: %s differs from AdamW's formula by %.3g of the tolerance", path, t, pworst, pstep);
    CHECK(mstep <= 1, "%s: step %d: %s's moments differ from AdamW's by %.3g of the tolerance", path, t, mworst, mstep);
    param_worst = fmax(param_worst, pstep), moment_worst = fmax(moment_worst, mstep);
    if (t == 1) swapped_first = swapped;
    else swapped_later = fmax(swapped_later, swapped);
  }
  CHECK(with_grad > 0, "%s: no parameter has a gradient", path);
  CHECK(swapped_later > 100, "%s: AdamW with swapped betas is within %.1f of the tolerance: the check has no teeth",
        path, swapped_later);
  bool ok = param_worst <= 1 && moment_worst <= 1 && swapped_later > 100 && with_grad > 0;
  printf("%s %s: AdamW over %d steps (lr %g, betas %g %g, wd %g) within %.2f of the tolerance, moments %.2f; "
         "swapped betas off by %.2g of it at t = 1, %.2g at t >= 2\n",
         ok ? "ok  " : "FAIL", path, ADAM_STEPS, opt.lr, opt.beta1, opt.beta2, opt.weight_decay, param_worst,
         moment_worst, swapped_first, swapped_later);
  for (int i = 0; i < 2; i++) free(o[i].theta), free(o[i].m), free(o[i].v);
  free(at);
  xf_close(rt);
out:
  arena_free(&a);
}

int main(void) {
  Define small[] = {{"layers", "2"}, {"d", "16"}, {"context", "8"}, {"vocab", "23"}, {"ffn", "24"}, {"dropout", "0.1"}, {"heads", "4"}};
  check_model("examples/she.xf", small, 6);
  check_model("examples/transformer.xf", small, 7);
  check_model("examples/macaron.xf", small, 7);
  check_model("examples/he.xf", small, 6);
  check_model("tests/runtime/inits.xf", NULL, 0);
  check_inits();
  check_adamw("examples/she.xf", small, 6);
  check_adamw("examples/transformer.xf", small, 7);
  check_adamw("examples/macaron.xf", small, 7);
  check_adamw("examples/he.xf", small, 6);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
