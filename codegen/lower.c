// lower.c: schedule kernel classes -> loop descriptions (loops.h).
//
// Requires: a Schedule (kernel.h) of a verified graph.
// Guarantees: for every kernel it describes, an LKernel computing the value
// of the reference interpreter (interp/interp.c) at every output element, in
// float32, whose outer extent is the schedule's (Kernel.outer; for an
// FG_MATMUL_MAP epilogue, the rows of the product) except where the form
// for the target sets its own (a GPU's attention, sums over rows and gain
// gradients: LKernel.nouter); NULL for the kernels left to the backends
// (loops.h) and for those computed in steps (lower_steps: the matrix-kind
// causal convolutions on a GPU, as chunked GEMMs). The scheduling choices
// made here, once for every backend and per target where they differ
// (LTarget): which kernels are elementwise
// (LK_ELEMENTS) and which work a row at a time (LK_ROWS), the loop order of
// each reduction, what a reduction over a row reuses (the statistics of
// softmax members, of layer norm, computed once per row), and a GPU's
// blocks: attention per (sequence, head), reductions over rows per column
// tile.
#include "loops.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "lower_impl.h"



// ---- elementwise maps --------------------------------------------------------------

// A map kernel's element: output shape os, row (variable), column j, flat
// index o = row * last + j; coordinates c[a] made on first use (LS_LET in
// the column loop); the value v[id] of each group member, once defined.
typedef struct {
  const Shape *os;
  int row, j, o;
  int c[IR_MAX_RANK];
  int *v;                   // [nnodes]: member id -> variable, -1 undefined
  int smx[KERNEL_MAX_IN], sinv[KERNEL_MAX_IN], sid[KERNEL_MAX_IN];  // softmax members' row statistics
  int nsmax;
} Map;

static bool member(Lo *L, int id) { return id == L->k->node || L->s->group[id] == L->k->node; }

static int leaf_slot(Lo *L, int id) {
  for (int i = 0; i < L->k->nin; i++)
    if (L->k->leaf[i] == id) return KS_IN0 + i;
  return -1;
}

// Coordinate a of the element (the column j for the last axis).
static LExpr *coord(Lo *L, Map *m, int a) {
  int r = m->os->rank;
  if (a == r - 1) return xvar(L, m->j);
  if (m->c[a] < 0) {
    LExpr *q = x2(L, LX_DIV, xvar(L, m->row), dprod(L, m->os, a + 1, r - 1));
    if (a > 0) q = x2(L, LX_REM, q, xdim(L, m->os->d[a]));
    m->c[a] = let(L, q, "c");
  }
  return xvar(L, m->c[a]);
}

static bool dim_one(Dim d) { return d.kind == DIM_CONST && d.n == 1; }

// The flat index of the element within output axes [k0, k1] (k1 the last
// of a run of axes x shares with the output): one division and remainder
// for the run, not one per axis (a division by T per element and axis was
// most of an expand's time).
static LExpr *run_coord(Lo *L, Map *m, int k0, int k1) {
  const Shape *os = m->os;
  int r = os->rank;
  if (k0 == k1) return coord(L, m, k0);
  if (k1 == r - 1) {  // (row % prod(os[k0 .. r-2])) * last + j
    LExpr *row = k0 > 0 ? x2(L, LX_REM, xvar(L, m->row), dprod(L, os, k0, r - 1)) : xvar(L, m->row);
    return iadd(L, imul(L, row, xdim(L, os->d[r - 1])), xvar(L, m->j));
  }
  LExpr *q = x2(L, LX_DIV, xvar(L, m->row), dprod(L, os, k1 + 1, r - 1));
  if (k0 > 0) q = x2(L, LX_REM, q, dprod(L, os, k0, k1 + 1));
  return q;
}

// Offset of x (shape xs) at the element, numpy-broadcast (axes aligned
// right): each run of axes x has whole (axes of size 1 in both belong to
// any run) indexed by one flat coordinate.
static LExpr *bcast_offset(Lo *L, Map *m, const Shape *xs) {
  const Shape *os = m->os;
  if (shape_eq(xs, os)) return xvar(L, m->o);
  LExpr *off = xi(L, 0), *stride = xi(L, 1);
  int r = os->rank, lead = r - xs->rank;
  for (int k = r - 1; k >= lead;) {
    if (dim_one(xs->d[k - lead])) {  // broadcast (or 1 in both): no coordinate
      k--;
      continue;
    }
    int k1 = k;
    LExpr *run = xi(L, 1);
    while (k >= lead && (!dim_one(xs->d[k - lead]) || dim_one(os->d[k]))) run = imul(L, run, xdim(L, xs->d[k - lead])), k--;
    int k0 = k + 1;
    while (k0 < k1 && dim_one(os->d[k0])) k0++;  // the run's outer axes of size 1 add nothing
    off = iadd(L, off, imul(L, run_coord(L, m, k0, k1), stride));
    stride = imul(L, stride, run);
  }
  return off;
}

// Offset of the element at coordinates c (c[a] for a != axis, c_axis at
// axis) in a row-major tensor of shape xs.
static LExpr *offset_at(Lo *L, Map *m, const Shape *xs, int axis, LExpr *c_axis, const int *perm) {
  LExpr *off = xi(L, 0), *stride = xi(L, 1);
  for (int k = xs->rank - 1; k >= 0; k--) {
    int oa = perm ? perm[k] : k;  // the output axis that indexes axis k of xs
    off = iadd(L, off, imul(L, oa == axis && c_axis ? c_axis : coord(L, m, oa), stride));
    stride = imul(L, stride, xdim(L, xs->d[k]));
  }
  return off;
}

static LExpr *map_value(Lo *L, Map *m, int id);

// Input i of member n at the element.
static LExpr *operand(Lo *L, Map *m, const Node *n, int i) {
  int id = n->in[i];
  if (member(L, id)) return map_value(L, m, id);
  int slot = leaf_slot(L, id);
  if (slot < 0) return unlowered(L, n), xf(L, 0);
  return load(L, slot, bcast_offset(L, m, &L->g->nodes[id].shape));
}

// The stored input i of move op n (a member reading a member has no lowering).
static int move_slot(Lo *L, const Node *n, int i) {
  int slot = member(L, n->in[i]) ? -1 : leaf_slot(L, n->in[i]);
  if (slot < 0) unlowered(L, n);
  return slot < 0 ? KS_IN0 : slot;
}

static LExpr *fbool(Lo *L, LExpr *c) { return xsel(L, c, xf(L, 1), xf(L, 0)); }

// The unary elementwise ops over the primitive ALU kinds.
static LExpr *unary(Lo *L, const Node *n, LExpr *x) {
  switch (n->op) {
  case OP_NEG: return x1(L, LX_NEG, x);
  case OP_EXP: return x1(L, LX_EXP, x);
  case OP_LOG: return x1(L, LX_LOG, x);
  case OP_SQRT: return x1(L, LX_SQRT, x);
  case OP_SIN: return x1(L, LX_SIN, x);
  case OP_COS: return x1(L, LX_COS, x);
  case OP_TANH: return x1(L, LX_TANH, x);
  case OP_RELU: return x2(L, LX_MAX, x, xf(L, 0));
  case OP_STEP: return fbool(L, x2(L, LX_GT, x, xf(L, 0)));
  case OP_SIGMOID: return x2(L, LX_DIV, xf(L, 1), x2(L, LX_ADD, xf(L, 1), x1(L, LX_EXP, x1(L, LX_NEG, x))));
  case OP_SILU: return x2(L, LX_DIV, x, x2(L, LX_ADD, xf(L, 1), x1(L, LX_EXP, x1(L, LX_NEG, x))));
  case OP_GELU:  // 0.5 x (1 + erf(x / sqrt 2))
    return x2(L, LX_MUL, x2(L, LX_MUL, xf(L, 0.5), x), x2(L, LX_ADD, xf(L, 1), x1(L, LX_ERF, x2(L, LX_MUL, x, xf(L, M_SQRT1_2)))));
  case OP_ABS: return xsel(L, x2(L, LX_LT, x, xf(L, 0)), x1(L, LX_NEG, x), x);
  case OP_FLOOR: {  // t = trunc(x), less 1 below a negative non-integer; |x| >= 2^23 is an integer (and inf, NaN)
    LExpr *t = x1(L, LX_TOF, x1(L, LX_TOI, x));
    LExpr *f = x2(L, LX_SUB, t, fbool(L, x2(L, LX_LT, x, t)));
    LExpr *big = x2(L, LX_GE, x2(L, LX_MAX, x, x1(L, LX_NEG, x)), xf(L, 8388608));
    return xsel(L, x2(L, LX_EQ, x, x), xsel(L, big, x, f), x);
  }
  case OP_SOFTPLUS:  // max(x, 0) + log(1 + e^(-|x|)): no overflow
    return x2(L, LX_ADD, x2(L, LX_MAX, x, xf(L, 0)),
              x1(L, LX_LOG, x2(L, LX_ADD, xf(L, 1), x1(L, LX_EXP, x1(L, LX_NEG, xsel(L, x2(L, LX_LT, x, xf(L, 0)), x1(L, LX_NEG, x), x))))));
  case OP_ERF: return x1(L, LX_ERF, x);
  case OP_RSQRT: return x2(L, LX_DIV, xf(L, 1), x1(L, LX_SQRT, x));
  case OP_STOP_GRADIENT: return x;
  case OP_DGELU: {  // Phi(x) + x phi(x)
    LExpr *Phi = x2(L, LX_MUL, xf(L, 0.5), x2(L, LX_ADD, xf(L, 1), x1(L, LX_ERF, x2(L, LX_MUL, x, xf(L, M_SQRT1_2)))));
    LExpr *phi = x2(L, LX_MUL, xf(L, 1 / sqrt(2 * M_PI)), x1(L, LX_EXP, x2(L, LX_MUL, xf(L, -0.5), x2(L, LX_MUL, x, x))));
    return x2(L, LX_ADD, Phi, x2(L, LX_MUL, x, phi));
  }
  default: return unlowered(L, n), xf(L, 0);
  }
}

static LExpr *binary(Lo *L, const Node *n, LExpr *x, LExpr *y) {
  switch (n->op) {
  case OP_ADD: return x2(L, LX_ADD, x, y);
  case OP_SUB: return x2(L, LX_SUB, x, y);
  case OP_MUL: return x2(L, LX_MUL, x, y);
  case OP_DIV: return x2(L, LX_DIV, x, y);
  case OP_EQ: return fbool(L, x2(L, LX_EQ, x, y));
  case OP_LT: return fbool(L, x2(L, LX_LT, x, y));
  case OP_LE: return fbool(L, x2(L, LX_GE, y, x));
  case OP_MAXIMUM: return xsel(L, x2(L, LX_LT, x, y), y, x);
  case OP_MINIMUM: return xsel(L, x2(L, LX_LT, y, x), y, x);
  case OP_POW: {  // a constant integer exponent |k| <= 16: products (any sign of x); else e^(y log x), x > 0
    const Node *yn = &L->g->nodes[n->in[1]];
    double k = yn->op == OP_CONST ? yn->fval : NAN;
    if (k == floor(k) && fabs(k) <= 16) {
      LExpr *r = xf(L, 1);
      for (int i = 0; i < (int)fabs(k); i++) r = i ? x2(L, LX_MUL, r, x) : x;
      return k < 0 ? x2(L, LX_DIV, xf(L, 1), r) : r;
    }
    return x1(L, LX_EXP, x2(L, LX_MUL, y, x1(L, LX_LOG, x)));
  }
  default: return unlowered(L, n), xf(L, 0);
  }
}

// The value of member id at the element: a variable defined before first use.
static LExpr *map_value(Lo *L, Map *m, int id) {
  if (m->v[id] >= 0) return xvar(L, m->v[id]);
  const Graph *g = L->g;
  const Node *n = &g->nodes[id];
  const Shape *xs = n->nin ? &g->nodes[n->in[0]].shape : NULL;
  int r = m->os->rank;
  LExpr *v;
  switch (n->op) {
  case OP_CONST: v = xf(L, n->fval); break;
  case OP_SIZE: v = x1(L, LX_TOF, xdim(L, n->len)); break;
  case OP_IOTA:  // positions along T count from the step program's frame's first (LX_POS0)
    v = x1(L, LX_TOF, n->len.kind == DIM_T ? iadd(L, coord(L, m, r - 1), ex(L, LX_POS0, LT_I64)) : coord(L, m, r - 1));
    break;
  case OP_EXPAND: v = operand(L, m, n, 0); break;
  case OP_MATMUL: v = load(L, KS_OUT, xvar(L, m->o)); break;  // the kernel's GEMM wrote it
  case OP_CAUSAL_MASK:
  {
    LExpr *x = operand(L, m, n, 0), *i = coord(L, m, r - 2);  // right to left: the order of the golden files
    v = xsel(L, x2(L, LX_GT, coord(L, m, r - 1), i), xf(L, n->fval), x);
  }
    break;
  case OP_ONEHOT: {
    int slot = move_slot(L, n, 0);
    v = fbool(L, x2(L, LX_EQ, load(L, slot, xvar(L, m->row)), coord(L, m, r - 1)));
    break;
  }
  case OP_DROPOUT: {  // keep where uniform(seed, stream, index, step) >= p, scaled by 1/(1-p)
    LExpr *x = operand(L, m, n, 0);
    L->lk->dropout = true;
    if (!L->train) {
      v = x;
      break;
    }
    // the global element index: o + row0 * (elements per batch row)
    LExpr *idx = xvar(L, m->o);
    if (n->shape.rank && n->shape.d[0].kind == DIM_B)
      idx = iadd(L, idx, imul(L, ex(L, LX_ROW0, LT_I64), dprod(L, &n->shape, 1, n->shape.rank)));
    LExpr *keep = x1(L, LX_KEEP, idx);
    keep->fval = n->fval;
    v = xsel(L, keep, x2(L, LX_MUL, x, xf(L, 1 / (1 - n->fval))), xf(L, 0));
    break;
  }
  case OP_SOFTMAX: {
    int i = 0;
    while (i < m->nsmax && m->sid[i] != id) i++;
    if (i == m->nsmax) return unlowered(L, n), xf(L, 0);
    LExpr *x = load(L, move_slot(L, n, 0), xvar(L, m->o));
    v = x2(L, LX_MUL, x1(L, LX_EXP, x2(L, LX_SUB, x, xvar(L, m->smx[i]))), xvar(L, m->sinv[i]));
    break;
  }
  case OP_TRANSPOSE: {  // out[.., c_axis, .., c_axis2, ..] = x[.., c_axis2, .., c_axis, ..]
    int perm[IR_MAX_RANK];
    for (int a = 0; a < r; a++) perm[a] = a;
    perm[n->axis] = n->axis2, perm[n->axis2] = n->axis;
    v = load(L, move_slot(L, n, 0), offset_at(L, m, xs, -1, NULL, perm));
    break;
  }
  case OP_SLICE: {  // rows t of a table along T (learned positions): from the frame's first (LX_POS0)
    LExpr *c = iadd(L, coord(L, m, n->axis), xi(L, n->start));
    if (n->len.kind == DIM_T && xs->d[n->axis].kind != DIM_T) c = iadd(L, c, ex(L, LX_POS0, LT_I64));
    v = load(L, move_slot(L, n, 0), offset_at(L, m, xs, n->axis, c, NULL));
    break;
  }
  case OP_PAD:      // inside [start, start + len) of axis: x, else 0
  case OP_SHIFT: {  // x at t - by along axis where that is in [0, T), else 0
    int rel = let(L, x2(L, LX_SUB, coord(L, m, n->axis), xi(L, n->start)), "rel");
    int in = let(L, x2(L, LX_AND, x2(L, LX_GE, xvar(L, rel), xi(L, 0)), x2(L, LX_LT, xvar(L, rel), xdim(L, xs->d[n->axis]))),
                 "inside");
    LExpr *safe = xsel(L, xvar(L, in), xvar(L, rel), xi(L, 0));
    v = xsel(L, xvar(L, in), load(L, move_slot(L, n, 0), offset_at(L, m, xs, n->axis, safe, NULL)), xf(L, 0));
    break;
  }
  case OP_CONCAT: {
    const Shape *ys = &g->nodes[n->in[1]].shape;
    LExpr *split = xdim(L, xs->d[n->axis]);
    int first = let(L, x2(L, LX_LT, coord(L, m, n->axis), split), "first");
    LExpr *cy = xsel(L, xvar(L, first), xi(L, 0), x2(L, LX_SUB, coord(L, m, n->axis), xdim(L, xs->d[n->axis])));
    LExpr *ox = xsel(L, xvar(L, first), offset_at(L, m, xs, -1, NULL, NULL), xi(L, 0));
    v = xsel(L, xvar(L, first), load(L, move_slot(L, n, 0), ox), load(L, move_slot(L, n, 1), offset_at(L, m, ys, n->axis, cy, NULL)));
    break;
  }
  default:
    if (ir_op_info[n->op].cat == OPC_UNARY) v = unary(L, n, operand(L, m, n, 0));
    else if (ir_op_info[n->op].cat == OPC_BINARY) {  // operand 1 first: the order of the golden files
      LExpr *y = operand(L, m, n, 1);
      v = binary(L, n, operand(L, m, n, 0), y);
    }
    else return unlowered(L, n), xf(L, 0);
    break;
  }
  if (v->kind == LX_VAR) return v;
  m->v[id] = let(L, v, "v");
  return xvar(L, m->v[id]);
}

// Reductions of the stored row slot[base + t], t < len: its maximum and
// sum exp(x - max), as variables.
static void softmax_stats(Lo *L, int slot, int base, LExpr *len, int *mx, int *sum) {
  int t;
  LStmt *st = reduce_begin(L, LX_MAX, xi(L, 0), len, &t);
  *mx = reduce_end(L, st, load(L, slot, iadd(L, xvar(L, base), xvar(L, t))), "mx");
  st = reduce_begin(L, LX_ADD, xi(L, 0), len, &t);
  *sum = reduce_end(L, st, x1(L, LX_EXP, x2(L, LX_SUB, load(L, slot, iadd(L, xvar(L, base), xvar(L, t))), xvar(L, *mx))), "sum");
}

// Elementwise kernels, FG_MAP groups and the epilogue of FG_MATMUL_MAP: for
// each row of the output, out[row, j] = the root's value at (row, j).
static void lower_map(Lo *L, const Node *n) {
  const Graph *g = L->g;
  const Shape *os = &n->shape;
  int r = os->rank;
  LExpr *last = r ? xdim(L, os->d[r - 1]) : xi(L, 1);
  Map m = {.os = os, .row = 0};
  for (int a = 0; a < IR_MAX_RANK; a++) m.c[a] = -1;
  m.v = arena_alloc(L->a, sizeof(int) * (size_t)g->nnodes);
  for (int i = 0; i < g->nnodes; i++) m.v[i] = -1;
  L->lk->outer = r ? dprod(L, os, 0, r - 1) : xi(L, 1);
  L->lk->nouter = r ? symsize_prod(os, 0, r - 1) : (SymSize){1, 0, 0, 1};
  L->lk->name = L->k->fusion == FG_NONE ? ir_op_info[n->op].name : "map";
  int base = -1;
  for (int i = 0; i < g->nnodes && m.nsmax < KERNEL_MAX_IN; i++)
    if (member(L, i) && g->nodes[i].op == OP_SOFTMAX && L->k->fusion == FG_MAP) {
      if (base < 0) base = let(L, imul(L, xvar(L, m.row), last), "base");
      m.sid[m.nsmax] = i;
      int sum;
      softmax_stats(L, move_slot(L, &g->nodes[i], 0), base, last, &m.smx[m.nsmax], &sum);
      m.sinv[m.nsmax++] = let(L, x2(L, LX_DIV, xf(L, 1), xvar(L, sum)), "inv");
    }
  L->lk->shape = m.nsmax ? LK_ROWS : LK_ELEMENTS;
  if (!m.nsmax) L->lk->inner = last, L->lk->ninner = r ? symsize_of(os->d[r - 1]) : (SymSize){1, 0, 0, 1};
  m.j = for_begin(L, xi(L, 0), last, true, "j");
  m.o = let(L, iadd(L, imul(L, xvar(L, m.row), last), xvar(L, m.j)), "o");
  store(L, KS_OUT, xvar(L, m.o), map_value(L, &m, n->id));
  if (L->k->stored >= 0) store(L, KS_SCRATCH, xvar(L, m.o), map_value(L, &m, L->k->stored));
  for_end(L);
}

// ---- reductions and softmax over an axis -------------------------------------------

// A reduction over axes before the last: x viewed as [P, K, M, Lc], one
// output row (p, m) of Lc per outer index o = p M + m: out = 0, then rows t
// in order accumulated into it (contiguous, so the column loop vectorises;
// each element's order is t = 0, 1, ...), MEAN divided by K after.
// FG_NORM_DG: also the sum of KS_IN1 (dy, x's shape) into KS_SCRATCH.
static void lower_reduce_rows(Lo *L, const Node *n) {
  const Shape *xs = &L->g->nodes[n->in[0]].shape;
  int r = xs->rank, ax = n->axis, end = ir_reduce_end(n);
  bool mx = n->op == OP_MAX, pair = L->k->fusion == FG_NORM_DG;
  LExpr *K = dprod(L, xs, ax, end + 1), *M = dprod(L, xs, end + 1, r - 1), *Lc = xdim(L, xs->d[r - 1]);
  int o = 0;
  int m = let(L, x2(L, LX_REM, xvar(L, o), M), "m"), p = let(L, x2(L, LX_DIV, xvar(L, o), M), "p");
  int ob = let(L, imul(L, xvar(L, o), Lc), "obase");
  int c = for_begin(L, xi(L, 0), Lc, true, "c");
  store(L, KS_OUT, iadd(L, xvar(L, ob), xvar(L, c)), xf(L, mx ? -INFINITY : 0));
  if (pair) store(L, KS_SCRATCH, iadd(L, xvar(L, ob), xvar(L, c)), xf(L, 0));
  for_end(L);
  int t = for_begin(L, xi(L, 0), K, false, "t");
  int xb = let(L, imul(L, iadd(L, imul(L, iadd(L, imul(L, xvar(L, p), K), xvar(L, t)), M), xvar(L, m)), Lc), "xbase");
  c = for_begin(L, xi(L, 0), Lc, true, "c");
  int oi = let(L, iadd(L, xvar(L, ob), xvar(L, c)), "oi");
  LExpr *xv = load(L, KS_IN0, iadd(L, xvar(L, xb), xvar(L, c))), *acc = load(L, KS_OUT, xvar(L, oi));
  store(L, KS_OUT, xvar(L, oi), mx ? x2(L, LX_MAX, xv, acc) : x2(L, LX_ADD, acc, xv));
  if (pair)
    store(L, KS_SCRATCH, xvar(L, oi), x2(L, LX_ADD, load(L, KS_SCRATCH, xvar(L, oi)), load(L, KS_IN1, iadd(L, xvar(L, xb), xvar(L, c)))));
  for_end(L);
  for_end(L);
  if (n->op == OP_MEAN) {
    LExpr *kf = x1(L, LX_TOF, K);
    c = for_begin(L, xi(L, 0), Lc, true, "c");
    int oi2 = let(L, iadd(L, xvar(L, ob), xvar(L, c)), "oi");
    store(L, KS_OUT, xvar(L, oi2), x2(L, LX_DIV, load(L, KS_OUT, xvar(L, oi2)), kf));
    for_end(L);
  }
}

// The GPU's reductions over rows (schedule_reduce_rows_gpu: sums over axes
// before the last, with the bias sum beside the gain gradient's): a block of
// `team` threads per tile of cw columns of an output row
// (gpu_red_tile_width; one 32-byte sector holds a row of a tile of 8);
// thread x = g cw + cl, g < G = team / cw, sums rows g, g + G, ... of its
// column in registers, then each column's total is its G partials in the
// order of g. Rows run in parallel, so the association differs from the
// CPU's rows in order. The team is GPU_RED_TEAM threads where the output is
// one row per (leading) index, its rows many (the batch and the positions:
// a bias's gradient); GPU_RED_TEAM_SMALL where output rows vary with the
// batch or the positions (a sum over the batch of [B, T, d], the learned
// positions' gradient: B rows a block, 98,304 blocks of 512 threads took
// 354 us a launch at GPT-2-small's 8 x 1024, --emit=cost).
// In two steps (Kernel.red_split S): a block per (output row, tile, slice
// s) sums rows [s Ks, (s + 1) Ks), Ks = ceil(K / S), into partials P[k, s,
// out] (slot KS_CONV_Y); then a thread per output sums its S partials
// (lower_red_total).
enum { GPU_RED_TEAM = 512, GPU_RED_TEAM_SMALL = 64, GPU_RED_U = 8 };
// Opens the par loop over the team's threads x: *g its row group, *c its
// column of tile `tile`; returns x.
static int tile_threads(Lo *L, int64_t team, int tile, int64_t cw, int *g, int *c) {
  int x = for_begin(L, xi(L, 0), xi(L, team), true, "x");
  *g = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, cw)), "g");
  *c = let(L, iadd(L, imul(L, xvar(L, tile), xi(L, cw)), x2(L, LX_REM, xvar(L, x), xi(L, cw))), "c");
  return x;
}
// Column cl's total: op over the partials part[g cw + cl], g in order.
static int tile_total(Lo *L, int64_t team, int part, int64_t cw, int cl, LExprKind op, const char *name) {
  int gi;
  LStmt *rd = reduce_begin(L, op, xi(L, 0), xi(L, team / cw), &gi);
  return reduce_end(L, rd, load(L, part, iadd(L, imul(L, xvar(L, gi), xi(L, cw)), xvar(L, cl))), name);
}
static bool reduce_rows_gpu_form(const Graph *g, const Node *n, LTarget tgt) {
  return tgt == LTARGET_GPU && schedule_reduce_rows_gpu(g, n);
}

// Accumulator a's next value with element v (max, or the sum).
static LExpr *acc_step(Lo *L, bool mx, int a, int v) {
  return mx ? x2(L, LX_MAX, xvar(L, v), xvar(L, a)) : x2(L, LX_ADD, xvar(L, a), xvar(L, v));
}
// The GPU_RED_U accumulators acc[0 .. U) combined in order of u.
static LExpr *acc_total(Lo *L, bool mx, const int *acc) {
  LExpr *all = xvar(L, acc[0]);
  for (int u = 1; u < GPU_RED_U; u++) all = mx ? x2(L, LX_MAX, xvar(L, acc[u]), all) : x2(L, LX_ADD, all, xvar(L, acc[u]));
  return all;
}

// A sum, mean or max over rows: GPU_RED_U accumulators per thread (loads in
// flight: rows s G U + u G + g of step s). FG_NORM_DG: also the sum of
// KS_IN1 into KS_SCRATCH, its own GPU_RED_U accumulators. S > 0: the first
// of the two steps, over slice s of the rows (the outer extent set here).
static void lower_reduce_rows_gpu(Lo *L, const Node *n, int64_t S) {
  const Shape *xs = &L->g->nodes[n->in[0]].shape;
  int r = xs->rank, ax = n->axis, end = ir_reduce_end(n);
  bool mx = n->op == OP_MAX;
  int nsum = L->k->fusion == FG_NORM_DG ? 2 : 1;
  bool rows_vary = false;  // output rows along the batch or the positions
  for (int i = end + 1; i < r - 1; i++) rows_vary = rows_vary || xs->d[i].kind != DIM_CONST;
  int64_t team = rows_vary ? GPU_RED_TEAM_SMALL : GPU_RED_TEAM;
  int64_t lc = xs->d[r - 1].n, cw = gpu_red_tile_width(lc, S > 0), ct = lc / cw, G = team / cw, nsl = S ? S : 1;
  LExpr *K = dprod(L, xs, ax, end + 1), *M = dprod(L, xs, end + 1, r - 1), *id = xf(L, mx ? -INFINITY : 0);
  L->own_outer = true, L->lk->team = (int)team;
  if (S) {  // a step's own outer extent, P M (constant), as lower_axis sets it for one pass
    L->lk->outer = imul(L, dprod(L, xs, 0, ax), M);
    L->lk->nouter = symsize_mul(symsize_prod(xs, 0, ax), symsize_prod(xs, end + 1, r - 1));
  }
  L->lk->outer = imul(L, L->lk->outer, xi(L, ct * nsl));
  L->lk->nouter = symsize_mul(L->lk->nouter, (SymSize){ct * nsl, 0, 0, 1});
  int o = 0;
  int tile = let(L, x2(L, LX_REM, xvar(L, o), xi(L, ct)), "tile"), os = let(L, x2(L, LX_DIV, xvar(L, o), xi(L, ct)), "os");
  int sl = let(L, x2(L, LX_REM, xvar(L, os), xi(L, nsl)), "sl"), om = let(L, x2(L, LX_DIV, xvar(L, os), xi(L, nsl)), "om");
  int m = let(L, x2(L, LX_REM, xvar(L, om), M), "m"), p = let(L, x2(L, LX_DIV, xvar(L, om), M), "p");
  int Kv = let(L, K, "K");
  int Ks = let(L, x2(L, LX_DIV, iadd(L, xvar(L, Kv), xi(L, nsl - 1)), xi(L, nsl)), "Ks");  // the slice's rows
  int r0 = let(L, imul(L, xvar(L, sl), xvar(L, Ks)), "r0");
  int r1 = let(L, imin(L, xvar(L, Kv), iadd(L, xvar(L, r0), xvar(L, Ks))), "r1");
  int part[2], g, c;
  for (int k = 0; k < nsum; k++) part[k] = local(L, team);
  int x = tile_threads(L, team, tile, cw, &g, &c);
  LExpr *init[2 * GPU_RED_U];
  const char *names[2 * GPU_RED_U];
  int acc[2 * GPU_RED_U], step;
  for (int u = 0; u < nsum * GPU_RED_U; u++) init[u] = id, names[u] = "acc";
  LExpr *nsteps = x2(L, LX_DIV, iadd(L, xvar(L, Ks), xi(L, G * GPU_RED_U - 1)), xi(L, G * GPU_RED_U));
  LStmt *st = carry_begin(L, xi(L, 0), nsteps, nsum * GPU_RED_U, init, names, acc, &step);
  LExpr *next[2 * GPU_RED_U];
  for (int u = 0; u < GPU_RED_U; u++) {
    LExpr *t0 = iadd(L, imul(L, xvar(L, step), xi(L, G * GPU_RED_U)), iadd(L, xi(L, u * G), xvar(L, g)));
    int row = let(L, S ? iadd(L, xvar(L, r0), t0) : t0, "t");
    LExpr *in = imin(L, xvar(L, row), x2(L, LX_SUB, xvar(L, Kv), xi(L, 1)));
    LExpr *at = iadd(L, imul(L, iadd(L, imul(L, iadd(L, imul(L, xvar(L, p), xvar(L, Kv)), in), M), xvar(L, m)), xi(L, lc)), xvar(L, c));
    for (int k = 0; k < nsum; k++) {
      int a = acc[k * GPU_RED_U + u];
      int v = let(L, xsel(L, x2(L, LX_LT, xvar(L, row), xvar(L, r1)), load(L, KS_IN0 + k, at), id), "v");
      next[k * GPU_RED_U + u] = acc_step(L, mx, a, v);
    }
  }
  carry_end(L, st, next);
  for (int k = 0; k < nsum; k++) store(L, part[k], xvar(L, x), acc_total(L, mx, acc + k * GPU_RED_U));
  for_end(L);
  int cl = for_begin(L, xi(L, 0), xi(L, cw), true, "cl");
  LExpr *oc = iadd(L, iadd(L, imul(L, xvar(L, om), xi(L, lc)), imul(L, xvar(L, tile), xi(L, cw))), xvar(L, cl));
  LExpr *nout = S ? imul(L, dprod(L, xs, 0, ax), imul(L, M, xi(L, lc))) : NULL;
  for (int k = 0; k < nsum; k++) {
    LExpr *v = xvar(L, tile_total(L, team, part[k], cw, cl, mx ? LX_MAX : LX_ADD, k ? "res2" : "res"));
    if (S) {  // P[k, s, oc]
      store(L, KS_CONV_Y, iadd(L, imul(L, iadd(L, xi(L, k * S), xvar(L, sl)), nout), oc), v);
      continue;
    }
    if (n->op == OP_MEAN) v = x2(L, LX_DIV, v, x1(L, LX_TOF, xvar(L, Kv)));
    store(L, k ? KS_SCRATCH : KS_OUT, oc, v);
  }
  for_end(L);
}

// The second step: out[e] (KS_SCRATCH for FG_NORM_DG's second sum) = op over
// the S partials P[k, s, e]: a block per output row, a thread per element e
// (up to 256 threads), GPU_RED_U accumulators, u over slices u, u + U, ...
// in order, then u in order.
static void lower_red_total(Lo *L, const Node *n, int64_t S) {
  const Shape *xs = &L->g->nodes[n->in[0]].shape;
  int r = xs->rank;
  bool mx = n->op == OP_MAX;
  int nsum = L->k->fusion == FG_NORM_DG ? 2 : 1;
  int64_t lc = xs->d[r - 1].n;
  SymSize rows = symsize_mul(symsize_prod(xs, 0, n->axis), symsize_prod(xs, ir_reduce_end(n) + 1, r - 1));
  int64_t nout = rows.coef * lc;  // constant (schedule_red_split)
  int64_t team = (lc + 31) / 32 * 32;
  L->lk->shape = LK_ROWS, L->lk->team = (int)(team < 256 ? team : 256);  // carries: not LK_ELEMENTS's body
  L->lk->outer = xi(L, rows.coef), L->lk->nouter = rows;
  int c = for_begin(L, xi(L, 0), xi(L, lc), true, "c");
  int e = let(L, iadd(L, imul(L, xvar(L, 0), xi(L, lc)), xvar(L, c)), "e");
  LExpr *id = xf(L, mx ? -INFINITY : 0), *init[2 * GPU_RED_U], *next[2 * GPU_RED_U];
  const char *names[2 * GPU_RED_U];
  int acc[2 * GPU_RED_U], step;
  for (int u = 0; u < nsum * GPU_RED_U; u++) init[u] = id, names[u] = "acc";
  LStmt *st = carry_begin(L, xi(L, 0), xi(L, (S + GPU_RED_U - 1) / GPU_RED_U), nsum * GPU_RED_U, init, names, acc, &step);
  for (int u = 0; u < GPU_RED_U; u++) {
    int sl = let(L, iadd(L, imul(L, xvar(L, step), xi(L, GPU_RED_U)), xi(L, u)), "s");
    for (int k = 0; k < nsum; k++) {
      LExpr *at = iadd(L, imul(L, iadd(L, xi(L, k * S), imin(L, xvar(L, sl), xi(L, S - 1))), xi(L, nout)), xvar(L, e));
      int v = let(L, xsel(L, x2(L, LX_LT, xvar(L, sl), xi(L, S)), load(L, KS_CONV_Y, at), id), "v");
      next[k * GPU_RED_U + u] = acc_step(L, mx, acc[k * GPU_RED_U + u], v);
    }
  }
  carry_end(L, st, next);
  for (int k = 0; k < nsum; k++) {  // accumulator u holds slices u, u + U, ...
    LExpr *v = acc_total(L, mx, acc + k * GPU_RED_U);
    if (n->op == OP_MEAN) v = x2(L, LX_DIV, v, x1(L, LX_TOF, dprod(L, xs, n->axis, ir_reduce_end(n) + 1)));
    store(L, k ? KS_SCRATCH : KS_OUT, xvar(L, e), v);
  }
  for_end(L);
}

LKernel *lower_red_step(Arena *a, const Schedule *s, const Kernel *k, int part) {
  Lo L;
  const Node *n = &s->g->nodes[k->node];
  LKernel *lk = step_begin(&L, a, s, k, LTARGET_GPU, part ? "sum_total" : "sum_partial");
  if (part) lower_red_total(&L, n, k->red_split);
  else lk->shape = LK_ROWS, lower_reduce_rows_gpu(&L, n, k->red_split);
  return lk;
}

// SUM/MEAN/MAX over trailing axes and SOFTMAX over any axis: x viewed as
// [P, K, I] (I the axes after the reduced ones), one p per outer index; for
// each i < I (a par loop when I > 1, else the row itself) the elements
// (p K + t) I + i, t < K.
static void lower_axis(Lo *L, const Node *n) {
  const Shape *xs = &L->g->nodes[n->in[0]].shape;
  int end = ir_reduce_end(n);
  L->lk->name = ir_op_info[n->op].name;
  L->lk->outer = dprod(L, xs, 0, n->axis);
  L->lk->nouter = symsize_prod(xs, 0, n->axis);
  L->lk->shape = LK_ROWS;
  if (n->op != OP_SOFTMAX && end < xs->rank - 1) {
    L->lk->outer = imul(L, L->lk->outer, dprod(L, xs, end + 1, xs->rank - 1));
    L->lk->nouter = symsize_mul(L->lk->nouter, symsize_prod(xs, end + 1, xs->rank - 1));
    if (reduce_rows_gpu_form(L->g, n, L->tgt)) lower_reduce_rows_gpu(L, n, 0);
    else lower_reduce_rows(L, n);
    return;
  }
  LExpr *K = dprod(L, xs, n->axis, end + 1), *I = dprod(L, xs, end + 1, xs->rank);
  bool one = I->kind == LX_INT && I->ival == 1;
  int i = one ? -1 : for_begin(L, xi(L, 0), I, true, "i");
  LExpr *base0 = imul(L, imul(L, xvar(L, 0), K), I);
  int base = let(L, one ? base0 : iadd(L, base0, xvar(L, i)), "base");
#define AT(t) iadd(L, xvar(L, base), imul(L, xvar(L, t), I))
  int t;
  if (n->op == OP_SOFTMAX) {
    LStmt *st = reduce_begin(L, LX_MAX, xi(L, 0), K, &t);
    int mx = reduce_end(L, st, load(L, KS_IN0, AT(t)), "mx");
    st = reduce_begin(L, LX_ADD, xi(L, 0), K, &t);
    int sum = reduce_end(L, st, x1(L, LX_EXP, x2(L, LX_SUB, load(L, KS_IN0, AT(t)), xvar(L, mx))), "sum");
    int inv = let(L, x2(L, LX_DIV, xf(L, 1), xvar(L, sum)), "inv");
    t = for_begin(L, xi(L, 0), K, true, "t");
    store(L, KS_OUT, AT(t), x2(L, LX_MUL, x1(L, LX_EXP, x2(L, LX_SUB, load(L, KS_IN0, AT(t)), xvar(L, mx))), xvar(L, inv)));
    for_end(L);
  } else {
    LStmt *st = reduce_begin(L, n->op == OP_MAX ? LX_MAX : LX_ADD, xi(L, 0), K, &t);
    int acc = reduce_end(L, st, load(L, KS_IN0, AT(t)), "acc");
    LExpr *res = xvar(L, acc);
    if (n->op == OP_MEAN) res = x2(L, LX_DIV, res, x1(L, LX_TOF, K));
    store(L, KS_OUT, one ? xvar(L, 0) : iadd(L, imul(L, xvar(L, 0), I), xvar(L, i)), res);
  }
#undef AT
  if (!one) for_end(L);
}


// ---- gradients of three parts --------------------------------------------------------

bool lower_out_parts(Lo *L, const Node *n, const int64_t width[3], int64_t row, OutPart part[3]) {
  bool split = L->k->nout == 3;
  if (L->k->nout != 1 && !split) {
    snprintf(L->err, L->errlen, "internal error: kernel of %%%d (%s): %d outputs", n->id, ir_op_info[n->op].name, L->k->nout);
    return false;
  }
  int64_t off = 0;
  for (int p = 0; p < 3; off += width[p++])
    part[p] = (OutPart){.slot = split ? kernel_out_slot(p) : KS_OUT, .w = split ? width[p] : row, .off = split ? 0 : off};
  return true;
}

// ---- row normalisations ------------------------------------------------------------

// sum over c < d of f(c) as a variable.
typedef LExpr *(*RowTerm)(Lo *L, int c, const void *ctx);
static int row_sum(Lo *L, LExpr *d, RowTerm f, const void *ctx, const char *name) {
  int c;
  LStmt *st = reduce_begin(L, LX_ADD, xi(L, 0), d, &c);
  return reduce_end(L, st, f(L, c, ctx), name);
}

// The row of a row op: slot's elements base + c.
typedef struct {
  int base, mu, sigma, g, dy;  // variables and slots (-1: unused)
  int x;
} Row;

static LExpr *at(Lo *L, const Row *w, int slot, int c) { return load(L, slot, iadd(L, xvar(L, w->base), xvar(L, c))); }
// The slot of input i of row op n: its leaf (first in order when alone).
int lower_in_slot(Lo *L, const Node *n, int i) {
  int slot = leaf_slot(L, n->in[i]);
  return slot < 0 ? KS_IN0 + i : slot;
}
// Row op n's value v at column c: stored, or (FG_NORM_MAP) the value of
// member n in the elementwise tree of the root stored instead.
static void row_store(Lo *L, const Node *n, const Row *w, int c, LExpr *v) {
  LExpr *o = iadd(L, xvar(L, w->base), xvar(L, c));
  if (L->k->fusion != FG_NORM_MAP) {
    store(L, KS_OUT, o, v);
    return;
  }
  const Node *root = &L->g->nodes[L->k->node];
  Map m = {.os = &root->shape, .row = 0, .j = c};
  for (int a = 0; a < IR_MAX_RANK; a++) m.c[a] = -1;
  m.v = arena_alloc(L->a, sizeof(int) * (size_t)L->g->nnodes);
  for (int i = 0; i < L->g->nnodes; i++) m.v[i] = -1;
  m.o = let(L, o, "o");
  m.v[n->id] = let(L, v, "v");
  store(L, KS_OUT, xvar(L, m.o), map_value(L, &m, root->id));
  if (L->k->stored >= 0) store(L, KS_SCRATCH, xvar(L, m.o), map_value(L, &m, L->k->stored));
}
static LExpr *term_x(Lo *L, int c, const void *ctx) { return at(L, ctx, ((const Row *)ctx)->x, c); }
static LExpr *term_dev2(Lo *L, int c, const void *ctx) {
  const Row *w = ctx;
  LExpr *dv = x2(L, LX_SUB, at(L, w, w->x, c), xvar(L, w->mu));
  return x2(L, LX_MUL, dv, x2(L, LX_SUB, at(L, w, w->x, c), xvar(L, w->mu)));
}
static LExpr *term_sq(Lo *L, int c, const void *ctx) {
  const Row *w = ctx;
  return x2(L, LX_MUL, at(L, w, w->x, c), at(L, w, w->x, c));
}
// xhat at column c: (x - mu) / sigma (layer norm), x / sigma (rms norm: mu < 0)
static LExpr *xhat(Lo *L, const Row *w, int c) {
  LExpr *x = at(L, w, w->x, c);
  if (w->mu >= 0) x = x2(L, LX_SUB, x, xvar(L, w->mu));
  return x2(L, LX_DIV, x, xvar(L, w->sigma));
}
// dxhat = dy o g
static LExpr *term_dxh(Lo *L, int c, const void *ctx) {
  const Row *w = ctx;
  return x2(L, LX_MUL, at(L, w, w->dy, c), load(L, w->g, xvar(L, c)));
}
static LExpr *term_dxh_xh(Lo *L, int c, const void *ctx) {
  const Row *w = ctx;
  return x2(L, LX_MUL, term_dxh(L, c, ctx), xhat(L, w, c));
}

// The row statistics (seed 001 eq. 8 for layer norm): mu = mean x, sigma =
// sqrt(mean (x - mu)^2 + eps); rms norm: sigma = sqrt(mean x^2 + eps), no mu.
static void row_stats(Lo *L, Row *w, LExpr *d, bool rms, double eps) {
  LExpr *df = x1(L, LX_TOF, d);
  if (rms) {
    w->mu = -1;
    int sq = row_sum(L, d, term_sq, w, "sq");
    w->sigma = let(L, x1(L, LX_SQRT, x2(L, LX_ADD, x2(L, LX_DIV, xvar(L, sq), df), xf(L, eps))), "sigma");
    return;
  }
  int sum = row_sum(L, d, term_x, w, "sum");
  w->mu = let(L, x2(L, LX_DIV, xvar(L, sum), df), "mu");
  int sq = row_sum(L, d, term_dev2, w, "sq");
  w->sigma = let(L, x1(L, LX_SQRT, x2(L, LX_ADD, x2(L, LX_DIV, xvar(L, sq), df), xf(L, eps))), "sigma");
}

// LAYERNORM, RMSNORM and their gradients _DX and _DYXH (the gain
// gradient's terms dy o xhat, summed by a SUM after it), one row per outer
// index. interp.c has the equations.
static void lower_norm(Lo *L, const Node *n) {
  const Shape *xs = &L->g->nodes[n->in[0]].shape;
  bool rms = ir_op_info[n->op].props & IR_P_RMS, dyxh = ir_op_info[n->op].props & IR_P_ROW_TERMS;
  LExpr *d = xdim(L, xs->d[xs->rank - 1]), *rows = dprod(L, xs, 0, xs->rank - 1);
  L->lk->name = ir_op_info[n->op].name;
  L->lk->shape = LK_ROWS;
  L->lk->outer = rows;
  L->lk->nouter = symsize_prod(xs, 0, xs->rank - 1);
  Row w = {.x = lower_in_slot(L, n, 0), .g = lower_in_slot(L, n, 1), .dy = dyxh ? lower_in_slot(L, n, 1) : n->nin > 2 ? lower_in_slot(L, n, 2) : -1};
  int c;
  w.base = let(L, imul(L, xvar(L, 0), d), "base");
  row_stats(L, &w, d, rms, n->fval);
  switch (n->op) {
  case OP_LAYERNORM: case OP_RMSNORM:  // y = g o xhat (+ b)
    c = for_begin(L, xi(L, 0), d, true, "c");
    {
      LExpr *x = at(L, &w, w.x, c);
      if (!rms) x = x2(L, LX_SUB, x, xvar(L, w.mu));
      LExpr *y = x2(L, LX_DIV, x2(L, LX_MUL, load(L, w.g, xvar(L, c)), x), xvar(L, w.sigma));
      if (!rms) y = x2(L, LX_ADD, y, load(L, lower_in_slot(L, n, 2), xvar(L, c)));
      row_store(L, n, &w, c, y);
    }
    for_end(L);
    break;
  case OP_LAYERNORM_DX: case OP_RMSNORM_DX: {
    // layer norm: dx = (dxhat - mean(dxhat) - xhat o mean(dxhat o xhat)) / sigma
    // rms norm:   dx = (dxhat - xhat o mean(dxhat o xhat)) / sigma
    LExpr *df = x1(L, LX_TOF, d);
    int a1 = rms ? -1 : let(L, x2(L, LX_DIV, xvar(L, row_sum(L, d, term_dxh, &w, "m1")), df), "a1");
    int a2 = let(L, x2(L, LX_DIV, xvar(L, row_sum(L, d, term_dxh_xh, &w, "m2")), df), "a2");
    c = for_begin(L, xi(L, 0), d, true, "c");
    LExpr *t = term_dxh(L, c, &w);
    if (a1 >= 0) t = x2(L, LX_SUB, t, xvar(L, a1));
    t = x2(L, LX_SUB, t, x2(L, LX_MUL, xhat(L, &w, c), xvar(L, a2)));
    row_store(L, n, &w, c, x2(L, LX_DIV, t, xvar(L, w.sigma)));
    if (L->k->terms >= 0) store(L, kernel_terms_slot(L->k), iadd(L, xvar(L, w.base), xvar(L, c)), x2(L, LX_MUL, at(L, &w, w.dy, c), xhat(L, &w, c)));
    for_end(L);
    break;
  }
  default:  // _DYXH: dy o xhat
    c = for_begin(L, xi(L, 0), d, true, "c");
    row_store(L, n, &w, c, x2(L, LX_MUL, at(L, &w, w.dy, c), xhat(L, &w, c)));
    for_end(L);
    break;
  }
}

// ---- cross-entropy, embeddings -----------------------------------------------------

// Phase 0, one row per outer index: scratch[r] = logsumexp(x_r) - x_r[id_r].
// Phase 1, serial: out = the mean of the scratch, summed in double in row order.
static void lower_cross_entropy(Lo *L, const Node *n) {
  const Shape *xs = &L->g->nodes[n->in[0]].shape;
  LExpr *V = xdim(L, xs->d[xs->rank - 1]), *rows = dprod(L, xs, 0, xs->rank - 1);
  L->lk->name = "cross_entropy";
  L->lk->shape = LK_ROWS;
  int t;
  if (L->k->phase == 1) {
    L->lk->outer = xi(L, 1), L->lk->nouter = (SymSize){1, 0, 0, 1};
    LStmt *st = reduce_begin(L, LX_ADD, xi(L, 0), rows, &t);
    st->wide = true;
    int total = reduce_end(L, st, load(L, KS_SCRATCH, xvar(L, t)), "total");
    store(L, KS_OUT, xi(L, 0), x2(L, LX_DIV, xvar(L, total), x1(L, LX_TOF, rows)));
    return;
  }
  L->lk->outer = rows, L->lk->nouter = symsize_prod(xs, 0, xs->rank - 1);
  int base = let(L, imul(L, xvar(L, 0), V), "base"), mx, sum;
  softmax_stats(L, KS_IN0, base, V, &mx, &sum);
  int lse = let(L, x2(L, LX_ADD, xvar(L, mx), x1(L, LX_LOG, xvar(L, sum))), "lse");
  if (n->op == OP_CROSS_ENTROPY_LSE) {  // alone (--no-fuse): the rows' statistics only
    store(L, KS_OUT, xvar(L, 0), xvar(L, lse));
    return;
  }
  LExpr *xid = load(L, KS_IN0, iadd(L, xvar(L, base), load(L, KS_IN1, xvar(L, 0))));
  store(L, KS_SCRATCH, xvar(L, 0), x2(L, LX_SUB, xvar(L, lse), xid));
  if (L->k->terms >= 0) store(L, kernel_terms_slot(L->k), xvar(L, 0), xvar(L, lse));  // CROSS_ENTROPY_LSE's
}

// out[r, c] = w[ids[r], c]
static void lower_embed(Lo *L, const Node *n) {
  const Shape *ws = &L->g->nodes[n->in[0]].shape, *is = &L->g->nodes[n->in[1]].shape;
  LExpr *d = xdim(L, ws->d[1]);
  L->lk->name = "embed";
  L->lk->shape = LK_ELEMENTS;
  L->lk->outer = dprod(L, is, 0, is->rank), L->lk->nouter = symsize_prod(is, 0, is->rank);
  L->lk->inner = d, L->lk->ninner = symsize_of(ws->d[1]);
  int c = for_begin(L, xi(L, 0), d, true, "c");
  LExpr *src = iadd(L, imul(L, load(L, KS_IN1, xvar(L, 0)), d), xvar(L, c));
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, 0), d), xvar(L, c)), load(L, KS_IN0, src));
  for_end(L);
}

// Serial (outer extent 1): out = 0; out[ids[r], :] += dy[r, :], rows in order
// (a GPU's sorted form: lower_steps).
static void lower_scatter_add(Lo *L, const Node *n) {
  const Shape *is = &L->g->nodes[n->in[1]].shape;
  LExpr *V = xdim(L, n->shape.d[0]), *d = xdim(L, n->shape.d[1]);
  L->lk->name = "scatter_add";
  L->lk->shape = LK_ROWS;
  L->lk->outer = xi(L, 1), L->lk->nouter = (SymSize){1, 0, 0, 1};
  int z = for_begin(L, xi(L, 0), imul(L, V, d), true, "e");
  store(L, KS_OUT, xvar(L, z), xf(L, 0));
  for_end(L);
  int r = for_begin(L, xi(L, 0), dprod(L, is, 0, is->rank), false, "r");
  int ob = let(L, imul(L, load(L, KS_IN1, xvar(L, r)), d), "obase");
  int yb = let(L, imul(L, xvar(L, r), d), "ybase");
  int c = for_begin(L, xi(L, 0), d, true, "c");
  int oi = let(L, iadd(L, xvar(L, ob), xvar(L, c)), "oi");
  store(L, KS_OUT, xvar(L, oi), x2(L, LX_ADD, load(L, KS_OUT, xvar(L, oi)), load(L, KS_IN0, iadd(L, xvar(L, yb), xvar(L, c)))));
  for_end(L);
  for_end(L);
}

// ---- causal convolutions on a GPU (seed 001 eqs. 23, 26, 28, 29; ir.h ConvKind) -----

// The direct forms (every kind on a GPU but a matrix kind with Kernel.chunk,
// which lower_steps computes as chunked GEMMs). CAUSAL_CONV and CONV_DX, a
// thread per output element (o, c), o = b T + i the row, the sum over lags in
// order (x the first operand, dy for CONV_DX; din its width, dout the output's):
//   conv:  out[o, c] = sum_{j <= i} x_j (.) w_{i-j}
//   dx:    out[o, c] = sum_{j >= i} dy_j (.) w_{j-i}  (matrix kind: W_{j-i}^T)
static void lower_conv_gpu(Lo *L, const Node *n) {
  bool fwd = n->op == OP_CAUSAL_CONV;
  const Shape *xs = &L->g->nodes[n->in[0]].shape, *os = &n->shape;
  int r = os->rank;
  LExpr *T = xdim(L, xs->d[xs->rank - 2]), *din = xdim(L, xs->d[xs->rank - 1]), *dout = xdim(L, os->d[r - 1]);
  L->lk->name = fwd ? "causal_conv" : "causal_conv_dx";
  L->lk->shape = LK_ELEMENTS;
  L->own_outer = true;
  L->lk->outer = dprod(L, os, 0, r - 1), L->lk->nouter = symsize_prod(os, 0, r - 1);
  L->lk->inner = dout, L->lk->ninner = symsize_of(os->d[r - 1]);
  int i = let(L, x2(L, LX_REM, xvar(L, 0), T), "i");
  int b0 = let(L, x2(L, LX_SUB, xvar(L, 0), xvar(L, i)), "b0");
  int c = for_begin(L, xi(L, 0), dout, true, "c");
  // terms u in [0, n) in order: lag-major, then (matrix kind) the input feature q
  bool mat = n->conv == CONV_MATRIX;
  LExpr *nlags = imin(L, fwd ? iadd(L, xvar(L, i), xi(L, 1)) : x2(L, LX_SUB, T, xvar(L, i)),
                      xdim(L, L->g->nodes[n->in[1]].shape.d[0]));  // lags < L
  int u;
  LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), mat ? imul(L, nlags, din) : nlags, &u);
  LExpr *t = mat ? x2(L, LX_DIV, xvar(L, u), din) : xvar(L, u), *q = mat ? x2(L, LX_REM, xvar(L, u), din) : xvar(L, c);
  LExpr *j = fwd ? x2(L, LX_SUB, xvar(L, i), t) : iadd(L, xvar(L, i), t), *lag = t;  // the input position, the lag
  LExpr *xv = load(L, KS_IN0, iadd(L, imul(L, iadd(L, xvar(L, b0), j), din), q)), *wi;
  switch (n->conv) {
  case CONV_SCALAR: wi = lag; break;
  case CONV_VECTOR: wi = iadd(L, imul(L, lag, dout), xvar(L, c)); break;
  default:  // W [L, d, e]: conv reads W[lag, q, c]; dx reads W[lag, c, q]
    wi = fwd ? iadd(L, imul(L, iadd(L, imul(L, lag, din), q), dout), xvar(L, c))
             : iadd(L, imul(L, iadd(L, imul(L, lag, dout), xvar(L, c)), din), q);
    break;
  }
  int sum = reduce_end(L, red, x2(L, LX_MUL, xv, load(L, KS_IN1, wi)), "acc");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, 0), dout), xvar(L, c)), xvar(L, sum));
  for_end(L);
}

// CONV_DW, a thread per element of dw: lag k, then p in the kind's block
// (scalar: 1; vector: d; matrix: d e), summing over sequences b, positions
// i >= k and (scalar) the features c in that order:
//   dw_k = sum_b sum_{i >= k} x_{b, i-k} (.) dy_{b, i}
static void lower_conv_dw_gpu(Lo *L, const Node *n) {
  const Shape *xs = &L->g->nodes[n->in[0]].shape, *ys = &L->g->nodes[n->in[1]].shape;
  int xr = xs->rank;
  LExpr *T = xdim(L, xs->d[xr - 2]), *d = xdim(L, xs->d[xr - 1]), *ew = xdim(L, ys->d[ys->rank - 1]);
  LExpr *lead = dprod(L, xs, 0, xr - 2);
  int64_t per = n->conv == CONV_SCALAR ? 1 : n->conv == CONV_VECTOR ? xs->d[xr - 1].n : xs->d[xr - 1].n * ys->d[ys->rank - 1].n;
  L->lk->name = "causal_conv_dw";
  L->lk->shape = LK_ELEMENTS;
  L->lk->outer = xdim(L, n->shape.d[0]), L->lk->nouter = symsize_of(n->shape.d[0]);
  L->lk->inner = xi(L, per), L->lk->ninner = (SymSize){per, 0, 0, 1};
  int k = let(L, xvar(L, 0), "k");
  int span = let(L, imax(L, x2(L, LX_SUB, T, xvar(L, k)), xi(L, 0)), "span");  // positions i >= k
  int cols = let(L, n->conv == CONV_SCALAR ? imul(L, xvar(L, span), d) : xvar(L, span), "cols");
  int p = for_begin(L, xi(L, 0), xi(L, per), true, "p");
  int u;
  LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), imul(L, lead, xvar(L, cols)), &u);
  LExpr *div = imax(L, xvar(L, cols), xi(L, 1));
  LExpr *b = x2(L, LX_DIV, xvar(L, u), div), *rem = x2(L, LX_REM, xvar(L, u), div);
  LExpr *xv, *yv;
  if (n->conv == CONV_SCALAR) {  // rem = (i - k) d + c: x and dy rows k apart
    LExpr *base = imul(L, imul(L, b, T), d);
    xv = load(L, KS_IN0, iadd(L, base, rem));
    yv = load(L, KS_IN1, iadd(L, iadd(L, base, imul(L, xvar(L, k), d)), rem));
  } else {  // rem = i - k
    LExpr *xrow = iadd(L, imul(L, b, T), rem), *yrow = iadd(L, xrow, xvar(L, k));
    bool vec = n->conv == CONV_VECTOR;
    xv = load(L, KS_IN0, iadd(L, imul(L, xrow, d), vec ? xvar(L, p) : x2(L, LX_DIV, xvar(L, p), ew)));
    yv = load(L, KS_IN1, iadd(L, imul(L, yrow, ew), vec ? xvar(L, p) : x2(L, LX_REM, xvar(L, p), ew)));
  }
  int sum = reduce_end(L, red, x2(L, LX_MUL, xv, yv), "acc");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, k), xi(L, per)), xvar(L, p)), xvar(L, sum));
  for_end(L);
}

// ---- entry -------------------------------------------------------------------------

LKernel *lower_kernel(Arena *a, const Schedule *s, const Kernel *k, LTarget tgt, bool train, char *err, size_t errlen) {
  const Graph *g = s->g;
  const Node *n = &g->nodes[k->node];
  if (errlen) err[0] = 0;
  bool conv = n->op == OP_CAUSAL_CONV || n->op == OP_CONV_DX || n->op == OP_CONV_DW;
  if (k->fusion == FG_WEIGHT_GRAD || n->op == OP_MATMUL || (conv && tgt == LTARGET_CPU) || lower_steps_form(s, k, tgt))
    return NULL;
  Lo L = {.a = a, .s = s, .g = g, .k = k, .tgt = tgt, .train = train, .err = err, .errlen = errlen};
  L.lk = arena_alloc(a, sizeof *L.lk);
  L.tail[0] = &L.lk->body;
  new_var(&L, LT_I64, "o");
  for (int i = 0; i < k->nin; i++) L.lk->slot_int[KS_IN0 + i] = g->nodes[k->leaf[i]].dtype == DT_I32;
  L.lk->ninner = (SymSize){1, 0, 0, 1};
  switch (n->op) {
  case OP_SUM: case OP_MEAN: case OP_MAX: case OP_SOFTMAX: lower_axis(&L, n); break;
  case OP_LAYERNORM: case OP_LAYERNORM_DX: case OP_LAYERNORM_DYXH:
  case OP_RMSNORM: case OP_RMSNORM_DX: case OP_RMSNORM_DYXH: lower_norm(&L, n); break;
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_LSE: lower_cross_entropy(&L, n); break;
  case OP_EMBED: lower_embed(&L, n); break;
  case OP_ATTENTION: case OP_ATTENTION_LSE: case OP_ATTENTION_GRAD: case OP_ATTENTION_DBIAS: lower_attention(&L, n); break;
  case OP_SCATTER_ADD: lower_scatter_add(&L, n); break;
  case OP_ROUTED_MATMUL: case OP_ROUTED_MATMUL_DW: lower_routed(&L, n); break;
  case OP_TOPK: lower_topk(&L, n); break;
  case OP_SCAN: case OP_SCAN_REV: lower_scan(&L, n); break;
  case OP_SCAN_READ: case OP_SCAN_READ_GRAD: lower_scan_read(&L, n); break;
  case OP_CAUSAL_CONV: case OP_CONV_DX: lower_conv_gpu(&L, n); break;
  case OP_CONV_DW: lower_conv_dw_gpu(&L, n); break;
  default:
    if (k->fusion == FG_NORM_MAP) lower_norm(&L, &g->nodes[k->norm]);  // the root's tree in its stores
    else lower_map(&L, n);
    break;
  }
  if (err[0]) return NULL;
  if (k->fusion != FG_MATMUL_MAP && !L.own_outer && !symsize_eq(L.lk->nouter, k->outer)) {
    snprintf(err, errlen, "internal error: kernel of %%%d (%s): loop outer extent %lldB^%dT^%d, schedule's %lldB^%dT^%d",
             n->id, ir_op_info[n->op].name, (long long)L.lk->nouter.coef, L.lk->nouter.pb, L.lk->nouter.pt,
             (long long)k->outer.coef, k->outer.pb, k->outer.pt);
    return NULL;
  }
  return L.lk;
}

// ---- the module ---------------------------------------------------------------------

// A causal convolution on the CPU (LConv), or NULL for any other kernel.
static LConv *lower_conv_cpu(Arena *a, const Schedule *s, const Kernel *k) {
  const Node *n = &s->g->nodes[k->node];
  if (n->op != OP_CAUSAL_CONV && n->op != OP_CONV_DX && n->op != OP_CONV_DW) return NULL;
  const Shape *xs = &s->g->nodes[n->in[0]].shape, *ys = &s->g->nodes[n->in[1]].shape;
  int r = xs->rank;
  LConv *c = arena_alloc(a, sizeof *c);
  *c = (LConv){.op = n->op == OP_CAUSAL_CONV ? LCONV_FWD : n->op == OP_CONV_DX ? LCONV_DX : LCONV_DW, .kind = n->conv,
               .T = xs->d[r - 2], .din = xs->d[r - 1], .xs = xs,
               .L = n->op == OP_CONV_DW ? n->shape.d[0].n : ys->d[0].n};
  c->dout = c->op == LCONV_DW ? ys->d[ys->rank - 1] : n->shape.d[n->shape.rank - 1];
  return c;
}

// A CPU's folded product (no steps) is split over its rows (LGemm.split_rows).
static bool split_rows(LGemm *gm, LTarget tgt, const LSteps *st) {
  if (tgt == LTARGET_CPU && gm && gm->fold && !gm->ta && !gm->split_cols && !st) gm->split_rows = true;
  return gm && gm->split_rows;
}

// x, wherever it is used, becomes bf16(x) (LX_BF16 of a copy of it).
static void round_in_place(Arena *a, LExpr *x) {
  if (x->kind == LX_BF16) return;
  LExpr *copy = arena_alloc(a, sizeof *copy);
  *copy = *x;
  *x = (LExpr){.kind = LX_BF16, .type = LT_F32, .a = {copy}};
}

// The LS_LET defining var, in the statements from st on or inside them, rounded.
static void round_let(Arena *a, LStmt *st, int var) {
  for (; st; st = st->next) {
    if (st->kind == LS_LET && st->var == var && st->val->type == LT_F32) round_in_place(a, st->val);
    if (st->body) round_let(a, st->body, var);
  }
}

// Every value the statements from st on store to a bf16 slot is rounded
// where it is computed, so that the kernel's other uses of it (a fused
// group's member that is also stored, FG_MAP's `stored`) see the value
// the store keeps: a fused kernel computes what the unfused ones would.
// A stored variable's defining LS_LET is rounded (LS_REDUCE and LS_CARRY
// results are not: reductions keep float32, storage.c).
static void round_stored(Arena *a, const LKernel *lk, LStmt *st) {
  for (; st; st = st->next) {
    if (st->kind == LS_STORE && st->slot < KS_COUNT && lk->slot_bf16[st->slot] && st->val->type == LT_F32) {
      LExpr *x = st->val;
      if (x->kind == LX_VAR) round_let(a, lk->body, x->var);
      else round_in_place(a, x);
    }
    if (st->body) round_stored(a, lk, st->body);
  }
}

// KS_STAGE[i] = bf16(x[i]) over the elements of the float32 operand x in
// `slot` (its buffer whole, in its layout, so the product reads the copy
// with x's offsets and strides): a thread per element.
static LKernel *lower_stage(Arena *a, const Schedule *s, const Kernel *k, int slot, int buf) {
  Lo L;
  LKernel *lk = step_begin(&L, a, s, k, LTARGET_GPU, "stage_bf16");
  const Shape *xs = &s->g->nodes[s->bufs[buf].node].shape;
  lk->shape = LK_ELEMENTS;
  lk->outer = xi(&L, 1), lk->nouter = (SymSize){1, 0, 0, 1};
  lk->inner = dprod(&L, xs, 0, xs->rank), lk->ninner = s->bufs[buf].size;
  int j = for_begin(&L, xi(&L, 0), dprod(&L, xs, 0, xs->rank), true, "j");
  store(&L, KS_STAGE, xvar(&L, j), load(&L, slot, xvar(&L, j)));
  for_end(&L);
  lk->slot_bf16[KS_STAGE] = true;
  return lk;
}

// Every e^x of x and its subexpressions marked for the SFU (LX_EXP ival 1).
static void fast_exp_expr(LExpr *x) {
  if (!x) return;
  if (x->kind == LX_EXP) x->ival = 1;
  for (int i = 0; i < 3; i++) fast_exp_expr(x->a[i]);
}
static void fast_exp(LStmt *st) {
  for (; st; st = st->next) {
    fast_exp_expr(st->lo), fast_exp_expr(st->hi), fast_exp_expr(st->idx), fast_exp_expr(st->val);
    for (int c = 0; c < st->ncarry; c++) fast_exp_expr(st->init[c]), fast_exp_expr(st->step[c]);
    fast_exp(st->body);
  }
}
// The facts a backend reads beside a description: its integers' ranges; on
// a GPU under Schedule.fast_exp, the exponentials it may approximate.
static void lkernel_facts(Arena *a, const Schedule *s, LTarget tgt, LKernel *lk) {
  lkernel_ranges(a, lk, s->g->t_max);
  if (tgt == LTARGET_GPU && s->fast_exp) fast_exp(lk->body);
}

// The storage of the class's slots, from its representative kernel k
// (Buffer.bf16, storage.c): LKernel.slot_bf16 and LGemm.bf16; on a GPU a
// product whose A and B differ in storage reads the float32 one's bf16 copy
// (Kernel.stage: LGemm.staged; LClass.stage makes it before the product,
// unless it is a parameter's twin, BUF_TWIN, which the optimizer keeps
// current). Element-wise accesses (in steps of loops too) and flat
// products convert; a bf16 slot elsewhere is an error in err.
static void mark_storage(Arena *a, const Schedule *s, const Kernel *k, LClass *c, LGemm *gm, LKernel *v[2], LTarget tgt,
                         char *err, size_t errlen) {
  int slot[KS_IMM];
  kernel_slots(s, k, slot);
  bool bf[KS_COUNT] = {false}, any = false;
  for (int j = 0; j < KS_IMM; j++) any |= bf[j] = slot[j] >= 0 && s->bufs[slot[j]].bf16;
  if (!any || err[0]) return;
  const Node *n = &s->g->nodes[k->node];
  bool gpu = tgt == LTARGET_GPU, mixed = gm && gpu && bf[gm->slot[LG_A]] != bf[gm->slot[LG_B]];
  if ((c->steps && !lsteps_all_loops(c->steps)) || c->conv || (gpu && gm && !gm->flat) || (mixed && !bf[KS_STAGE])) {
    snprintf(err, errlen, "%s:%d:%d: error: the %s backend has no bf16 storage for op '%s' (node %%%d)%s",
             n->loc.file ? n->loc.file : "<compiler>", n->loc.line, n->loc.col, gpu ? "CUDA" : "CPU",
             ir_op_info[n->op].name, n->id, mixed && !bf[KS_STAGE] ? ": a product of bf16 by float32 without a staged copy" : "");
    return;
  }
  if (gm)
    for (int x = 0; x < 3; x++) gm->bf16[x] = bf[gm->slot[x]];
  if (mixed) {
    int x = bf[gm->slot[LG_A]] ? LG_B : LG_A;
    gm->staged[x] = gm->bf16[x] = true;
    if (s->bufs[slot[KS_STAGE]].role != BUF_TWIN) {
      LKernel *st = lower_stage(a, s, k, gm->slot[x], slot[gm->slot[x]]);
      lkernel_facts(a, s, tgt, st);
      c->stage = st;
    }
  }
  for (int i = 0; i < 2; i++)
    if (v[i]) memcpy(v[i]->slot_bf16, bf, sizeof bf), round_stored(a, v[i], v[i]->body);
  for (int i = 0; c->steps && i < c->steps->n; i++)
    memcpy(c->steps->lk[i]->slot_bf16, bf, sizeof bf), round_stored(a, c->steps->lk[i], c->steps->lk[i]->body);
}

LModule *lower_module(Arena *a, const Schedule *s, LTarget tgt, const int *time_axis) {
  LModule *m = arena_alloc(a, sizeof *m);
  m->tgt = tgt;
  m->cls = arena_alloc(a, sizeof *m->cls * ((size_t)s->nkernels + 1));
  for (int ki = 0; ki < s->nkernels; ki++) {
    const Kernel *k = &s->kernels[ki];
    if (k->cls != ki) continue;
    LClass *c = &m->cls[ki];
    const Node *n = &s->g->nodes[k->node];
    char err[512] = "";
    c->outer = k->outer;
    LGemm *gm = lower_gemm(a, s, k);
    c->gemm = gm;
    c->product_only = k->fusion == FG_WEIGHT_GRAD || n->op == OP_MATMUL;
    c->steps = lower_steps(a, s, k, tgt);
    if (c->steps) c->outer = (SymSize){1, 0, 0, 1};
    if (split_rows(gm, tgt, c->steps)) c->outer = symsize_mul(gm->count, gm->m);  // a thread's rows
    LKernel *lk = NULL, *infer = NULL;
    if (!c->product_only && !c->steps) {
      lk = infer = lower_kernel(a, s, k, tgt, true, err, sizeof err);
      if (lk && lk->dropout) infer = lower_kernel(a, s, k, tgt, false, err, sizeof err);
      c->train = lk, c->infer = infer;
      if (lk && !c->gemm) c->outer = lk->nouter;  // a form may choose its own (the GPU's attention)
      if (!lk && !err[0] && tgt == LTARGET_CPU) c->conv = lower_conv_cpu(a, s, k);
      if (!lk && !err[0] && !c->conv) kernel_unlowered(err, sizeof err, tgt == LTARGET_GPU ? "CUDA" : "CPU", n);
    }
    mark_storage(a, s, k, c, gm, (LKernel *[]){lk, infer}, tgt, err, sizeof err);
    if (lk) lkernel_facts(a, s, tgt, lk);
    if (infer && infer != lk) lkernel_facts(a, s, tgt, infer);
    for (int i = 0; c->steps && i < c->steps->n; i++)
      if (c->steps->lk[i]) lkernel_facts(a, s, tgt, c->steps->lk[i]);
    if (err[0]) c->err = arena_strdup(a, err);
    if (c->err && !m->err) m->err = c->err;
  }
  LKernel *adamw[2] = {lower_adamw(a, false), lower_adamw(a, true)};
  for (int i = 0; i < 2; i++) lkernel_facts(a, s, tgt, adamw[i]);
  m->adamw = adamw[0], m->adamw_twin = adamw[1];
  if (time_axis) {
    m->window = arena_alloc(a, sizeof *m->window * ((size_t)s->nkernels + 1));
    for (int ki = 0; ki < s->nkernels; ki++) {
      m->window[ki] = lower_window(s, time_axis, &s->kernels[ki], tgt);
      const LGemm *gm = m->cls[s->kernels[ki].cls].gemm;
      if (m->window[ki].kind == LW_OUTER && gm && gm->split_rows)  // outer index: a row, m of them per entry
        m->window[ki].stride = symsize_mul(m->window[ki].stride, gm->m);
    }
  }
  return m;
}

// ---- products ---------------------------------------------------------------------

// Per-axis strides of operand xs (matrix [rows, cols] last, its batch axes
// aligned right with the output's nb batch axes): 0 where it has no such
// axis or size 1; true when they are the flat index's (xs's batch shape is
// the output's, or it has none).
static bool gemm_strides(const Shape *xs, const SymSize *batch, int nb, SymSize *st) {
  int bx = xs->rank - 2;
  SymSize mat = symsize_prod(xs, bx, xs->rank), acc = mat;
  bool all = bx == nb, none = true;
  for (int i = nb - 1; i >= 0; i--) {
    int j = i - (nb - bx);
    bool one = j < 0 || (xs->d[j].kind == DIM_CONST && xs->d[j].n == 1);
    st[i] = one ? (SymSize){0, 0, 0, 1} : acc;
    if (!one) acc = symsize_mul(acc, symsize_of(xs->d[j])), none = false;
    if (one || !symsize_eq(symsize_of(xs->d[j]), batch[i])) all = false;
  }
  return all || none;
}

LGemm *lower_gemm(Arena *a, const Schedule *s, const Kernel *k) {
  const Graph *g = s->g;
  const Node *n = &g->nodes[k->node];
  LGemm *gm = arena_alloc(a, sizeof *gm);
  if (k->fusion == FG_WEIGHT_GRAD) {  // dW [d, c] = x^T dy over all rows; x [.., d], dy [.., c]
    const Shape *xs = &g->nodes[k->leaf[0]].shape, *ys = &g->nodes[k->leaf[1]].shape;
    gm->ta = true, gm->split_cols = true, gm->flat = true;
    gm->slot[LG_A] = KS_IN0, gm->slot[LG_B] = KS_IN1, gm->slot[LG_C] = KS_OUT;
    int r = xs->rank;
    gm->m = symsize_of(xs->d[r - 1]), gm->n = symsize_of(ys->d[r - 1]), gm->k = symsize_prod(xs, 0, r - 1);
    gm->ld[LG_A] = gm->m, gm->ld[LG_B] = gm->n, gm->ld[LG_C] = gm->n;
    gm->count = (SymSize){1, 0, 0, 1};
    return gm;
  }
  const Node *mm = k->fusion == FG_MATMUL_MAP ? &g->nodes[k->matmul] : n->op == OP_MATMUL ? n : NULL;
  if (!mm) return NULL;
  const Shape *xs = &g->nodes[mm->in[0]].shape, *ys = &g->nodes[mm->in[1]].shape, *os = &mm->shape;
  int r = os->rank;
  for (int i = 0; i < 2; i++) {  // the operands' slots: the kernel's leaves
    gm->slot[i] = -1;
    for (int j = 0; j < k->nin; j++)
      if (k->leaf[j] == mm->in[i]) gm->slot[i] = KS_IN0 + j;
  }
  if (n->op == OP_MATMUL) gm->slot[LG_A] = KS_IN0, gm->slot[LG_B] = KS_IN1;
  gm->slot[LG_C] = KS_OUT;
  gm->tb = k->tb;
  gm->m = symsize_of(os->d[r - 2]), gm->n = symsize_of(os->d[r - 1]), gm->k = symsize_of(xs->d[xs->rank - 1]);
  gm->ld[LG_A] = gm->k, gm->ld[LG_B] = gm->tb ? gm->k : gm->n, gm->ld[LG_C] = gm->n;
  gm->nbatch = r - 2;
  for (int i = 0; i < r - 2; i++) gm->batch[i] = symsize_of(os->d[i]);
  gm->count = symsize_prod(os, 0, r - 2);
  bool fa = gemm_strides(xs, gm->batch, r - 2, gm->stride[LG_A]);
  bool fb = gemm_strides(ys, gm->batch, r - 2, gm->stride[LG_B]);
  gemm_strides(os, gm->batch, r - 2, gm->stride[LG_C]);
  gm->flat = fa && fb;
  for (int x = 0; x < 3; x++) {
    bool any = false;
    for (int i = 0; i < gm->nbatch; i++) any = any || gm->stride[x][i].coef != 0;
    SymSize mat = x == LG_A ? symsize_mul(gm->m, gm->k) : x == LG_B ? symsize_mul(gm->k, gm->n) : symsize_mul(gm->m, gm->n);
    gm->flat_stride[x] = gm->flat && any ? mat : (SymSize){0, 0, 0, 1};
  }
  gm->fold = gm->flat && gm->flat_stride[LG_A].coef != 0 && gm->flat_stride[LG_B].coef == 0;
  return gm;
}

static void print_sym(FILE *f, SymSize z) {
  bool one = z.coef == 1 && (z.pb || z.pt);
  if (!one) fprintf(f, "%lld", (long long)z.coef);
  for (int i = 0; i < z.pb; i++) fputs(one && i == 0 ? "B" : "*B", f);
  for (int i = 0; i < z.pt; i++) fputs(one && i == 0 && !z.pb ? "T" : "*T", f);
  if (symsize_den(z) > 1) fprintf(f, "/%lld", (long long)symsize_den(z));
}

void lgemm_print(FILE *f, const LGemm *gm) {
  fprintf(f, "  gemm s%d = %ss%d @ %ss%d: m ", gm->slot[LG_C], gm->ta ? "T " : "", gm->slot[LG_A], gm->tb ? "T " : "",
          gm->slot[LG_B]);
  print_sym(f, gm->m), fputs(" n ", f), print_sym(f, gm->n), fputs(" k ", f), print_sym(f, gm->k);
  if (gm->nbatch) fputs(", batch [", f);
  for (int i = 0; i < gm->nbatch; i++) fputs(i ? ", " : "", f), print_sym(f, gm->batch[i]);
  if (gm->nbatch) fputs("]", f);
  for (int x = 0; x < 3; x++) {
    if (!gm->nbatch) break;
    fprintf(f, " %c[", "ABC"[x]);
    for (int i = 0; i < gm->nbatch; i++) fputs(i ? ", " : "", f), print_sym(f, gm->stride[x][i]);
    fputs("]", f);
  }
  fprintf(f, "%s%s%s\n", gm->flat ? ", strided-batched" : ", entry by entry", gm->fold ? ", rows folded" : "",
          gm->split_cols ? ", split over columns of C" : gm->split_rows ? ", split over rows" : "");
}

// ---- the step program's windows ----------------------------------------------------

// The axes [0, nouter) of *sh are the coordinates of k's outer index
// (schedule.c outer_of; for FG_MATMUL_MAP the product's batch axes).
LWindow lower_window(const Schedule *s, const int *time_axis, const Kernel *k, LTarget tgt) {
  const Graph *g = s->g;
  const Node *n = &g->nodes[k->node];
  const Node *mm = k->fusion == FG_MATMUL_MAP ? &g->nodes[k->matmul] : n->op == OP_MATMUL ? n : NULL;
  const Shape *xs = n->nin ? &g->nodes[n->in[0]].shape : NULL, *sh = &n->shape;
  int a = time_axis ? time_axis[n->id] : -1, r = n->shape.rank, nouter = r - 1;
  LWindow w = {LW_FULL, {1, 0, 0, 1}, {1, 0, 0, 1}};
  if (a < 0 || k->fusion == FG_WEIGHT_GRAD) return w;
  bool fwd = n->op == OP_ATTENTION || n->op == OP_ATTENTION_LSE;
  if (lower_att_gpu_form(g, n, tgt) || (fwd && (lower_att_block(g, n, k, tgt) > 0 || lower_att_short_fwd(g, n, k, tgt))))
    return w.kind = LW_BODY, w;
  if (n->op == OP_SCAN && a == n->axis) return w.kind = LW_BODY, w;  // positions [w0, w1) from h_{w0-1}
  if (n->op == OP_ROUTED_MATMUL) return w.kind = LW_BODY, w;  // the rows at positions [w0, w1) (lower_route.c)
  if (n->op == OP_SCAN_READ) return w.kind = a == n->axis ? LW_BODY : LW_FULL, w;  // from S_{w0-1}, or all
  if (reduce_rows_gpu_form(g, n, tgt)) return w;  // column tiles: all of it
  if (lower_steps_form(s, k, tgt)) return w;  // the chunked convolution: every position
  bool inside = false;
  if (mm) sh = &mm->shape, nouter = r - 2, inside = a == r - 2;
  else if (n->op == OP_ATTENTION) nouter = n->axis ? r - 2 : r - 1;  // query rows
  else if (n->op == OP_ATTENTION_LSE) nouter = n->axis ? r - 1 : r;  // query rows
  else if (n->op == OP_SOFTMAX) sh = xs, nouter = n->axis;
  else if (n->op == OP_SCAN || n->op == OP_SCAN_REV) nouter = n->axis;
  else if (n->op == OP_CAUSAL_CONV && n->conv == CONV_MATRIX) sh = xs, nouter = r - 2, inside = a == r - 2;
  else if (n->op == OP_CROSS_ENTROPY || n->op == OP_SCATTER_ADD || n->op == OP_ATTENTION_GRAD || n->op == OP_CONV_DW ||
           n->op == OP_ATTENTION_DBIAS || n->op == OP_ROUTED_MATMUL_DW ||
           n->op == OP_SCAN_READ_GRAD ||
           n->op == OP_CONV_DX)
    return w;
  if (a < nouter) w.kind = LW_OUTER, w.stride = symsize_prod(sh, a + 1, nouter);
  else if (inside) w.kind = LW_ROWS, w.stride = (SymSize){1, 0, 0, 1};
  else return w;
  w.extent = symsize_of(sh->d[a]);
  return w;
}

// ---- text --------------------------------------------------------------------------

static const char *kind_name[LX_COUNT] = {
    [LX_NEG] = "neg", [LX_EXP] = "exp", [LX_LOG] = "log", [LX_SQRT] = "sqrt", [LX_SIN] = "sin", [LX_COS] = "cos",
    [LX_TANH] = "tanh", [LX_ERF] = "erf", [LX_ADD] = "+", [LX_SUB] = "-", [LX_MUL] = "*", [LX_DIV] = "/",
    [LX_REM] = "%", [LX_MAX] = "max", [LX_LT] = "<", [LX_GT] = ">", [LX_GE] = ">=", [LX_EQ] = "==", [LX_AND] = "&&",
    [LX_TOF] = "float", [LX_TOI] = "int", [LX_BF16] = "bf16", [LX_KEEP] = "keep"};

static void print_var(FILE *f, const LKernel *lk, int v) { fprintf(f, "%s_%d", lk->names[v][0] ? lk->names[v] : "v", v); }

static void print_expr(FILE *f, const LKernel *lk, const LExpr *e) {
  switch (e->kind) {
  case LX_INT: fprintf(f, "%lld", (long long)e->ival); return;
  case LX_EXP: fputs(e->ival ? "exp_sfu(" : "exp(", f), print_expr(f, lk, e->a[0]), fputc(')', f); return;
  case LX_FLT: fprintf(f, "%gf", e->fval); return;
  case LX_DIM: fputs(e->ival ? "T" : "B", f); return;
  case LX_VAR: print_var(f, lk, e->var); return;
  case LX_ROW0: fputs("row0", f); return;
  case LX_POS0: fputs("pos0", f); return;
  case LX_WIN: fputs(e->ival == 2 ? "wk" : e->ival ? "w1" : "w0", f); return;
  case LX_LOAD:
    if (e->slot >= LK_LOCAL0) fprintf(f, "local%d[", e->slot - LK_LOCAL0);
    else fprintf(f, "%s%d[", lk->slot_int[e->slot] ? "ids" : "s", e->slot);
    print_expr(f, lk, e->a[0]);
    fputc(']', f);
    return;
  case LX_SELECT:
    fputc('(', f), print_expr(f, lk, e->a[0]), fputs(" ? ", f), print_expr(f, lk, e->a[1]);
    fputs(" : ", f), print_expr(f, lk, e->a[2]), fputc(')', f);
    return;
  case LX_KEEP:
    fprintf(f, "keep(%g, ", e->fval), print_expr(f, lk, e->a[0]), fputc(')', f);
    return;
  default:
    if (!e->a[1] || e->kind == LX_MAX) {
      fprintf(f, "%s(", kind_name[e->kind]);
      print_expr(f, lk, e->a[0]);
      if (e->a[1]) fputs(", ", f), print_expr(f, lk, e->a[1]);
      fputc(')', f);
      return;
    }
    fputc('(', f), print_expr(f, lk, e->a[0]), fprintf(f, " %s ", kind_name[e->kind]), print_expr(f, lk, e->a[1]);
    fputc(')', f);
  }
}

static void print_block(FILE *f, const LKernel *lk, const LStmt *st, int ind) {
  for (; st; st = st->next) {
    fprintf(f, "%*s", ind, "");
    switch (st->kind) {
    case LS_LET: print_var(f, lk, st->var), fputs(" = ", f), print_expr(f, lk, st->val), fputc('\n', f); break;
    case LS_STORE:
      fprintf(f, st->slot >= LK_LOCAL0 ? "local%d[" : "s%d[", st->slot >= LK_LOCAL0 ? st->slot - LK_LOCAL0 : st->slot);
      print_expr(f, lk, st->idx), fputs("] = ", f), print_expr(f, lk, st->val);
      fputc('\n', f);
      break;
    case LS_FOR:
      fprintf(f, "for%s ", st->par ? " par" : ""), print_var(f, lk, st->var), fputs(" in [", f);
      print_expr(f, lk, st->lo), fputs(", ", f), print_expr(f, lk, st->hi), fputs("):\n", f);
      print_block(f, lk, st->body, ind + 2);
      break;
    case LS_CARRY:
      fputs("carry (", f);
      for (int k = 0; k < st->ncarry; k++)
        fputs(k ? ", " : "", f), print_var(f, lk, st->carry[k]), fputs(" = ", f), print_expr(f, lk, st->init[k]);
      fputs(") for ", f), print_var(f, lk, st->var), fputs(" in [", f);
      print_expr(f, lk, st->lo), fputs(", ", f), print_expr(f, lk, st->hi), fputs("):\n", f);
      print_block(f, lk, st->body, ind + 2);
      fprintf(f, "%*snext (", ind + 2, "");
      for (int k = 0; k < st->ncarry; k++)
        fputs(k ? ", " : "", f), print_var(f, lk, st->carry[k]), fputs(" = ", f), print_expr(f, lk, st->step[k]);
      fputs(")\n", f);
      break;
    case LS_REDUCE:
      print_var(f, lk, st->var), fprintf(f, " = %s%s over ", st->op == LX_MAX ? "max" : "sum", st->wide ? " (double)" : "");
      print_var(f, lk, st->ivar), fputs(" in [", f), print_expr(f, lk, st->lo), fputs(", ", f), print_expr(f, lk, st->hi);
      fputs(") of ", f), print_expr(f, lk, st->val), fputc('\n', f);
      break;
    case LS_GEMM: {
      const LCall *c = st->call;
      static const char *op[3] = {"A", "B", "C"};
      fprintf(f, "gemm%s%s m ", c->ta ? " ta" : "", c->tb ? " tb" : ""), print_expr(f, lk, c->m);
      fputs(" n ", f), print_expr(f, lk, c->n), fputs(" k ", f), print_expr(f, lk, c->k);
      fprintf(f, " alpha %g beta %g", c->alpha, c->beta);
      for (int x = 0; x < 3; x++) {
        fprintf(f, c->slot[x] >= LK_LOCAL0 ? " %s local%d[" : " %s s%d[", op[x], c->slot[x] >= LK_LOCAL0 ? c->slot[x] - LK_LOCAL0 : c->slot[x]);
        print_expr(f, lk, c->at[x]), fputs("] ld ", f), print_expr(f, lk, c->ld[x]);
      }
      fputc('\n', f);
      break;
    }
    default: fputs("?\n", f); break;
    }
  }
}

void lkernel_print(FILE *f, const LKernel *lk) {
  fprintf(f, "  %s %s, outer [0, ", lk->name, lk->shape == LK_ELEMENTS ? "elements" : "rows");
  print_expr(f, lk, lk->outer);
  if (lk->inner) fputs(") x [0, ", f), print_expr(f, lk, lk->inner);
  fputs(")", f);
  if (lk->team) fprintf(f, ", a team of %d threads each", lk->team);
  fputs(":\n", f);
  for (int i = 0; i < lk->nlocals; i++)
    fprintf(f, "    local%d: %s[%lld]\n", i, lk->local_bf16[i] ? "bf16" : "float", (long long)lk->local_size[i]);
  print_block(f, lk, lk->body, 4);
}

// An expression of kind k (var < 0), or variable var, in x.
static bool lexpr_any(const LExpr *x, LExprKind k, int var) {
  if (!x) return false;
  if (var < 0 ? x->kind == k : x->kind == LX_VAR && x->var == var) return true;
  for (int i = 0; i < 3; i++)
    if (lexpr_any(x->a[i], k, var)) return true;
  return false;
}
static bool lstmt_any(const LStmt *s, LExprKind k, int var) {
  for (; s; s = s->next) {
    if (lexpr_any(s->lo, k, var) || lexpr_any(s->hi, k, var) || lexpr_any(s->idx, k, var) || lexpr_any(s->val, k, var) ||
        lstmt_any(s->body, k, var))
      return true;
    for (int c = 0; c < s->ncarry; c++)
      if (lexpr_any(s->init[c], k, var) || lexpr_any(s->step[c], k, var)) return true;
    if (s->call) {
      const LCall *c = s->call;
      if (lexpr_any(c->m, k, var) || lexpr_any(c->n, k, var) || lexpr_any(c->k, k, var)) return true;
      for (int x = 0; x < 3; x++)
        if (lexpr_any(c->at[x], k, var) || lexpr_any(c->ld[x], k, var)) return true;
    }
  }
  return false;
}
bool lcall_packed(const LKernel *lk, const LCall *c, int x) {
  int sl = c->slot[x];
  bool along = x == LC_A ? !c->ta : x == LC_B && c->tb;
  if (sl < LK_LOCAL0 || !lk->local_bf16[sl - LK_LOCAL0] || !along) return false;
  return c->at[x]->kind == LX_INT && c->at[x]->ival % 2 == 0 && c->ld[x]->kind == LX_INT && c->ld[x]->ival % 2 == 0;
}

bool lcall_ldsm(const LKernel *lk, const LCall *c) {
  int sl = c->slot[LC_B];
  if (sl < LK_LOCAL0 || !lk->local_bf16[sl - LK_LOCAL0] || c->tb) return false;
  if (c->at[LC_B]->kind != LX_INT || c->ld[LC_B]->kind != LX_INT || c->n->kind != LX_INT) return false;
  int64_t at = c->at[LC_B]->ival, ld = c->ld[LC_B]->ival;
  return at % 8 == 0 && ld % 8 == 0 && ld > 0 && c->n->ival <= ld / 8 * 8;
}

bool lstmt_has(const LStmt *s, LExprKind k) { return lstmt_any(s, k, -1); }
bool lstmt_uses(const LStmt *s, int var) { return lstmt_any(s, LX_COUNT, var); }

int lower_print(FILE *f, Arena *a, const Schedule *s, LTarget tgt) {
  char err[512];
  for (int ki = 0; ki < s->nkernels; ki++) {
    const Kernel *k = &s->kernels[ki];
    if (k->cls != ki) continue;
    const Node *n = &s->g->nodes[k->node];
    LGemm *gm = lower_gemm(a, s, k);
    LKernel *lk = lower_kernel(a, s, k, tgt, true, err, sizeof err);
    LSteps *st = lower_steps(a, s, k, tgt);
    split_rows(gm, tgt, st);
    if (err[0]) return fprintf(stderr, "%s\n", err), 1;
    fprintf(f, "k%d %s %%%d%s\n", ki, k->fusion == FG_WEIGHT_GRAD ? "weight_grad" : ir_op_info[n->op].name, n->id,
            gm || lk ? "" : st && k->chunk ? arena_printf(a, ": chunked, C %d, steps in order", k->chunk) : st ? ": steps in order" : ": a backend kernel (causal convolution)");
    if (gm) lgemm_print(f, gm);
    if (lk) lkernel_print(f, lk);
    for (int i = 0; st && i < st->n; i++) {
      if (st->gm[i]) lgemm_print(f, st->gm[i]);
      else lkernel_print(f, st->lk[i]);
    }
  }
  fprintf(f, "optimizer adamw: an outer index per element of a parameter\n");
  lkernel_print(f, lower_adamw(a, false));
  return 0;
}
