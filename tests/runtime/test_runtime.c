// test_runtime.c: the runtime against the reference interpreter.
//   - xf_init_params gives bit for bit the interpreter's float32 parameters;
//   - one training step through the thread pool (2 threads) and OpenBLAS
//     gives the interpreter's loss and gradients within 1e-4 relative;
//   - the AdamW update equals torch.optim.AdamW's formula, recomputed here.
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

static void check_model(const char *path, Define *defs, int ndefs) {
  char err[1024], so[64];
  Arena a = {0};
  Schedule *s;
  Graph *g = build_model_so(&a, path, defs, ndefs, true, &s, so, err, sizeof err);
  CHECK(g != NULL, "%s", err);
  if (!g) goto out;
  const int64_t B = 4, T = g->t_max;
  XfRuntime *rt = xf_open(so, &(XfOptions){.batch = B, .seq = T, .threads = 2, .seed = 3}, err, sizeof err);
  unlink(so);
  CHECK(rt != NULL, "%s", err);
  if (!rt) goto out;
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
  // keep copies of the parameters to recompute AdamW's first step
  int np = xf_nparams(rt);
  float **before = calloc((size_t)np, sizeof *before);
  for (int p = 0; p < np; p++) {
    int64_t n;
    float *w = xf_param(rt, p, NULL, &n);
    before[p] = malloc(sizeof(float) * (size_t)n);
    memcpy(before[p], w, sizeof(float) * (size_t)n);
  }
  float loss = xf_train_step(rt);
  double want = interp_output_scalar(in, "loss");
  CHECK(fabs(loss - want) <= 1e-4 * fabs(want), "%s: loss %.7f vs interpreter %.7f", path, loss, want);
  double worst = 0, adam_worst = 0;
  const XfOptions *o = xf_options(rt);
  for (int p = 0; p < np; p++) {
    const char *name;
    int64_t n;
    float *w = xf_param(rt, p, &name, &n);
    const float *gr = xf_grad(rt, p);
    char gname[512];
    snprintf(gname, sizeof gname, "grad.%s", name);
    const double *gw = interp_value(in, interp_output_node(g, gname));
    double maxg = 0, maxe = 0;
    for (int64_t k = 0; k < n; k++) {
      maxg = fmax(maxg, fabs(gw[k]));
      maxe = fmax(maxe, fabs(gr[k] - gw[k]));
      // AdamW, t = 1: m = (1-b1) g, v = (1-b2) g^2, w' = w (1 - lr wd) - lr mhat / (sqrt(vhat) + eps)
      double g1 = gr[k], mhat = g1, vhat = g1 * g1;
      double ref = before[p][k] * (1 - o->lr * o->weight_decay) - o->lr * mhat / (sqrt(vhat) + o->eps);
      adam_worst = fmax(adam_worst, fabs(w[k] - ref) / (o->lr));
    }
    double e = maxg > 0 ? maxe / maxg : maxe;
    worst = fmax(worst, e);
    free(before[p]);
  }
  free(before);
  CHECK(worst < 1e-4, "%s: worst gradient relative error %.2e", path, worst);
  CHECK(adam_worst < 1e-3, "%s: AdamW differs from its formula by %.2e lr", path, adam_worst);
  printf("%s %s: init bit-identical (%d values), loss %.6f vs %.6f, gradients within %.1e, AdamW within %.1e lr\n",
         worst < 1e-4 && same == total ? "ok  " : "FAIL", path, total, loss, want, worst, adam_worst);
  interp_free(in);
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
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
