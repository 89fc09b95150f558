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

typedef struct {
  Arena *a;
  const Schedule *s;
  const Graph *g;
  const Kernel *k;
  LKernel *lk;
  LTarget tgt;
  bool train;
  bool own_outer;   // the form chosen for tgt has its own outer extent, not Kernel.outer
  char *err;
  size_t errlen;
  int cap;
  LStmt **tail[8];  // where the next statement of each open block goes
  int depth;
} Lo;

static bool lower_steps_form(const Schedule *s, const Kernel *k, LTarget tgt);

// ---- builders ----------------------------------------------------------------------

static int new_var(Lo *L, LType t, const char *name) {
  LKernel *lk = L->lk;
  if (lk->nvars == L->cap) {
    int cap = L->cap ? 2 * L->cap : 16;
    lk->types = arena_realloc(L->a, lk->types, sizeof(LType) * (size_t)L->cap, sizeof(LType) * (size_t)cap);
    lk->names = arena_realloc(L->a, lk->names, sizeof(char *) * (size_t)L->cap, sizeof(char *) * (size_t)cap);
    L->cap = cap;
  }
  lk->types[lk->nvars] = t;
  lk->names[lk->nvars] = name ? name : "";
  return lk->nvars++;
}

static LExpr *ex(Lo *L, LExprKind kind, LType t) {
  LExpr *e = arena_alloc(L->a, sizeof *e);
  e->kind = kind, e->type = t;
  return e;
}
static LExpr *xi(Lo *L, int64_t v) {
  LExpr *e = ex(L, LX_INT, LT_I64);
  e->ival = v;
  return e;
}
static LExpr *xf(Lo *L, double v) {
  LExpr *e = ex(L, LX_FLT, LT_F32);
  e->fval = v;
  return e;
}
static LExpr *xvar(Lo *L, int v) {
  LExpr *e = ex(L, LX_VAR, L->lk->types[v]);
  e->var = v;
  return e;
}
static LExpr *x1(Lo *L, LExprKind kind, LExpr *x) {
  if (kind == LX_TOF && x->kind == LX_INT) return xf(L, (double)x->ival);
  LExpr *e = ex(L, kind, kind == LX_TOF ? LT_F32 : kind == LX_TOI ? LT_I64 : kind == LX_KEEP ? LT_BOOL : x->type);
  e->a[0] = x;
  return e;
}
static LExpr *x2(Lo *L, LExprKind kind, LExpr *x, LExpr *y) {
  if ((kind == LX_DIV || kind == LX_REM) && y->kind == LX_INT && y->ival == 1) return kind == LX_DIV ? x : xi(L, 0);
  bool cmp = kind == LX_LT || kind == LX_GT || kind == LX_GE || kind == LX_EQ || kind == LX_AND;
  LExpr *e = ex(L, kind, cmp ? LT_BOOL : x->type);
  e->a[0] = x, e->a[1] = y;
  return e;
}
static LExpr *xsel(Lo *L, LExpr *c, LExpr *x, LExpr *y) {
  LExpr *e = ex(L, LX_SELECT, x->type);
  e->a[0] = c, e->a[1] = x, e->a[2] = y;
  return e;
}
// Integer arithmetic with constants folded (sizes are mostly constants).
static LExpr *imul(Lo *L, LExpr *x, LExpr *y) {
  if (x->kind == LX_INT && y->kind == LX_INT) return xi(L, x->ival * y->ival);
  if (x->kind == LX_INT && x->ival == 1) return y;
  if (y->kind == LX_INT && y->ival == 1) return x;
  if ((x->kind == LX_INT && x->ival == 0) || (y->kind == LX_INT && y->ival == 0)) return xi(L, 0);
  return x2(L, LX_MUL, x, y);
}
static LExpr *iadd(Lo *L, LExpr *x, LExpr *y) {
  if (x->kind == LX_INT && y->kind == LX_INT) return xi(L, x->ival + y->ival);
  if (x->kind == LX_INT && x->ival == 0) return y;
  if (y->kind == LX_INT && y->ival == 0) return x;
  return x2(L, LX_ADD, x, y);
}
// min, max of two i64 values
static LExpr *imin(Lo *L, LExpr *x, LExpr *y) { return xsel(L, x2(L, LX_LT, x, y), x, y); }
static LExpr *imax(Lo *L, LExpr *x, LExpr *y) { return xsel(L, x2(L, LX_LT, x, y), y, x); }
static LExpr *load(Lo *L, int slot, LExpr *idx) {
  bool local = slot >= LK_LOCAL0;
  LExpr *e = ex(L, LX_LOAD, !local && L->lk->slot_int[slot] ? LT_I64 : LT_F32);
  e->slot = slot, e->a[0] = idx;
  if (!local) L->lk->slot_read[slot] = true;
  return e;
}
static LExpr *xdim(Lo *L, Dim d) {
  if (d.kind == DIM_CONST) return xi(L, d.n);
  LExpr *e = ex(L, LX_DIM, LT_I64);
  e->ival = d.kind == DIM_T;
  return e;
}
// prod of dims [from, to) of s
static LExpr *dprod(Lo *L, const Shape *s, int from, int to) {
  LExpr *r = xi(L, 1);
  for (int i = from; i < to; i++) r = imul(L, r, xdim(L, s->d[i]));
  return r;
}

static LStmt *stmt(Lo *L, LStmtKind kind) {
  LStmt *st = arena_alloc(L->a, sizeof *st);
  st->kind = kind;
  *L->tail[L->depth] = st;
  L->tail[L->depth] = &st->next;
  return st;
}
static int let(Lo *L, LExpr *v, const char *name) {
  LStmt *st = stmt(L, LS_LET);
  st->var = new_var(L, v->type, name);
  st->val = v;
  return st->var;
}
static void store(Lo *L, int slot, LExpr *idx, LExpr *v) {
  LStmt *st = stmt(L, LS_STORE);
  st->slot = slot, st->idx = idx, st->val = v;
  if (slot < LK_LOCAL0) L->lk->slot_written[slot] = true;
}
// for (var in [lo, hi)) { ... for_end }: returns var.
static int for_begin(Lo *L, LExpr *lo, LExpr *hi, bool par, const char *name) {
  LStmt *st = stmt(L, LS_FOR);
  st->var = new_var(L, LT_I64, name);
  st->lo = lo, st->hi = hi, st->par = par;
  L->tail[++L->depth] = &st->body;
  return st->var;
}
static void for_end(Lo *L) { L->depth--; }
// var = op over a new index in [lo, hi) of val(index): begin returns the
// index; reduce_end(value) closes it and returns the result variable.
static LStmt *reduce_begin(Lo *L, LExprKind op, LExpr *lo, LExpr *hi, int *index) {
  LStmt *st = arena_alloc(L->a, sizeof *st);
  st->kind = LS_REDUCE, st->op = op, st->lo = lo, st->hi = hi;
  st->ivar = *index = new_var(L, LT_I64, "t");
  return st;
}
static int reduce_end(Lo *L, LStmt *st, LExpr *val, const char *name) {
  st->val = val;
  st->var = new_var(L, LT_F32, name);
  *L->tail[L->depth] = st;
  L->tail[L->depth] = &st->next;
  return st->var;
}

// A local array of size floats (LK_LOCAL0 + i).
static int local(Lo *L, int64_t size) {
  LKernel *lk = L->lk;
  if (lk->nlocals == LK_MAX_LOCALS) {
    fprintf(stderr, "xfc: internal error: lower.c: more than %d local arrays\n", LK_MAX_LOCALS);
    abort();
  }
  lk->local_size[lk->nlocals] = size;
  return LK_LOCAL0 + lk->nlocals++;
}

// for (index in [lo, hi)) carrying vars[k] = init[k] (types of init[k]) {
// ... carry_end(next) }: returns the statement; *index the loop variable.
static LStmt *carry_begin(Lo *L, LExpr *lo, LExpr *hi, int n, LExpr **init, const char *const *names, int *vars, int *index) {
  LStmt *st = stmt(L, LS_CARRY);
  st->var = *index = new_var(L, LT_I64, "t");
  st->lo = lo, st->hi = hi, st->ncarry = n;
  st->carry = arena_alloc(L->a, sizeof(int) * (size_t)n);
  st->init = arena_alloc(L->a, sizeof(LExpr *) * (size_t)n);
  st->step = arena_alloc(L->a, sizeof(LExpr *) * (size_t)n);
  for (int k = 0; k < n; k++) st->init[k] = init[k], vars[k] = st->carry[k] = new_var(L, init[k]->type, names[k]);
  L->tail[++L->depth] = &st->body;
  return st;
}
static void carry_end(Lo *L, LStmt *st, LExpr **next) {
  for (int k = 0; k < st->ncarry; k++) st->step[k] = next[k];
  L->depth--;
}

// An op the description has no loops for where it stands (inside a group):
// "file:line:col: error: no loop lowering for op 'X' (node %N)", never an identity.
static void unlowered(Lo *L, const Node *n) {
  if (L->err[0]) return;
  int at = n->loc.file ? snprintf(L->err, L->errlen, "%s:%d:%d: ", n->loc.file, n->loc.line, n->loc.col) : 0;
  if (at < 0 || (size_t)at >= L->errlen) at = 0;
  snprintf(L->err + at, L->errlen - (size_t)at, "error: no loop lowering for op '%s' (node %%%d)", ir_op_info[n->op].name, n->id);
}

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

// Offset of x (shape xs) at the element, numpy-broadcast (axes aligned right).
static LExpr *bcast_offset(Lo *L, Map *m, const Shape *xs) {
  const Shape *os = m->os;
  if (shape_eq(xs, os)) return xvar(L, m->o);
  LExpr *off = xi(L, 0), *stride = xi(L, 1);
  for (int k = os->rank - 1; k >= 0; k--) {
    int i = k - (os->rank - xs->rank);
    if (i < 0) break;
    bool one = xs->d[i].kind == DIM_CONST && xs->d[i].n == 1;
    if (!one) off = iadd(L, off, imul(L, coord(L, m, k), stride));
    stride = imul(L, stride, xdim(L, xs->d[i]));
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
  case OP_GELU:  // 0.5 x (1 + erf(x / sqrt 2))
    return x2(L, LX_MUL, x2(L, LX_MUL, xf(L, 0.5), x), x2(L, LX_ADD, xf(L, 1), x1(L, LX_ERF, x2(L, LX_MUL, x, xf(L, M_SQRT1_2)))));
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
  case OP_IOTA: v = x1(L, LX_TOF, coord(L, m, r - 1)); break;
  case OP_EXPAND: v = operand(L, m, n, 0); break;
  case OP_MATMUL: v = load(L, KS_OUT, xvar(L, m->o)); break;  // the kernel's GEMM wrote it
  case OP_CAUSAL_MASK:
    v = xsel(L, x2(L, LX_GT, coord(L, m, r - 1), coord(L, m, r - 2)), xf(L, n->fval), operand(L, m, n, 0));
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
  case OP_SLICE:
    v = load(L, move_slot(L, n, 0), offset_at(L, m, xs, n->axis, iadd(L, coord(L, m, n->axis), xi(L, n->start)), NULL));
    break;
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
    else if (ir_op_info[n->op].cat == OPC_BINARY) v = binary(L, n, operand(L, m, n, 0), operand(L, m, n, 1));
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
  L->lk->nouter = r ? symsize_prod(os, 0, r - 1) : (SymSize){1, 0, 0};
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
  if (!m.nsmax) L->lk->inner = last, L->lk->ninner = r ? symsize_of(os->d[r - 1]) : (SymSize){1, 0, 0};
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

// The GPU's reductions over rows (sums over axes before the last, with the
// bias sum beside the gain gradient's): a block of GPU_RED_TEAM threads per
// tile of cw columns of an output row (cw the largest of 8, 4, 2, 1 that
// divides the row width and leaves GPU_RED_TILES tiles; one 32-byte sector
// holds a row of a tile of 8, and more, narrower tiles keep more loads in
// flight);
// thread x = g cw + cl, g < G = TEAM / cw, sums rows g, g + G, ... of its
// column in registers, then each column's total is its G partials in the
// order of g. Rows run in parallel, so the association differs from the
// CPU's rows in order.
enum { GPU_RED_TEAM = 512, GPU_RED_U = 8, GPU_RED_TILES = 64 };
static int64_t col_tile_width(int64_t lc) {
  int64_t cw = 8;
  while (cw > 1 && (lc % cw || lc / cw < GPU_RED_TILES)) cw /= 2;
  return cw;
}
// Opens the par loop over the team's threads x: *g its row group, *c its
// column of tile `tile`; returns x.
static int tile_threads(Lo *L, int tile, int64_t cw, int *g, int *c) {
  int x = for_begin(L, xi(L, 0), xi(L, GPU_RED_TEAM), true, "x");
  *g = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, cw)), "g");
  *c = let(L, iadd(L, imul(L, xvar(L, tile), xi(L, cw)), x2(L, LX_REM, xvar(L, x), xi(L, cw))), "c");
  return x;
}
// Column cl's total: op over the partials part[g cw + cl], g in order.
static int tile_total(Lo *L, int part, int64_t cw, int cl, LExprKind op, const char *name) {
  int gi;
  LStmt *rd = reduce_begin(L, op, xi(L, 0), xi(L, GPU_RED_TEAM / cw), &gi);
  return reduce_end(L, rd, load(L, part, iadd(L, imul(L, xvar(L, gi), xi(L, cw)), xvar(L, cl))), name);
}
static bool reduce_rows_gpu_form(const Graph *g, const Node *n, LTarget tgt) {
  if (tgt != LTARGET_GPU || (n->op != OP_SUM && n->op != OP_MEAN && n->op != OP_MAX)) return false;
  const Shape *xs = &g->nodes[n->in[0]].shape;
  bool over_bt = false;  // sums over the batch or the positions (gradients of biases and gains), not a
                         // fixed axis inside a position (a readout over a state's rows: a row each)
  for (int i = n->axis; i <= ir_reduce_end(n); i++) over_bt = over_bt || xs->d[i].kind != DIM_CONST;
  return over_bt && ir_reduce_end(n) < xs->rank - 1 && xs->d[xs->rank - 1].kind == DIM_CONST;
}

// A sum, mean or max over rows: GPU_RED_U accumulators per thread (loads in
// flight: rows s G U + u G + g of step s). FG_NORM_DG: also the sum of
// KS_IN1 into KS_SCRATCH, its own GPU_RED_U accumulators.
static void lower_reduce_rows_gpu(Lo *L, const Node *n) {
  const Shape *xs = &L->g->nodes[n->in[0]].shape;
  int r = xs->rank, ax = n->axis, end = ir_reduce_end(n);
  bool mx = n->op == OP_MAX;
  int nsum = L->k->fusion == FG_NORM_DG ? 2 : 1;
  int64_t lc = xs->d[r - 1].n, cw = col_tile_width(lc), ct = lc / cw, G = GPU_RED_TEAM / cw;
  LExpr *K = dprod(L, xs, ax, end + 1), *M = dprod(L, xs, end + 1, r - 1), *id = xf(L, mx ? -INFINITY : 0);
  L->own_outer = true, L->lk->team = GPU_RED_TEAM;
  L->lk->outer = imul(L, L->lk->outer, xi(L, ct)), L->lk->nouter = symsize_mul(L->lk->nouter, (SymSize){ct, 0, 0});
  int o = 0;
  int tile = let(L, x2(L, LX_REM, xvar(L, o), xi(L, ct)), "tile"), om = let(L, x2(L, LX_DIV, xvar(L, o), xi(L, ct)), "om");
  int m = let(L, x2(L, LX_REM, xvar(L, om), M), "m"), p = let(L, x2(L, LX_DIV, xvar(L, om), M), "p");
  int Kv = let(L, K, "K");
  int part[2], g, c;
  for (int k = 0; k < nsum; k++) part[k] = local(L, GPU_RED_TEAM);
  int x = tile_threads(L, tile, cw, &g, &c);
  LExpr *init[2 * GPU_RED_U];
  const char *names[2 * GPU_RED_U];
  int acc[2 * GPU_RED_U], step;
  for (int u = 0; u < nsum * GPU_RED_U; u++) init[u] = id, names[u] = "acc";
  LExpr *nsteps = x2(L, LX_DIV, iadd(L, xvar(L, Kv), xi(L, G * GPU_RED_U - 1)), xi(L, G * GPU_RED_U));
  LStmt *st = carry_begin(L, xi(L, 0), nsteps, nsum * GPU_RED_U, init, names, acc, &step);
  LExpr *next[2 * GPU_RED_U];
  for (int u = 0; u < GPU_RED_U; u++) {
    int row = let(L, iadd(L, imul(L, xvar(L, step), xi(L, G * GPU_RED_U)), iadd(L, xi(L, u * G), xvar(L, g))), "t");
    LExpr *in = imin(L, xvar(L, row), x2(L, LX_SUB, xvar(L, Kv), xi(L, 1)));
    LExpr *at = iadd(L, imul(L, iadd(L, imul(L, iadd(L, imul(L, xvar(L, p), xvar(L, Kv)), in), M), xvar(L, m)), xi(L, lc)), xvar(L, c));
    for (int k = 0; k < nsum; k++) {
      int a = acc[k * GPU_RED_U + u];
      int v = let(L, xsel(L, x2(L, LX_LT, xvar(L, row), xvar(L, Kv)), load(L, KS_IN0 + k, at), id), "v");
      next[k * GPU_RED_U + u] = mx ? x2(L, LX_MAX, xvar(L, v), xvar(L, a)) : x2(L, LX_ADD, xvar(L, a), xvar(L, v));
    }
  }
  carry_end(L, st, next);
  for (int k = 0; k < nsum; k++) {
    LExpr *all = xvar(L, acc[k * GPU_RED_U]);
    for (int u = 1; u < GPU_RED_U; u++) {
      LExpr *a = xvar(L, acc[k * GPU_RED_U + u]);
      all = mx ? x2(L, LX_MAX, a, all) : x2(L, LX_ADD, all, a);
    }
    store(L, part[k], xvar(L, x), all);
  }
  for_end(L);
  int cl = for_begin(L, xi(L, 0), xi(L, cw), true, "cl");
  LExpr *oc = iadd(L, iadd(L, imul(L, xvar(L, om), xi(L, lc)), imul(L, xvar(L, tile), xi(L, cw))), xvar(L, cl));
  for (int k = 0; k < nsum; k++) {
    LExpr *v = xvar(L, tile_total(L, part[k], cw, cl, mx ? LX_MAX : LX_ADD, k ? "res2" : "res"));
    if (n->op == OP_MEAN) v = x2(L, LX_DIV, v, x1(L, LX_TOF, xvar(L, Kv)));
    store(L, k ? KS_SCRATCH : KS_OUT, oc, v);
  }
  for_end(L);
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
    if (reduce_rows_gpu_form(L->g, n, L->tgt)) lower_reduce_rows_gpu(L, n);
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

static LExpr *xwin(Lo *L, int hi);
static int in_slot(Lo *L, const Node *n, int i);

// ---- linear recurrences ------------------------------------------------------------

// SCAN, SCAN_REV over a, b [P.., K, Q..] along axis: an outer index per
// sequence p < P and block of JB of the Q states of a position (JB 256 on a
// CPU, 64 on a GPU: two per lane), the positions in order, the block's
// states in parallel; the state of the step before is the output's own
// previous row (p K + t -+ 1) Q + j, read back by the thread (lane) that
// wrote it.
//   SCAN      h_t = a_t h_{t-1} + b_t, t in [0, K). Along T: t in [w0, w1),
//             which is [0, T) but in the step program; there h_{w0-1} is
//             the state row H [P, Q] (slot KS_SCRATCH, a cache of the step
//             program), into which the run copies its row wk - 1 (w0 < wk
//             <= w1, the position the next run starts from; wk 0: none)
//   SCAN_REV  g_t = dy_t + a_{t+1} g_{t+1}, t from K - 1 down to 0
// The offset of a (shape as, broadcast to s) at coordinates (o, t, j): o
// over the axes before `axis`, t on it, j over those after.
static LExpr *scan_bcast(Lo *L, const Shape *as, const Shape *s, int axis, LExpr *o, LExpr *t, LExpr *j) {
  LExpr *off = xi(L, 0), *stride = xi(L, 1);
  int r = s->rank;
  for (int k = r - 1; k >= 0 && k - (r - as->rank) >= 0; k--) {
    Dim d = as->d[k - (r - as->rank)];
    if (d.kind == DIM_CONST && d.n == 1) continue;
    LExpr *c = k == axis ? t : k < axis ? x2(L, LX_DIV, o, dprod(L, s, k + 1, axis)) : x2(L, LX_DIV, j, dprod(L, s, k + 1, r));
    if ((k < axis && k > 0) || k > axis + 1) c = x2(L, LX_REM, c, xdim(L, s->d[k]));  // o < P, j < Q: none on the first
    off = iadd(L, off, imul(L, c, stride));
    stride = imul(L, stride, xdim(L, d));
  }
  return off;
}

static void lower_scan(Lo *L, const Node *n) {
  const Shape *s = &n->shape, *as = &L->g->nodes[n->in[0]].shape;
  bool fwd = n->op == OP_SCAN, same = shape_eq(as, s);
  bool win = schedule_scan_state(n);
  int sa = in_slot(L, n, 0), sb = in_slot(L, n, 1);
  LExpr *K = xdim(L, s->d[n->axis]), *Q = dprod(L, s, n->axis + 1, s->rank);
  L->lk->name = ir_op_info[n->op].name;
  L->lk->shape = LK_ROWS;
  // an outer index per (sequence p, block of JB states): the states of a
  // position are independent, so wide ones spread over threads (warps)
  int64_t JB = L->tgt == LTARGET_GPU ? 64 : 256;
  int64_t NJ = Q->kind == LX_INT && Q->ival > JB ? (Q->ival + JB - 1) / JB : 1;
  L->own_outer = NJ > 1;
  L->lk->outer = imul(L, dprod(L, s, 0, n->axis), xi(L, NJ));
  L->lk->nouter = symsize_mul(symsize_prod(s, 0, n->axis), (SymSize){NJ, 0, 0});
  int p = NJ > 1 ? let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, NJ)), "p") : 0;  // 0: the outer index itself
  LExpr *j0 = NJ > 1 ? imul(L, x2(L, LX_REM, xvar(L, 0), xi(L, NJ)), xi(L, JB)) : xi(L, 0);
  LExpr *j1 = NJ > 1 ? imin(L, iadd(L, j0, xi(L, JB)), Q) : Q;
  if (NJ > 1) {
    int jl = let(L, j0, "j0"), jh = let(L, j1, "j1");
    j0 = xvar(L, jl), j1 = xvar(L, jh);
  }
  LExpr *w0 = win ? xwin(L, 0) : xi(L, 0);
  int st = for_begin(L, w0, win ? xwin(L, 1) : K, false, fwd ? "t" : "s");
  int t = fwd ? st : let(L, x2(L, LX_SUB, x2(L, LX_SUB, K, xi(L, 1)), xvar(L, st)), "t");
  int has = let(L, fwd ? x2(L, LX_GT, xvar(L, t), w0) : x2(L, LX_LT, xvar(L, t), x2(L, LX_SUB, K, xi(L, 1))), "has");
  int row = let(L, imul(L, iadd(L, imul(L, xvar(L, p), K), xvar(L, t)), Q), "row");
  // the neighbour's row, clamped to this one at the ends: in bounds for a select that evaluates both
  int nb = let(L, xsel(L, xvar(L, has), fwd ? x2(L, LX_SUB, xvar(L, row), Q) : iadd(L, xvar(L, row), Q), xvar(L, row)), "nb");
  int ta = fwd ? t : let(L, xsel(L, xvar(L, has), iadd(L, xvar(L, t), xi(L, 1)), xvar(L, t)), "ta");  // a's step
  int j = for_begin(L, j0, j1, true, "j");
  LExpr *at = iadd(L, xvar(L, row), xvar(L, j)), *nat = iadd(L, xvar(L, nb), xvar(L, j));
  LExpr *aoff = same ? (fwd ? at : nat) : scan_bcast(L, as, s, n->axis, xvar(L, p), xvar(L, ta), xvar(L, j));
  int av = let(L, load(L, sa, aoff), "a");
  LExpr *hrow = imul(L, xvar(L, p), Q);  // sequence p's state row
  LExpr *first = xf(L, 0);  // a_{w0} h_{w0-1}: 0 at w0 = 0, else from the state row
  if (win)
    first = xsel(L, x2(L, LX_GT, w0, xi(L, 0)), x2(L, LX_MUL, xvar(L, av), load(L, KS_SCRATCH, iadd(L, hrow, xvar(L, j)))), first);
  LExpr *carry = xsel(L, xvar(L, has), x2(L, LX_MUL, xvar(L, av), load(L, KS_OUT, nat)), first);
  store(L, KS_OUT, at, x2(L, LX_ADD, carry, load(L, sb, at)));
  for_end(L);
  for_end(L);
  if (!win) return;
  // H <- row wk - 1: a loop of one iteration where wk > 0, else none
  LExpr *wk = xwin(L, 2);
  for_begin(L, xi(L, 0), xsel(L, x2(L, LX_GT, wk, xi(L, 0)), xi(L, 1), xi(L, 0)), false, "keep");
  int krow = let(L, imul(L, iadd(L, imul(L, xvar(L, p), K), x2(L, LX_SUB, wk, xi(L, 1))), Q), "krow");
  j = for_begin(L, j0, j1, true, "j");
  store(L, KS_SCRATCH, iadd(L, hrow, xvar(L, j)), load(L, KS_OUT, iadd(L, xvar(L, krow), xvar(L, j))));
  for_end(L);
  for_end(L);
}

// ---- gradients of three parts --------------------------------------------------------

// Part p of a gradient of three (ATTENTION_GRAD's, SCAN_READ_GRAD's dq, dk,
// dv), element c of row r at slot[r w + off + c]: with Kernel.nout 3 each
// part in a buffer of its own (slots KS_OUT, KS_OUT1, KS_OUT2; w = its
// width, off 0), else packed along the last axis of KS_OUT (w = the sum of
// the widths, off = those before it; schedule.c's split_parts).
typedef struct {
  int slot;
  int64_t w, off;
} OutPart;

static bool out_parts(Lo *L, const Node *n, const int64_t width[3], int64_t row, OutPart part[3]) {
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

// ---- a scan of outer products read out (SCAN_READ, passes/fuse_scan.c) ------------
//
// One outer index per sequence (p, m) of k [P.., K, M.., dk, 1] (so row t of
// it is (p K + t) M + m), its state S [dk, dv] in a local array, row-major,
// never stored; the state's columns j are the par loops (vector lanes, a
// warp's threads), its rows i go in order.
//   SCAN_READ       for t in [w0, w1): S = a_t o S + k_t v_t (row by row,
//                   O += q_t[i] S[i, :] as each row is made); out_t = O.
//                   Along T, the step program's run starts from S_{w0-1}
//                   in the state row H [P M, dk dv] (slot KS_SCRATCH, a
//                   cache) and copies S into it after position wk - 1;
//                   elsewhere [w0, w1) = [0, K) from S = 0
//   SCAN_READ_GRAD  in order: S as above, dq_t[i] = S_t[i, :] . dy_t; then
//                   from t = K - 1 down, with G in the same local array,
//                   G = a_{t+1} o G + q_t^T dy_t, dk_t[i] = G[i, :] . v_t,
//                   dv_t = sum_i k_t[i] G[i, :] (accumulated as rows are made)
// Every sum runs over i (or j) in index order.
typedef struct {
  const Shape *ks, *as;
  int axis, p, m;        // the sequence's coordinates (variables)
  int64_t dk, dv;
  LExpr *K, *M;
  OutPart part[3];       // SCAN_READ_GRAD's dq, dk, dv
} Rd;

// The offset of the decay a (broadcast to k) at position t, row i: scan_bcast
// over k's shape, whose axes after the time axis are (m, i) and a last of 1.
static LExpr *rd_a(Lo *L, const Rd *d, LExpr *t, LExpr *i) {
  return scan_bcast(L, d->as, d->ks, d->axis, xvar(L, d->p), t, iadd(L, imul(L, xvar(L, d->m), xi(L, d->dk)), i));
}

// Row t of the sequence: (p K + t) M + m.
static int rd_row(Lo *L, const Rd *d, LExpr *t) {
  return let(L, iadd(L, imul(L, iadd(L, imul(L, xvar(L, d->p), d->K), t), d->M), xvar(L, d->m)), "row");
}

// local[x] <- v(x) for x < n
static void rd_fill(Lo *L, int loc, int64_t n, LExpr *v) {
  int x = for_begin(L, xi(L, 0), xi(L, n), true, "x");
  store(L, loc, xvar(L, x), v ? v : xf(L, 0));
  for_end(L);
}

// Row i of a state M [dk, dv] (local M) as a par loop over its columns j:
// M[i, j] = a M[i, j] + x y[row, j] (y: slot sy, rows of dv), and with
// acc >= 0 also acc[j] += z M[i, j] (a, x, z: variables).
static void rd_update(Lo *L, const Rd *d, int M, int i, int a, int x, int sy, int row, int acc, int z) {
  int j = for_begin(L, xi(L, 0), xi(L, d->dv), true, "j");
  int si = let(L, iadd(L, imul(L, xvar(L, i), xi(L, d->dv)), xvar(L, j)), "si");
  LExpr *yj = load(L, sy, iadd(L, imul(L, xvar(L, row), xi(L, d->dv)), xvar(L, j)));
  int mn = let(L, x2(L, LX_ADD, x2(L, LX_MUL, xvar(L, a), load(L, M, xvar(L, si))), x2(L, LX_MUL, xvar(L, x), yj)), "s");
  store(L, M, xvar(L, si), xvar(L, mn));
  if (acc >= 0) store(L, acc, xvar(L, j), x2(L, LX_ADD, load(L, acc, xvar(L, j)), x2(L, LX_MUL, xvar(L, z), xvar(L, mn))));
  for_end(L);
}

// Part `out` of the gradient at row `row`, element i < dk: M[i, :] . y[row, :]
// (y: slot sy, rows of dv), each in a loop of its own after the rows' updates:
// LLVM 14's loop vectoriser miscompiles a row's update and its reload in one
// iteration (dv 4).
static void rd_dots(Lo *L, const Rd *d, int M, int sy, int row, const OutPart *out) {
  int i = for_begin(L, xi(L, 0), xi(L, d->dk), false, "i"), c;
  LStmt *st = reduce_begin(L, LX_ADD, xi(L, 0), xi(L, d->dv), &c);
  LExpr *yc = load(L, sy, iadd(L, imul(L, xvar(L, row), xi(L, d->dv)), xvar(L, c)));
  int v = reduce_end(L, st, x2(L, LX_MUL, load(L, M, iadd(L, imul(L, xvar(L, i), xi(L, d->dv)), xvar(L, c))), yc), "dot");
  store(L, out->slot, iadd(L, imul(L, xvar(L, row), xi(L, out->w)), iadd(L, xi(L, out->off), xvar(L, i))), xvar(L, v));
  for_end(L);
}

static void lower_scan_read_fwd(Lo *L, Rd *d, const Node *n) {
  bool win = schedule_scan_state(n);
  int sq = in_slot(L, n, 0), sk = in_slot(L, n, 1), sv = in_slot(L, n, 2), sa = in_slot(L, n, 3);
  int64_t dk = d->dk, dv = d->dv;
  int S = local(L, dk * dv), O = local(L, dv);
  LExpr *w0 = win ? xwin(L, 0) : xi(L, 0), *hrow = imul(L, xvar(L, 0), xi(L, dk * dv));
  int x = for_begin(L, xi(L, 0), xi(L, dk * dv), true, "x");
  LExpr *h = win ? xsel(L, x2(L, LX_GT, w0, xi(L, 0)), load(L, KS_SCRATCH, iadd(L, hrow, xvar(L, x))), xf(L, 0)) : xf(L, 0);
  store(L, S, xvar(L, x), h);
  for_end(L);
  int t = for_begin(L, w0, win ? xwin(L, 1) : d->K, false, "t");
  int row = rd_row(L, d, xvar(L, t));
  rd_fill(L, O, dv, NULL);
  int i = for_begin(L, xi(L, 0), xi(L, dk), false, "i");
  int ki = let(L, iadd(L, imul(L, xvar(L, row), xi(L, dk)), xvar(L, i)), "ki");
  int av = let(L, load(L, sa, rd_a(L, d, xvar(L, t), xvar(L, i))), "a");
  int kv = let(L, load(L, sk, xvar(L, ki)), "k"), qv = let(L, load(L, sq, xvar(L, ki)), "q");
  rd_update(L, d, S, i, av, kv, sv, row, O, qv);
  for_end(L);
  int j = for_begin(L, xi(L, 0), xi(L, dv), true, "j");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, row), xi(L, dv)), xvar(L, j)), load(L, O, xvar(L, j)));
  for_end(L);
  if (win) {  // H <- S after position wk - 1: a loop of one iteration there, else none
    LExpr *last = x2(L, LX_EQ, xvar(L, t), x2(L, LX_SUB, xwin(L, 2), xi(L, 1)));
    for_begin(L, xi(L, 0), xsel(L, last, xi(L, 1), xi(L, 0)), false, "keep");
    x = for_begin(L, xi(L, 0), xi(L, dk * dv), true, "x");
    store(L, KS_SCRATCH, iadd(L, hrow, xvar(L, x)), load(L, S, xvar(L, x)));
    for_end(L);
    for_end(L);
  }
  for_end(L);
}

static void lower_scan_read_grad(Lo *L, Rd *d, const Node *n) {
  int sq = in_slot(L, n, 0), sk = in_slot(L, n, 1), sv = in_slot(L, n, 2), sa = in_slot(L, n, 3), sy = in_slot(L, n, 4);
  int64_t dk = d->dk, dv = d->dv;
  int S = local(L, dk * dv), DV = local(L, dv);
  // dq, in order
  rd_fill(L, S, dk * dv, NULL);
  int t = for_begin(L, xi(L, 0), d->K, false, "t");
  int row = rd_row(L, d, xvar(L, t));
  int i = for_begin(L, xi(L, 0), xi(L, dk), false, "i");
  int ki = let(L, iadd(L, imul(L, xvar(L, row), xi(L, dk)), xvar(L, i)), "ki");
  int av = let(L, load(L, sa, rd_a(L, d, xvar(L, t), xvar(L, i))), "a");
  int kv = let(L, load(L, sk, xvar(L, ki)), "k");
  rd_update(L, d, S, i, av, kv, sv, row, -1, -1);
  for_end(L);
  rd_dots(L, d, S, sy, row, &d->part[0]);
  for_end(L);
  // G, dk, dv, from the last position down
  rd_fill(L, S, dk * dv, NULL);
  int s = for_begin(L, xi(L, 0), d->K, false, "s");
  t = let(L, x2(L, LX_SUB, x2(L, LX_SUB, d->K, xi(L, 1)), xvar(L, s)), "t");
  int has = let(L, x2(L, LX_LT, iadd(L, xvar(L, t), xi(L, 1)), d->K), "has");
  int tn = let(L, xsel(L, xvar(L, has), iadd(L, xvar(L, t), xi(L, 1)), xvar(L, t)), "tn");  // in bounds either way
  row = rd_row(L, d, xvar(L, t));
  rd_fill(L, DV, dv, NULL);
  i = for_begin(L, xi(L, 0), xi(L, dk), false, "i");
  ki = let(L, iadd(L, imul(L, xvar(L, row), xi(L, dk)), xvar(L, i)), "ki");
  av = let(L, xsel(L, xvar(L, has), load(L, sa, rd_a(L, d, xvar(L, tn), xvar(L, i))), xf(L, 0)), "an");
  kv = let(L, load(L, sk, xvar(L, ki)), "k");
  int qv = let(L, load(L, sq, xvar(L, ki)), "q");
  rd_update(L, d, S, i, av, qv, sy, row, DV, kv);  // G = a_{t+1} G + q^T dy; DV += k G
  for_end(L);
  rd_dots(L, d, S, sv, row, &d->part[1]);
  int j = for_begin(L, xi(L, 0), xi(L, dv), true, "j");
  store(L, d->part[2].slot, iadd(L, imul(L, xvar(L, row), xi(L, d->part[2].w)), iadd(L, xi(L, d->part[2].off), xvar(L, j))), load(L, DV, xvar(L, j)));
  for_end(L);
  for_end(L);
}

static void lower_scan_read(Lo *L, const Node *n) {
  const Shape *ks = &L->g->nodes[n->in[1]].shape, *vs = &L->g->nodes[n->in[2]].shape;
  int r = ks->rank;
  Rd d = {.ks = ks, .as = &L->g->nodes[n->in[3]].shape, .axis = n->axis, .dk = ks->d[r - 2].n, .dv = vs->d[r - 1].n,
          .K = xdim(L, ks->d[n->axis]), .M = dprod(L, ks, n->axis + 1, r - 2)};
  L->lk->name = ir_op_info[n->op].name;
  L->lk->shape = LK_ROWS;
  L->lk->outer = imul(L, dprod(L, ks, 0, n->axis), d.M);
  L->lk->nouter = symsize_mul(symsize_prod(ks, 0, n->axis), symsize_prod(ks, n->axis + 1, r - 2));
  d.p = let(L, x2(L, LX_DIV, xvar(L, 0), d.M), "p");
  d.m = let(L, x2(L, LX_REM, xvar(L, 0), d.M), "m");
  if (n->op == OP_SCAN_READ) {
    lower_scan_read_fwd(L, &d, n);
    return;
  }
  int64_t width[3] = {d.dk, d.dk, d.dv};
  if (out_parts(L, n, width, 2 * d.dk + d.dv, d.part)) lower_scan_read_grad(L, &d, n);
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
static int in_slot(Lo *L, const Node *n, int i) {
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
  bool rms = n->op == OP_RMSNORM || n->op == OP_RMSNORM_DX || n->op == OP_RMSNORM_DYXH;
  bool dyxh = n->op == OP_LAYERNORM_DYXH || n->op == OP_RMSNORM_DYXH;
  LExpr *d = xdim(L, xs->d[xs->rank - 1]), *rows = dprod(L, xs, 0, xs->rank - 1);
  L->lk->name = ir_op_info[n->op].name;
  L->lk->shape = LK_ROWS;
  L->lk->outer = rows;
  L->lk->nouter = symsize_prod(xs, 0, xs->rank - 1);
  Row w = {.x = in_slot(L, n, 0), .g = in_slot(L, n, 1), .dy = dyxh ? in_slot(L, n, 1) : n->nin > 2 ? in_slot(L, n, 2) : -1};
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
      if (!rms) y = x2(L, LX_ADD, y, load(L, in_slot(L, n, 2), xvar(L, c)));
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
    if (L->k->terms >= 0) store(L, KS_TERMS, iadd(L, xvar(L, w.base), xvar(L, c)), x2(L, LX_MUL, at(L, &w, w.dy, c), xhat(L, &w, c)));
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
    L->lk->outer = xi(L, 1), L->lk->nouter = (SymSize){1, 0, 0};
    LStmt *st = reduce_begin(L, LX_ADD, xi(L, 0), rows, &t);
    st->wide = true;
    int total = reduce_end(L, st, load(L, KS_SCRATCH, xvar(L, t)), "total");
    store(L, KS_OUT, xi(L, 0), x2(L, LX_DIV, xvar(L, total), x1(L, LX_TOF, rows)));
    return;
  }
  L->lk->outer = rows, L->lk->nouter = symsize_prod(xs, 0, xs->rank - 1);
  int base = let(L, imul(L, xvar(L, 0), V), "base"), mx, sum;
  softmax_stats(L, KS_IN0, base, V, &mx, &sum);
  LExpr *lse = x2(L, LX_ADD, xvar(L, mx), x1(L, LX_LOG, xvar(L, sum)));
  LExpr *xid = load(L, KS_IN0, iadd(L, xvar(L, base), load(L, KS_IN1, xvar(L, 0))));
  store(L, KS_SCRATCH, xvar(L, 0), x2(L, LX_SUB, lse, xid));
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
  L->lk->outer = xi(L, 1), L->lk->nouter = (SymSize){1, 0, 0};
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
  LExpr *nlags = fwd ? iadd(L, xvar(L, i), xi(L, 1)) : x2(L, LX_SUB, T, xvar(L, i));
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
  L->lk->inner = xi(L, per), L->lk->ninner = (SymSize){per, 0, 0};
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

// ---- fused causal attention -------------------------------------------------------

// ATTENTION and ATTENTION_GRAD (interp.c has the equations) in fuse_attention's
// layouts: row r of [..., T, NH, width] (axis 1, time-major heads) or of
// [..., T, width] (axis 0, NH = 1), a head's `width` features contiguous. Every
// loop over heads is a par loop, so a backend works across heads (seed 001's
// transformer has 32 heads of 4 features) rather than along a head's few
// features; scores and probabilities of a query row live in a local array
// [t_max, NH].
typedef struct {
  int64_t NH, h, e, w;  // heads; features of q and k, of v, of the output
  LExpr *T;
  int S, M, Ls, X;      // locals: scores [t_max NH]; max, sum [NH]; output or dP
  // ATTENTION_GRAD's parts p = dq, dk, dv (out_parts): feature c of row r,
  // head hd at slot[p][(r NH + hd) w + off + c]: the [..., T, NH, 2h + e]
  // rows in KS_OUT (w = 2h + e, off 0, h, 2h), or with Kernel.nout 3 each
  // part in a [..., T, NH, width] buffer of its own (w = h, h, e, off 0)
  OutPart part[3];
} Att;

// Element (row, head hd, feature c) of slot, rows NH n wide (n per head).
static LExpr *att_at(Lo *L, const Att *a, int64_t n, LExpr *row, int hd, LExpr *c) {
  return iadd(L, imul(L, iadd(L, imul(L, row, xi(L, a->NH)), xvar(L, hd)), xi(L, n)), c);
}
// Feature c of part p of the gradient, row `row`, head hd (slot a->part[p].slot).
static LExpr *att_part_at(Lo *L, const Att *a, int p, LExpr *row, int hd, LExpr *c) {
  return att_at(L, a, a->part[p].w, row, hd, iadd(L, xi(L, a->part[p].off), c));
}


// sum_{c < len} a[abase + c] * b[bbase + c]: straight-line for short heads,
// else a reduction.
static LExpr *dot(Lo *L, int sa, int abase, int sb, int bbase, int64_t len) {
  if (len <= 16) {
    LExpr *acc = NULL;
    for (int64_t c = 0; c < len; c++) {
      LExpr *t = x2(L, LX_MUL, load(L, sa, iadd(L, xvar(L, abase), xi(L, c))), load(L, sb, iadd(L, xvar(L, bbase), xi(L, c))));
      acc = acc ? x2(L, LX_ADD, acc, t) : t;
    }
    return acc ? acc : xf(L, 0);
  }
  int c;
  LStmt *st = reduce_begin(L, LX_ADD, xi(L, 0), xi(L, len), &c);
  int v = reduce_end(L, st, x2(L, LX_MUL, load(L, sa, iadd(L, xvar(L, abase), xvar(L, c))), load(L, sb, iadd(L, xvar(L, bbase), xvar(L, c)))), "dot");
  return xvar(L, v);
}

// A loop over a head's n features: unrolled here when n <= 8, so a backend
// sees one access per feature and vectorises across heads (interleaved
// accesses, not gathers); else a par loop.
//   for (Feat f = feat_begin(L, n); feat_more(L, &f);) { ... feat_c(L, &f) ... }
typedef struct {
  int64_t n, k;
  int var;
} Feat;
static Feat feat_begin(Lo *L, int64_t n) {
  Feat f = {n, -1, -1};
  if (n > 8) f.var = for_begin(L, xi(L, 0), xi(L, n), true, "c");
  return f;
}
static bool feat_more(Lo *L, Feat *f) {
  f->k++;
  if (f->var < 0) return f->k < f->n;
  if (f->k == 1) for_end(L);
  return f->k == 0;
}
static LExpr *feat_c(Lo *L, const Feat *f) { return f->var >= 0 ? xvar(L, f->var) : xi(L, f->k); }

#define LOC(slot, j, hd) load(L, slot, iadd(L, imul(L, xvar(L, j), xi(L, a->NH)), xvar(L, hd)))
#define LOC_AT(j, hd) iadd(L, imul(L, xvar(L, j), xi(L, a->NH)), xvar(L, hd))

// Row o's scores s_j = scale q_o . k_j over j <= i into S and their maximum
// per head into M; then (probs) p_j = exp(s_j - M) into S and sum p_j into Ls.
static void att_scores(Lo *L, const Att *a, const Node *n, int o, int i, int r0, bool probs) {
  int hd = for_begin(L, xi(L, 0), xi(L, a->NH), true, "hd");
  store(L, a->M, xvar(L, hd), xf(L, -INFINITY));
  store(L, a->Ls, xvar(L, hd), xf(L, 0));
  for_end(L);
  int j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  int kr = let(L, imul(L, iadd(L, xvar(L, r0), xvar(L, j)), xi(L, a->NH * a->h)), "krow");
  hd = for_begin(L, xi(L, 0), xi(L, a->NH), true, "hd");
  int qb = let(L, iadd(L, imul(L, xvar(L, o), xi(L, a->NH * a->h)), imul(L, xvar(L, hd), xi(L, a->h))), "qb");
  int kb = let(L, iadd(L, xvar(L, kr), imul(L, xvar(L, hd), xi(L, a->h))), "kb");
  int s = let(L, x2(L, LX_MUL, dot(L, KS_IN0, qb, KS_IN1, kb, a->h), xf(L, n->fval)), "s");
  store(L, a->S, LOC_AT(j, hd), xvar(L, s));
  store(L, a->M, xvar(L, hd), x2(L, LX_MAX, xvar(L, s), load(L, a->M, xvar(L, hd))));
  for_end(L);
  for_end(L);
  if (!probs) return;
  j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  hd = for_begin(L, xi(L, 0), xi(L, a->NH), true, "hd");
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, LOC(a->S, j, hd), load(L, a->M, xvar(L, hd)))), "p");
  store(L, a->S, LOC_AT(j, hd), xvar(L, p));
  store(L, a->Ls, xvar(L, hd), x2(L, LX_ADD, load(L, a->Ls, xvar(L, hd)), xvar(L, p)));
  for_end(L);
  for_end(L);
}

// Forward, one query row o = (sequence, i) per outer index (so the step
// program windows it like any row kernel): o_i = (sum_j p_j v_j) / sum_j p_j
// with p_j = exp(s_j - max s), the exponentials and products in one pass.
static void lower_attention_fwd(Lo *L, Att *a, const Node *n) {
  int o = 0;
  int i = let(L, x2(L, LX_REM, xvar(L, o), a->T), "i"), r0 = let(L, x2(L, LX_SUB, xvar(L, o), xvar(L, i)), "r0");
  a->X = local(L, a->NH * a->e);
  int x = for_begin(L, xi(L, 0), xi(L, a->NH * a->e), true, "x");
  store(L, a->X, xvar(L, x), xf(L, 0));
  for_end(L);
  att_scores(L, a, n, o, i, r0, false);
  int j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  int vr = let(L, imul(L, iadd(L, xvar(L, r0), xvar(L, j)), xi(L, a->NH * a->e)), "vrow");
  int hd = for_begin(L, xi(L, 0), xi(L, a->NH), true, "hd");
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, LOC(a->S, j, hd), load(L, a->M, xvar(L, hd)))), "p");
  store(L, a->Ls, xvar(L, hd), x2(L, LX_ADD, load(L, a->Ls, xvar(L, hd)), xvar(L, p)));
  for (Feat f = feat_begin(L, a->e); feat_more(L, &f);) {
    int ai = let(L, iadd(L, imul(L, xvar(L, hd), xi(L, a->e)), feat_c(L, &f)), "ai");
    LExpr *vv = load(L, KS_IN2, iadd(L, xvar(L, vr), xvar(L, ai)));
    store(L, a->X, xvar(L, ai), x2(L, LX_ADD, load(L, a->X, xvar(L, ai)), x2(L, LX_MUL, xvar(L, p), vv)));
  }
  for_end(L);
  for_end(L);
  hd = for_begin(L, xi(L, 0), xi(L, a->NH), true, "hd");
  int inv = let(L, x2(L, LX_DIV, xf(L, 1), load(L, a->Ls, xvar(L, hd))), "inv");
  for (Feat f = feat_begin(L, a->e); feat_more(L, &f);) {
    int ao = let(L, iadd(L, imul(L, xvar(L, hd), xi(L, a->e)), feat_c(L, &f)), "ai");
    store(L, KS_OUT, iadd(L, imul(L, xvar(L, o), xi(L, a->NH * a->e)), xvar(L, ao)), x2(L, LX_MUL, load(L, a->X, xvar(L, ao)), xvar(L, inv)));
  }
  for_end(L);
}

// Gradient, one sequence per outer index, query rows i in order: the rows of
// its dq, dk, dv parts (Att.part) zeroed, then for each i,
// with u_j = exp(s_j - max s), l = sum_j u_j, P_ij = u_j / l:
// dP_ij = do_i . v_j, D_i = sum_j P_ij dP_ij = (sum_j u_j dP_ij) / l,
// dS_ij = scale P_ij (dP_ij - D_i); dq_i += dS_ij k_j, dk_j += dS_ij q_i,
// dv_j += P_ij do_i, each output element accumulated in the order of i,
// then j. Three passes over j per row: scores; u, l, dP; the updates.
static void lower_attention_grad(Lo *L, Att *a, const Node *n) {
  int64_t NH = a->NH, h = a->h, e = a->e;
  int r0 = let(L, imul(L, xvar(L, 0), a->T), "r0");
  a->X = local(L, L->g->t_max * NH);  // dP
  int D = local(L, NH);
  for (int pt = 0; pt < 3 && (pt == 0 || a->part[pt].slot != a->part[0].slot); pt++) {  // one buffer: zeroed whole
    int64_t pw = a->part[pt].w;
    int x = for_begin(L, xi(L, 0), imul(L, a->T, xi(L, NH * pw)), true, "x");
    store(L, a->part[pt].slot, iadd(L, imul(L, xvar(L, r0), xi(L, NH * pw)), xvar(L, x)), xf(L, 0));
    for_end(L);
  }
  int i = for_begin(L, xi(L, 0), a->T, false, "i");
  int o = let(L, iadd(L, xvar(L, r0), xvar(L, i)), "o");
  att_scores(L, a, n, o, i, r0, false);
  int hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  store(L, D, xvar(L, hd), xf(L, 0));
  for_end(L);
  int j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  int vr = let(L, imul(L, iadd(L, xvar(L, r0), xvar(L, j)), xi(L, NH * e)), "vrow");
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  int u = let(L, x1(L, LX_EXP, x2(L, LX_SUB, LOC(a->S, j, hd), load(L, a->M, xvar(L, hd)))), "u");
  store(L, a->S, LOC_AT(j, hd), xvar(L, u));
  store(L, a->Ls, xvar(L, hd), x2(L, LX_ADD, load(L, a->Ls, xvar(L, hd)), xvar(L, u)));
  int yb = let(L, iadd(L, imul(L, xvar(L, o), xi(L, NH * e)), imul(L, xvar(L, hd), xi(L, e))), "yb");
  int vb = let(L, iadd(L, xvar(L, vr), imul(L, xvar(L, hd), xi(L, e))), "vb");
  int dp = let(L, dot(L, KS_IN0 + 3, yb, KS_IN2, vb, e), "dp");
  store(L, a->X, LOC_AT(j, hd), xvar(L, dp));
  store(L, D, xvar(L, hd), x2(L, LX_ADD, load(L, D, xvar(L, hd)), x2(L, LX_MUL, xvar(L, u), xvar(L, dp))));
  for_end(L);
  for_end(L);
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");  // M <- 1 / l, D <- D / l
  int inv = let(L, x2(L, LX_DIV, xf(L, 1), load(L, a->Ls, xvar(L, hd))), "inv");
  store(L, a->M, xvar(L, hd), xvar(L, inv));
  store(L, D, xvar(L, hd), x2(L, LX_MUL, load(L, D, xvar(L, hd)), xvar(L, inv)));
  for_end(L);
  j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  int jr = let(L, iadd(L, xvar(L, r0), xvar(L, j)), "jr");
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  int p = let(L, x2(L, LX_MUL, LOC(a->S, j, hd), load(L, a->M, xvar(L, hd))), "p");
  int ds = let(L, x2(L, LX_MUL, xf(L, n->fval), x2(L, LX_MUL, xvar(L, p), x2(L, LX_SUB, LOC(a->X, j, hd), load(L, D, xvar(L, hd))))), "ds");
  int oq = let(L, att_part_at(L, a, 0, xvar(L, o), hd, xi(L, 0)), "oq");
  int ok = let(L, att_part_at(L, a, 1, xvar(L, jr), hd, xi(L, 0)), "ok");
  int ov = let(L, att_part_at(L, a, 2, xvar(L, jr), hd, xi(L, 0)), "ov");
  int qb = let(L, iadd(L, imul(L, xvar(L, o), xi(L, NH * h)), imul(L, xvar(L, hd), xi(L, h))), "qb");
  int kb = let(L, iadd(L, imul(L, xvar(L, jr), xi(L, NH * h)), imul(L, xvar(L, hd), xi(L, h))), "kb");
  yb = let(L, iadd(L, imul(L, xvar(L, o), xi(L, NH * e)), imul(L, xvar(L, hd), xi(L, e))), "yb");
  int sq = a->part[0].slot, sk = a->part[1].slot, sv = a->part[2].slot;
  for (Feat f = feat_begin(L, h); feat_more(L, &f);) {
    LExpr *c = feat_c(L, &f);
    int dq = let(L, iadd(L, xvar(L, oq), c), "dq"), dk = let(L, iadd(L, xvar(L, ok), c), "dk");
    store(L, sq, xvar(L, dq), x2(L, LX_ADD, load(L, sq, xvar(L, dq)), x2(L, LX_MUL, xvar(L, ds), load(L, KS_IN1, iadd(L, xvar(L, kb), c)))));
    store(L, sk, xvar(L, dk), x2(L, LX_ADD, load(L, sk, xvar(L, dk)), x2(L, LX_MUL, xvar(L, ds), load(L, KS_IN0, iadd(L, xvar(L, qb), c)))));
  }
  for (Feat f = feat_begin(L, e); feat_more(L, &f);) {
    LExpr *c = feat_c(L, &f);
    int dv = let(L, iadd(L, xvar(L, ov), c), "dv");
    store(L, sv, xvar(L, dv), x2(L, LX_ADD, load(L, sv, xvar(L, dv)), x2(L, LX_MUL, xvar(L, p), load(L, KS_IN0 + 3, iadd(L, xvar(L, yb), c)))));
  }
  for_end(L);
  for_end(L);
  for_end(L);
}
#undef LOC
#undef LOC_AT

// ---- attention on a GPU: a block of threads per (sequence, head) ---------------------
//
// Outer index o = b NH + hd, a block of ATT_TEAM threads; a thread per query
// row (in the gradient's last sweep, per key row), strided when T >
// ATT_TEAM. K and V (in that last sweep Q and dO) pass through shared memory
// in tiles of ATT_TILE rows, loaded by all threads; the causal mask skips
// every tile past a row. Scores are never stored: a row keeps its running
// maximum m, sum l and accumulators, rescaled by e^(m_old - m_new) as keys
// arrive (the online softmax), in registers through a tile (LS_CARRY) and in
// local arrays laid out [feature, row] between tiles (consecutive threads,
// consecutive words).
enum { ATT_TEAM = 128, ATT_TILE = 64, ATT_LOCAL_BUDGET = 64 * 1024 };

// Floats of local arrays of the forward (grad false) or the gradient.
static int64_t att_gpu_locals(int64_t tmax, int64_t h, int64_t e, bool grad) {
  return grad ? tmax * (3 + 2 * h + e) + ATT_TILE * (h + e) : tmax * (2 + e) + ATT_TILE * (h + e);
}

// Whether attention node n takes the GPU form on tgt: its block's state fits
// ATT_LOCAL_BUDGET bytes of shared memory (else the CPU's form, a warp per
// query row or sequence).
static bool att_gpu_form(const Graph *g, const Node *n, LTarget tgt) {
  if (tgt != LTARGET_GPU || (n->op != OP_ATTENTION && n->op != OP_ATTENTION_GRAD)) return false;
  const Shape *qs = &g->nodes[n->in[0]].shape, *vs = &g->nodes[n->in[2]].shape;
  int r = qs->rank;
  int64_t loc = att_gpu_locals(g->t_max, qs->d[r - 1].n, vs->d[r - 1].n, n->op == OP_ATTENTION_GRAD);
  return loc * (int64_t)sizeof(float) <= ATT_LOCAL_BUDGET;
}

static LExpr *xwin(Lo *L, int hi) {
  LExpr *e = ex(L, LX_WIN, LT_I64);
  e->ival = hi;
  return e;
}

// Local tile [ATT_TILE, n] <- rows r0 + [k0, k0 + ATT_TILE) of slot, head hd,
// by all threads; rows clamped to hi - 1 (a clamped row is a copy no thread
// reads: every reader stops at a row < hi).
static void att_tile(Lo *L, const Att *a, int tile, int slot, int64_t n, int r0, int hd, int k0, int hi) {
  int x = for_begin(L, xi(L, 0), xi(L, ATT_TILE * n), true, "x");
  LExpr *row = imin(L, iadd(L, xvar(L, k0), x2(L, LX_DIV, xvar(L, x), xi(L, n))), x2(L, LX_SUB, xvar(L, hi), xi(L, 1)));
  store(L, tile, xvar(L, x), load(L, slot, att_at(L, a, n, iadd(L, xvar(L, r0), row), hd, x2(L, LX_REM, xvar(L, x), xi(L, n)))));
  for_end(L);
}

// A thread's own row of n features (row r of slot, head hd): its values as
// variables when n <= 16, else loaded where used.
typedef struct {
  int slot, hd, var[16];
  int64_t n;
  LExpr *row;
} AttRow;
static AttRow att_row(Lo *L, const Att *a, int slot, int64_t n, LExpr *row, int hd, const char *name) {
  AttRow w = {.slot = slot, .hd = hd, .n = n, .row = row};
  for (int64_t c = 0; c < n && n <= 16; c++) w.var[c] = let(L, load(L, slot, att_at(L, a, n, row, hd, xi(L, c))), name);
  return w;
}
// sum_c w_c tile[t n + c], in the order of c (straight-line for n <= 16).
static LExpr *att_dot(Lo *L, const Att *a, const AttRow *w, int tile, LExpr *t) {
  LExpr *base = imul(L, t, xi(L, w->n));
  if (w->n <= 16) {
    LExpr *acc = NULL;
    for (int64_t c = 0; c < w->n; c++) {
      LExpr *p = x2(L, LX_MUL, xvar(L, w->var[c]), load(L, tile, iadd(L, base, xi(L, c))));
      acc = acc ? x2(L, LX_ADD, acc, p) : p;
    }
    return acc ? acc : xf(L, 0);
  }
  int c;
  LStmt *st = reduce_begin(L, LX_ADD, xi(L, 0), xi(L, w->n), &c);
  LExpr *v = load(L, w->slot, att_at(L, a, w->n, w->row, w->hd, xvar(L, c)));
  return xvar(L, reduce_end(L, st, x2(L, LX_MUL, v, load(L, tile, iadd(L, base, xvar(L, c)))), "dot"));
}

// Row state in registers over one tile: n values loaded from local arrays
// before the tile's carried loop, stored back after it. The carried loop of the
// tile's keys (or queries) runs between att_state_begin and _end.
typedef struct {
  int n, *var, *slot;
  LExpr **at, **next;
  LStmt *st;
  int index;
} AttState;
static AttState att_state(Lo *L, int64_t cap) {
  size_t c = (size_t)cap;
  return (AttState){.var = arena_alloc(L->a, sizeof(int) * c), .slot = arena_alloc(L->a, sizeof(int) * c),
                    .at = arena_alloc(L->a, sizeof(LExpr *) * c), .next = arena_alloc(L->a, sizeof(LExpr *) * c)};
}
// Adds local slot's element at to the state; returns its index in it.
static int att_state_add(AttState *w, int slot, LExpr *at) {
  w->slot[w->n] = slot, w->at[w->n] = at;
  return w->n++;
}
// The carried loop over [lo, hi); each state value starts as its stored
// value times scale (NULL: 1).
static void att_state_begin(Lo *L, AttState *w, LExpr *lo, LExpr *hi, const char *name, LExpr *scale) {
  LExpr **init = arena_alloc(L->a, sizeof(LExpr *) * (size_t)w->n);
  const char **names = arena_alloc(L->a, sizeof(char *) * (size_t)w->n);
  for (int k = 0; k < w->n; k++) {
    init[k] = load(L, w->slot[k], w->at[k]), names[k] = name;
    if (scale) init[k] = x2(L, LX_MUL, init[k], scale);
  }
  w->st = carry_begin(L, lo, hi, w->n, init, names, w->var, &w->index);
}
static void att_state_end(Lo *L, AttState *w) {
  carry_end(L, w->st, w->next);
  for (int k = 0; k < w->n; k++) store(L, w->slot[k], w->at[k], xvar(L, w->var[k]));
}
// The accumulators acc[c tmax + i], c < n, into the state; returns the first.
static int att_state_acc(Lo *L, AttState *w, int acc, int64_t n, int i) {
  int first = w->n;
  for (int64_t c = 0; c < n; c++) att_state_add(w, acc, iadd(L, imul(L, xi(L, c), xi(L, L->g->t_max)), xvar(L, i)));
  return first;
}
// next of accumulators first .. first + n: acc al + f tile[t n + c] (al NULL: 1)
static void att_state_axpy(Lo *L, AttState *w, int first, int64_t n, LExpr *al, LExpr *f, int tile, LExpr *t) {
  for (int64_t c = 0; c < n; c++) {
    LExpr *old = xvar(L, w->var[first + c]);
    if (al) old = x2(L, LX_MUL, old, al);
    w->next[first + c] = x2(L, LX_ADD, old, x2(L, LX_MUL, f, load(L, tile, iadd(L, imul(L, t, xi(L, n)), xi(L, c)))));
  }
}

// The running maximum of row i's scores through key tile k0: its scores
// s_jj = scale q . k_(k0 + jj), jj < jn, are reduced to their maximum first,
// so the running sums are rescaled once per tile (by *al = e^(m_old - m),
// m the new maximum, stored to M[i]) and each key costs one exponential.
static int att_tile_max(Lo *L, Att *a, const AttRow *q, int Kt, int jn, int M, int i, double scale, int *al) {
  int jj;
  LStmt *rd = reduce_begin(L, LX_MAX, xi(L, 0), xvar(L, jn), &jj);
  int mt = reduce_end(L, rd, x2(L, LX_MUL, att_dot(L, a, q, Kt, xvar(L, jj)), xf(L, scale)), "mt");
  int mo = let(L, load(L, M, xvar(L, i)), "mo");
  int mn = let(L, x2(L, LX_MAX, xvar(L, mt), xvar(L, mo)), "mn");
  *al = let(L, x1(L, LX_EXP, x2(L, LX_SUB, xvar(L, mo), xvar(L, mn))), "al");
  store(L, M, xvar(L, i), xvar(L, mn));
  return mn;
}

// Forward, rows [w0, min(w1, T)) of the step program's window (all rows
// elsewhere): o_i = (sum_{j <= i} p_j v_j) / sum_{j <= i} p_j, p_j = e^(s_j - m).
static void lower_attention_fwd_gpu(Lo *L, Att *a, const Node *n) {
  int64_t NH = a->NH, h = a->h, e = a->e, tm = L->g->t_max;
  int b = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, NH)), "b"), hd = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, NH)), "hd");
  int r0 = let(L, imul(L, xvar(L, b), a->T), "r0");
  int lo = let(L, xwin(L, 0), "lo"), hi = let(L, imin(L, xwin(L, 1), a->T), "hi");
  int M = local(L, tm), Ls = local(L, tm), A = local(L, tm * e), Kt = local(L, ATT_TILE * h), Vt = local(L, ATT_TILE * e);
  int i = for_begin(L, xvar(L, lo), xvar(L, hi), true, "i");
  store(L, M, xvar(L, i), xf(L, -INFINITY));
  store(L, Ls, xvar(L, i), xf(L, 0));
  for (Feat f = feat_begin(L, e); feat_more(L, &f);) store(L, A, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i)), xf(L, 0));
  for_end(L);
  LExpr *ntile = x2(L, LX_DIV, iadd(L, xvar(L, hi), xi(L, ATT_TILE - 1)), xi(L, ATT_TILE));
  int kt = for_begin(L, xi(L, 0), ntile, false, "kt");
  int k0 = let(L, imul(L, xvar(L, kt), xi(L, ATT_TILE)), "k0");
  att_tile(L, a, Kt, KS_IN1, h, r0, hd, k0, hi);
  att_tile(L, a, Vt, KS_IN2, e, r0, hd, k0, hi);
  i = for_begin(L, imax(L, xvar(L, lo), xvar(L, k0)), xvar(L, hi), true, "i");
  int jn = let(L, imin(L, iadd(L, x2(L, LX_SUB, xvar(L, i), xvar(L, k0)), xi(L, 1)), xi(L, ATT_TILE)), "jn");
  AttRow q = att_row(L, a, KS_IN0, h, iadd(L, xvar(L, r0), xvar(L, i)), hd, "q");
  int al, mn = att_tile_max(L, a, &q, Kt, jn, M, i, n->fval, &al);
  AttState w = att_state(L, 1 + e);
  int l = att_state_add(&w, Ls, xvar(L, i)), acc = att_state_acc(L, &w, A, e, i);
  att_state_begin(L, &w, xi(L, 0), xvar(L, jn), "st", xvar(L, al));
  int jj = w.index;
  int s = let(L, x2(L, LX_MUL, att_dot(L, a, &q, Kt, xvar(L, jj)), xf(L, n->fval)), "s");
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, xvar(L, s), xvar(L, mn))), "p");
  w.next[l] = x2(L, LX_ADD, xvar(L, w.var[l]), xvar(L, p));
  att_state_axpy(L, &w, acc, e, NULL, xvar(L, p), Vt, xvar(L, jj));
  att_state_end(L, &w);
  for_end(L);
  for_end(L);
  i = for_begin(L, xvar(L, lo), xvar(L, hi), true, "i");
  int inv = let(L, x2(L, LX_DIV, xf(L, 1), load(L, Ls, xvar(L, i))), "inv");
  for (Feat f = feat_begin(L, e); feat_more(L, &f);)
    store(L, KS_OUT, att_at(L, a, e, iadd(L, xvar(L, r0), xvar(L, i)), hd, feat_c(L, &f)),
          x2(L, LX_MUL, load(L, A, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i))), xvar(L, inv)));
  for_end(L);
}

// Gradient, every row. With P_ij = e^(s_ij - m_i) / l_i, dP_ij = do_i . v_j,
// D_i = sum_j P_ij dP_ij, dS_ij = scale P_ij (dP_ij - D_i):
// dq_i = sum_j dS_ij k_j, dk_j = sum_i dS_ij q_i, dv_j = sum_i P_ij do_i,
// each summed in index order. Sweeps: (1) over key tiles, per query row,
// m_i, l_i and sum_j u_j dP_ij online; (2) over key tiles, per query row,
// dq_i; (3) over query tiles (Q and dO), per key row j, dk_j and dv_j.
static void lower_attention_grad_gpu(Lo *L, Att *a, const Node *n) {
  int64_t NH = a->NH, h = a->h, e = a->e, tm = L->g->t_max;
  int b = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, NH)), "b"), hd = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, NH)), "hd");
  int r0 = let(L, imul(L, xvar(L, b), a->T), "r0");
  int T = let(L, a->T, "T");
  int M = local(L, tm), Ls = local(L, tm), D = local(L, tm), DQ = local(L, tm * h), DK = local(L, tm * h), DV = local(L, tm * e);
  int Kt = local(L, ATT_TILE * h), Vt = local(L, ATT_TILE * e);  // K, V tiles; in sweep 3 Q, dO
  int i = for_begin(L, xi(L, 0), xvar(L, T), true, "i");
  store(L, M, xvar(L, i), xf(L, -INFINITY));
  store(L, Ls, xvar(L, i), xf(L, 0));
  store(L, D, xvar(L, i), xf(L, 0));
  for (Feat f = feat_begin(L, h); feat_more(L, &f);) {
    store(L, DQ, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i)), xf(L, 0));
    store(L, DK, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i)), xf(L, 0));
  }
  for (Feat f = feat_begin(L, e); feat_more(L, &f);) store(L, DV, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i)), xf(L, 0));
  for_end(L);
  LExpr *ntile = x2(L, LX_DIV, iadd(L, xvar(L, T), xi(L, ATT_TILE - 1)), xi(L, ATT_TILE));
  for (int sweep = 1; sweep <= 2; sweep++) {
    int kt = for_begin(L, xi(L, 0), ntile, false, "kt");
    int k0 = let(L, imul(L, xvar(L, kt), xi(L, ATT_TILE)), "k0");
    att_tile(L, a, Kt, KS_IN1, h, r0, hd, k0, T);
    att_tile(L, a, Vt, KS_IN2, e, r0, hd, k0, T);
    i = for_begin(L, xvar(L, k0), xvar(L, T), true, "i");
    int jn = let(L, imin(L, iadd(L, x2(L, LX_SUB, xvar(L, i), xvar(L, k0)), xi(L, 1)), xi(L, ATT_TILE)), "jn");
    LExpr *row = iadd(L, xvar(L, r0), xvar(L, i));
    AttRow q = att_row(L, a, KS_IN0, h, row, hd, "q"), dy = att_row(L, a, KS_IN0 + 3, e, row, hd, "dy");
    int mi = -1, inv = -1, Di = -1;
    AttState st = att_state(L, 2 + h);
    int l = -1, d = -1, dq = -1, al = -1, mn = -1;
    if (sweep == 1) {
      mn = att_tile_max(L, a, &q, Kt, jn, M, i, n->fval, &al);
      l = att_state_add(&st, Ls, xvar(L, i)), d = att_state_add(&st, D, xvar(L, i));
    } else {
      mi = let(L, load(L, M, xvar(L, i)), "mi");
      inv = let(L, load(L, Ls, xvar(L, i)), "inv");
      Di = let(L, load(L, D, xvar(L, i)), "Di");
      dq = att_state_acc(L, &st, DQ, h, i);
    }
    att_state_begin(L, &st, xi(L, 0), xvar(L, jn), "st", sweep == 1 ? xvar(L, al) : NULL);
    int jj = st.index;
    int s = let(L, x2(L, LX_MUL, att_dot(L, a, &q, Kt, xvar(L, jj)), xf(L, n->fval)), "s");
    int dp = let(L, att_dot(L, a, &dy, Vt, xvar(L, jj)), "dp");
    if (sweep == 1) {
      int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, xvar(L, s), xvar(L, mn))), "p");
      st.next[l] = x2(L, LX_ADD, xvar(L, st.var[l]), xvar(L, p));
      st.next[d] = x2(L, LX_ADD, xvar(L, st.var[d]), x2(L, LX_MUL, xvar(L, p), xvar(L, dp)));
    } else {
      int p = let(L, x2(L, LX_MUL, x1(L, LX_EXP, x2(L, LX_SUB, xvar(L, s), xvar(L, mi))), xvar(L, inv)), "p");
      int ds = let(L, x2(L, LX_MUL, xf(L, n->fval), x2(L, LX_MUL, xvar(L, p), x2(L, LX_SUB, xvar(L, dp), xvar(L, Di)))), "ds");
      att_state_axpy(L, &st, dq, h, NULL, xvar(L, ds), Kt, xvar(L, jj));
    }
    att_state_end(L, &st);
    for_end(L);
    for_end(L);
    if (sweep == 1) {  // l_i <- 1 / l_i, D_i <- D_i / l_i
      i = for_begin(L, xi(L, 0), xvar(L, T), true, "i");
      int il = let(L, x2(L, LX_DIV, xf(L, 1), load(L, Ls, xvar(L, i))), "il");
      store(L, Ls, xvar(L, i), xvar(L, il));
      store(L, D, xvar(L, i), x2(L, LX_MUL, load(L, D, xvar(L, i)), xvar(L, il)));
      for_end(L);
    }
  }
  // sweep 3: query tiles; key row j takes the tile's rows i >= j
  int qt = for_begin(L, xi(L, 0), ntile, false, "qt");
  int q0 = let(L, imul(L, xvar(L, qt), xi(L, ATT_TILE)), "q0");
  att_tile(L, a, Kt, KS_IN0, h, r0, hd, q0, T);
  att_tile(L, a, Vt, KS_IN0 + 3, e, r0, hd, q0, T);
  int j = for_begin(L, xi(L, 0), imin(L, xvar(L, T), iadd(L, xvar(L, q0), xi(L, ATT_TILE))), true, "j");
  int ilo = let(L, x2(L, LX_SUB, imax(L, xvar(L, j), xvar(L, q0)), xvar(L, q0)), "ilo");
  int ihi = let(L, imin(L, x2(L, LX_SUB, xvar(L, T), xvar(L, q0)), xi(L, ATT_TILE)), "ihi");
  LExpr *row = iadd(L, xvar(L, r0), xvar(L, j));
  AttRow k = att_row(L, a, KS_IN1, h, row, hd, "k"), v = att_row(L, a, KS_IN2, e, row, hd, "v");
  AttState st = att_state(L, h + e);
  int dk = att_state_acc(L, &st, DK, h, j), dv = att_state_acc(L, &st, DV, e, j);
  att_state_begin(L, &st, xvar(L, ilo), xvar(L, ihi), "st", NULL);
  int ii = st.index;
  int iq = let(L, iadd(L, xvar(L, q0), xvar(L, ii)), "iq");
  int s = let(L, x2(L, LX_MUL, att_dot(L, a, &k, Kt, xvar(L, ii)), xf(L, n->fval)), "s");
  int p = let(L, x2(L, LX_MUL, x1(L, LX_EXP, x2(L, LX_SUB, xvar(L, s), load(L, M, xvar(L, iq)))), load(L, Ls, xvar(L, iq))), "p");
  int dp = let(L, att_dot(L, a, &v, Vt, xvar(L, ii)), "dp");
  int ds = let(L, x2(L, LX_MUL, xf(L, n->fval), x2(L, LX_MUL, xvar(L, p), x2(L, LX_SUB, xvar(L, dp), load(L, D, xvar(L, iq))))), "ds");
  att_state_axpy(L, &st, dk, h, NULL, xvar(L, ds), Kt, xvar(L, ii));
  att_state_axpy(L, &st, dv, e, NULL, xvar(L, p), Vt, xvar(L, ii));
  att_state_end(L, &st);
  for_end(L);
  for_end(L);
  // the parts' rows (Att.part): dq, dk, dv of head hd
  i = for_begin(L, xi(L, 0), xvar(L, T), true, "i");
  LExpr *orow = iadd(L, xvar(L, r0), xvar(L, i));
  for (Feat f = feat_begin(L, h); feat_more(L, &f);) {
    LExpr *c = feat_c(L, &f), *at = iadd(L, imul(L, c, xi(L, tm)), xvar(L, i));
    store(L, a->part[0].slot, att_part_at(L, a, 0, orow, hd, c), load(L, DQ, at));
    store(L, a->part[1].slot, att_part_at(L, a, 1, orow, hd, c), load(L, DK, at));
  }
  for (Feat f = feat_begin(L, e); feat_more(L, &f);) {
    LExpr *c = feat_c(L, &f);
    store(L, a->part[2].slot, att_part_at(L, a, 2, orow, hd, c), load(L, DV, iadd(L, imul(L, c, xi(L, tm)), xvar(L, i))));
  }
  for_end(L);
}

static void lower_attention(Lo *L, const Node *n) {
  const Shape *qs = &L->g->nodes[n->in[0]].shape, *vs = &L->g->nodes[n->in[2]].shape;
  int r = qs->rank, tax = r - 2 - (n->axis != 0);  // the time axis
  bool grad = n->op == OP_ATTENTION_GRAD;
  Att a = {.NH = n->axis ? qs->d[r - 2].n : 1, .h = qs->d[r - 1].n, .e = vs->d[r - 1].n, .w = n->shape.d[r - 1].n,
           .T = xdim(L, qs->d[tax])};
  L->lk->name = ir_op_info[n->op].name;
  L->lk->shape = LK_ROWS;
  int64_t width[3] = {a.h, a.h, a.e};
  if (!out_parts(L, n, width, a.w, a.part)) return;
  if (att_gpu_form(L->g, n, L->tgt)) {  // (sequence, head) per block
    L->own_outer = true, L->lk->team = ATT_TEAM;
    L->lk->outer = imul(L, dprod(L, qs, 0, tax), xi(L, a.NH));
    L->lk->nouter = symsize_mul(symsize_prod(qs, 0, tax), (SymSize){a.NH, 0, 0});
    if (grad) lower_attention_grad_gpu(L, &a, n);
    else lower_attention_fwd_gpu(L, &a, n);
    return;
  }
  int nouter = grad ? tax : tax + 1;  // sequences, or query rows
  L->lk->outer = dprod(L, qs, 0, nouter), L->lk->nouter = symsize_prod(qs, 0, nouter);
  a.S = local(L, L->g->t_max * a.NH), a.M = local(L, a.NH), a.Ls = local(L, a.NH);
  if (grad) lower_attention_grad(L, &a, n);
  else lower_attention_fwd(L, &a, n);
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
  L.lk->ninner = (SymSize){1, 0, 0};
  switch (n->op) {
  case OP_SUM: case OP_MEAN: case OP_MAX: case OP_SOFTMAX: lower_axis(&L, n); break;
  case OP_LAYERNORM: case OP_LAYERNORM_DX: case OP_LAYERNORM_DYXH:
  case OP_RMSNORM: case OP_RMSNORM_DX: case OP_RMSNORM_DYXH: lower_norm(&L, n); break;
  case OP_CROSS_ENTROPY: lower_cross_entropy(&L, n); break;
  case OP_EMBED: lower_embed(&L, n); break;
  case OP_ATTENTION: case OP_ATTENTION_GRAD: lower_attention(&L, n); break;
  case OP_SCATTER_ADD: lower_scatter_add(&L, n); break;
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
    st[i] = one ? (SymSize){0, 0, 0} : acc;
    if (!one) acc = symsize_mul(acc, symsize_of(xs->d[j])), none = false;
    if (one || !symsize_eq(symsize_of(xs->d[j]), batch[i])) all = false;
  }
  return all || none;
}

LGemm *lower_gemm(Arena *a, const Schedule *s, const Kernel *k) {
  const Graph *g = s->g;
  const Node *n = &g->nodes[k->node];
  LGemm *gm = arena_alloc(a, sizeof *gm);
  if (k->fusion == FG_WEIGHT_GRAD) {  // dW [d, c] = x^T dy over all rows; x [.., .., d], dy [.., .., c]
    const Shape *xs = &g->nodes[k->leaf[0]].shape, *ys = &g->nodes[k->leaf[1]].shape;
    gm->ta = true, gm->split_cols = true, gm->flat = true;
    gm->slot[LG_A] = KS_IN0, gm->slot[LG_B] = KS_IN1, gm->slot[LG_C] = KS_OUT;
    gm->m = symsize_of(xs->d[2]), gm->n = symsize_of(ys->d[2]), gm->k = symsize_prod(xs, 0, 2);
    gm->ld[LG_A] = gm->m, gm->ld[LG_B] = gm->n, gm->ld[LG_C] = gm->n;
    gm->count = (SymSize){1, 0, 0};
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
    gm->flat_stride[x] = gm->flat && any ? mat : (SymSize){0, 0, 0};
  }
  gm->fold = gm->flat && gm->flat_stride[LG_A].coef != 0 && gm->flat_stride[LG_B].coef == 0;
  return gm;
}

static void print_sym(FILE *f, SymSize z) {
  bool one = z.coef == 1 && (z.pb || z.pt);
  if (!one) fprintf(f, "%lld", (long long)z.coef);
  for (int i = 0; i < z.pb; i++) fputs(one && i == 0 ? "B" : "*B", f);
  for (int i = 0; i < z.pt; i++) fputs(one && i == 0 && !z.pb ? "T" : "*T", f);
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
          gm->split_cols ? ", split over columns of C" : "");
}

// ---- the chunked convolutions (loops.h LSteps) -------------------------------------

typedef struct {
  const Shape *xs;     // the unfolded operand: x [.., T, din] (dy for CONV_DX)
  int64_t C, NC, L;    // chunk, chunks, lags
  int64_t din, f;      // features of the unfolded operand; of the product's rows (Y, S)
  SymSize rows;        // R: the rows of xs
  bool rev;            // CONV_DX: time reversed
} Chunked;

static LKernel *step_begin(Lo *L, Arena *a, const Schedule *s, const Kernel *k, LTarget tgt, const char *name) {
  *L = (Lo){.a = a, .s = s, .g = s->g, .k = k, .tgt = tgt, .train = true, .own_outer = true};
  L->lk = arena_alloc(a, sizeof *L->lk);
  L->tail[0] = &L->lk->body;
  L->lk->name = name;
  L->lk->ninner = (SymSize){1, 0, 0};
  new_var(L, LT_I64, "o");
  return L->lk;
}

// The row's position i = o mod T and its sequence's row 0, b0 = o - i, of outer index o.
static void step_row(Lo *L, const Chunked *c, LExpr *o, int *i, int *b0) {
  LExpr *T = xdim(L, c->xs->d[c->xs->rank - 2]);
  *i = let(L, x2(L, LX_REM, o, T), "i");
  *b0 = let(L, x2(L, LX_SUB, o, xvar(L, *i)), "b0");
}

// U[o, (r, p)] = i >= r ? xs[b0 + t(i - r), p] : 0, t the identity or (rev)
// T-1-(.); the load's position clamped to i - min(r, i) (LX_SELECT may load
// either side). A thread per element.
static LKernel *step_unfold(Arena *a, const Schedule *s, const Kernel *k, LTarget tgt, const Chunked *c) {
  Lo L;
  LKernel *lk = step_begin(&L, a, s, k, tgt, c->rev ? "conv_unfold_reversed" : "conv_unfold");
  int64_t w = c->C * c->din;
  lk->shape = LK_ELEMENTS;
  lk->outer = dprod(&L, c->xs, 0, c->xs->rank - 1), lk->nouter = c->rows;
  lk->inner = xi(&L, w), lk->ninner = (SymSize){w, 0, 0};
  int i, b0;
  step_row(&L, c, xvar(&L, 0), &i, &b0);
  int j = for_begin(&L, xi(&L, 0), xi(&L, w), true, "j");
  int r = let(&L, x2(&L, LX_DIV, xvar(&L, j), xi(&L, c->din)), "r");
  int p = let(&L, x2(&L, LX_REM, xvar(&L, j), xi(&L, c->din)), "p");
  LExpr *t = x2(&L, LX_SUB, xvar(&L, i), imin(&L, xvar(&L, r), xvar(&L, i)));
  if (c->rev) t = x2(&L, LX_SUB, x2(&L, LX_SUB, xdim(&L, c->xs->d[c->xs->rank - 2]), xi(&L, 1)), t);
  LExpr *src = iadd(&L, imul(&L, iadd(&L, xvar(&L, b0), t), xi(&L, c->din)), xvar(&L, p));
  LExpr *v = xsel(&L, x2(&L, LX_GE, xvar(&L, i), xvar(&L, r)), load(&L, KS_IN0, src), xf(&L, 0));
  store(&L, KS_CONV_U, iadd(&L, imul(&L, xvar(&L, 0), xi(&L, w)), xvar(&L, j)), v);
  for_end(&L);
  return lk;
}

// W^T[kk, p, q] = W[kk, q, p]: W [L, d, e] -> [L, e, d], outer index o = kk e + p.
static LKernel *step_transpose(Arena *a, const Schedule *s, const Kernel *k, LTarget tgt, const Chunked *c) {
  Lo L;
  LKernel *lk = step_begin(&L, a, s, k, tgt, "conv_transpose_lags");
  int64_t e = c->din, d = c->f;
  lk->shape = LK_ELEMENTS;
  lk->outer = xi(&L, c->L * e), lk->nouter = (SymSize){c->L * e, 0, 0};
  lk->inner = xi(&L, d), lk->ninner = (SymSize){d, 0, 0};
  int kk = let(&L, x2(&L, LX_DIV, xvar(&L, 0), xi(&L, e)), "k");
  int p = let(&L, x2(&L, LX_REM, xvar(&L, 0), xi(&L, e)), "p");
  int q = for_begin(&L, xi(&L, 0), xi(&L, d), true, "q");
  LExpr *src = iadd(&L, imul(&L, iadd(&L, imul(&L, xvar(&L, kk), xi(&L, d)), xvar(&L, q)), xi(&L, e)), xvar(&L, p));
  store(&L, KS_CONV_WT, iadd(&L, imul(&L, xvar(&L, 0), xi(&L, d)), xvar(&L, q)), load(&L, KS_IN1, src));
  for_end(&L);
  return lk;
}

// out[o, q] = sum over D in [0, min(i'/C + 1, NC)), ascending, of
// Y[D, b0 + i' - D C, q], i' = i (rev: T-1-i). A row per outer index, its
// columns over the lanes, each column's sum the lane's own.
static LKernel *step_shifted_sum(Arena *a, const Schedule *s, const Kernel *k, LTarget tgt, const Chunked *c) {
  Lo L;
  LKernel *lk = step_begin(&L, a, s, k, tgt, c->rev ? "conv_shifted_sum_reversed" : "conv_shifted_sum");
  lk->shape = LK_ROWS;
  lk->outer = dprod(&L, c->xs, 0, c->xs->rank - 1), lk->nouter = c->rows;
  int i, b0;
  step_row(&L, c, xvar(&L, 0), &i, &b0);
  LExpr *ip = xvar(&L, i);
  if (c->rev) ip = x2(&L, LX_SUB, x2(&L, LX_SUB, xdim(&L, c->xs->d[c->xs->rank - 2]), xi(&L, 1)), ip);
  int pos = let(&L, ip, "ip");
  int nd = let(&L, imin(&L, iadd(&L, x2(&L, LX_DIV, xvar(&L, pos), xi(&L, c->C)), xi(&L, 1)), xi(&L, c->NC)), "nd");
  int q = for_begin(&L, xi(&L, 0), xi(&L, c->f), true, "q");
  int D;
  LStmt *red = reduce_begin(&L, LX_ADD, xi(&L, 0), xvar(&L, nd), &D);
  LExpr *yrow = iadd(&L, imul(&L, xvar(&L, D), lk->outer),
                     x2(&L, LX_SUB, iadd(&L, xvar(&L, b0), xvar(&L, pos)), imul(&L, xvar(&L, D), xi(&L, c->C))));
  int sum = reduce_end(&L, red, load(&L, KS_CONV_Y, iadd(&L, imul(&L, yrow, xi(&L, c->f)), xvar(&L, q))), "sum");
  store(&L, KS_OUT, iadd(&L, imul(&L, xvar(&L, 0), xi(&L, c->f)), xvar(&L, q)), xvar(&L, sum));
  for_end(&L);
  return lk;
}

// S[D, row, q] = i + D C < T ? dy[row + D C, q] : 0, outer index o = D R + row,
// the load's shift clamped to min(D C, T-1-i). A thread per element.
static LKernel *step_shift(Arena *a, const Schedule *s, const Kernel *k, LTarget tgt, const Chunked *c) {
  Lo L;
  LKernel *lk = step_begin(&L, a, s, k, tgt, "conv_shift");
  LExpr *R = dprod(&L, c->xs, 0, c->xs->rank - 1), *T = xdim(&L, c->xs->d[c->xs->rank - 2]);
  lk->shape = LK_ELEMENTS;
  lk->outer = imul(&L, xi(&L, c->NC), R), lk->nouter = symsize_mul((SymSize){c->NC, 0, 0}, c->rows);
  lk->inner = xi(&L, c->f), lk->ninner = (SymSize){c->f, 0, 0};
  int sh = let(&L, imul(&L, x2(&L, LX_DIV, xvar(&L, 0), R), xi(&L, c->C)), "sh");
  int row = let(&L, x2(&L, LX_REM, xvar(&L, 0), R), "row");
  int i = let(&L, x2(&L, LX_REM, xvar(&L, row), T), "i");
  int lim = let(&L, x2(&L, LX_SUB, x2(&L, LX_SUB, T, xi(&L, 1)), xvar(&L, i)), "lim");
  int q = for_begin(&L, xi(&L, 0), xi(&L, c->f), true, "q");
  LExpr *src = iadd(&L, imul(&L, iadd(&L, xvar(&L, row), imin(&L, xvar(&L, sh), xvar(&L, lim))), xi(&L, c->f)), xvar(&L, q));
  LExpr *v = xsel(&L, x2(&L, LX_GE, xvar(&L, lim), xvar(&L, sh)), load(&L, KS_IN1, src), xf(&L, 0));
  store(&L, KS_CONV_Y, iadd(&L, imul(&L, xvar(&L, 0), xi(&L, c->f)), xvar(&L, q)), v);
  for_end(&L);
  return lk;
}

// The strided-batched GEMM over D < NC: C_D = op(A) B_D with A shared (stride 0).
static LGemm *step_gemm(Arena *a, bool ta, int sa, int sb, int sc, SymSize m, SymSize n, SymSize k, int64_t nc,
                        SymSize stride_b, SymSize stride_c) {
  LGemm *gm = arena_alloc(a, sizeof *gm);
  gm->ta = ta;
  gm->slot[LG_A] = sa, gm->slot[LG_B] = sb, gm->slot[LG_C] = sc;
  gm->m = m, gm->n = n, gm->k = k;
  gm->ld[LG_A] = ta ? m : k, gm->ld[LG_B] = n, gm->ld[LG_C] = n;
  gm->nbatch = 1, gm->batch[0] = (SymSize){nc, 0, 0}, gm->count = gm->batch[0];
  gm->stride[LG_A][0] = (SymSize){0, 0, 0}, gm->stride[LG_B][0] = stride_b, gm->stride[LG_C][0] = stride_c;
  gm->flat = true;
  for (int x = 0; x < 3; x++) gm->flat_stride[x] = gm->stride[x][0];
  return gm;
}

// CONV_DW of the scalar and vector kinds on a GPU, in two steps through
// partial sums P in the kernel's scratch (schedule.c), with CT =
// schedule_conv_dw_tile columns a tile, NT = d / CT, L lags, g a sequence:
//   conv_dw_partial  a block per (g, tile t): the tile's x and dy in shared
//       memory, a thread per (lag k, column c) summing i in [k, T) in order,
//       Z[k, c] = sum_i x[g, i-k, c] dy[g, i, c];
//       vector: P[g, k, t CT + c] = Z[k, c];
//       scalar: P[g, t, k] = sum over c < CT in order of Z[k, c]
//   conv_dw_sum      dw[k (, c)] = sum over g (scalar: (g, t)) of P: in
//       order (vector, a thread per element), or (scalar, a warp per lag)
//       as lane partials combined by a fixed butterfly
// Every sum has an order fixed by the code: the same bits every run.
static LKernel *step_dw_partial(Arena *a, const Schedule *s, const Kernel *k, int64_t ct) {
  Lo Lw, *L = &Lw;
  LKernel *lk = step_begin(L, a, s, k, LTARGET_GPU, "conv_dw_partial");
  const Node *n = &s->g->nodes[k->node];
  const Shape *xs = &s->g->nodes[n->in[0]].shape;
  int r = xs->rank;
  bool scalar = n->conv == CONV_SCALAR;
  int64_t d = xs->d[r - 1].n, nt = d / ct, lags = n->shape.d[0].n, tmax = s->g->t_max;
  LExpr *T = xdim(L, xs->d[r - 2]);
  lk->shape = LK_ROWS, lk->team = 256;
  lk->outer = imul(L, dprod(L, xs, 0, r - 2), xi(L, nt));
  lk->nouter = symsize_mul(symsize_prod(xs, 0, r - 2), (SymSize){nt, 0, 0});
  int X = local(L, tmax * ct), Y = local(L, tmax * ct), Z = scalar ? local(L, lags * ct) : -1;
  int g = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, nt)), "g");
  int t = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, nt)), "t");
  int base = let(L, iadd(L, imul(L, imul(L, xvar(L, g), T), xi(L, d)), imul(L, xvar(L, t), xi(L, ct))), "base");
  int e = for_begin(L, xi(L, 0), imul(L, T, xi(L, ct)), true, "e");
  LExpr *src = iadd(L, iadd(L, xvar(L, base), imul(L, x2(L, LX_DIV, xvar(L, e), xi(L, ct)), xi(L, d))),
                    x2(L, LX_REM, xvar(L, e), xi(L, ct)));
  store(L, X, xvar(L, e), load(L, KS_IN0, src));
  store(L, Y, xvar(L, e), load(L, KS_IN1, src));
  for_end(L);
  e = for_begin(L, xi(L, 0), xi(L, lags * ct), true, "e");
  int kk = let(L, x2(L, LX_DIV, xvar(L, e), xi(L, ct)), "k");
  int c = let(L, x2(L, LX_REM, xvar(L, e), xi(L, ct)), "c");
  int j;
  LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), imax(L, x2(L, LX_SUB, T, xvar(L, kk)), xi(L, 0)), &j);
  LExpr *xv = load(L, X, iadd(L, imul(L, xvar(L, j), xi(L, ct)), xvar(L, c)));
  LExpr *yv = load(L, Y, iadd(L, imul(L, iadd(L, xvar(L, j), xvar(L, kk)), xi(L, ct)), xvar(L, c)));
  int z = reduce_end(L, red, x2(L, LX_MUL, xv, yv), "z");
  if (scalar) store(L, Z, xvar(L, e), xvar(L, z));
  else
    store(L, KS_SCRATCH, iadd(L, imul(L, iadd(L, imul(L, xvar(L, g), xi(L, lags)), xvar(L, kk)), xi(L, d)),
                              iadd(L, imul(L, xvar(L, t), xi(L, ct)), xvar(L, c))), xvar(L, z));
  for_end(L);
  if (scalar) {
    kk = for_begin(L, xi(L, 0), xi(L, lags), true, "k");
    int q;
    red = reduce_begin(L, LX_ADD, xi(L, 0), xi(L, ct), &q);
    z = reduce_end(L, red, load(L, Z, iadd(L, imul(L, xvar(L, kk), xi(L, ct)), xvar(L, q))), "zk");
    store(L, KS_SCRATCH, iadd(L, imul(L, xvar(L, 0), xi(L, lags)), xvar(L, kk)), xvar(L, z));
    for_end(L);
  }
  return lk;
}

static LKernel *step_dw_sum(Arena *a, const Schedule *s, const Kernel *k, int64_t ct) {
  Lo Lw, *L = &Lw;
  LKernel *lk = step_begin(L, a, s, k, LTARGET_GPU, "conv_dw_sum");
  const Node *n = &s->g->nodes[k->node];
  const Shape *xs = &s->g->nodes[n->in[0]].shape;
  int r = xs->rank;
  int64_t d = xs->d[r - 1].n, lags = n->shape.d[0].n;
  lk->outer = xi(L, lags), lk->nouter = (SymSize){lags, 0, 0};
  int v;
  if (n->conv == CONV_SCALAR) {  // a warp per lag: P[v, k] over v = (g, t)
    lk->shape = LK_ROWS;
    LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), imul(L, dprod(L, xs, 0, r - 2), xi(L, d / ct)), &v);
    int sum = reduce_end(L, red, load(L, KS_SCRATCH, iadd(L, imul(L, xvar(L, v), xi(L, lags)), xvar(L, 0))), "sum");
    store(L, KS_OUT, xvar(L, 0), xvar(L, sum));
    return lk;
  }
  lk->shape = LK_ELEMENTS;  // a thread per (k, c): P[g, k, c] over g in order
  lk->inner = xi(L, d), lk->ninner = (SymSize){d, 0, 0};
  int c = for_begin(L, xi(L, 0), xi(L, d), true, "c");
  LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), dprod(L, xs, 0, r - 2), &v);
  LExpr *at = iadd(L, imul(L, iadd(L, imul(L, xvar(L, v), xi(L, lags)), xvar(L, 0)), xi(L, d)), xvar(L, c));
  int sum = reduce_end(L, red, load(L, KS_SCRATCH, at), "sum");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, 0), xi(L, d)), xvar(L, c)), xvar(L, sum));
  for_end(L);
  return lk;
}

// SCATTER_ADD on a GPU (the embedding gradient, out [V, d] = 0; out[ids[r]]
// += dy[r]) in three steps, ids [lead, Tc] (Tc its last axis), r = b Tc + i,
// through F [lead, V] (KS_SCRATCH) and U [rows, d] (KS_CONV_Y):
//   scatter_first    a thread per (b, v): F[b, v] = Tc - (the first i with
//                    ids[b, i] = v), 0 when v is not in sequence b
//   scatter_combine  a thread per (r, c): at the first row r of its id in
//                    its sequence, U[r, c] = sum over i' >= i in order of
//                    dy[b Tc + i', c] where ids[b, i'] = ids[r] (else 0)
//   scatter_gather   a thread per (v, c): out[v, c] = sum over b in order of
//                    U[first row of v in b, c] where v is in b
// Each sum has a fixed order (rows in order within a sequence, then
// sequences in order): the same bits every run. Ids outside [0, V) add nothing.
static LKernel *step_scatter(Arena *a, const Schedule *s, const Kernel *k, int part) {
  static const char *names[] = {"scatter_first", "scatter_combine", "scatter_gather"};
  Lo Lw, *L = &Lw;
  LKernel *lk = step_begin(L, a, s, k, LTARGET_GPU, names[part]);
  const Node *n = &s->g->nodes[k->node];
  const Shape *is = &s->g->nodes[n->in[1]].shape;
  int r = is->rank;
  int64_t V = n->shape.d[0].n, d = n->shape.d[1].n;
  LExpr *Tc = xdim(L, is->d[r - 1]), *lead = dprod(L, is, 0, r - 1);
  lk->shape = LK_ELEMENTS;
  lk->slot_int[KS_IN1] = true;
  int x, j;
  if (part == 0) {
    lk->outer = lead, lk->nouter = symsize_prod(is, 0, r - 1);
    lk->inner = xi(L, V), lk->ninner = (SymSize){V, 0, 0};
    int v = for_begin(L, xi(L, 0), xi(L, V), true, "v");
    LStmt *red = reduce_begin(L, LX_MAX, xi(L, 0), Tc, &j);
    LExpr *hit = x2(L, LX_EQ, load(L, KS_IN1, iadd(L, imul(L, xvar(L, 0), Tc), xvar(L, j))), xvar(L, v));
    x = reduce_end(L, red, xsel(L, hit, x1(L, LX_TOF, x2(L, LX_SUB, Tc, xvar(L, j))), xf(L, 0)), "first");
    store(L, KS_SCRATCH, iadd(L, imul(L, xvar(L, 0), xi(L, V)), xvar(L, v)), xvar(L, x));
    for_end(L);
    return lk;
  }
  if (part == 1) {
    lk->outer = dprod(L, is, 0, r), lk->nouter = symsize_prod(is, 0, r);
    lk->inner = xi(L, d), lk->ninner = (SymSize){d, 0, 0};
    int i = let(L, x2(L, LX_REM, xvar(L, 0), Tc), "i");
    int id = let(L, load(L, KS_IN1, xvar(L, 0)), "id");
    int ok = let(L, x2(L, LX_AND, x2(L, LX_GE, xvar(L, id), xi(L, 0)), x2(L, LX_LT, xvar(L, id), xi(L, V))), "ok");
    LExpr *fi = iadd(L, imul(L, x2(L, LX_DIV, xvar(L, 0), Tc), xi(L, V)), xsel(L, xvar(L, ok), xvar(L, id), xi(L, 0)));
    LExpr *first = x2(L, LX_AND, xvar(L, ok),
                      x2(L, LX_EQ, load(L, KS_SCRATCH, fi), x1(L, LX_TOF, x2(L, LX_SUB, Tc, xvar(L, i)))));
    int len = let(L, xsel(L, first, x2(L, LX_SUB, Tc, xvar(L, i)), xi(L, 0)), "len");
    int c = for_begin(L, xi(L, 0), xi(L, d), true, "c");
    LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), xvar(L, len), &j);
    LExpr *row = iadd(L, xvar(L, 0), xvar(L, j));
    LExpr *same = x2(L, LX_EQ, load(L, KS_IN1, row), xvar(L, id));
    x = reduce_end(L, red, xsel(L, same, load(L, KS_IN0, iadd(L, imul(L, row, xi(L, d)), xvar(L, c))), xf(L, 0)), "u");
    store(L, KS_CONV_Y, iadd(L, imul(L, xvar(L, 0), xi(L, d)), xvar(L, c)), xvar(L, x));
    for_end(L);
    return lk;
  }
  lk->outer = xi(L, V), lk->nouter = (SymSize){V, 0, 0};
  lk->inner = xi(L, d), lk->ninner = (SymSize){d, 0, 0};
  int c = for_begin(L, xi(L, 0), xi(L, d), true, "c");
  int b;
  LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), lead, &b);
  LExpr *f = load(L, KS_SCRATCH, iadd(L, imul(L, xvar(L, b), xi(L, V)), xvar(L, 0)));
  // the first row, b Tc + Tc - F (F >= 1 where v is in b; clamped so the load stays in b)
  LExpr *row = x2(L, LX_SUB, imul(L, iadd(L, xvar(L, b), xi(L, 1)), Tc), x1(L, LX_TOI, x2(L, LX_MAX, f, xf(L, 1))));
  LExpr *u = load(L, KS_CONV_Y, iadd(L, imul(L, row, xi(L, d)), xvar(L, c)));
  x = reduce_end(L, red, xsel(L, x2(L, LX_GT, f, xf(L, 0)), u, xf(L, 0)), "sum");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, 0), xi(L, d)), xvar(L, c)), xvar(L, x));
  for_end(L);
  return lk;
}

// The sorted scatter applies: a GPU schedule gave the kernel F and U.
static bool scatter_sorted(const Schedule *s, const Kernel *k, LTarget tgt) {
  return tgt == LTARGET_GPU && s->g->nodes[k->node].op == OP_SCATTER_ADD && k->scratch >= 0 && k->xscratch[0] >= 0;
}

// The two-step CONV_DW applies: a GPU schedule gave the kernel its partials.
static int64_t dw_tile(const Schedule *s, const Kernel *k, LTarget tgt) {
  return tgt == LTARGET_GPU && k->scratch >= 0 ? schedule_conv_dw_tile(s->g, &s->g->nodes[k->node]) : 0;
}

static bool lower_steps_form(const Schedule *s, const Kernel *k, LTarget tgt) {
  return tgt == LTARGET_GPU && (k->chunk || dw_tile(s, k, tgt) || scatter_sorted(s, k, tgt));
}

LSteps *lower_steps(Arena *a, const Schedule *s, const Kernel *k, LTarget tgt) {
  const Graph *g = s->g;
  const Node *n = &g->nodes[k->node];
  if (!lower_steps_form(s, k, tgt)) return NULL;
  LSteps *st = arena_alloc(a, sizeof *st);
  if (scatter_sorted(s, k, tgt)) {
    for (int part = 0; part < 3; part++) st->lk[st->n++] = step_scatter(a, s, k, part);
    return st;
  }
  int64_t ct = dw_tile(s, k, tgt);
  if (ct) {
    st->lk[st->n++] = step_dw_partial(a, s, k, ct);
    st->lk[st->n++] = step_dw_sum(a, s, k, ct);
    return st;
  }
  const Shape *xs = &g->nodes[n->in[0]].shape, *os = &n->shape;
  int r = xs->rank;
  Chunked c = {.xs = xs, .C = k->chunk, .din = xs->d[r - 1].n, .rows = symsize_prod(xs, 0, r - 1), .rev = n->op == OP_CONV_DX};
  c.L = n->op == OP_CONV_DW ? os->d[0].n : g->nodes[n->in[1]].shape.d[0].n;
  c.f = n->op == OP_CONV_DW ? g->nodes[n->in[1]].shape.d[r - 1].n : os->d[os->rank - 1].n;
  c.NC = c.L / c.C;
  SymSize cd = {c.C * c.din, 0, 0}, f = {c.f, 0, 0};
  if (n->op == OP_CONV_DX) st->lk[st->n++] = step_transpose(a, s, k, tgt, &c);
  st->lk[st->n++] = step_unfold(a, s, k, tgt, &c);
  if (n->op == OP_CONV_DW) {  // dW_D [C d, e] = U^T S_D, k = R; dW viewed as [NC, C d, e]
    st->lk[st->n++] = step_shift(a, s, k, tgt, &c);
    st->gm[st->n++] = step_gemm(a, true, KS_CONV_U, KS_CONV_Y, KS_OUT, cd, f, c.rows, c.NC, symsize_mul(c.rows, f),
                                symsize_mul(cd, f));
    return st;
  }
  // Y_D [R, f] = U [R, C din] W_D [C din, f]: W (W^T for dx) viewed as [NC, C din, f]
  st->gm[st->n++] = step_gemm(a, false, KS_CONV_U, c.rev ? KS_CONV_WT : KS_IN1, KS_CONV_Y, c.rows, f, cd, c.NC,
                              symsize_mul(cd, f), symsize_mul(c.rows, f));
  st->lk[st->n++] = step_shifted_sum(a, s, k, tgt, &c);
  return st;
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
  LWindow w = {LW_FULL, {1, 0, 0}, {1, 0, 0}};
  if (a < 0 || k->fusion == FG_WEIGHT_GRAD) return w;
  if (att_gpu_form(g, n, tgt)) return w.kind = LW_BODY, w;
  if (n->op == OP_SCAN && a == n->axis) return w.kind = LW_BODY, w;  // positions [w0, w1) from h_{w0-1}
  if (n->op == OP_SCAN_READ) return w.kind = a == n->axis ? LW_BODY : LW_FULL, w;  // from S_{w0-1}, or all
  if (reduce_rows_gpu_form(g, n, tgt)) return w;  // column tiles: all of it
  if (lower_steps_form(s, k, tgt)) return w;  // the chunked convolution: every position
  bool inside = false;
  if (mm) sh = &mm->shape, nouter = r - 2, inside = a == r - 2;
  else if (n->op == OP_ATTENTION) nouter = n->axis ? r - 2 : r - 1;  // query rows
  else if (n->op == OP_SOFTMAX) sh = xs, nouter = n->axis;
  else if (n->op == OP_SCAN || n->op == OP_SCAN_REV) nouter = n->axis;
  else if (n->op == OP_CAUSAL_CONV && n->conv == CONV_MATRIX) sh = xs, nouter = r - 2, inside = a == r - 2;
  else if (n->op == OP_CROSS_ENTROPY || n->op == OP_SCATTER_ADD || n->op == OP_ATTENTION_GRAD || n->op == OP_CONV_DW ||
           n->op == OP_SCAN_READ_GRAD ||
           n->op == OP_CONV_DX)
    return w;
  if (a < nouter) w.kind = LW_OUTER, w.stride = symsize_prod(sh, a + 1, nouter);
  else if (inside) w.kind = LW_ROWS, w.stride = (SymSize){1, 0, 0};
  else return w;
  w.extent = symsize_of(sh->d[a]);
  return w;
}

// ---- text --------------------------------------------------------------------------

static const char *kind_name[LX_COUNT] = {
    [LX_NEG] = "neg", [LX_EXP] = "exp", [LX_LOG] = "log", [LX_SQRT] = "sqrt", [LX_SIN] = "sin", [LX_COS] = "cos",
    [LX_TANH] = "tanh", [LX_ERF] = "erf", [LX_ADD] = "+", [LX_SUB] = "-", [LX_MUL] = "*", [LX_DIV] = "/",
    [LX_REM] = "%", [LX_MAX] = "max", [LX_LT] = "<", [LX_GT] = ">", [LX_GE] = ">=", [LX_EQ] = "==", [LX_AND] = "&&",
    [LX_TOF] = "float", [LX_TOI] = "int", [LX_KEEP] = "keep"};

static void print_var(FILE *f, const LKernel *lk, int v) { fprintf(f, "%s_%d", lk->names[v][0] ? lk->names[v] : "v", v); }

static void print_expr(FILE *f, const LKernel *lk, const LExpr *e) {
  switch (e->kind) {
  case LX_INT: fprintf(f, "%lld", (long long)e->ival); return;
  case LX_FLT: fprintf(f, "%gf", e->fval); return;
  case LX_DIM: fputs(e->ival ? "T" : "B", f); return;
  case LX_VAR: print_var(f, lk, e->var); return;
  case LX_ROW0: fputs("row0", f); return;
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
  for (int i = 0; i < lk->nlocals; i++) fprintf(f, "    local%d: float[%lld]\n", i, (long long)lk->local_size[i]);
  print_block(f, lk, lk->body, 4);
}

int lower_print(FILE *f, Arena *a, const Schedule *s, LTarget tgt) {
  char err[512];
  for (int ki = 0; ki < s->nkernels; ki++) {
    const Kernel *k = &s->kernels[ki];
    if (k->cls != ki) continue;
    const Node *n = &s->g->nodes[k->node];
    LGemm *gm = lower_gemm(a, s, k);
    LKernel *lk = lower_kernel(a, s, k, tgt, true, err, sizeof err);
    LSteps *st = lower_steps(a, s, k, tgt);
    if (err[0]) return fprintf(stderr, "%s\n", err), 1;
    fprintf(f, "k%d %s %%%d%s\n", ki, k->fusion == FG_WEIGHT_GRAD ? "weight_grad" : ir_op_info[n->op].name, n->id,
            gm || lk ? "" : st ? arena_printf(a, ": chunked, C %d, steps in order", k->chunk) : ": a backend kernel (causal convolution)");
    if (gm) lgemm_print(f, gm);
    if (lk) lkernel_print(f, lk);
    for (int i = 0; st && i < st->n; i++) {
      if (st->gm[i]) lgemm_print(f, st->gm[i]);
      else lkernel_print(f, st->lk[i]);
    }
  }
  return 0;
}
