// builtins.c: the language's built-in functions (the table the names
// resolve to, and each one's elaboration into graph nodes).
#include "elab_impl.h"

#include <math.h>
#include <string.h>

// The trailing arguments of builtin b that may be left out: topk's axis.
static int builtin_opt(BuiltinKind k) { return k == BI_TOPK; }

// The elementwise unary ops come from the op table; those without IR_P_CALL
// (neg, the gradients' step and dgelu) are not callable by name.
#define BI_OPC_UNARY(name, text) {text, BI_UNARY, OP_##name, 1, text "(x)"},
#define BI_OPC_LEAF(name, text)
#define BI_OPC_BINARY(name, text) {text, BI_BINARY, OP_##name, 2, text "(x, y)"},
#define BI_OPC_REDUCE(name, text)
#define BI_OPC_MATMUL(name, text)
#define BI_OPC_MOVE(name, text)
#define BI_OPC_NN(name, text)
#define X(name, text, nin, cat, diff, props, cost) BI_##cat(name, text)
const Builtin el_builtins[] = {
    IR_OPS(X)
#undef X
    {"sum", BI_REDUCE, OP_SUM, 2, "sum(x, axis)"},
    {"mean", BI_REDUCE, OP_MEAN, 2, "mean(x, axis)"},
    {"max", BI_REDUCE, OP_MAX, 2, "max(x, axis)"},
    {"softmax", BI_SOFTMAX, OP_SOFTMAX, 2, "softmax(x, axis)"},
    {"layernorm", BI_LAYERNORM, OP_LAYERNORM, 4, "layernorm(x, gain, bias, eps)"},
    {"rmsnorm", BI_RMSNORM, OP_RMSNORM, 3, "rmsnorm(x, gain, eps)"},
    {"causal_mask", BI_CAUSAL_MASK, OP_CAUSAL_MASK, 1, "causal_mask(scores)"},
    {"causal_conv", BI_CAUSAL_CONV, OP_CAUSAL_CONV, 2, "causal_conv(x, kernel)"},
    {"scan", BI_SCAN, OP_SCAN, 3, "scan(decay, x, axis)"},
    {"shift", BI_SHIFT, OP_SHIFT, 3, "shift(x, axis, steps)"},
    {"embed", BI_EMBED, OP_EMBED, 2, "embed(table, ids)"},
    {"routed_matmul", BI_ROUTED, OP_ROUTED_MATMUL, 3, "routed_matmul(x, weights, ids)"},
    {"topk", BI_TOPK, OP_TOPK, 3, "topk(x, k, axis = -1)"},
    {"dropout", BI_DROPOUT, OP_DROPOUT, 2, "dropout(x, p)"},
    {"transpose", BI_TRANSPOSE, OP_TRANSPOSE, 3, "transpose(x, axis1, axis2)"},
    {"reshape", BI_RESHAPE, OP_RESHAPE, 2, "reshape(x, [sizes])"},
    {"slice", BI_SLICE, OP_SLICE, 4, "slice(x, axis, start, length)"},
    {"concat", BI_CONCAT, OP_CONCAT, 3, "concat(x, y, axis)"},
    {"iota", BI_IOTA, OP_IOTA, 1, "iota(n)"},
    {"cross_entropy", BI_CROSS_ENTROPY, OP_CROSS_ENTROPY, 2, "cross_entropy(logits, targets)"},
    {"dim", BI_DIM, OP_COUNT, 2, "dim(x, axis)"},
    {"side", BI_SIDE, OP_COUNT, 1, "side(\"name\")"},
    {"one_hot", BI_ONE_HOT, OP_COUNT, 2, "one_hot(ids, n)"},
    {"gather", BI_GATHER, OP_COUNT, 3, "gather(x, ids, axis)"},
    {"scatter_add", BI_SCATTER, OP_COUNT, 4, "scatter_add(x, ids, n, axis)"},
    {"normal", BI_INIT, OP_COUNT, 2, "normal(mean, std)"},
    {"uniform", BI_INIT, OP_COUNT, 2, "uniform(low, high)"},
    {"zeros", BI_INIT, OP_COUNT, 0, "zeros"},
    {"ones", BI_INIT, OP_COUNT, 0, "ones"},
    {"constant", BI_INIT, OP_COUNT, 1, "constant(value)"},
    {"trunc_normal", BI_INIT, OP_COUNT, 2, "trunc_normal(mean, std)"},
    {"B", BI_SIZE, OP_COUNT, 0, "B"},
    {"T", BI_SIZE, OP_COUNT, 0, "T"},
};
const int el_nbuiltins = sizeof el_builtins / sizeof el_builtins[0];

bool el_callable(const Builtin *b) {
  return (b->kind != BI_UNARY && b->kind != BI_BINARY) || (ir_op_info[b->op].props & IR_P_CALL);
}

int el_find_builtin(const char *name) {
  for (int i = 0; i < el_nbuiltins; i++)
    if (el_callable(&el_builtins[i]) && !strcmp(el_builtins[i].name, name)) return i;
  return -1;
}

// ids [...] -> [..., n], 1 where the id is the class: the onehot op of token
// ids, else (float ids) reshape(ids, [..., 1]) == iota(n).
static int one_hot(Elab *E, int x, Dim n, Loc at, Loc loc) {
  const Node *xn = &E->g->nodes[x];
  if (xn->dtype == DT_I32) return el_add_node(E, (Node){.op = OP_ONEHOT, .nin = 1, .in = {x}, .len = n}, loc);
  Shape col = xn->shape;
  if (col.rank == IR_MAX_RANK) el_err(E, at, "one_hot of a tensor of rank %d: at most %d", col.rank, IR_MAX_RANK - 1);
  col.d[col.rank++] = (Dim){DIM_CONST, 1};
  int r = el_add_node(E, (Node){.op = OP_RESHAPE, .nin = 1, .in = {x}, .shape = col}, loc);
  int io = el_add_node(E, (Node){.op = OP_IOTA, .len = n}, loc);
  return el_add_node(E, (Node){.op = OP_EQ, .nin = 2, .in = {r, io}}, loc);
}

// x with axis and its last axis swapped (x itself when axis is the last):
// ops along the last axis applied along another, and undone the same way.
static int swap_last(Elab *E, int x, int axis, Loc loc) {
  int last = E->g->nodes[x].shape.rank - 1;
  return axis == last ? x : el_add_node(E, (Node){.op = OP_TRANSPOSE, .nin = 1, .in = {x}, .axis = axis, .axis2 = last}, loc);
}

Value el_call_builtin(Elab *E, const Builtin *bi, Value *a, const Expr **ax, int n, Loc loc, Ctx ctx) {
  if (n > bi->nargs || n < bi->nargs - builtin_opt(bi->kind)) {
    if (builtin_opt(bi->kind))
      el_err(E, loc, "'%s' takes %d to %d arguments: %s", bi->name, bi->nargs - builtin_opt(bi->kind), bi->nargs, bi->usage);
    el_err(E, loc, "'%s' takes %d argument%s: %s", bi->name, bi->nargs, bi->nargs == 1 ? "" : "s", bi->usage);
  }
  if (bi->kind == BI_UNARY && is_number(a[0])) {
    double r = ir_eval_unary(bi->op, num(a[0]));
    if (!isfinite(r)) el_err(E, loc, "%s(%g) is not a finite number", bi->name, num(a[0]));
    return vfloat(r);
  }
  if (bi->kind == BI_BINARY && is_number(a[0]) && is_number(a[1])) {
    double r = ir_eval_binary(bi->op, num(a[0]), num(a[1]));
    if (!isfinite(r)) el_err(E, loc, "%s(%g, %g) is not a finite number", bi->name, num(a[0]), num(a[1]));
    return vfloat(r);
  }
  if (ctx == CTX_BUILD)
    el_err(E, loc, "'%s' makes a tensor, which only a forward body can do", bi->name);
  Node nd = {.op = bi->op, .nin = 1};
  switch (bi->kind) {
  case BI_BINARY:
    nd.nin = 2;
    for (int i = 0; i < 2; i++) nd.in[i] = el_want_tensor(E, a[i], ax[i]->loc, "the argument");
    break;
  case BI_UNARY:
  case BI_CAUSAL_MASK:
    nd.in[0] = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    nd.fval = bi->kind == BI_CAUSAL_MASK ? -INFINITY : 0;
    break;
  case BI_REDUCE:
  case BI_SOFTMAX:
    nd.in[0] = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    nd.axis = el_want_axis(E, a[1], ax[1]->loc);
    break;
  case BI_LAYERNORM:
    nd.nin = 3;
    for (int i = 0; i < 3; i++) nd.in[i] = el_want_tensor_strict(E, a[i], ax[i]->loc, "each of x, gain and bias");
    nd.fval = el_want_number(E, a[3], ax[3]->loc, "epsilon");
    if (!(nd.fval > 0)) el_err(E, ax[3]->loc, "epsilon must be positive, got %g", nd.fval);
    break;
  case BI_RMSNORM:
    nd.nin = 2;
    for (int i = 0; i < 2; i++) nd.in[i] = el_want_tensor_strict(E, a[i], ax[i]->loc, "each of x and gain");
    nd.fval = el_want_number(E, a[2], ax[2]->loc, "epsilon");
    if (!(nd.fval > 0)) el_err(E, ax[2]->loc, "epsilon must be positive, got %g", nd.fval);
    break;
  case BI_CAUSAL_CONV:
  case BI_EMBED:
  case BI_CROSS_ENTROPY:
    nd.nin = 2;
    for (int i = 0; i < 2; i++) nd.in[i] = el_want_tensor_strict(E, a[i], ax[i]->loc, "the argument");
    break;
  case BI_ROUTED:
    nd.nin = 3;
    nd.in[0] = el_want_tensor_strict(E, a[0], ax[0]->loc, "the rows");
    nd.in[1] = el_want_tensor_strict(E, a[1], ax[1]->loc, "the weights");
    nd.in[2] = el_want_tensor_strict(E, a[2], ax[2]->loc, "the ids");
    break;
  case BI_TOPK: {  // along the last axis; another axis moved last and back
    int x = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument"), r = E->g->nodes[x].shape.rank;
    Dim k = el_want_size(E, a[1], ax[1]->loc, "k");
    if (k.kind != DIM_CONST) el_err(E, ax[1]->loc, "topk needs a fixed k");
    int axis = n > 2 ? ir_norm_axis(el_want_axis(E, a[2], ax[2]->loc), r) : r - 1;
    if (axis < 0) el_err(E, ax[2]->loc, "axis %lld is out of range for a tensor of rank %d", (long long)a[2].i, r);
    int t = el_add_node(E, (Node){.op = OP_TOPK, .nin = 1, .in = {swap_last(E, x, axis, loc)}, .len = k}, loc);
    return vtensor(swap_last(E, t, axis, loc));
  }
  case BI_SCAN:  // h_t = a_t o h_{t-1} + b_t along axis; a broadcasts to b's shape
    nd.nin = 2;
    nd.in[0] = el_want_tensor(E, a[0], ax[0]->loc, "the decay");
    nd.in[1] = el_want_tensor_strict(E, a[1], ax[1]->loc, "the input");
    nd.axis = el_want_axis(E, a[2], ax[2]->loc);
    break;
  case BI_SHIFT: {
    nd.in[0] = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    nd.axis = el_want_axis(E, a[1], ax[1]->loc);
    nd.start = el_want_int(E, a[2], ax[2]->loc, "the number of steps");
    if (nd.start < -(1 << 30) || nd.start > (1 << 30)) el_err(E, ax[2]->loc, "shift by %lld steps is out of range", (long long)nd.start);
    break;
  }
  case BI_DROPOUT: {
    int x = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    double p = el_want_number(E, a[1], ax[1]->loc, "the dropout probability");
    if (!(p >= 0 && p < 1)) el_err(E, ax[1]->loc, "the dropout probability must be in [0, 1), got %g", p);
    if (p == 0) return vtensor(x);
    nd.in[0] = x, nd.fval = p, nd.seed = ++E->ndropout;
    break;
  }
  case BI_TRANSPOSE:
    nd.in[0] = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    nd.axis = el_want_axis(E, a[1], ax[1]->loc);
    nd.axis2 = el_want_axis(E, a[2], ax[2]->loc);
    break;
  case BI_RESHAPE:
    nd.in[0] = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    if (a[1].kind != V_SHAPE) el_err(E, ax[1]->loc, "reshape needs a shape such as [B, T, 4, 32], not %s", el_kind_name(a[1].kind));
    nd.shape = a[1].shape;
    break;
  case BI_SLICE: {
    nd.in[0] = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    nd.axis = el_want_axis(E, a[1], ax[1]->loc);
    nd.start = el_want_int(E, a[2], ax[2]->loc, "the start");
    nd.len = el_want_size(E, a[3], ax[3]->loc, "the length");
    break;
  }
  case BI_CONCAT:
    nd.nin = 2;
    nd.in[0] = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    nd.in[1] = el_want_tensor_strict(E, a[1], ax[1]->loc, "the argument");
    nd.axis = el_want_axis(E, a[2], ax[2]->loc);
    break;
  case BI_IOTA:
    nd.nin = 0;
    nd.len = el_want_size(E, a[0], ax[0]->loc, "the length");  // add_node bounds its size
    break;
  case BI_ONE_HOT: {  // ids [...] -> [..., n]: 1 where the id is the class, no gradient
    int x = el_want_tensor_strict(E, a[0], ax[0]->loc, "the ids");
    Dim n = el_want_size(E, a[1], ax[1]->loc, "the number of classes");
    if (n.kind != DIM_CONST) el_err(E, ax[1]->loc, "one_hot needs a fixed number of classes");
    return vtensor(one_hot(E, x, n, ax[0]->loc, loc));
  }
  case BI_GATHER:
  case BI_SCATTER: {
    // gather(x, ids, axis): out[.., j, ..] = x[.., ids[.., j, ..], ..] along
    // axis (as torch.gather; ids' other axes broadcast against x's);
    // scatter_add(x, ids, n, axis): out[.., c, ..] = sum over j with
    // ids[.., j, ..] = c of x[.., j, ..], n places. Both as sums of one_hot
    // masks with the axis moved last: n k products per row (its classes n
    // against its k ids), so for a few classes (experts, chunks, buckets)
    // rather than a vocabulary; the gradient flows to x (the masks take none)
    bool g = bi->kind == BI_GATHER;
    int x = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    int ids = el_want_tensor_strict(E, a[1], ax[1]->loc, "the ids");
    int axarg = g ? 2 : 3;
    int r = E->g->nodes[x].shape.rank;
    int axis = ir_norm_axis(el_want_axis(E, a[axarg], ax[axarg]->loc), r);
    if (axis < 0) el_err(E, ax[axarg]->loc, "axis %lld is out of range for a tensor of rank %d", (long long)a[axarg].i, r);
    if (E->g->nodes[ids].shape.rank != r)
      el_err(E, ax[1]->loc, "%s needs ids of x's rank %d, got rank %d", bi->name, r, E->g->nodes[ids].shape.rank);
    if (r + 1 > IR_MAX_RANK) el_err(E, ax[0]->loc, "%s of a tensor of rank %d: at most %d", bi->name, r, IR_MAX_RANK - 1);
    Dim n = g ? E->g->nodes[x].shape.d[axis] : el_want_size(E, a[2], ax[2]->loc, "the number of places");
    if (n.kind != DIM_CONST) el_err(E, g ? ax[0]->loc : ax[2]->loc, "%s needs a fixed size along the axis", bi->name);
    x = swap_last(E, x, axis, loc);  // the axis last
    ids = swap_last(E, ids, axis, loc);
    int oh = one_hot(E, ids, n, ax[1]->loc, loc);  // [.., k, n]
    Shape xs = E->g->nodes[x].shape, s = xs;
    if (g) s.d[r - 1] = (Dim){DIM_CONST, 1}, s.d[r] = n;  // x [.., n] as [.., 1, n]
    else s.d[r] = (Dim){DIM_CONST, 1};                    // x [.., k] as [.., k, 1]
    s.rank = r + 1;
    int xr = el_add_node(E, (Node){.op = OP_RESHAPE, .nin = 1, .in = {x}, .shape = s}, loc);
    int m = el_add_node(E, (Node){.op = OP_MUL, .nin = 2, .in = {oh, xr}}, loc);
    int sum = el_add_node(E, (Node){.op = OP_SUM, .nin = 1, .in = {m}, .axis = g ? r : r - 1, .axis2 = g ? r : r - 1}, loc);
    Shape o = E->g->nodes[sum].shape;
    if (!g) o.d[r - 1] = o.d[r];
    o.rank = r;
    int out = el_add_node(E, (Node){.op = OP_RESHAPE, .nin = 1, .in = {sum}, .shape = o}, loc);
    return vtensor(swap_last(E, out, axis, loc));
  }
  case BI_SIDE: {  // the sum of side outputs ax[0]->name, in the order returned
    if (ax[0]->kind != EX_STRING) el_err(E, ax[0]->loc, "side takes the side output's name in quotes: side(\"aux\")");
    int sum = -1;
    for (int i = 0; i < E->sides.n; i++) {
      const Side *o = E->sides.items[i];
      if (strcmp(o->name, ax[0]->name)) continue;
      sum = sum < 0 ? o->node : el_add_node(E, (Node){.op = OP_ADD, .nin = 2, .in = {sum, o->node}}, loc);
    }
    if (sum < 0) el_err(E, ax[0]->loc, "no block or function has returned a side output '%s' yet (`return y, %s: value`)", ax[0]->name, ax[0]->name);
    return vtensor(sum);
  }
  case BI_DIM: {
    int x = el_want_tensor_strict(E, a[0], ax[0]->loc, "the argument");
    const Shape *s = &E->g->nodes[x].shape;
    int axis = ir_norm_axis(el_want_axis(E, a[1], ax[1]->loc), s->rank);
    if (axis < 0) el_err(E, ax[1]->loc, "axis %lld is out of range for a tensor of rank %d", (long long)a[1].i, s->rank);
    Dim d = s->d[axis];
    return d.kind == DIM_CONST ? vint(d.n) : (Value){.kind = V_DIM, .dim = d};
  }
  case BI_INIT:
  case BI_SIZE:
    el_err(E, loc, "'%s' cannot be called", bi->name);
  }
  return vtensor(el_add_node(E, nd, loc));
}
