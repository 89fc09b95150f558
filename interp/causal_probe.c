// causal_probe.c: whether a model's output reads later positions, shown by
// running it: the evidence behind xfc's error for a language model that is
// not causal (passes/causal.c proves causality; where its proof fails, this
// tells a model that reads the future from one the proof does not cover).
//
// Requires: a verified graph whose forward computes output `name`.
// Guarantees: nothing is changed; the interpreter runs the forward in double
// (no dropout) on B = 1 sequence of T = min(t_max, 8) random tokens, then
// on its first T - 1 tokens with the same parameters, and compares the
// output's rows at positions t < T - 1 of the two runs: a causal output
// cannot tell them apart. Where T must be a multiple of m > 1 (a time axis
// T / s, ir_t_multiple), both runs are at T (a multiple of m, at least 2 m
// where the context allows), the second with the last token changed.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"

enum { PROBE_T = 8 };

// The sizes of shape s at B = 1 and length T; *tax: its first T axis (-1: none).
static void sizes(const Shape *s, int64_t T, int64_t *d, int *tax) {
  *tax = -1;
  for (int k = 0; k < s->rank; k++) {
    d[k] = dim_size(s->d[k], 1, T);
    if (s->d[k].kind == DIM_T && *tax < 0) *tax = k;
  }
}

// The output's values at length T (tokens ids[0 .. T)) into a new array.
static double *run(const Graph *g, int out, int64_t T, const int32_t *const *ids, char *err, size_t errlen) {
  Interp *in = interp_new(g, (InterpConfig){.B = 1, .T = T, .seed = 1}, err, errlen);
  if (!in) return NULL;
  interp_init_params(in, 1);
  bool ok = true;
  for (int i = 0; i < g->nnodes && ok; i++)
    if (g->nodes[i].op == OP_INPUT && g->nodes[i].dtype == DT_I32) ok = interp_set_input(in, g->nodes[i].name, ids[i], err, errlen);
  ok = ok && interp_run(in, out + 1, err, errlen);
  double *v = ok ? malloc(sizeof(double) * (size_t)interp_numel(in, out)) : NULL;
  if (v) memcpy(v, interp_value(in, out), sizeof(double) * (size_t)interp_numel(in, out));
  else if (ok) snprintf(err, errlen, "out of memory");
  interp_free(in);
  return v;
}

int interp_causal_probe(const Graph *g, const char *name, int64_t *len, int64_t *pos, double *diff, char *err, size_t errlen) {
  int out = interp_output_node(g, name);
  int64_t T = *len = g->t_max < PROBE_T ? g->t_max : PROBE_T, da[IR_MAX_RANK], db[IR_MAX_RANK];
  int64_t m = ir_t_multiple(g);  // T a multiple of m: two runs at T, the second with its last tokens changed
  if (m > 1) T = *len = (g->t_max < 2 * m ? g->t_max : T > 2 * m ? T : 2 * m) / m * m;
  int tax;
  if (out < 0) return snprintf(err, errlen, "no output '%s'", name), -1;
  const Shape *s = &g->nodes[out].shape;
  sizes(s, T, da, &tax);
  if (T < 2 || tax < 0) return 1;
  sizes(s, T - 1, db, &tax);
  // every token input: ids below its vocabulary, from a fixed sequence
  int32_t **ids = calloc((size_t)g->nnodes + 1, sizeof *ids);
  bool ok = ids != NULL;
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < g->nnodes && ok; i++) {
    const Node *n = &g->nodes[i];
    if (n->op != OP_INPUT || n->dtype != DT_I32) continue;
    int64_t lim = interp_input_limit(g, i), len = 1;
    for (int k = 0; k < n->shape.rank; k++) len *= dim_size(n->shape.d[k], 1, T);
    ok = (ids[i] = malloc(sizeof(int32_t) * (size_t)len)) != NULL;
    for (int64_t k = 0; ok && k < len; k++) {
      x = x * 6364136223846793005u + 1442695040888963407u;
      ids[i][k] = (int32_t)((x >> 33) % (uint64_t)(lim < 1 ? 1 : lim));
    }
  }
  // the shorter run reads the same tokens' first T - 1 positions: its inputs
  // are [1, T - 1] prefixes of [1, T] when T is their last axis, as token
  // inputs [B, T] are
  double *a = ok ? run(g, out, T, (const int32_t *const *)ids, err, errlen) : NULL;
  if (m > 1)
    for (int i = 0; ok && i < g->nnodes; i++) {
      const Node *n = &g->nodes[i];
      int64_t lim = interp_input_limit(g, i), r = n->shape.rank;
      if (ids[i] && r && n->shape.d[r - 1].kind == DIM_T && lim > 1) ids[i][T - 1] = (ids[i][T - 1] + 1) % (int32_t)lim;
    }
  double *b = a ? run(g, out, m > 1 ? T : T - 1, (const int32_t *const *)ids, err, errlen) : NULL;
  int r = -1;
  if (!ids) snprintf(err, errlen, "out of memory");
  if (a && b) {
    int64_t nb = 1;
    for (int k = 0; k < s->rank; k++) nb *= db[k];
    r = 1, *pos = -1, *diff = 0;
    for (int64_t e = 0; e < nb; e++) {  // element e of the short run, at the same coordinates in the long one
      int64_t rest = e, ia = 0, stride = 1, t = 0;
      for (int k = s->rank - 1; k >= 0; k--) {
        int64_t c = rest % db[k];
        rest /= db[k];
        if (k == tax) t = c;
        ia += c * stride, stride *= da[k];
      }
      double d = fabs(a[ia] - b[m > 1 ? ia : e]);
      if (!(d <= 1e-9 * (1 + fabs(a[ia])))) {
        if (r == 1 || t < *pos) *pos = t;
        if (!(d <= *diff)) *diff = d;
        r = 0;
      }
    }
  }
  for (int i = 0; ids && i < g->nnodes; i++) free(ids[i]);
  free(ids), free(a), free(b);
  return r;
}
