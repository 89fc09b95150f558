// ir.c: graph construction and the shape rule of every op.
//
// ir_infer is the single definition of what each op accepts and produces;
// ir_add uses it to build nodes and ir_verify uses it to re-check them.
#include "ir.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const OpInfo ir_op_info[OP_COUNT] = {
#define X(name, text, nin, cat, diff, props, cost) [OP_##name] = {text, nin, cat, diff, props, IR_COST_##cost},
    IR_OPS(X)
#undef X
};

Graph *ir_graph_new(Arena *a, const char *name) {
  Graph *g = arena_alloc(a, sizeof *g);
  g->arena = a;
  g->name = arena_strdup(a, name);
  g->t_max = 1;
  return g;
}

Graph *ir_graph_clone(Arena *a, const Graph *g) {
  Graph *c = arena_alloc(a, sizeof *c);
  *c = *g;
  c->arena = a;
#define COPY(arr, n, cap)                                                      \
  c->arr = arena_alloc(a, sizeof *g->arr * (size_t)(g->cap + 1));              \
  if (g->n) memcpy(c->arr, g->arr, sizeof *g->arr * (size_t)g->n);
  COPY(nodes, nnodes, cap_nodes)
  COPY(scopes, nscopes, cap_scopes)
  COPY(outputs, noutputs, cap_outputs)
  COPY(config, nconfig, cap_config)
  COPY(calls, ncalls, cap_calls)
#undef COPY
  return c;
}

#define GROW(g, arr, n, cap)                                                   \
  do {                                                                         \
    if ((n) == (cap)) {                                                        \
      int nc = (cap) ? 2 * (cap) : 64;                                         \
      (arr) = arena_realloc((g)->arena, (arr), sizeof *(arr) * (size_t)(cap),  \
                            sizeof *(arr) * (size_t)nc);                       \
      (cap) = nc;                                                              \
    }                                                                          \
  } while (0)

int ir_call_add(Graph *g, int scope, int parent, const char *site) {
  GROW(g, g->calls, g->ncalls, g->cap_calls);
  g->calls[g->ncalls] = (Call){scope, parent, site};
  return g->ncalls++;
}

int ir_scope_add(Graph *g, const char *path, const char *block, int parent, Loc loc) {
  GROW(g, g->scopes, g->nscopes, g->cap_scopes);
  g->scopes[g->nscopes] = (Scope){path, block, parent, loc};
  return g->nscopes++;
}

void ir_output_add(Graph *g, const char *name, int node) {
  GROW(g, g->outputs, g->noutputs, g->cap_outputs);
  g->outputs[g->noutputs++] = (Output){name, node};
}

void ir_config_add(Graph *g, const char *name, bool is_float, double v) {
  GROW(g, g->config, g->nconfig, g->cap_config);
  g->config[g->nconfig++] = (ConfigEntry){name, is_float, v};
}

bool dim_eq(Dim a, Dim b) { return a.kind == b.kind && a.n == b.n; }

bool shape_eq(const Shape *a, const Shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (!dim_eq(a->d[i], b->d[i])) return false;
  return true;
}

int64_t shape_numel_const(const Shape *s, int64_t b, int64_t t) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++)
    n *= dim_size(s->d[i], b, t);
  return n;
}

int64_t ir_t_multiple(const Graph *g) {
  int64_t m = 1;
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].shape.rank; k++) {
      int64_t s = dim_tdiv(g->nodes[i].shape.d[k]), a = m, b = s;
      while (b) {
        int64_t r = a % b;
        a = b, b = r;
      }
      m = m / a * s;
    }
  return m;
}

static void dim_fmt(char *buf, size_t n, Dim d) {
  if (d.kind == DIM_B) snprintf(buf, n, "B");
  else if (d.kind == DIM_T && d.n > 1) snprintf(buf, n, "T/%lld", (long long)d.n);
  else if (d.kind == DIM_T) snprintf(buf, n, "T");
  else snprintf(buf, n, "%lld", (long long)d.n);
}

void shape_fmt(char *buf, size_t n, const Shape *s) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, n - k, "[");
  for (int i = 0; i < s->rank && k < n; i++) {
    char d[32];
    dim_fmt(d, sizeof d, s->d[i]);
    k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", d);
  }
  if (k < n) snprintf(buf + k, n - k, "]");
}

const char *shape_str(Arena *a, const Shape *s) {
  char buf[256];
  shape_fmt(buf, sizeof buf, s);
  return arena_strdup(a, buf);
}

int ir_reduce_end(const Node *n) {
  return ir_op_info[n->op].cat == OPC_REDUCE && n->axis2 > n->axis ? n->axis2 : n->axis;
}

int ir_norm_axis(int axis, int rank) {
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank ? axis : -1;
}

bool ir_errorf(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return false;
}
#define fail ir_errorf

int64_t ir_attention_group(const Graph *g, const Node *n) {
  const Shape *q = &g->nodes[n->in[0]].shape, *k = &g->nodes[n->in[1]].shape, *v = &g->nodes[n->in[2]].shape;
  int r = q->rank;
  if (n->axis != 0 || r < 3 || k->rank != r || v->rank != r) return 1;
  Dim gq = q->d[r - 3], gk = k->d[r - 3], gv = v->d[r - 3];
  bool one = gk.kind == DIM_CONST && gk.n == 1 && gv.kind == DIM_CONST && gv.n == 1;
  return one && gq.kind == DIM_CONST && gq.n > 1 ? gq.n : 1;
}

int ir_attention_bias(const Node *n) {
  int at = n->op == OP_ATTENTION || n->op == OP_ATTENTION_LSE ? 3 : n->op == OP_ATTENTION_GRAD ? 6 : n->op == OP_ATTENTION_DBIAS ? 4 : -1;
  return at >= 0 && n->nin > at ? at : -1;
}

int ir_attention_seq(const Graph *g, const Node *n, Dim *seq, Dim *t) {
  const Shape *qs = &g->nodes[n->in[0]].shape;
  int r = qs->rank, tax = r - 2 - (n->axis != 0), ns = 0;
  for (int i = 0; i < tax; i++) seq[ns++] = qs->d[i];
  if (n->axis) seq[ns++] = qs->d[r - 2];
  *t = qs->d[tax];
  return ns;
}

int ir_attention_bias_axis(const Shape *bs, int ns, int s) {
  int a = s - (ns + 2 - bs->rank);
  if (a < 0 || a >= bs->rank) return -1;
  return bs->d[a].kind == DIM_CONST && bs->d[a].n == 1 ? -1 : a;
}

bool ir_attention_bias_fits(const Dim *seq, int ns, Dim t, const Shape *bs) {
  if (bs->rank > ns + 2) return false;
  for (int a = 0; a < bs->rank; a++) {
    int s = a + ns + 2 - bs->rank;
    Dim d = bs->d[a], want = s < ns ? seq[s] : t;
    if (!(d.kind == DIM_CONST && d.n == 1) && !dim_eq(d, want)) return false;
  }
  return true;
}

// Whether bias shape bs fits attention n.
static bool attention_bias_fits(const Graph *g, const Node *n, const Shape *bs) {
  Dim seq[IR_MAX_RANK + 1], t;
  int ns = ir_attention_seq(g, n, seq, &t);
  return ir_attention_bias_fits(seq, ns, t, bs);
}

double ir_eval_unary(OpKind op, double x) {
  switch (op) {
  case OP_NEG: return -x;
  case OP_EXP: return exp(x);
  case OP_LOG: return log(x);
  case OP_SQRT: return sqrt(x);
  case OP_TANH: return tanh(x);
  case OP_RELU: return x > 0 ? x : 0;
  case OP_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
  case OP_SIGMOID: return 1 / (1 + exp(-x));
  case OP_SIN: return sin(x);
  case OP_COS: return cos(x);
  case OP_SILU: return x / (1 + exp(-x));
  case OP_ABS: return fabs(x);
  case OP_FLOOR: return floor(x);
  case OP_SOFTPLUS: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
  case OP_ERF: return erf(x);
  case OP_RSQRT: return 1 / sqrt(x);
  case OP_STOP_GRADIENT: return x;
  case OP_STEP: return x > 0 ? 1 : 0;
  case OP_DGELU: return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
  default: return NAN;
  }
}

bool ir_reshape_unit_map(const Shape *from, const Shape *to, int *map) {
  int o = 0;
  for (int a = 0; a < from->rank; a++) {
    map[a] = -1;
    if (from->d[a].kind == DIM_CONST && from->d[a].n == 1) continue;
    while (o < to->rank && to->d[o].kind == DIM_CONST && to->d[o].n == 1) o++;
    if (o == to->rank || !dim_eq(to->d[o], from->d[a])) return false;
    map[a] = o++;
  }
  for (; o < to->rank; o++)
    if (!(to->d[o].kind == DIM_CONST && to->d[o].n == 1)) return false;
  return true;
}

double ir_eval_binary(OpKind op, double x, double y) {
  switch (op) {
  case OP_ADD: return x + y;
  case OP_SUB: return x - y;
  case OP_MUL: return x * y;
  case OP_DIV: return x / y;
  case OP_EQ: return x == y ? 1 : 0;
  case OP_LT: return x < y ? 1 : 0;
  case OP_LE: return x <= y ? 1 : 0;
  case OP_MAXIMUM: return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
  case OP_MINIMUM: return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
  case OP_POW: return pow(x, y);
  default: return NAN;
  }
}

static Dim dconst(int64_t n) { return (Dim){DIM_CONST, n}; }

// numpy broadcasting of a and b into out.
static bool broadcast(const Shape *a, const Shape *b, Shape *out, char *err, size_t errlen) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    Dim da = ia >= 0 ? a->d[ia] : dconst(1);
    Dim db = ib >= 0 ? b->d[ib] : dconst(1);
    if (dim_eq(da, db) || (db.kind == DIM_CONST && db.n == 1)) out->d[i] = da;
    else if (da.kind == DIM_CONST && da.n == 1) out->d[i] = db;
    else {
      char sa[128], sb[128];
      shape_fmt(sa, sizeof sa, a);
      shape_fmt(sb, sizeof sb, b);
      return fail(err, errlen, "shapes %s and %s do not broadcast (axis %d)", sa, sb, i - r);
    }
  }
  return true;
}

// Reshape is legal when symbolic dims appear in the same order in both
// shapes and the constant dims between consecutive symbolic dims have the
// same product (row-major data is then unchanged).
// Row-major reshape: the symbolic axes in the same order, the same constant
// product between them. A time axis T / s counts as U (T / m, m the larger
// divisor of the two shapes' time axes) followed by a constant m / s, so
// that [.., T, ..] <-> [.., T / s, s, ..] (position t = p s + r) passes and
// [.., s, T / s, ..] does not.
static bool reshape_ok(const Shape *from, const Shape *to) {
  int64_t m = 1;
  for (int i = 0; i < from->rank; i++) m = dim_tdiv(from->d[i]) > m ? dim_tdiv(from->d[i]) : m;
  for (int i = 0; i < to->rank; i++) m = dim_tdiv(to->d[i]) > m ? dim_tdiv(to->d[i]) : m;
  for (int i = 0; i < from->rank; i++)
    if (m % dim_tdiv(from->d[i])) return false;
  for (int i = 0; i < to->rank; i++)
    if (m % dim_tdiv(to->d[i])) return false;
  int i = 0, j = 0;
  int64_t ca = 1, cb = 1;  // a time axis's m / s, carried into the next product
  for (;;) {
    int64_t pa = ca, pb = cb;
    while (i < from->rank && from->d[i].kind == DIM_CONST) pa *= from->d[i++].n;
    while (j < to->rank && to->d[j].kind == DIM_CONST) pb *= to->d[j++].n;
    if (pa != pb) return false;
    if (i == from->rank || j == to->rank) return i == from->rank && j == to->rank;
    if (from->d[i].kind != to->d[j].kind) return false;
    ca = from->d[i].kind == DIM_T ? m / dim_tdiv(from->d[i]) : 1;
    cb = to->d[j].kind == DIM_T ? m / dim_tdiv(to->d[j]) : 1;
    i++, j++;
  }
}

static bool want_f32(const Graph *g, const Node *n, int k, char *err, size_t errlen) {
  if (g->nodes[n->in[k]].dtype != DT_F32)
    return fail(err, errlen, "'%s' needs a float tensor as input %d, not token ids",
                ir_op_info[n->op].name, k + 1);
  return true;
}

bool ir_infer(const Graph *g, const Node *n, Shape *out, DType *dt, char *err, size_t errlen) {
  const OpInfo *info = &ir_op_info[n->op];
  if (!ir_nin_ok(n->op, n->nin))
    return fail(err, errlen, "'%s' takes %d inputs, got %d", info->name, info->nin, n->nin);
  const Shape *x = n->nin > 0 ? &g->nodes[n->in[0]].shape : NULL;
  const Shape *y = n->nin > 1 ? &g->nodes[n->in[1]].shape : NULL;
  char sx[128] = "", sy[128] = "";
  if (x) shape_fmt(sx, sizeof sx, x);
  if (y) shape_fmt(sy, sizeof sy, y);
  *dt = DT_F32;
  switch (info->cat) {
  case OPC_LEAF:
    *out = n->shape;
    *dt = n->dtype;
    if (n->op == OP_CONST) out->rank = 0, *dt = DT_F32;
    if (n->op == OP_IOTA) out->rank = 1, out->d[0] = n->len, *dt = DT_F32;
    if (n->op == OP_SIZE) out->rank = 0, *dt = DT_F32;
    if (n->op == OP_PARAM && n->dtype != DT_F32) return fail(err, errlen, "parameters are float");
    for (int i = 0; i < out->rank; i++)
      if (out->d[i].kind == DIM_CONST && out->d[i].n < 1)
        return fail(err, errlen, "dimension %d of %s is %lld; sizes must be at least 1", i,
                    info->name, (long long)out->d[i].n);
    return true;
  case OPC_UNARY:
    *out = *x;
    return want_f32(g, n, 0, err, errlen);
  case OPC_BINARY:
    return want_f32(g, n, 0, err, errlen) && want_f32(g, n, 1, err, errlen) &&
           broadcast(x, y, out, err, errlen);
  case OPC_REDUCE: {
    int ax = ir_norm_axis(n->axis, x->rank);
    if (ax < 0) return fail(err, errlen, "axis %d is out of range for %s", n->axis, sx);
    int end = n->axis2 > ax ? n->axis2 : ax;
    if (end >= x->rank) return fail(err, errlen, "axes %d..%d are out of range for %s", ax, end, sx);
    *out = *x;
    for (int i = ax; i <= end; i++) out->d[i] = dconst(1);
    return want_f32(g, n, 0, err, errlen);
  }
  case OPC_MATMUL: {
    if (!want_f32(g, n, 0, err, errlen) || !want_f32(g, n, 1, err, errlen)) return false;
    if (x->rank < 2 || y->rank < 2)
      return fail(err, errlen, "matmul needs two operands of rank >= 2, got %s @ %s", sx, sy);
    if (!dim_eq(x->d[x->rank - 1], y->d[y->rank - 2]))
      return fail(err, errlen, "matmul inner dimensions differ: %s @ %s", sx, sy);
    Shape bx = *x, by = *y, bo;
    bx.rank -= 2, by.rank -= 2;
    if (!broadcast(&bx, &by, &bo, err, errlen))
      return fail(err, errlen, "matmul batch dimensions do not broadcast: %s @ %s", sx, sy);
    *out = bo;
    out->d[out->rank++] = x->d[x->rank - 2];
    out->d[out->rank++] = y->d[y->rank - 1];
    return true;
  }
  case OPC_MOVE:
    switch (n->op) {
    case OP_TRANSPOSE: {
      int a = ir_norm_axis(n->axis, x->rank), b = ir_norm_axis(n->axis2, x->rank);
      if (a < 0 || b < 0 || a == b)
        return fail(err, errlen, "transpose axes %d and %d are not two distinct axes of %s",
                    n->axis, n->axis2, sx);
      *out = *x;
      out->d[a] = x->d[b], out->d[b] = x->d[a];
      *dt = g->nodes[n->in[0]].dtype;
      return true;
    }
    case OP_RESHAPE: {
      char so[128];
      shape_fmt(so, sizeof so, &n->shape);
      for (int i = 0; i < n->shape.rank; i++)
        if (n->shape.d[i].kind == DIM_CONST && n->shape.d[i].n < 1)
          return fail(err, errlen, "reshape target %s has a size below 1", so);
      if (!reshape_ok(x, &n->shape))
        return fail(err, errlen, "cannot reshape %s to %s", sx, so);
      *out = n->shape;
      *dt = g->nodes[n->in[0]].dtype;
      return true;
    }
    case OP_SLICE: {
      int ax = ir_norm_axis(n->axis, x->rank);
      if (ax < 0) return fail(err, errlen, "axis %d is out of range for %s", n->axis, sx);
      Dim d = x->d[ax];
      if (n->start < 0) return fail(err, errlen, "slice start %lld is negative", (long long)n->start);
      if (n->len.kind == DIM_CONST && n->len.n < 1)
        return fail(err, errlen, "slice length %lld is below 1", (long long)n->len.n);
      if (d.kind == DIM_CONST) {
        if (n->len.kind == DIM_B)
          return fail(err, errlen, "cannot slice a fixed axis to the batch size B");
        int64_t len = dim_size(n->len, 0, g->t_max);  // T / s: at most t_max / s
        // start >= 0 and len >= 1 may be near INT64_MAX: start + len can overflow, d.n - len cannot.
        if (n->start > d.n - len)
          return fail(err, errlen,
                      "slice [%lld, %llu) of axis %d of %s is out of range (T <= %lld)",
                      (long long)n->start, (unsigned long long)n->start + (unsigned long long)len,
                      ax, sx, (long long)g->t_max);
      } else if (!(n->start == 0 && dim_eq(n->len, d))) {
        return fail(err, errlen, "a symbolic axis can only be sliced whole");
      }
      *out = *x;
      out->d[ax] = n->len;
      *dt = g->nodes[n->in[0]].dtype;
      return true;
    }
    case OP_SHIFT: {
      if (ir_norm_axis(n->axis, x->rank) < 0) return fail(err, errlen, "axis %d is out of range for %s", n->axis, sx);
      *out = *x;
      return want_f32(g, n, 0, err, errlen);
    }
    case OP_PAD: {  // x is the slice [start, start + len) of axis of node.shape
      int ax = ir_norm_axis(n->axis, n->shape.rank);
      bool ok = ax >= 0 && x->rank == n->shape.rank && n->start >= 0;
      for (int i = 0; ok && i < x->rank; i++) ok = i == ax || dim_eq(x->d[i], n->shape.d[i]);
      if (ok) {
        Dim full = n->shape.d[ax], part = x->d[ax];
        int64_t hi = n->start + (part.kind == DIM_B ? -1 : dim_size(part, 0, g->t_max));
        ok = dim_eq(full, part) ? n->start == 0 : full.kind == DIM_CONST && part.kind != DIM_B && hi <= full.n;
      }
      char so[128];
      shape_fmt(so, sizeof so, &n->shape);
      if (!ok) return fail(err, errlen, "cannot pad %s into %s at axis %d, start %lld", sx, so, n->axis,
                           (long long)n->start);
      *out = n->shape;
      return want_f32(g, n, 0, err, errlen);
    }
    case OP_CONCAT: {
      int ax = ir_norm_axis(n->axis, x->rank);
      if (ax < 0 || x->rank != y->rank)
        return fail(err, errlen, "cannot concatenate %s and %s along axis %d", sx, sy, n->axis);
      for (int i = 0; i < x->rank; i++)
        if (i != ax && !dim_eq(x->d[i], y->d[i]))
          return fail(err, errlen, "cannot concatenate %s and %s along axis %d", sx, sy, n->axis);
      if (x->d[ax].kind != DIM_CONST || y->d[ax].kind != DIM_CONST)
        return fail(err, errlen, "concatenation axis must have a fixed size: %s, %s", sx, sy);
      *out = *x;
      out->d[ax] = dconst(x->d[ax].n + y->d[ax].n);
      return want_f32(g, n, 0, err, errlen) && want_f32(g, n, 1, err, errlen);
    }
    case OP_EXPAND: {
      Shape b;
      char so[128];
      shape_fmt(so, sizeof so, &n->shape);
      if (!broadcast(x, &n->shape, &b, err, errlen) || !shape_eq(&b, &n->shape))
        return fail(err, errlen, "cannot expand %s to %s", sx, so);
      *out = n->shape;
      return want_f32(g, n, 0, err, errlen);
    }
    case OP_ONEHOT:
      if (g->nodes[n->in[0]].dtype != DT_I32) return fail(err, errlen, "onehot needs token ids");
      if (n->len.kind != DIM_CONST || n->len.n < 1 || x->rank + 1 > IR_MAX_RANK)
        return fail(err, errlen, "onehot needs a fixed number of classes");
      *out = *x;
      out->d[out->rank++] = n->len;
      return true;
    case OP_SCATTER_ADD: {
      if (!want_f32(g, n, 0, err, errlen)) return false;
      if (g->nodes[n->in[1]].dtype != DT_I32) return fail(err, errlen, "scatter_add needs token ids");
      bool ok = x->rank == y->rank + 1 && n->len.kind == DIM_CONST && n->len.n >= 1;
      for (int i = 0; ok && i < y->rank; i++) ok = dim_eq(x->d[i], y->d[i]);
      if (!ok) return fail(err, errlen, "scatter_add needs rows [..., d] and ids [...], got %s and %s", sx, sy);
      out->rank = 2;
      out->d[0] = n->len;
      out->d[1] = x->d[x->rank - 1];
      return true;
    }
    case OP_EMBED: {
      if (x->rank != 2 || !want_f32(g, n, 0, err, errlen))
        return fail(err, errlen, "embed needs a float table [V, d], got %s", sx);
      if (g->nodes[n->in[1]].dtype != DT_I32)
        return fail(err, errlen, "embed needs token ids as its second input");
      if (y->rank + 1 > IR_MAX_RANK)
        return fail(err, errlen, "embed of ids %s would have rank %d; at most %d", sy, y->rank + 1, IR_MAX_RANK);
      *out = *y;
      out->d[out->rank++] = x->d[1];
      return true;
    }
    default: break;
    }
    break;
  case OPC_NN:
    switch (n->op) {
    case OP_SOFTMAX: {
      int ax = ir_norm_axis(n->axis, x->rank);
      if (ax < 0) return fail(err, errlen, "axis %d is out of range for %s", n->axis, sx);
      *out = *x;
      return want_f32(g, n, 0, err, errlen);
    }
    case OP_LAYERNORM: {
      const Shape *gs = &g->nodes[n->in[1]].shape, *bs = &g->nodes[n->in[2]].shape;
      char sg[128], sb[128];
      shape_fmt(sg, sizeof sg, gs);
      shape_fmt(sb, sizeof sb, bs);
      if (x->rank < 1 || gs->rank != 1 || bs->rank != 1 ||
          !dim_eq(gs->d[0], x->d[x->rank - 1]) || !dim_eq(bs->d[0], x->d[x->rank - 1]))
        return fail(err, errlen,
                    "layernorm of %s needs gain and bias matching its last axis, got %s and %s",
                    sx, sg, sb);
      if (!(n->fval > 0)) return fail(err, errlen, "layernorm epsilon must be positive");
      *out = *x;
      return want_f32(g, n, 0, err, errlen) && want_f32(g, n, 1, err, errlen) &&
             want_f32(g, n, 2, err, errlen);
    }
    case OP_RMSNORM: {
      const Shape *gs = &g->nodes[n->in[1]].shape;
      char sg[128];
      shape_fmt(sg, sizeof sg, gs);
      if (x->rank < 1 || gs->rank != 1 || !dim_eq(gs->d[0], x->d[x->rank - 1]))
        return fail(err, errlen, "rmsnorm of %s needs a gain matching its last axis, got %s", sx, sg);
      if (!(n->fval > 0)) return fail(err, errlen, "rmsnorm epsilon must be positive");
      *out = *x;
      return want_f32(g, n, 0, err, errlen) && want_f32(g, n, 1, err, errlen);
    }
    case OP_LAYERNORM_DX: case OP_RMSNORM_DX:
    case OP_LAYERNORM_DYXH: case OP_RMSNORM_DYXH: {  // x [..., d]; DX: g [d], dy like x; DYXH: dy like x
      const Shape *gs = &g->nodes[n->in[1]].shape, *ds = &g->nodes[n->in[n->nin - 1]].shape;
      bool dx = n->op == OP_LAYERNORM_DX || n->op == OP_RMSNORM_DX;
      bool ok = x->rank >= 1 && shape_eq(x, ds);
      if (ok && dx) ok = gs->rank == 1 && dim_eq(gs->d[0], x->d[x->rank - 1]);
      if (!ok) return fail(err, errlen, "%s of %s needs a gain [d] and dy like x", ir_op_info[n->op].name, sx);
      if (!(n->fval > 0)) return fail(err, errlen, "%s epsilon must be positive", ir_op_info[n->op].name);
      *out = *x;
      for (int i = 0; i < n->nin; i++)
        if (!want_f32(g, n, i, err, errlen)) return false;
      return true;
    }
    case OP_ATTENTION:
    case OP_ATTENTION_LSE:
    case OP_ATTENTION_GRAD:
    case OP_ATTENTION_DBIAS: {
      const Shape *ks = &g->nodes[n->in[1]].shape, *vs = &g->nodes[n->in[2]].shape;
      bool ok = x->rank >= 2 && ks->rank == x->rank && vs->rank == x->rank &&
                dim_eq(x->d[x->rank - 1], ks->d[x->rank - 1]) && x->d[x->rank - 1].kind == DIM_CONST &&
                vs->d[x->rank - 1].kind == DIM_CONST;
      bool group = ok && ir_attention_group(g, n) > 1;  // k, v [..., 1, T, h] against q [..., G, T, h]
      for (int i = 0; ok && i < x->rank - 1; i++)
        ok = (group && i == x->rank - 3) || (dim_eq(x->d[i], ks->d[i]) && dim_eq(x->d[i], vs->d[i]));
      if (ok && n->op != OP_ATTENTION && n->op != OP_ATTENTION_LSE) {
        const Shape *ds = &g->nodes[n->in[3]].shape;
        ok = ds->rank == x->rank && dim_eq(ds->d[x->rank - 1], vs->d[x->rank - 1]);
        for (int i = 0; ok && i < x->rank - 1; i++) ok = dim_eq(x->d[i], ds->d[i]);
      }
      if (ok && n->op == OP_ATTENTION_GRAD) {  // L: q's rows; o: dy's shape
        const Shape *ls = &g->nodes[n->in[4]].shape, *os = &g->nodes[n->in[5]].shape, *ds = &g->nodes[n->in[3]].shape;
        ok = ls->rank == x->rank - 1 && os->rank == x->rank;
        for (int i = 0; ok && i < x->rank - 1; i++) ok = dim_eq(x->d[i], ls->d[i]);
        for (int i = 0; ok && i < x->rank; i++) ok = dim_eq(ds->d[i], os->d[i]);
      }
      if (!ok || (n->axis != 0 && (n->axis != 1 || x->rank < 3)))
        return fail(err, errlen, "%s needs q, k [..., T, h] and v [..., T, e] alike, got q %s", ir_op_info[n->op].name, sx);
      int bi = ir_attention_bias(n);
      if (bi >= 0 && !attention_bias_fits(g, n, &g->nodes[n->in[bi]].shape)) {
        char sb[128];
        shape_fmt(sb, sizeof sb, &g->nodes[n->in[bi]].shape);
        return fail(err, errlen, "%s's score bias %s is not [..., T, T] over the trailing axes of the sequences of q %s",
                    ir_op_info[n->op].name, sb, sx);
      }
      if (n->op == OP_ATTENTION_DBIAS) {  // db: b's shape
        *out = g->nodes[n->in[bi]].shape;
      } else if (n->op == OP_ATTENTION_LSE) {  // a row per query: q's shape without its last axis
        *out = *x;
        out->rank--;
      } else {
        *out = *x;
        out->d[x->rank - 1].n = n->op == OP_ATTENTION ? vs->d[x->rank - 1].n : 2 * x->d[x->rank - 1].n + vs->d[x->rank - 1].n;
      }
      for (int i = 0; i < n->nin; i++)
        if (!want_f32(g, n, i, err, errlen)) return false;
      return true;
    }
    case OP_ROUTED_MATMUL:
    case OP_ROUTED_MATMUL_DW: {  // x [.., d]; w [E, d, f] or dy [.., f]; ids [..]: x's leading axes
      const Shape *is = &g->nodes[n->in[2]].shape;
      bool fwd = n->op == OP_ROUTED_MATMUL;
      bool ok = x->rank >= 1 && is->rank == x->rank - 1 && x->d[x->rank - 1].kind == DIM_CONST &&
                y->d[y->rank - 1].kind == DIM_CONST;
      for (int i = 0; ok && i < is->rank; i++) ok = dim_eq(x->d[i], is->d[i]);
      if (ok && fwd) ok = y->rank == 3 && y->d[0].kind == DIM_CONST && dim_eq(y->d[1], x->d[x->rank - 1]);
      if (ok && !fwd) {
        ok = y->rank == x->rank && n->len.kind == DIM_CONST && n->len.n >= 1;
        for (int i = 0; ok && i < is->rank; i++) ok = dim_eq(x->d[i], y->d[i]);
      }
      char si[128];
      shape_fmt(si, sizeof si, is);
      if (!ok)
        return fail(err, errlen, fwd ? "routed_matmul needs x [..., d], weights [E, d, f] of fixed sizes and ids [...], got %s, %s and %s"
                                     : "routed_matmul_dw needs x [..., d], dy [..., f] and ids [...], got %s, %s and %s",
                    sx, sy, si);
      if (fwd) {
        *out = *x;
        out->d[x->rank - 1] = y->d[2];
      } else {
        out->rank = 3;
        out->d[0] = n->len, out->d[1] = x->d[x->rank - 1], out->d[2] = y->d[y->rank - 1];
      }
      for (int i = 0; i < 3; i++)
        if (!want_f32(g, n, i, err, errlen)) return false;
      return true;
    }
    case OP_TOPK:
      if (x->rank < 1 || x->d[x->rank - 1].kind != DIM_CONST || n->len.kind != DIM_CONST || n->len.n < 1 ||
          n->len.n > x->d[x->rank - 1].n)
        return fail(err, errlen, "topk needs x [..., n] with a fixed n and 1 <= k <= n, got %s and k = %lld", sx,
                    (long long)n->len.n);
      *out = *x;
      out->d[x->rank - 1] = n->len;
      return want_f32(g, n, 0, err, errlen);
    case OP_CAUSAL_MASK:
      if (x->rank < 2 || !dim_eq(x->d[x->rank - 1], x->d[x->rank - 2]) ||
          x->d[x->rank - 1].kind == DIM_B)
        return fail(err, errlen, "causal_mask needs a square [..., T, T] tensor, got %s", sx);
      *out = *x;
      return want_f32(g, n, 0, err, errlen);
    case OP_CAUSAL_CONV: {
      if (!want_f32(g, n, 0, err, errlen) || !want_f32(g, n, 1, err, errlen)) return false;
      if (x->rank < 2)
        return fail(err, errlen, "causal_conv needs input [..., T, d], got %s", sx);
      Dim t = x->d[x->rank - 2], d = x->d[x->rank - 1];
      if (y->rank < 1 || y->rank > 3 || y->d[0].kind != DIM_CONST)
        return fail(err, errlen,
                    "causal_conv kernel must be [L], [L, d] or [L, d, e] with fixed L, got %s", sy);
      if (t.kind == DIM_B) return fail(err, errlen, "causal_conv time axis of %s is the batch size", sx);
      if (y->d[0].n < 1) return fail(err, errlen, "causal_conv kernel %s has no lags", sy);
      ConvKind want = y->rank == 1 ? CONV_SCALAR : y->rank == 2 ? CONV_VECTOR : CONV_MATRIX;
      if (n->conv != want) return fail(err, errlen, "causal_conv kind does not match kernel %s", sy);
      if (y->rank >= 2 && !dim_eq(y->d[1], d))
        return fail(err, errlen, "causal_conv kernel %s does not match input width of %s", sy, sx);
      *out = *x;
      if (y->rank == 3) out->d[out->rank - 1] = y->d[2];
      return true;
    }
    case OP_CONV_DX: {  // dy [..., T, e], w -> dx [..., T, d]
      if (!want_f32(g, n, 0, err, errlen) || !want_f32(g, n, 1, err, errlen)) return false;
      ConvKind want = y->rank == 1 ? CONV_SCALAR : y->rank == 2 ? CONV_VECTOR : CONV_MATRIX;
      if (x->rank < 2 || y->rank < 1 || y->rank > 3 || n->conv != want)
        return fail(err, errlen, "causal_conv_dx of %s with kernel %s", sx, sy);
      Dim e = x->d[x->rank - 1];
      if (y->rank >= 2 && !dim_eq(y->d[y->rank - 1], e))
        return fail(err, errlen, "causal_conv_dx: kernel %s does not match gradient %s", sy, sx);
      *out = *x;
      if (y->rank == 3) out->d[out->rank - 1] = y->d[1];
      return true;
    }
    case OP_CONV_DW: {  // x [..., T, d], dy [..., T, e] -> dw [L], [L, d] or [L, d, e]
      if (!want_f32(g, n, 0, err, errlen) || !want_f32(g, n, 1, err, errlen)) return false;
      bool ok = x->rank >= 2 && x->rank == y->rank && n->len.kind == DIM_CONST && n->len.n >= 1;
      for (int i = 0; ok && i < x->rank - 1; i++) ok = dim_eq(x->d[i], y->d[i]);
      if (ok && n->conv != CONV_MATRIX) ok = dim_eq(x->d[x->rank - 1], y->d[y->rank - 1]);
      if (!ok) return fail(err, errlen, "causal_conv_dw of %s and %s", sx, sy);
      out->rank = n->conv == CONV_SCALAR ? 1 : n->conv == CONV_VECTOR ? 2 : 3;
      out->d[0] = n->len;
      if (out->rank >= 2) out->d[1] = x->d[x->rank - 1];
      if (out->rank == 3) out->d[2] = y->d[y->rank - 1];
      return true;
    }
    case OP_SCAN: case OP_SCAN_REV: {  // a broadcast to b (dy) [..]: b's shape
      if (!want_f32(g, n, 0, err, errlen) || !want_f32(g, n, 1, err, errlen)) return false;
      Shape bs;
      char e2[64];
      if (x->rank > y->rank || !broadcast(x, y, &bs, e2, sizeof e2) || !shape_eq(&bs, y))
        return fail(err, errlen, "%s needs a decay that broadcasts to its input, got %s and %s", ir_op_info[n->op].name, sx, sy);
      int ax = ir_norm_axis(n->axis, y->rank);
      if (ax < 0) return fail(err, errlen, "axis %d is out of range for %s", n->axis, sy);
      if (y->d[ax].kind == DIM_B) return fail(err, errlen, "%s along the batch axis of %s", ir_op_info[n->op].name, sy);
      *out = *y;
      return true;
    }
    case OP_SCAN_READ: case OP_SCAN_READ_GRAD: {  // q, k [.., dk, 1], v [.., 1, dv], a broadcast to k
      const Shape *vs = &g->nodes[n->in[2]].shape, *as = &g->nodes[n->in[3]].shape;
      int r = y->rank, ax = n->axis;
      bool ok = r >= 3 && ax >= 0 && ax < r - 2 && shape_eq(x, y) && vs->rank == r && y->d[r - 1].kind == DIM_CONST &&
                y->d[r - 1].n == 1 && y->d[r - 2].kind == DIM_CONST && vs->d[r - 2].kind == DIM_CONST &&
                vs->d[r - 2].n == 1 && vs->d[r - 1].kind == DIM_CONST && y->d[ax].kind != DIM_B;
      for (int i = 0; ok && i < r - 2; i++) ok = dim_eq(y->d[i], vs->d[i]);
      Shape bs;
      char e2[64];
      if (ok) ok = as->rank <= r && broadcast(as, y, &bs, e2, sizeof e2) && shape_eq(&bs, y);
      *out = *vs;
      if (ok && n->op == OP_SCAN_READ_GRAD) {
        ok = shape_eq(&g->nodes[n->in[4]].shape, vs);
        out->rank = r - 1;
        out->d[r - 2] = (Dim){DIM_CONST, 2 * y->d[r - 2].n + vs->d[r - 1].n};
      }
      if (!ok)
        return fail(err, errlen, "%s needs q, k [.., dk, 1], v [.., 1, dv] and a decay broadcast to k, got q %s, k %s",
                    ir_op_info[n->op].name, sx, sy);
      for (int i = 0; i < n->nin; i++)
        if (!want_f32(g, n, i, err, errlen)) return false;
      return true;
    }
    case OP_DROPOUT:
      if (!(n->fval >= 0 && n->fval < 1))
        return fail(err, errlen, "dropout probability %g is not in [0, 1)", n->fval);
      *out = *x;
      return want_f32(g, n, 0, err, errlen);
    case OP_CROSS_ENTROPY_LSE:
      if (x->rank < 1) return fail(err, errlen, "cross_entropy_lse needs logits [..., V], got %s", sx);
      *out = *x;
      out->d[x->rank - 1] = (Dim){DIM_CONST, 1};
      return want_f32(g, n, 0, err, errlen);
    case OP_CROSS_ENTROPY: {
      if (!want_f32(g, n, 0, err, errlen)) return false;
      if (g->nodes[n->in[1]].dtype != DT_I32)
        return fail(err, errlen, "cross_entropy needs token ids as targets");
      bool ok = x->rank == y->rank + 1;
      for (int i = 0; ok && i < y->rank; i++) ok = dim_eq(x->d[i], y->d[i]);
      if (!ok)
        return fail(err, errlen, "cross_entropy needs logits [..., V] and targets [...], got %s and %s",
                    sx, sy);
      out->rank = 0;
      return true;
    }
    default: break;
    }
    break;
  }
  return fail(err, errlen, "no shape rule for op '%s'", info->name);
}

int ir_add(Graph *g, Node n, char *err, size_t errlen) {
  for (int i = 0; i < n.nin; i++)
    if (n.in[i] < 0 || n.in[i] >= g->nnodes) {
      snprintf(err, errlen, "input %d of '%s' is not a node", i, ir_op_info[n.op].name);
      return -1;
    }
  if ((n.op == OP_CAUSAL_CONV || n.op == OP_CONV_DX) && n.nin == 2) {
    int r = g->nodes[n.in[1]].shape.rank;
    n.conv = r == 1 ? CONV_SCALAR : r == 2 ? CONV_VECTOR : CONV_MATRIX;
  }
  Shape shape;
  DType dtype;
  if (!ir_infer(g, &n, &shape, &dtype, err, errlen)) return -1;
  n.shape = shape;
  n.dtype = dtype;
  if (ir_op_info[n.op].cat == OPC_REDUCE || n.op == OP_SOFTMAX || n.op == OP_SLICE ||
      n.op == OP_CONCAT || n.op == OP_PAD || n.op == OP_SHIFT)
    n.axis = ir_norm_axis(n.axis, g->nodes[n.in[0]].shape.rank);
  if (n.op == OP_SCAN || n.op == OP_SCAN_REV) n.axis = ir_norm_axis(n.axis, g->nodes[n.in[1]].shape.rank);
  if (n.op == OP_TRANSPOSE) {
    int r = g->nodes[n.in[0]].shape.rank;
    n.axis = ir_norm_axis(n.axis, r), n.axis2 = ir_norm_axis(n.axis2, r);
  }
  GROW(g, g->nodes, g->nnodes, g->cap_nodes);
  n.id = g->nnodes;
  g->nodes[g->nnodes] = n;
  return g->nnodes++;
}
