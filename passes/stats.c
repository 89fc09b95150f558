// stats.c: parameter counts per block instance and forward operation counts.
//
// Requires: a verified graph. Guarantees: nothing is changed.
//
// Counts are exact integers for batch 1 and T = t_max (the context length),
// so they can be compared with the closed forms of seed 001 Tables 3, 4 and
// 7 and seed 003 Table 6.1. Causal structure is tracked so that masked work
// is not counted, as the paper does:
//   tri_out[n]:  the upper triangle of n's last two axes is structurally
//                -inf or 0 (causal_mask, softmax of such, scaling of such);
//   tri_need[n]: every user of n reads only its lower triangle (n feeds a
//                causal_mask, possibly through elementwise ops).
#include "passes.h"

#include <stdlib.h>

// Counts are >= 0 and saturate at INT64_MAX instead of overflowing: a graph
// the elaborator accepts (each tensor below 2^46 elements, T up to 2^24) can
// still describe more than 2^63 operations.
static int64_t sadd(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}
static int64_t smul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
static int64_t smul3(int64_t a, int64_t b, int64_t c) { return smul(smul(a, b), c); }

int64_t cost_total_ops(const Cost *c) { return sadd(sadd(sadd(c->mul, c->add), sadd(c->div, c->exp)), c->other); }

static int64_t dimv(Dim d, int64_t T) { return d.kind == DIM_CONST ? d.n : d.kind == DIM_T ? T / dim_tdiv(d) : 1; }

static int64_t numel(const Shape *s, int64_t T) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n = smul(n, dimv(s->d[i], T));
  return n;
}

static bool square(const Shape *s) {
  return s->rank >= 2 && dim_eq(s->d[s->rank - 1], s->d[s->rank - 2]);
}

// Elements of s, counting only the lower triangle of the last two axes when tri.
static int64_t elements(const Shape *s, int64_t T, bool tri) {
  int64_t n = numel(s, T);
  if (!tri || !square(s)) return n;
  int64_t m = dimv(s->d[s->rank - 1], T);
  return smul(n / smul(m, m), smul(m, m + 1) / 2);
}

static bool is_scalar_like(const Shape *s) {
  for (int i = 0; i < s->rank; i++)
    if (!(s->d[i].kind == DIM_CONST && s->d[i].n == 1)) return false;
  return true;
}

static void structure(const Graph *g, bool *tri_out, bool *tri_need) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    const bool *in0 = n->nin ? &tri_out[n->in[0]] : NULL;
    switch (n->op) {
    case OP_CAUSAL_MASK: tri_out[i] = true; break;
    case OP_SOFTMAX: tri_out[i] = *in0 && n->axis == n->shape.rank - 1; break;
    case OP_DROPOUT: tri_out[i] = *in0; break;
    case OP_MUL:
    case OP_DIV: {
      const Shape *a = &g->nodes[n->in[0]].shape, *b = &g->nodes[n->in[1]].shape;
      tri_out[i] = (*in0 && is_scalar_like(b) && shape_eq(a, &n->shape)) ||
                   (n->op == OP_MUL && tri_out[n->in[1]] && is_scalar_like(a) && shape_eq(b, &n->shape));
      break;
    }
    default: break;
    }
  }
  int *users = calloc((size_t)g->nnodes, sizeof *users);
  int *need = calloc((size_t)g->nnodes, sizeof *need);  // users that read only the lower triangle
  if (!users || !need) {
    fprintf(stderr, "xfc: out of memory in stats\n");
    exit(1);
  }
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nin; k++) users[g->nodes[i].in[k]]++;
  for (int o = 0; o < g->noutputs; o++) users[g->outputs[o].node]++;
  for (int i = g->nnodes - 1; i >= 0; i--) {
    const Node *n = &g->nodes[i];
    tri_need[i] = users[i] > 0 && need[i] == users[i] && square(&n->shape);
    OpCategory c = ir_op_info[n->op].cat;
    for (int k = 0; k < n->nin; k++) {
      const Node *x = &g->nodes[n->in[k]];
      bool reads_tri = n->op == OP_CAUSAL_MASK ||
                       ((c == OPC_UNARY || c == OPC_BINARY) && tri_need[i] && shape_eq(&x->shape, &n->shape));
      if (reads_tri) need[n->in[k]]++;
    }
  }
  free(users);
  free(need);
}

// The operations of an op whose cost rule the table states: one operation of
// its kind per element, or the rule of its category (IrCost in ir/ir.h).
static void count_by_table(const Graph *g, const Node *n, int64_t T, const bool *tri_out, const bool *tri_need, Cost *c) {
  const Shape *s = &n->shape;
  const Shape *x = n->nin ? &g->nodes[n->in[0]].shape : NULL;
  int64_t e = elements(s, T, tri_out[n->id] || tri_need[n->id]);
  switch (ir_op_info[n->op].cost) {
  case IR_COST_ADD: c->add = sadd(c->add, e); return;
  case IR_COST_MUL: c->mul = sadd(c->mul, e); return;
  case IR_COST_DIV: c->div = sadd(c->div, e); return;
  case IR_COST_EXP: c->exp = sadd(c->exp, e); return;
  case IR_COST_OTHER: c->other = sadd(c->other, e); return;
  case IR_COST_CAT: case IR_COST_OWN: break;
  }
  switch (ir_op_info[n->op].cat) {
  case OPC_LEAF:
    if (n->op == OP_PARAM) c->params = sadd(c->params, numel(s, T));
    return;
  case OPC_UNARY: case OPC_BINARY: case OPC_NN: return;  // their rules are not CAT
  case OPC_REDUCE: {
    int64_t k = 1, out = numel(s, T);
    for (int i = n->axis; i <= ir_reduce_end(n); i++) k = smul(k, dimv(x->d[i], T));
    if (n->op == OP_MAX) c->other = sadd(c->other, smul(out, k - 1));
    else c->add = sadd(c->add, smul(out, k - 1));
    if (n->op == OP_MEAN) c->div = sadd(c->div, out);
    return;
  }
  case OPC_MATMUL: {
    int64_t m = dimv(s->d[s->rank - 2], T), nn = dimv(s->d[s->rank - 1], T);
    int64_t k = dimv(x->d[x->rank - 1], T);
    int64_t batch = numel(s, T) / smul(m, nn);
    if (tri_need[n->id] && m == nn) {  // only row i's first i outputs are needed
      int64_t tri_n = smul(m, m + 1) / 2;
      c->mul = sadd(c->mul, smul3(batch, tri_n, k));
      c->add = sadd(c->add, smul3(batch, tri_n, k - 1));
    } else if (tri_out[n->in[0]] && m == k) {  // row i of the left operand has i non-zeros
      int64_t tri_n = smul(m, m + 1) / 2;
      c->mul = sadd(c->mul, smul3(batch, nn, tri_n));
      c->add = sadd(c->add, smul3(batch, nn, tri_n - m));
    } else {
      c->mul = sadd(c->mul, smul(smul3(batch, m, k), nn));
      c->add = sadd(c->add, smul(smul3(batch, m, k - 1), nn));
    }
    return;
  }
  case OPC_MOVE:
    if (n->op == OP_SCATTER_ADD) c->add = sadd(c->add, numel(x, T));
    return;
  }
}

// The terms (i, j) of a causal convolution of t positions and L lags: row i
// sums min(i + 1, L) of them.
static int64_t conv_terms(int64_t t, int64_t L) {
  return L >= t ? smul(t, t + 1) / 2 : smul(L, L + 1) / 2 + smul(t - L, L);
}

// The operations of node n, by the op's cost rule: every op of the table
// has a case (no default: an op without a rule is a -Wswitch error).
static void count(const Graph *g, const Node *n, int64_t T, const bool *tri_out, const bool *tri_need, Cost *c) {
  const Shape *s = &n->shape;
  const Shape *x = n->nin ? &g->nodes[n->in[0]].shape : NULL;
  switch (n->op) {
#define CASE_CAT(name) case OP_##name:
#define CASE_ADD CASE_CAT
#define CASE_MUL CASE_CAT
#define CASE_DIV CASE_CAT
#define CASE_EXP CASE_CAT
#define CASE_OTHER CASE_CAT
#define CASE_OWN(name)
#define X(name, text, nin, cat, diff, props, cost) CASE_##cost(name)
  IR_OPS(X)  // every op whose rule is its category's or one operation per element
#undef X
    count_by_table(g, n, T, tri_out, tri_need, c);
    return;
  case OP_CAUSAL_MASK: return;  // a selection, no arithmetic
  case OP_SOFTMAX: {
    int64_t k = dimv(x->d[n->axis], T), rows = numel(x, T) / k;
    int64_t e = tri_out[n->in[0]] && n->axis == x->rank - 1 && square(x) ? elements(x, T, true) : numel(x, T);
    c->exp = sadd(c->exp, e);
    c->add = sadd(c->add, e - rows);
    c->div = sadd(c->div, e);
    return;
  }
  case OP_LAYERNORM: {
    int64_t d = dimv(x->d[x->rank - 1], T), rows = numel(x, T) / d;
    // mean: d-1 adds, 1 div; centre: d adds; variance: d muls, d-1 adds, 1 div;
    // + eps: 1 add; sqrt: 1; normalise: d divs; gain: d muls; bias: d adds.
    c->add = sadd(c->add, smul(rows, smul(4, d) - 1));
    c->mul = sadd(c->mul, smul3(rows, 2, d));
    c->div = sadd(c->div, smul(rows, sadd(d, 2)));
    c->other = sadd(c->other, rows);
    return;
  }
  case OP_RMSNORM: case OP_RMSNORM_DX: case OP_RMSNORM_DYXH: {
    // per row, as the interpreter: sigma (d muls, d-1 adds, a div, an add, a
    // sqrt), xhat (d divs); forward: g o xhat (d muls); DYXH: dy o xhat (d
    // muls); DX: dxhat (d muls), mean(dxhat o xhat) (d muls, d adds, a div),
    // dx (d muls, d adds, d divs)
    int64_t d = dimv(x->d[x->rank - 1], T), rows = numel(x, T) / d;
    int dx = n->op == OP_RMSNORM_DX;
    c->add = sadd(c->add, smul(rows, smul(dx ? 3 : 1, d)));
    c->mul = sadd(c->mul, smul3(rows, dx ? 4 : 2, d));
    c->div = sadd(c->div, smul(rows, dx ? smul(2, d) + 2 : d + 1));
    c->other = sadd(c->other, rows);
    return;
  }
  case OP_LAYERNORM_DX: case OP_LAYERNORM_DYXH: {
    // per row, as the interpreter: mu, sigma (3d + 1 adds, d muls, 2 divs, a
    // sqrt), xhat (d adds, d divs); DYXH: dy o xhat (d muls); DX: dxhat (d
    // muls), its two means (2d adds, d muls, 2 divs), dx (2d adds, d muls, d
    // divs)
    int64_t d = dimv(x->d[x->rank - 1], T), rows = numel(x, T) / d;
    bool dx = n->op == OP_LAYERNORM_DX;
    c->add = sadd(c->add, smul(rows, smul(dx ? 8 : 4, d) + 1));
    c->mul = sadd(c->mul, smul3(rows, dx ? 4 : 2, d));
    c->div = sadd(c->div, smul(rows, dx ? smul(2, d) + 4 : d + 2));
    c->other = sadd(c->other, rows);
    return;
  }
  case OP_CAUSAL_CONV: {
    const Shape *w = &g->nodes[n->in[1]].shape;
    int64_t t = dimv(x->d[x->rank - 2], T), d = dimv(x->d[x->rank - 1], T);
    int64_t lead = numel(x, T) / smul(t, d), S = conv_terms(t, w->d[0].n);  // S: terms over all rows
    if (n->conv == CONV_MATRIX) {  // seed 001 eq. 23: row i sums i products x_j W
      int64_t e = dimv(w->d[2], T);
      c->mul = sadd(c->mul, smul(smul3(lead, d, e), S));
      c->add = sadd(c->add, smul(lead, sadd(smul3(d - 1, e, S), smul(e, S - t))));
    } else {  // eqs. 26, 28, 29: row i sums i elementwise products
      c->mul = sadd(c->mul, smul3(lead, d, S));
      c->add = sadd(c->add, smul3(lead, d, S - t));
    }
    return;
  }
  case OP_CONV_DX:
  case OP_CONV_DW: {  // the same triangular sums as the forward convolution
    const Shape *dy = n->op == OP_CONV_DX ? x : &g->nodes[n->in[1]].shape;
    const Shape *xs = n->op == OP_CONV_DX ? s : x;
    int64_t t = dimv(xs->d[xs->rank - 2], T), d = dimv(xs->d[xs->rank - 1], T), e = dimv(dy->d[dy->rank - 1], T);
    int64_t lead = numel(xs, T) / smul(t, d), S = conv_terms(t, n->op == OP_CONV_DX ? g->nodes[n->in[1]].shape.d[0].n : n->shape.d[0].n);
    int64_t prod = n->conv == CONV_MATRIX ? smul(d, e) : d;
    c->mul = sadd(c->mul, smul3(lead, prod, S));
    c->add = sadd(c->add, smul3(lead, prod, S) - (n->op == OP_CONV_DW ? smul(dimv(n->len, T), n->conv == CONV_MATRIX ? smul(d, e) : n->conv == CONV_VECTOR ? d : 1) : smul3(lead, d, t)));
    return;
  }
  case OP_DROPOUT: c->mul = sadd(c->mul, numel(s, T)); return;
  case OP_SCAN: case OP_SCAN_REV: {  // a product and a sum per element but the first (last) step's
    int64_t steps = numel(s, T) - numel(s, T) / dimv(s->d[n->axis], T);
    c->mul = sadd(c->mul, steps);
    c->add = sadd(c->add, steps);
    return;
  }
  case OP_SCAN_READ: case OP_SCAN_READ_GRAD: {
    // per position: S = a S + k v (2 dk dv products, dk dv sums) and q S
    // (dk dv, (dk - 1) dv); the gradient recomputes S, then dq, G, dk, dv
    const Shape *ks = &g->nodes[n->in[1]].shape, *vs = &g->nodes[n->in[2]].shape;
    int64_t dk = dimv(ks->d[ks->rank - 2], T), dv = dimv(vs->d[vs->rank - 1], T), rows = numel(ks, T) / dk;
    int64_t st = smul3(rows, dk, dv);
    if (n->op == OP_SCAN_READ) {
      c->mul = sadd(c->mul, smul(st, 3));
      c->add = sadd(c->add, smul(st, 2) - smul(rows, dv));
    } else {
      c->mul = sadd(c->mul, smul(st, 7));
      c->add = sadd(c->add, smul(st, 5) - smul(rows, dk + dv));
    }
    return;
  }
  case OP_CROSS_ENTROPY_LSE: {  // per row: the maximum, the sum of exps of the differences, a log and an addition
    int64_t v = dimv(x->d[x->rank - 1], T), rows = numel(x, T) / v;
    c->exp = sadd(c->exp, smul(rows, v));
    c->add = sadd(c->add, smul(rows, 2 * v));
    c->other = sadd(c->other, sadd(smul(rows, v - 1), rows));
    return;
  }
  case OP_CROSS_ENTROPY: {
    int64_t v = dimv(x->d[x->rank - 1], T), rows = numel(x, T) / v;
    c->exp = sadd(c->exp, smul(rows, v));
    c->add = sadd(c->add, sadd(smul(rows, v - 1), smul(rows, 2) - 1));  // sum of exps, minus target, mean
    c->other = sadd(c->other, rows);                                     // log
    c->div = sadd(c->div, 1);
    return;
  }

  case OP_ATTENTION: case OP_ATTENTION_LSE: case OP_ATTENTION_GRAD: case OP_ATTENTION_DBIAS: {
    // per (sequence, head), as the interpreter: S = T (T + 1) / 2 causal
    // scores (a key window W: W (W + 1) / 2 + (T - W) W), each h products, h - 1 sums and the scale; softmax over them
    // (S exps, S - T sums, S divisions); P v (S e products, (S - T) e sums).
    // The gradient recomputes the scores and P, then dP = dy v^T (S e, S (e -
    // 1)), dS = P o (dP - rowsum(P o dP)) (2 S products, 2 S - T sums), dq =
    // dS k (S h, (S - T) h), dk = dS^T q (S h, (S - T) h), dv = P^T dy (S e,
    // (S - T) e).
    const Shape *vs = &g->nodes[n->in[2]].shape;
    int r = x->rank, tax = r - 2 - (n->axis != 0);
    int64_t t = dimv(x->d[tax], T), h = dimv(x->d[r - 1], T), e = dimv(vs->d[r - 1], T);
    int64_t heads = numel(x, T) / smul(t, h), W = n->start, S = smul(t, t + 1) / 2;
    if (W > 0 && W < t) S = smul(W, W + 1) / 2 + smul(t - W, W);  // the key window: min(i + 1, W) keys per row
    int64_t mul = smul(S, h + 1) + smul(S, e), add = smul(S, h - 1) + (S - t) + smul(S - t, e);
    int64_t ex = S, dv = S;
    if (ir_attention_bias(n) >= 0) add += S;  // the score bias
    if (n->op == OP_ATTENTION_LSE) {  // the scores and their sum of exps; per row a log and an addition, no P v
      mul -= smul(S, e), add -= smul(S - t, e) - t, dv = 0;
      c->other = sadd(c->other, smul(heads, t));
    }
    if (n->op == OP_ATTENTION_DBIAS) {  // the scores and P recomputed (not P v), dP, P o (dP - D), summed into db
      mul -= smul(S, e), add -= smul(S - t, e);
      mul += smul(S, e) + S, add += smul(S, e - 1) + smul(S, 2) - t + S;
    }
    if (n->op == OP_ATTENTION_GRAD) {
      mul += smul(S, e) + smul(S, 2) + smul3(S, 2, h) + smul(S, e);
      add += smul(S, e - 1) + smul(S, 2) - t + smul3(S - t, 2, h) + smul(S - t, e);
    }
    c->mul = sadd(c->mul, smul(heads, mul));
    c->add = sadd(c->add, smul(heads, add));
    c->exp = sadd(c->exp, smul(heads, ex));
    c->div = sadd(c->div, smul(heads, dv));
    return;
  }
  case OP_ROUTED_MATMUL: case OP_ROUTED_MATMUL_DW: {
    // rows R of x [.., d] against f columns: the routed rows' products only,
    // each row with one expert (a row outside [0, E) counted as routed): R d f
    // products, R (d - 1) f sums (the weight gradient: R d f sums into E d f
    // outputs, R d f - E d f)
    const Shape *w = &g->nodes[n->in[1]].shape;  // w [E, d, f] or dy [.., f]
    int64_t d = dimv(x->d[x->rank - 1], T), f = dimv(w->d[w->rank - 1], T), rows = numel(x, T) / d;
    int64_t prod = smul3(rows, d, f);
    c->mul = sadd(c->mul, prod);
    c->add = sadd(c->add, n->op == OP_ROUTED_MATMUL ? smul3(rows, d - 1, f) : prod - numel(s, T));
    return;
  }
  case OP_TOPK: {  // per output, a maximum over the row and the lowest index holding it: 2 n comparisons
    int64_t nx = dimv(x->d[x->rank - 1], T);
    c->other = sadd(c->other, smul3(numel(s, T), 2, nx));
    return;
  }
  case OP_COUNT: return;
  }
}

void stats_compute(const Graph *g, int64_t T, bool backward, Cost *incl) {
  bool *tri_out = calloc((size_t)g->nnodes + 1, sizeof *tri_out);
  bool *tri_need = calloc((size_t)g->nnodes + 1, sizeof *tri_need);
  if (!tri_out || !tri_need) {
    fprintf(stderr, "xfc: out of memory in stats\n");
    exit(1);
  }
  structure(g, tri_out, tri_need);
  for (int s = 0; s < g->nscopes; s++) incl[s] = (Cost){0};
  int nfwd = g->nforward ? g->nforward : g->nnodes;
  int from = backward ? nfwd : 0, to = backward ? g->nnodes : nfwd;
  for (int i = from; i < to; i++) count(g, &g->nodes[i], T, tri_out, tri_need, &incl[g->nodes[i].scope]);
  for (int s = g->nscopes - 1; s > 0; s--) {
    Cost *p = &incl[g->scopes[s].parent], *c = &incl[s];
    p->params = sadd(p->params, c->params), p->mul = sadd(p->mul, c->mul), p->add = sadd(p->add, c->add);
    p->div = sadd(p->div, c->div), p->exp = sadd(p->exp, c->exp), p->other = sadd(p->other, c->other);
  }
  free(tri_out);
  free(tri_need);
}

static int depth(const Graph *g, int s) {
  int d = 0;
  while (g->scopes[s].parent >= 0) s = g->scopes[s].parent, d++;
  return d;
}

// Operations of g's forward (backward false) or backward pass at T = context.
static int64_t pass_ops(const Graph *g, bool backward) {
  Cost *c = calloc((size_t)g->nscopes + 1, sizeof *c);
  if (!c) {
    fprintf(stderr, "xfc: out of memory in stats\n");
    exit(1);
  }
  stats_compute(g, g->t_max, backward, c);
  int64_t ops = cost_total_ops(&c[0]);
  free(c);
  return ops;
}

double stats_train_ops_per_token(const Graph *g) {
  return (double)sadd(pass_ops(g, false), pass_ops(g, true)) / (double)g->t_max;
}

void stats_print(FILE *f, const Graph *g) {
  int64_t T = g->t_max;
  Cost *incl = calloc((size_t)g->nscopes + 1, sizeof *incl);
  if (!incl) {
    fprintf(stderr, "xfc: out of memory in stats\n");
    exit(1);
  }
  stats_compute(g, T, false, incl);
  fprintf(f, "model %s: forward pass of one sequence, B = 1, T = context = %lld\n", g->name, (long long)T);
  fprintf(f, "%-44s %-16s %12s %14s %14s %12s %12s %12s %16s\n", "instance", "block", "params", "mul", "add",
          "div", "exp", "other", "ops");
  for (int s = 0; s < g->nscopes; s++) {
    const Scope *sc = &g->scopes[s];
    const char *path = *sc->path ? sc->path : "<model>";
    char name[256];
    snprintf(name, sizeof name, "%*s%s", 2 * depth(g, s), "", path);
    const Cost *c = &incl[s];
    fprintf(f, "%-44s %-16s %12lld %14lld %14lld %12lld %12lld %12lld %16lld\n", name, sc->block,
            (long long)c->params, (long long)c->mul, (long long)c->add, (long long)c->div, (long long)c->exp,
            (long long)c->other, (long long)cost_total_ops(c));
  }
  // Incremental decoding: generating the token at position t costs
  // C(t) - C(t - 1), C(l) the forward cost of a sequence of length l: a
  // position-wise op costs the same for every row, a causal op (attention,
  // causal convolution) the terms of its row t. With seed 001 Tables 3-4 as
  // C this gives Tables 5-6.
  if (T >= 2) {
    Cost *prev = calloc((size_t)g->nscopes + 1, sizeof *prev), *at = calloc((size_t)g->nscopes + 1, sizeof *at);
    if (!prev || !at) {
      fprintf(stderr, "xfc: out of memory in stats\n");
      exit(1);
    }
    stats_compute(g, T, false, at);
    stats_compute(g, T - 1, false, prev);
    fprintf(f, "\noperations per generated token at position t = %lld (incremental decoding, B = 1):\n", (long long)T);
    fprintf(f, "%-44s %-16s %14s %14s %12s %12s %12s %16s\n", "instance", "block", "mul", "add", "div", "exp", "other", "ops");
    for (int s = 0; s < g->nscopes; s++) {
      const Scope *sc = &g->scopes[s];
      char name[256];
      snprintf(name, sizeof name, "%*s%s", 2 * depth(g, s), "", *sc->path ? sc->path : "<model>");
      Cost d = {.mul = at[s].mul - prev[s].mul, .add = at[s].add - prev[s].add, .div = at[s].div - prev[s].div,
                .exp = at[s].exp - prev[s].exp, .other = at[s].other - prev[s].other};
      fprintf(f, "%-44s %-16s %14lld %14lld %12lld %12lld %12lld %16lld\n", name, sc->block, (long long)d.mul,
              (long long)d.add, (long long)d.div, (long long)d.exp, (long long)d.other, (long long)cost_total_ops(&d));
    }
    fprintf(f, "\n");
    free(prev), free(at);
  }
  const Cost *t = &incl[0];
  fprintf(f, "total parameters: %lld\n", (long long)t->params);
  fprintf(f, "forward ops per sequence: %lld\n", (long long)cost_total_ops(t));
  fprintf(f, "forward ops per token: %.1f\n", (double)cost_total_ops(t) / (double)T);
  if (g->nforward) {
    int64_t bwd = pass_ops(g, true);
    fprintf(f, "backward ops per sequence: %lld\n", (long long)bwd);
    fprintf(f, "backward ops per token: %.1f\n", (double)bwd / (double)T);
    fprintf(f, "training (forward + backward) ops per token: %.1f\n", stats_train_ops_per_token(g));
  }
  free(incl);
}
