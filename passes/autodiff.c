// autodiff.c: reverse-mode differentiation of the graph IR.
//
// Requires: a verified graph with a scalar output "loss" and no backward
// part yet (nforward == 0).
// Guarantees: the forward nodes are unchanged (same ids); backward nodes are
// appended after them and g->nforward marks the split; for every parameter
// P there is an output "grad.P" of P's shape holding dloss/dP (zeros when P
// does not reach the loss). The graph verifies.
//
// Each differentiable op has one rule in the table `rules` below; a rule
// receives the adjoint dy of a node and adds the adjoint of each input that
// needs one. Adjoints reaching one node from several users (a shared block
// instance, a residual branch) are summed. Broadcast inputs get their
// adjoint summed over the broadcast axes (unbroadcast). A dropout's gradient
// is a dropout node on the same mask stream: the same mask by construction.
#include "passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  Graph *g;
  int *adj;     // adj[i]: node holding dloss/d(node i), or -1
  bool *needs;  // needs[i]: node i depends on a parameter
  int cur;      // the forward node whose rule runs: scope and loc of new nodes
  char *err;
  size_t errlen;
  bool failed;
} AD;

static int emit(AD *a, Node n) {
  const Node *src = &a->g->nodes[a->cur];
  n.scope = src->scope;
  n.loc = src->loc;
  char msg[512];
  int id = ir_add(a->g, n, msg, sizeof msg);
  if (id < 0 && !a->failed) {
    a->failed = true;
    snprintf(a->err, a->errlen, "internal error: gradient of %%%d (%s): %s", a->cur, ir_op_info[src->op].name, msg);
  }
  return id < 0 ? 0 : id;
}

// Shapes are copied: emitting a node may move the node array.
static Shape shape(AD *a, int id) { return a->g->nodes[id].shape; }
static int un(AD *a, OpKind op, int x) { return emit(a, (Node){.op = op, .nin = 1, .in = {x}}); }
static int bin(AD *a, OpKind op, int x, int y) { return emit(a, (Node){.op = op, .nin = 2, .in = {x, y}}); }
static int cst(AD *a, double v) { return emit(a, (Node){.op = OP_CONST, .fval = v}); }
static int reduce(AD *a, OpKind op, int x, int axis) { return emit(a, (Node){.op = op, .nin = 1, .in = {x}, .axis = axis}); }
static int reshape(AD *a, int x, Shape s) { return emit(a, (Node){.op = OP_RESHAPE, .nin = 1, .in = {x}, .shape = s}); }
static int expand(AD *a, int x, Shape s) {
  Shape xs = shape(a, x);
  return shape_eq(&xs, &s) ? x : emit(a, (Node){.op = OP_EXPAND, .nin = 1, .in = {x}, .shape = s});
}
static int transpose_last(AD *a, int x) {
  int r = shape(a, x).rank;
  return emit(a, (Node){.op = OP_TRANSPOSE, .nin = 1, .in = {x}, .axis = r - 1, .axis2 = r - 2});
}
// The value of a size as a scalar tensor (a constant unless it is B or T).
static int size_of(AD *a, Dim d) {
  return d.kind == DIM_CONST ? cst(a, (double)d.n) : emit(a, (Node){.op = OP_SIZE, .len = d});
}

static bool is_one(Dim d) { return d.kind == DIM_CONST && d.n == 1; }

// Sums grad over the axes along which a tensor of shape `to` was broadcast,
// each run of adjacent such axes in one SUM over [axis, axis2].
static int unbroadcast(AD *a, int grad, const Shape *to) {
  Shape gs = shape(a, grad);
  if (shape_eq(&gs, to)) return grad;
  int lead = gs.rank - to->rank;
  for (int i = 0; i < gs.rank; i++) {
    int end = i - 1;
    while (end + 1 < gs.rank && (end + 1 < lead || (is_one(to->d[end + 1 - lead]) && !is_one(gs.d[end + 1])))) end++;
    if (end < i) continue;
    grad = emit(a, (Node){.op = OP_SUM, .nin = 1, .in = {grad}, .axis = i, .axis2 = end});
    i = end;
  }
  gs = shape(a, grad);
  return shape_eq(&gs, to) ? grad : reshape(a, grad, *to);
}

// Adds contribution c (of node x's shape after unbroadcasting) to adj[x].
static void accumulate(AD *a, int x, int c) {
  if (!a->needs[x]) return;
  Shape xs = shape(a, x);
  c = unbroadcast(a, c, &xs);
  a->adj[x] = a->adj[x] < 0 ? c : bin(a, OP_ADD, a->adj[x], c);
}

// ---- rules: n is the forward node, dy its adjoint ---------------------------

typedef void (*GradRule)(AD *a, const Node *n, int dy);
#define IN(k) (n->in[k])
#define OUT (n->id)

static void g_neg(AD *a, const Node *n, int dy) { accumulate(a, IN(0), un(a, OP_NEG, dy)); }
static void g_exp(AD *a, const Node *n, int dy) { accumulate(a, IN(0), bin(a, OP_MUL, dy, OUT)); }
static void g_log(AD *a, const Node *n, int dy) { accumulate(a, IN(0), bin(a, OP_DIV, dy, IN(0))); }
static void g_sqrt(AD *a, const Node *n, int dy) {  // d sqrt(x) = 1 / (2 sqrt(x))
  accumulate(a, IN(0), bin(a, OP_DIV, dy, bin(a, OP_MUL, OUT, cst(a, 2))));
}
static void g_tanh(AD *a, const Node *n, int dy) {  // 1 - tanh^2
  int sq = bin(a, OP_MUL, OUT, OUT);  // before the constant: nodes in one order on every compiler
  accumulate(a, IN(0), bin(a, OP_MUL, dy, bin(a, OP_SUB, cst(a, 1), sq)));
}
static void g_relu(AD *a, const Node *n, int dy) { accumulate(a, IN(0), bin(a, OP_MUL, dy, un(a, OP_STEP, IN(0)))); }
static void g_gelu(AD *a, const Node *n, int dy) { accumulate(a, IN(0), bin(a, OP_MUL, dy, un(a, OP_DGELU, IN(0)))); }
static void g_sigmoid(AD *a, const Node *n, int dy) {  // s (1 - s)
  int ds = bin(a, OP_MUL, OUT, bin(a, OP_SUB, cst(a, 1), OUT));
  accumulate(a, IN(0), bin(a, OP_MUL, dy, ds));
}
static void g_silu(AD *a, const Node *n, int dy) {  // s + x s (1 - s) = s (1 + x - y), s = sigmoid(x), y = x s
  int s = un(a, OP_SIGMOID, IN(0));
  int ds = bin(a, OP_MUL, s, bin(a, OP_SUB, bin(a, OP_ADD, cst(a, 1), IN(0)), OUT));
  accumulate(a, IN(0), bin(a, OP_MUL, dy, ds));
}
static void g_abs(AD *a, const Node *n, int dy) {  // sign(x) = step(x) - step(-x)
  int sign = bin(a, OP_SUB, un(a, OP_STEP, IN(0)), un(a, OP_STEP, un(a, OP_NEG, IN(0))));
  accumulate(a, IN(0), bin(a, OP_MUL, dy, sign));
}
static void g_softplus(AD *a, const Node *n, int dy) { accumulate(a, IN(0), bin(a, OP_MUL, dy, un(a, OP_SIGMOID, IN(0)))); }
static void g_erf(AD *a, const Node *n, int dy) {  // 2 / sqrt(pi) e^(-x^2)
  int e = un(a, OP_EXP, un(a, OP_NEG, bin(a, OP_MUL, IN(0), IN(0))));
  accumulate(a, IN(0), bin(a, OP_MUL, dy, bin(a, OP_MUL, e, cst(a, 2 / sqrt(M_PI)))));
}
static void g_rsqrt(AD *a, const Node *n, int dy) {  // -y^3 / 2
  int y3 = bin(a, OP_MUL, OUT, bin(a, OP_MUL, OUT, OUT));
  accumulate(a, IN(0), bin(a, OP_MUL, dy, bin(a, OP_MUL, y3, cst(a, -0.5))));
}
// maximum, minimum: dy to the operand that is taken, half to each at a tie
static void g_extremum(AD *a, const Node *n, int dy) {
  int tie = bin(a, OP_MUL, bin(a, OP_EQ, IN(0), IN(1)), cst(a, 0.5));
  for (int k = 0; k < 2; k++) {
    if (!a->needs[IN(k)]) continue;
    int other = IN(1 - k), wins = n->op == OP_MAXIMUM ? bin(a, OP_LT, other, IN(k)) : bin(a, OP_LT, IN(k), other);
    accumulate(a, IN(k), bin(a, OP_MUL, dy, bin(a, OP_ADD, wins, tie)));
  }
}
static void g_pow(AD *a, const Node *n, int dy) {  // d x^y = y x^(y - 1) dx + x^y log(x) dy
  if (a->needs[IN(0)]) {  // a constant y: y - 1 a constant too (pow's lowering multiplies for an integer)
    const Node *y = &a->g->nodes[IN(1)];
    int ym1 = y->op == OP_CONST ? cst(a, y->fval - 1) : bin(a, OP_SUB, IN(1), cst(a, 1));
    int d = bin(a, OP_MUL, IN(1), bin(a, OP_POW, IN(0), ym1));
    accumulate(a, IN(0), bin(a, OP_MUL, dy, d));
  }
  if (a->needs[IN(1)]) accumulate(a, IN(1), bin(a, OP_MUL, dy, bin(a, OP_MUL, OUT, un(a, OP_LOG, IN(0)))));
}
static void g_compare(AD *a, const Node *n, int dy) {  // piecewise constant: 0 almost everywhere
  (void)a, (void)n, (void)dy;
}
static void g_sin(AD *a, const Node *n, int dy) { accumulate(a, IN(0), bin(a, OP_MUL, dy, un(a, OP_COS, IN(0)))); }
static void g_cos(AD *a, const Node *n, int dy) {
  accumulate(a, IN(0), un(a, OP_NEG, bin(a, OP_MUL, dy, un(a, OP_SIN, IN(0)))));
}
static void g_add(AD *a, const Node *n, int dy) {
  accumulate(a, IN(0), dy);
  accumulate(a, IN(1), dy);
}
static void g_sub(AD *a, const Node *n, int dy) {
  accumulate(a, IN(0), dy);
  if (a->needs[IN(1)]) accumulate(a, IN(1), un(a, OP_NEG, dy));
}
static void g_mul(AD *a, const Node *n, int dy) {
  if (a->needs[IN(0)]) accumulate(a, IN(0), bin(a, OP_MUL, dy, IN(1)));
  if (a->needs[IN(1)]) accumulate(a, IN(1), bin(a, OP_MUL, dy, IN(0)));
}
static void g_div(AD *a, const Node *n, int dy) {  // d(x/y) = dx/y - (x/y) dy/y
  if (a->needs[IN(0)]) accumulate(a, IN(0), bin(a, OP_DIV, dy, IN(1)));
  if (a->needs[IN(1)]) accumulate(a, IN(1), un(a, OP_NEG, bin(a, OP_MUL, dy, bin(a, OP_DIV, OUT, IN(1)))));
}
static void g_sum(AD *a, const Node *n, int dy) { accumulate(a, IN(0), expand(a, dy, shape(a, IN(0)))); }
static void g_mean(AD *a, const Node *n, int dy) {
  Shape x = shape(a, IN(0));
  int e = expand(a, dy, x);
  int count = size_of(a, x.d[n->axis]);
  for (int i = n->axis + 1; i <= ir_reduce_end(n); i++) count = bin(a, OP_MUL, count, size_of(a, x.d[i]));
  accumulate(a, IN(0), bin(a, OP_DIV, e, count));
}
static void g_max(AD *a, const Node *n, int dy) {  // to every maximal entry (ties each get dy)
  int e = expand(a, dy, shape(a, IN(0)));
  accumulate(a, IN(0), bin(a, OP_MUL, e, bin(a, OP_EQ, IN(0), OUT)));
}
static void g_matmul(AD *a, const Node *n, int dy) {  // dX = dY Y^T, dY = X^T dY
  if (a->needs[IN(0)]) accumulate(a, IN(0), bin(a, OP_MATMUL, dy, transpose_last(a, IN(1))));
  if (a->needs[IN(1)]) accumulate(a, IN(1), bin(a, OP_MATMUL, transpose_last(a, IN(0)), dy));
}
static void g_transpose(AD *a, const Node *n, int dy) {
  accumulate(a, IN(0), emit(a, (Node){.op = OP_TRANSPOSE, .nin = 1, .in = {dy}, .axis = n->axis, .axis2 = n->axis2}));
}
static void g_reshape(AD *a, const Node *n, int dy) { accumulate(a, IN(0), reshape(a, dy, shape(a, IN(0)))); }
static void g_slice(AD *a, const Node *n, int dy) {
  accumulate(a, IN(0), emit(a, (Node){.op = OP_PAD, .nin = 1, .in = {dy}, .axis = n->axis, .start = n->start,
                                       .shape = shape(a, IN(0))}));
}
static void g_concat(AD *a, const Node *n, int dy) {
  Dim first = shape(a, IN(0)).d[n->axis], second = shape(a, IN(1)).d[n->axis];
  if (a->needs[IN(0)])
    accumulate(a, IN(0), emit(a, (Node){.op = OP_SLICE, .nin = 1, .in = {dy}, .axis = n->axis, .len = first}));
  if (a->needs[IN(1)])
    accumulate(a, IN(1), emit(a, (Node){.op = OP_SLICE, .nin = 1, .in = {dy}, .axis = n->axis, .start = first.n,
                                         .len = second}));
}
static void g_embed(AD *a, const Node *n, int dy) {  // rows of dW gather dy by token id
  Dim v = shape(a, IN(0)).d[0];
  accumulate(a, IN(0), emit(a, (Node){.op = OP_SCATTER_ADD, .nin = 2, .in = {dy, IN(1)}, .len = v}));
}
static void g_softmax(AD *a, const Node *n, int dy) {  // y o (dy - sum(dy o y))
  int s = reduce(a, OP_SUM, bin(a, OP_MUL, dy, OUT), n->axis);
  accumulate(a, IN(0), bin(a, OP_MUL, OUT, bin(a, OP_SUB, dy, s)));
}
static void g_layernorm(AD *a, const Node *n, int dy) {
  // xhat = (x - mu) / sigma, sigma = sqrt(var + eps) (biased variance);
  // db = sum dy, dg = sum dy o xhat (the rows of LAYERNORM_DYXH summed by
  // unbroadcast), dx (LAYERNORM_DX):
  // (dxhat - mean(dxhat) - xhat o mean(dxhat o xhat)) / sigma, dxhat = dy o g
  if (a->needs[IN(2)]) accumulate(a, IN(2), dy);
  if (a->needs[IN(1)])
    accumulate(a, IN(1), emit(a, (Node){.op = OP_LAYERNORM_DYXH, .nin = 2, .in = {IN(0), dy}, .fval = n->fval}));
  if (a->needs[IN(0)])
    accumulate(a, IN(0), emit(a, (Node){.op = OP_LAYERNORM_DX, .nin = 3, .in = {IN(0), IN(1), dy}, .fval = n->fval}));
}
static void g_rmsnorm(AD *a, const Node *n, int dy) {
  // xhat = x / sigma, sigma = sqrt(mean(x^2) + eps); dg = sum dy o xhat
  // (RMSNORM_DYXH summed), dx = (dxhat - xhat o mean(dxhat o xhat)) / sigma (RMSNORM_DX)
  if (a->needs[IN(1)])
    accumulate(a, IN(1), emit(a, (Node){.op = OP_RMSNORM_DYXH, .nin = 2, .in = {IN(0), dy}, .fval = n->fval}));
  if (a->needs[IN(0)])
    accumulate(a, IN(0), emit(a, (Node){.op = OP_RMSNORM_DX, .nin = 3, .in = {IN(0), IN(1), dy}, .fval = n->fval}));
}
static void g_causal_mask(AD *a, const Node *n, int dy) {  // masked entries are constants
  accumulate(a, IN(0), emit(a, (Node){.op = OP_CAUSAL_MASK, .nin = 1, .in = {dy}, .fval = 0}));
}
static void g_causal_conv(AD *a, const Node *n, int dy) {
  if (a->needs[IN(0)]) accumulate(a, IN(0), bin(a, OP_CONV_DX, dy, IN(1)));
  if (a->needs[IN(1)])
    accumulate(a, IN(1), emit(a, (Node){.op = OP_CONV_DW, .nin = 2, .in = {IN(0), dy}, .conv = n->conv,
                                         .len = shape(a, IN(1)).d[0]}));
}
// h = SCAN(a, b): g = SCAN_REV(a, dy) is dL/dh with the future's terms;
// db = g, da_t = g_t o h_{t-1}.
static void g_scan(AD *a, const Node *n, int dy) {
  int g = emit(a, (Node){.op = OP_SCAN_REV, .nin = 2, .in = {IN(0), dy}, .axis = n->axis});
  accumulate(a, IN(1), g);
  if (a->needs[IN(0)])
    accumulate(a, IN(0), bin(a, OP_MUL, g, emit(a, (Node){.op = OP_SHIFT, .nin = 1, .in = {OUT}, .axis = n->axis, .start = 1})));
}
static void g_shift(AD *a, const Node *n, int dy) {
  accumulate(a, IN(0), emit(a, (Node){.op = OP_SHIFT, .nin = 1, .in = {dy}, .axis = n->axis, .start = -n->start}));
}
static void g_dropout(AD *a, const Node *n, int dy) {  // the same mask, the same scale 1/(1-p)
  accumulate(a, IN(0), emit(a, (Node){.op = OP_DROPOUT, .nin = 1, .in = {dy}, .fval = n->fval, .seed = n->seed}));
}
// (softmax - onehot) dy / N, the softmax e^(x - L) from the rows' log-sum-exp
// L (CROSS_ENTROPY_LSE, which the forward's kernel writes): one pass over
// the logits, not three.
static void g_cross_entropy(AD *a, const Node *n, int dy) {
  Shape x = shape(a, IN(0)), ids = shape(a, IN(1));
  int count = -1;
  for (int i = 0; i < ids.rank; i++) {
    int s = size_of(a, ids.d[i]);
    count = count < 0 ? s : bin(a, OP_MUL, count, s);
  }
  int scale = count < 0 ? dy : bin(a, OP_DIV, dy, count);
  int lse = un(a, OP_CROSS_ENTROPY_LSE, IN(0));
  int p = un(a, OP_EXP, bin(a, OP_SUB, IN(0), lse));
  int onehot = emit(a, (Node){.op = OP_ONEHOT, .nin = 1, .in = {IN(1)}, .len = x.d[x.rank - 1]});
  accumulate(a, IN(0), bin(a, OP_MUL, bin(a, OP_SUB, p, onehot), scale));
}
// Fused attention (fuse_attention.c): one ATTENTION_GRAD node recomputes the
// probabilities row by row from the rows' log-sum-exp L (ATTENTION_LSE, which
// the forward's kernel writes) and the output o, and yields dq | dk | dv along
// the last axis; a
// score bias that takes a gradient gets ATTENTION_DBIAS's, which recomputes
// them once more (db = sum over the sequences sharing b of P o (dP - D)).
static void g_attention(AD *a, const Node *n, int dy) {
  Shape qs = shape(a, IN(0)), vs = shape(a, IN(2));
  int r = qs.rank;
  int64_t h = qs.d[r - 1].n, e = vs.d[r - 1].n;
  int bi = ir_attention_bias(n);
  int lse = emit(a, (Node){.op = OP_ATTENTION_LSE, .nin = n->nin, .in = {IN(0), IN(1), IN(2), bi >= 0 ? IN(bi) : 0},
                           .fval = n->fval, .axis = n->axis, .start = n->start});
  int gr = emit(a, (Node){.op = OP_ATTENTION_GRAD, .nin = bi >= 0 ? 7 : 6, .in = {IN(0), IN(1), IN(2), dy, lse, n->id, bi >= 0 ? IN(bi) : 0},
                          .fval = n->fval, .axis = n->axis, .start = n->start});
  int64_t start[3] = {0, h, 2 * h}, len[3] = {h, h, e};
  for (int k = 0; k < 3; k++)
    if (a->needs[IN(k)])
      accumulate(a, IN(k), emit(a, (Node){.op = OP_SLICE, .nin = 1, .in = {gr}, .axis = r - 1, .start = start[k],
                                          .len = {DIM_CONST, len[k]}}));
  if (bi >= 0 && a->needs[IN(bi)])
    accumulate(a, IN(bi), emit(a, (Node){.op = OP_ATTENTION_DBIAS, .nin = 5, .in = {IN(0), IN(1), IN(2), dy, IN(bi)},
                                         .fval = n->fval, .axis = n->axis, .start = n->start}));
}
// SCAN_READ (fuse_scan.c): one SCAN_READ_GRAD node recomputes the states and
// yields dq | dk | dv along its last axis; da from the identity of ir.h,
//   c_s = sum_{t >= s} (q_t o dq_t - k_t o dk_t) = SCAN_REV(1, .),  da = c / a,
// and 0 where a = 0 (fuse_scan fuses only where that is the true product of
// the chain rule: a decay that is exp(.) or sigmoid(.), or needs no gradient).
static void g_scan_read(AD *a, const Node *n, int dy) {
  Shape ks = shape(a, IN(1)), vs = shape(a, IN(2));
  int r = ks.rank;
  int64_t dk = ks.d[r - 2].n, dv = vs.d[r - 1].n;
  int gr = emit(a, (Node){.op = OP_SCAN_READ_GRAD, .nin = 5, .in = {IN(0), IN(1), IN(2), IN(3), dy}, .axis = n->axis});
  int64_t start[3] = {0, dk, 2 * dk}, len[3] = {dk, dk, dv};
  int part[3] = {-1, -1, -1};
  bool want[3] = {a->needs[IN(0)] || a->needs[IN(3)], a->needs[IN(1)] || a->needs[IN(3)], a->needs[IN(2)]};
  for (int k = 0; k < 3; k++) {
    if (!want[k]) continue;
    int sl = emit(a, (Node){.op = OP_SLICE, .nin = 1, .in = {gr}, .axis = r - 2, .start = start[k], .len = {DIM_CONST, len[k]}});
    part[k] = reshape(a, sl, k < 2 ? ks : vs);
    accumulate(a, IN(k), part[k]);
  }
  if (!a->needs[IN(3)]) return;
  int x1 = bin(a, OP_MUL, IN(1), part[1]);  // nodes made in sequence: one order on every compiler
  int x = bin(a, OP_SUB, bin(a, OP_MUL, IN(0), part[0]), x1);
  int c = emit(a, (Node){.op = OP_SCAN_REV, .nin = 2, .in = {cst(a, 1), x}, .axis = n->axis});
  int zero = bin(a, OP_EQ, IN(3), cst(a, 0));
  int keep = bin(a, OP_SUB, cst(a, 1), zero);
  int da = bin(a, OP_MUL, bin(a, OP_DIV, c, bin(a, OP_ADD, IN(3), zero)), keep);
  accumulate(a, IN(3), da);
}
// y_r = x_r w[e_r]: dx_r = dy_r w[e_r]^T (routed by the same ids through the
// transposed weights), dw[e] = sum over e's rows of x_r^T dy_r; the ids take
// none (piecewise constant)
static void g_routed_matmul(AD *a, const Node *n, int dy) {
  if (a->needs[IN(0)]) {
    int wt = emit(a, (Node){.op = OP_TRANSPOSE, .nin = 1, .in = {IN(1)}, .axis = 1, .axis2 = 2});
    accumulate(a, IN(0), emit(a, (Node){.op = OP_ROUTED_MATMUL, .nin = 3, .in = {dy, wt, IN(2)}}));
  }
  if (a->needs[IN(1)])
    accumulate(a, IN(1), emit(a, (Node){.op = OP_ROUTED_MATMUL_DW, .nin = 3, .in = {IN(0), dy, IN(2)},
                                         .len = shape(a, IN(1)).d[0]}));
}
static void g_param(AD *a, const Node *n, int dy) { (void)a, (void)n, (void)dy; }

static const GradRule rules[OP_COUNT] = {
    [OP_PARAM] = g_param,
    [OP_NEG] = g_neg, [OP_EXP] = g_exp, [OP_LOG] = g_log, [OP_SQRT] = g_sqrt, [OP_TANH] = g_tanh,
    [OP_RELU] = g_relu, [OP_GELU] = g_gelu, [OP_SIGMOID] = g_sigmoid, [OP_SILU] = g_silu, [OP_ABS] = g_abs, [OP_SOFTPLUS] = g_softplus, [OP_ERF] = g_erf, [OP_RSQRT] = g_rsqrt,
    [OP_MAXIMUM] = g_extremum, [OP_MINIMUM] = g_extremum, [OP_POW] = g_pow, [OP_SIN] = g_sin, [OP_COS] = g_cos,
    [OP_ADD] = g_add, [OP_SUB] = g_sub, [OP_MUL] = g_mul, [OP_DIV] = g_div,
    [OP_EQ] = g_compare, [OP_LT] = g_compare, [OP_LE] = g_compare,
    [OP_SUM] = g_sum, [OP_MEAN] = g_mean, [OP_MAX] = g_max,
    [OP_MATMUL] = g_matmul,
    [OP_TRANSPOSE] = g_transpose, [OP_RESHAPE] = g_reshape, [OP_SLICE] = g_slice, [OP_CONCAT] = g_concat,
    [OP_EMBED] = g_embed,
    [OP_SOFTMAX] = g_softmax, [OP_LAYERNORM] = g_layernorm, [OP_RMSNORM] = g_rmsnorm, [OP_CAUSAL_MASK] = g_causal_mask,
    [OP_CAUSAL_CONV] = g_causal_conv, [OP_DROPOUT] = g_dropout, [OP_CROSS_ENTROPY] = g_cross_entropy,
    [OP_ATTENTION] = g_attention,
    [OP_SCAN] = g_scan, [OP_SHIFT] = g_shift, [OP_SCAN_READ] = g_scan_read,
    [OP_ROUTED_MATMUL] = g_routed_matmul,
};

bool autodiff_has_rule(OpKind op) { return op < OP_COUNT && rules[op] != NULL; }

bool autodiff(Graph *g, char *err, size_t errlen) {
  int loss = -1;
  for (int o = 0; o < g->noutputs; o++)
    if (!strcmp(g->outputs[o].name, "loss")) loss = g->outputs[o].node;
  if (loss < 0 || g->nodes[loss].shape.rank != 0) {
    snprintf(err, errlen, "autodiff needs a scalar output 'loss'");
    return false;
  }
  if (g->nforward) {
    snprintf(err, errlen, "the graph already has a backward pass");
    return false;
  }
  int nfwd = g->nnodes;
  AD a = {g, calloc((size_t)nfwd, sizeof(int)), calloc((size_t)nfwd, sizeof(bool)), loss, err, errlen, false};
  if (!a.adj || !a.needs) {
    free(a.adj), free(a.needs);
    snprintf(err, errlen, "out of memory");
    return false;
  }
  for (int i = 0; i < nfwd; i++) {
    const Node *n = &g->nodes[i];
    a.adj[i] = -1;
    a.needs[i] = n->op == OP_PARAM;
    for (int k = 0; k < n->nin && !ir_grad_zero(n->op); k++) a.needs[i] |= a.needs[n->in[k]];
  }
  a.adj[loss] = cst(&a, 1);
  for (int i = loss; i >= 0 && !a.failed; i--) {
    if (a.adj[i] < 0 || !a.needs[i]) continue;
    Node n = g->nodes[i];  // a copy: emitting may move the node array
    if (!ir_op_info[n.op].differentiable || !rules[n.op]) {
      a.failed = true;
      snprintf(err, errlen, "internal error: no gradient rule for op '%s'", ir_op_info[n.op].name);
      break;
    }
    a.cur = i;
    rules[n.op](&a, &n, a.adj[i]);
  }
  for (int i = 0; i < nfwd && !a.failed; i++) {
    const Node *p = &g->nodes[i];
    if (p->op != OP_PARAM) continue;
    const char *name = arena_printf(g->arena, "grad.%s", p->name);
    int grad = a.adj[i];
    if (grad < 0) {  // the parameter does not reach the loss
      a.cur = i;
      Shape ps = g->nodes[i].shape;
      grad = expand(&a, cst(&a, 0), ps);
    }
    ir_output_add(g, name, grad);
  }
  free(a.adj);
  free(a.needs);
  g->nforward = nfwd;
  return !a.failed;
}
