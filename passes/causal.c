// causal.c: proves that the logits of a model are causal, position by
// position, and finds each value's time axis: what an incremental decoder
// (codegen's step program) needs to compute only new positions.
//
// Requires: a verified graph with an output "logits".
// Guarantees: nothing is changed. On success time_axis[n] is, for every node
// n the logits depend on, the axis of n that indexes positions (-1: none, the
// value is the same at every step, e.g. a parameter), such that row t of that
// axis depends only on inputs at positions <= t. On failure *bad is the first
// node (in order) that breaks it and why says how.
//
// Rules (seed 001 section 5: every sublayer is causal):
//   - token inputs carry positions on their T axis; position-wise ops
//     (elementwise, layer norm, linear maps, embeddings, reductions and
//     softmax over other axes) keep them;
//   - slice(W, axis, 0, T) of a position-free tensor makes positions (learned
//     positional embeddings: row t is W_t);
//   - a product q [.., T, h] @ k' [.., h, T] gives scores with a second,
//     "key" axis; causal_mask makes its future structurally -inf, softmax
//     over the key axis turns it into exact zeros, and only then may a
//     product contract the key axis against values at positions
//     (p [.., T, T] @ v [.., T, e]);
//   - a value of positions only (iota(T), no token input) whose time axis is
//     the last, combined elementwise with rows at positions (time axis
//     second to last), is indexed by key position: a term f(i, j) of the
//     scores (a distance i - j, ALiBi's bias) with an open key axis, which
//     the causal mask closes as it does the scores';
//   - a term f(i, j) keeps its axes through reshapes that add or drop axes
//     of size 1 and through a product by a position-free matrix along its
//     last axis (a one-hot of distances times a learned table);
//   - causal_conv and the fused attention (with a score bias of positions,
//     parameters and constants whose rows are the query positions, or that
//     is one row over the keys) are causal by definition, and so
//     are scan along the time axis (h_t from h_{t-1}) and shift by steps >= 0
//     along it (x_{t-s});
//   - anything else that reads across positions (a reduction or softmax over
//     the time axis, an unmasked score matrix used, the length T used as a
//     value) is not incremental.
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KEY_NONE, KEY_OPEN, KEY_MASKED };  // the key axis' future: free, -inf or 0

typedef struct {
  int *ta, *key, *kstate;
  bool *tok;  // the value depends on the tokens (else on positions, parameters, constants only)
  int *bad;
  char *why;
  size_t whylen;
} Causal;

static bool fail(Causal *c, int id, const char *what) {
  *c->bad = id;
  snprintf(c->why, c->whylen, "%s", what);
  return false;
}

// The axis of output shape (rank ro) aligned with axis a of an input of rank ri.
static int align(int a, int ri, int ro) { return a < 0 ? -1 : a + ro - ri; }

static int t_axis(const Shape *s) {
  for (int i = 0; i < s->rank; i++)
    if (s->d[i].kind == DIM_T) return i;
  return -1;
}

// Symbolic product of dims [0, to) of s: the constant part and the powers of B and T.
static void prefix(const Shape *s, int to, int64_t *c, int *pb, int *pt) {
  *c = 1, *pb = *pt = 0;
  for (int i = 0; i < to; i++) {
    if (s->d[i].kind == DIM_B) (*pb)++;
    else if (s->d[i].kind == DIM_T) (*pt)++;
    else *c *= s->d[i].n;
  }
}

static bool node(Causal *c, const Graph *g, const Node *n) {
  int id = n->id, r = n->shape.rank;
  int *ta = c->ta, *key = c->key, *ks = c->kstate;
  ta[id] = key[id] = -1, ks[id] = KEY_NONE;
  c->tok[id] = n->op == OP_INPUT;
  for (int i = 0; i < n->nin; i++) c->tok[id] = c->tok[id] || c->tok[n->in[i]];
  const Node *x = n->nin ? &g->nodes[n->in[0]] : NULL;
  int xa = x ? ta[x->id] : -1, xk = x ? key[x->id] : -1, xr = x ? x->shape.rank : 0;
  switch (n->op) {
  case OP_PARAM: case OP_CONST: return true;
  case OP_IOTA: ta[id] = n->len.kind == DIM_T ? 0 : -1; return true;
  case OP_SIZE:
    return n->len.kind == DIM_T ? fail(c, id, "uses the sequence length T as a value") : true;
  case OP_INPUT: ta[id] = t_axis(&n->shape); return true;
  case OP_EMBED: case OP_ONEHOT: {
    const Node *ids = &g->nodes[n->in[n->op == OP_EMBED ? 1 : 0]];
    ta[id] = ta[ids->id];  // ids [..] -> [.., d]: the same leading axes
    return true;
  }
  case OP_SLICE:
    if (xa == n->axis) return fail(c, id, "slices along the time axis");
    if (xa < 0 && n->len.kind == DIM_T && n->start == 0) ta[id] = n->axis;  // positions: row t is W_t
    else ta[id] = xa;
    if (xk >= 0) key[id] = xk, ks[id] = ks[x->id];
    if (xk == n->axis) return fail(c, id, "slices along the key axis");
    return true;
  case OP_TRANSPOSE: {
    int p[IR_MAX_RANK];
    for (int i = 0; i < r; i++) p[i] = i;
    p[n->axis] = n->axis2, p[n->axis2] = n->axis;
    for (int i = 0; i < r; i++) {
      if (p[i] == xa) ta[id] = i;
      if (p[i] == xk) key[id] = i, ks[id] = ks[x->id];
    }
    return true;
  }
  case OP_RESHAPE: {
    for (int i = 0; i < IR_MAX_RANK; i++)
      if ((i < n->shape.rank && dim_tdiv(n->shape.d[i]) > 1) || (i < x->shape.rank && dim_tdiv(x->shape.d[i]) > 1))
        return fail(c, id, "groups positions along time (a time axis T / s): a group is whole only once its last position is");
    if (xk >= 0) {  // scores or a term f(i, j): axes of size 1 added or dropped only
      int map[IR_MAX_RANK];
      if (!ir_reshape_unit_map(&x->shape, &n->shape, map)) return fail(c, id, "reshapes a score matrix");
      if (xa >= 0) ta[id] = map[xa];
      key[id] = map[xk], ks[id] = ks[x->id];
      return true;
    }
    if (xa < 0) return true;
    int oa = t_axis(&n->shape);
    int64_t c1, c2;
    int b1, b2, t1, t2;
    prefix(&x->shape, xa, &c1, &b1, &t1);
    if (oa >= 0) prefix(&n->shape, oa, &c2, &b2, &t2);
    if (oa < 0 || c1 != c2 || b1 != b2 || t1 || t2) return fail(c, id, "reshapes the time axis into another axis");
    ta[id] = oa;
    return true;
  }
  case OP_LAYERNORM: case OP_RMSNORM:
    if (xa == xr - 1) return fail(c, id, "normalises over the time axis");
    if (xk >= 0) return fail(c, id, "normalises a score matrix");
    ta[id] = xa;
    return true;
  case OP_SUM: case OP_MEAN: case OP_MAX: case OP_SOFTMAX: {
    int end = ir_reduce_end(n);
    if (xa >= n->axis && xa <= end)
      return fail(c, id, n->op == OP_SOFTMAX ? "takes a softmax over the time axis" : "reduces over the time axis");
    ta[id] = xa;
    if (xk >= 0 && xk >= n->axis && xk <= end && end > n->axis) return fail(c, id, "reduces scores over several axes");
    if (xk >= 0 && n->axis == xk) {
      if (ks[x->id] != KEY_MASKED)
        return fail(c, id, "mixes positions: a softmax or reduction over scores without a causal mask");
      if (n->op == OP_SOFTMAX) key[id] = xk, ks[id] = KEY_MASKED;  // the future is now exactly 0
      return true;
    }
    if (xk >= 0) key[id] = xk, ks[id] = ks[x->id];
    return true;
  }
  case OP_CAUSAL_MASK:
    if (xa != xr - 2 || !(xk < 0 || xk == xr - 1)) return fail(c, id, "masks a matrix whose rows are not positions");
    ta[id] = xa, key[id] = xr - 1, ks[id] = KEY_MASKED;
    return true;
  case OP_CAUSAL_CONV:
    if (xa != xr - 2) return fail(c, id, "convolves along an axis that is not time");
    ta[id] = xa;
    return true;
  case OP_SCAN: {  // h_t reads a, b at t and h_{t-1}: causal along time, position-wise along any other axis
    int ba = ta[n->in[1]], aa = align(xa, xr, r);  // a broadcasts to b's shape: its axes align at the end
    if (xk >= 0 || key[n->in[1]] >= 0) return fail(c, id, "scans a score matrix");
    if (aa >= 0 && ba >= 0 && aa != ba) return fail(c, id, "combines values whose time axes differ");
    ta[id] = aa >= 0 ? aa : ba;
    return true;
  }
  case OP_SCAN_READ: {  // position-wise over q, k, v and a at t, S_{t-1}: as SCAN
    int t = -1;
    for (int i = 0; i < 4; i++) {
      const Node *u = &g->nodes[n->in[i]];
      int ua = ta[u->id] < 0 ? -1 : ta[u->id] + (g->nodes[n->in[1]].shape.rank - u->shape.rank);
      if (key[u->id] >= 0) return fail(c, id, "scans a score matrix");
      if (ua >= 0 && t >= 0 && ua != t) return fail(c, id, "combines values whose time axes differ");
      if (ua >= 0) t = ua;
    }
    if (t >= r - 2) return fail(c, id, "keeps positions in the axes of its state");
    ta[id] = t;
    return true;
  }
  case OP_SHIFT:
    if (xk >= 0) return fail(c, id, "shifts a score matrix");
    if (xa == n->axis && n->start < 0) return fail(c, id, "shifts later positions back (reads the future)");
    ta[id] = xa;
    return true;
  case OP_ATTENTION: {
    int at = n->axis ? xr - 3 : xr - 2;  // the time axis of q, k, v
    if (xa != at || ta[n->in[1]] != at || ta[n->in[2]] != at) return fail(c, id, "attends across non-positions");
    int bi = ir_attention_bias(n);
    if (bi >= 0) {  // the score bias: of positions, parameters and constants; rows at query positions (or none)
      const Node *b = &g->nodes[n->in[bi]];
      int br = b->shape.rank, ba = ta[b->id], bk = key[b->id];
      bool rows = ba == br - 2 && (bk < 0 || bk == br - 1);  // f(i, j) or f(i)
      bool keys = ba == br - 1 && bk < 0 && (br < 2 || b->shape.d[br - 2].kind == DIM_CONST);  // f(j): [.., 1, T]
      if (c->tok[b->id] || !(rows || keys || (ba < 0 && bk < 0)))
        return fail(c, id, "adds a score bias that depends on the tokens or whose rows are not query positions");
    }
    ta[id] = xa;
    return true;
  }
  case OP_CONCAT: {
    const Node *y = &g->nodes[n->in[1]];
    int ya = ta[y->id];
    if (xk >= 0 || key[y->id] >= 0) return fail(c, id, "concatenates score matrices");
    if (n->axis == xa || n->axis == ya) return fail(c, id, "concatenates along the time axis");
    if (xa >= 0 && ya >= 0 && xa != ya) return fail(c, id, "combines values whose time axes differ");
    ta[id] = xa >= 0 ? xa : ya;
    return true;
  }
  case OP_TOPK:  // along the last axis, position-wise along every other
    if (xa == xr - 1) return fail(c, id, "ranks values along the time axis");
    if (xk >= 0) return fail(c, id, "ranks a score matrix");
    ta[id] = xa;
    return true;
  case OP_ROUTED_MATMUL: {  // row r of x with ids_r: position-wise over the rows, the weights of no position
    int ia = ta[n->in[2]], wa = ta[n->in[1]];
    if (xk >= 0 || key[n->in[2]] >= 0 || key[n->in[1]] >= 0) return fail(c, id, "routes a score matrix");
    if (xa == xr - 1 || wa >= 0) return fail(c, id, "contracts the time axis");
    if (xa >= 0 && ia >= 0 && xa != ia) return fail(c, id, "combines values whose time axes differ");
    ta[id] = xa >= 0 ? xa : ia;
    return true;
  }
  case OP_DROPOUT: case OP_EXPAND:
    ta[id] = align(xa, xr, r);
    if (xk >= 0) key[id] = align(xk, xr, r), ks[id] = ks[x->id];
    return true;
  case OP_MATMUL: {
    const Node *y = &g->nodes[n->in[1]];
    int yr = y->shape.rank, ya = align(ta[y->id], yr, r), yk = key[y->id];
    int xa2 = align(xa, xr, r), xk2 = align(xk, xr, r);
    if (yk >= 0) return fail(c, id, "multiplies by a score matrix on the right");
    if (xk2 == r - 1) {  // p [.., T, T'] @ v [.., T', e]: contracts the key axis
      if (ks[x->id] != KEY_MASKED) return fail(c, id, "mixes positions: scores without a causal mask weigh values");
      if (ya != r - 2) return fail(c, id, "weighs values whose rows are not positions");
      ta[id] = xa2;
      return true;
    }
    if (xk2 == r - 2 && ya < 0 && key[y->id] < 0) {  // f(i, j) [.., T', k] @ w [k, n]: position-wise along the keys
      if (xa2 >= r - 2) return fail(c, id, "contracts the time axis");
      ta[id] = xa2, key[id] = r - 2, ks[id] = ks[x->id];
      return true;
    }
    if (xa2 == r - 1) return fail(c, id, "contracts the time axis");
    if (xa2 == r - 2 && ya == r - 1) {  // q [.., T, h] @ k' [.., h, T]: scores
      ta[id] = r - 2, key[id] = r - 1, ks[id] = KEY_OPEN;
      return true;
    }
    if (ya == r - 2) return fail(c, id, "contracts the time axis");
    if (xa2 >= 0 && ya >= 0 && xa2 != ya) return fail(c, id, "mixes two time axes");
    ta[id] = xa2 >= 0 ? xa2 : ya;
    return true;
  }
  default:
    if (ir_op_info[n->op].cat == OPC_UNARY || ir_op_info[n->op].cat == OPC_BINARY) {
      // beside rows at positions (time axis r - 2), an operand that depends
      // on positions only and has its time axis last is indexed by key
      // position (iota(T) as [1, T]: the j of a bias term f(i, j)): a key
      // axis, open (its future is not masked)
      bool rows = false;
      for (int i = 0; i < n->nin && r >= 2; i++)
        rows = rows || align(ta[n->in[i]], g->nodes[n->in[i]].shape.rank, r) == r - 2;
      for (int i = 0; i < n->nin; i++) {
        const Node *in = &g->nodes[n->in[i]];
        int a = align(ta[in->id], in->shape.rank, r), k = align(key[in->id], in->shape.rank, r);
        if (rows && a == r - 1 && k < 0 && !c->tok[in->id]) a = -1, k = r - 1;
        if (a >= 0 && ta[id] >= 0 && a != ta[id]) return fail(c, id, "combines values whose time axes differ");
        if (a >= 0) ta[id] = a;
        if (k >= 0) {
          // a key axis stays masked through products and quotients by other
          // values (-inf or 0 stays so); a sum reopens it
          bool keeps = (n->op == OP_MUL || n->op == OP_DIV || n->nin == 1) && ks[in->id] == KEY_MASKED;
          if (key[id] >= 0 && key[id] != k) return fail(c, id, "combines two score matrices");
          key[id] = k, ks[id] = keeps && ks[id] != KEY_OPEN ? KEY_MASKED : KEY_OPEN;
        }
      }
      return true;
    }
    return fail(c, id, "is not an op the incremental decoder knows");
  }
}

bool causal_analyze(const Graph *g, int *time_axis, int *bad, char *why, size_t whylen) {
  int lo = -1;
  for (int i = 0; i < g->noutputs; i++)
    if (!strcmp(g->outputs[i].name, "logits")) lo = g->outputs[i].node;
  *bad = -1;
  if (lo < 0) return snprintf(why, whylen, "the model has no output 'logits'"), false;
  bool *need = calloc((size_t)g->nnodes + 1, sizeof *need), *tok = calloc((size_t)g->nnodes + 1, sizeof *tok);
  int *key = calloc((size_t)g->nnodes + 1, sizeof *key), *ks = calloc((size_t)g->nnodes + 1, sizeof *ks);
  if (!need || !tok || !key || !ks) {
    free(need), free(tok), free(key), free(ks);
    return snprintf(why, whylen, "out of memory"), false;
  }
  need[lo] = true;
  for (int i = lo; i >= 0; i--)
    if (need[i])
      for (int j = 0; j < g->nodes[i].nin; j++) need[g->nodes[i].in[j]] = true;
  Causal c = {time_axis, key, ks, tok, bad, why, whylen};
  bool ok = true;
  for (int i = 0; i < g->nnodes; i++) time_axis[i] = -1;
  for (int i = 0; i <= lo && ok; i++)
    if (need[i]) ok = node(&c, g, &g->nodes[i]);
  if (ok && time_axis[lo] != g->nodes[lo].shape.rank - 2) ok = fail(&c, lo, "has logits whose rows are not positions");
  if (ok && key[lo] >= 0) ok = fail(&c, lo, "has logits over a score matrix");
  free(need), free(tok), free(key), free(ks);
  return ok;
}
