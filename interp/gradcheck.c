// gradcheck.c: autodiff against finite differences (see interp.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/rng.h"
#include "interp.h"

enum { STREAM_TOKENS = 0x746f6b73u, STREAM_CHECK = 0x63686b70u };

static bool loss_at(Interp *in, const Graph *g, int loss, double *v, char *err, size_t errlen) {
  if (!interp_run(in, g->nforward, err, errlen)) return false;
  *v = interp_value(in, loss)[0];
  return true;
}

bool gradcheck(const Graph *g, const GradCheckConfig *c, FILE *out, double *worst) {
  char err[512];
  *worst = 0;
  int loss = interp_output_node(g, "loss");
  if (!g->nforward || loss < 0) {
    fprintf(out, "gradcheck: the graph has no backward pass\n");
    return false;
  }
  InterpConfig ic = {.B = c->B, .T = c->T, .f32 = false, .training = c->dropout, .seed = c->seed, .step = 1};
  Interp *in = interp_new(g, ic, err, sizeof err);
  if (!in) {
    fprintf(out, "gradcheck: %s\n", err);
    return false;
  }
  // Parameters: centre of the initialiser plus 0.5 N(0, 1).
  for (int i = 0; i < g->nforward; i++) {
    const Node *n = &g->nodes[i];
    if (n->op != OP_PARAM) continue;
    double centre = n->init.kind == INIT_ONES ? 1
                    : n->init.kind == INIT_NORMAL || n->init.kind == INIT_CONSTANT || n->init.kind == INIT_TRUNC_NORMAL ? n->init.a
                    : n->init.kind == INIT_UNIFORM ? (n->init.a + n->init.b) / 2 : 0;
    uint32_t stream = xf_stream_of(n->name) ^ STREAM_CHECK;
    double *p = interp_param(in, i);
    for (int64_t k = 0; k < interp_numel(in, i); k++) p[k] = centre + 0.5 * xf_rand_normal(c->seed, stream, (uint64_t)k, 0);
  }
  // Inputs: uniform token ids below each input's vocabulary.
  bool ok = true;
  for (int i = 0; i < g->nforward && ok; i++) {
    const Node *n = &g->nodes[i];
    if (n->op != OP_INPUT) continue;
    int64_t lim = interp_input_limit(g, i), cnt = interp_numel(in, i);
    int32_t *ids = malloc(sizeof *ids * (size_t)cnt);
    if (!ids) {
      ok = false;
      break;
    }
    for (int64_t k = 0; k < cnt; k++)
      ids[k] = (int32_t)(xf_rand_uniform(c->seed, STREAM_TOKENS + (uint32_t)i, (uint64_t)k, 0) * (double)lim);
    ok = interp_set_input(in, n->name, ids, err, sizeof err);
    free(ids);
  }
  double base;
  ok = ok && interp_run(in, 0, err, sizeof err) && loss_at(in, g, loss, &base, err, sizeof err);
  if (!ok) {
    fprintf(out, "gradcheck: %s\n", err);
    interp_free(in);
    return false;
  }
  fprintf(out, "gradient check: B = %lld, T = %lld, float64, dropout %s, loss %.12g\n", (long long)c->B,
          (long long)c->T, c->dropout ? "on (fixed masks)" : "off", base);
  fprintf(out, "%-48s %10s %10s %12s %12s %10s\n", "parameter", "elements", "checked", "max|grad|", "max|err|",
          "rel.err");
  bool pass = true;
  for (int o = 0; o < g->noutputs && ok; o++) {
    const char *name = g->outputs[o].name;
    if (strncmp(name, "grad.", 5)) continue;
    int p = -1;
    for (int i = 0; i < g->nforward; i++)
      if (g->nodes[i].op == OP_PARAM && !strcmp(g->nodes[i].name, name + 5)) p = i;
    if (p < 0) continue;
    int64_t cnt = interp_numel(in, p);
    double *grad = malloc(sizeof *grad * (size_t)cnt);
    if (!grad) break;
    memcpy(grad, interp_value(in, g->outputs[o].node), sizeof *grad * (size_t)cnt);
    int64_t stride = c->max_elems > 0 && cnt > c->max_elems ? (cnt + c->max_elems - 1) / c->max_elems : 1;
    double *w = interp_param(in, p), maxg = 0, maxe = 0;
    int64_t checked = 0;
    for (int64_t k = 0; k < cnt && ok; k += stride, checked++) {
      double v = w[k], h = 1e-5 * (fabs(v) > 1 ? fabs(v) : 1), f[4];  // small: ReLU kinks
      const double steps[4] = {h, -h, 2 * h, -2 * h};
      for (int s = 0; s < 4 && ok; s++) {
        w[k] = v + steps[s];
        ok = loss_at(in, g, loss, &f[s], err, sizeof err);
      }
      w[k] = v;
      double fd = (8 * (f[0] - f[1]) - (f[2] - f[3])) / (12 * h);
      double a = fabs(grad[k]) > fabs(fd) ? fabs(grad[k]) : fabs(fd);
      maxg = a > maxg ? a : maxg;
      double e = fabs(grad[k] - fd);
      maxe = e > maxe ? e : maxe;
    }
    free(grad);
    double rel = maxg > 0 ? maxe / maxg : 0;
    if (!(rel < c->tol)) pass = false;
    if (rel > *worst || rel != rel) *worst = rel;
    fprintf(out, "%-48s %10lld %10lld %12.4e %12.4e %10.2e%s\n", name + 5, (long long)cnt, (long long)checked, maxg,
            maxe, rel, rel < c->tol ? "" : "  FAIL");
  }
  if (!ok) fprintf(out, "gradcheck: %s\n", err);
  fprintf(out, "largest relative error: %.3e (tolerance %.1e): %s\n", *worst, c->tol, pass && ok ? "pass" : "FAIL");
  interp_free(in);
  return pass && ok;
}
