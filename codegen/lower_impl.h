// lower_impl.h: what the files of the loop lowering share (lower.c,
// lower_attention.c, lower_scan.c, lower_steps.c): the lowering state of one kernel (Lo), the builders of
// loop descriptions, and the entry points of each file's forms. Not a
// public interface: loops.h is.
#ifndef XF_LOWER_IMPL_H
#define XF_LOWER_IMPL_H

#include "loops.h"

#include <stdio.h>
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

// ---- builders ----------------------------------------------------------------------

static inline int new_var(Lo *L, LType t, const char *name) {
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

static inline LExpr *ex(Lo *L, LExprKind kind, LType t) {
  LExpr *e = arena_alloc(L->a, sizeof *e);
  e->kind = kind, e->type = t;
  return e;
}
static inline LExpr *xi(Lo *L, int64_t v) {
  LExpr *e = ex(L, LX_INT, LT_I64);
  e->ival = v;
  return e;
}
static inline LExpr *xf(Lo *L, double v) {
  LExpr *e = ex(L, LX_FLT, LT_F32);
  e->fval = v;
  return e;
}
static inline LExpr *xvar(Lo *L, int v) {
  LExpr *e = ex(L, LX_VAR, L->lk->types[v]);
  e->var = v;
  return e;
}
static inline LExpr *x1(Lo *L, LExprKind kind, LExpr *x) {
  if (kind == LX_TOF && x->kind == LX_INT) return xf(L, (double)x->ival);
  LExpr *e = ex(L, kind, kind == LX_TOF ? LT_F32 : kind == LX_TOI ? LT_I64 : kind == LX_KEEP ? LT_BOOL : x->type);
  e->a[0] = x;
  return e;
}
static inline LExpr *x2(Lo *L, LExprKind kind, LExpr *x, LExpr *y) {
  if ((kind == LX_DIV || kind == LX_REM) && y->kind == LX_INT && y->ival == 1) return kind == LX_DIV ? x : xi(L, 0);
  bool cmp = kind == LX_LT || kind == LX_GT || kind == LX_GE || kind == LX_EQ || kind == LX_AND;
  LExpr *e = ex(L, kind, cmp ? LT_BOOL : x->type);
  e->a[0] = x, e->a[1] = y;
  return e;
}
static inline LExpr *xsel(Lo *L, LExpr *c, LExpr *x, LExpr *y) {
  LExpr *e = ex(L, LX_SELECT, x->type);
  e->a[0] = c, e->a[1] = x, e->a[2] = y;
  return e;
}
// Integer arithmetic with constants folded (sizes are mostly constants).
static inline LExpr *imul(Lo *L, LExpr *x, LExpr *y) {
  if (x->kind == LX_INT && y->kind == LX_INT) return xi(L, x->ival * y->ival);
  if (x->kind == LX_INT && x->ival == 1) return y;
  if (y->kind == LX_INT && y->ival == 1) return x;
  if ((x->kind == LX_INT && x->ival == 0) || (y->kind == LX_INT && y->ival == 0)) return xi(L, 0);
  return x2(L, LX_MUL, x, y);
}
static inline LExpr *iadd(Lo *L, LExpr *x, LExpr *y) {
  if (x->kind == LX_INT && y->kind == LX_INT) return xi(L, x->ival + y->ival);
  if (x->kind == LX_INT && x->ival == 0) return y;
  if (y->kind == LX_INT && y->ival == 0) return x;
  return x2(L, LX_ADD, x, y);
}
// min, max of two i64 values
static inline LExpr *imin(Lo *L, LExpr *x, LExpr *y) { return xsel(L, x2(L, LX_LT, x, y), x, y); }
static inline LExpr *imax(Lo *L, LExpr *x, LExpr *y) { return xsel(L, x2(L, LX_LT, x, y), y, x); }
static inline LExpr *load(Lo *L, int slot, LExpr *idx) {
  bool local = slot >= LK_LOCAL0;
  LExpr *e = ex(L, LX_LOAD, !local && L->lk->slot_int[slot] ? LT_I64 : LT_F32);
  e->slot = slot, e->a[0] = idx;
  if (!local) L->lk->slot_read[slot] = true;
  return e;
}
static inline LExpr *xdim(Lo *L, Dim d) {
  if (d.kind == DIM_CONST) return xi(L, d.n);
  LExpr *e = ex(L, LX_DIM, LT_I64);
  e->ival = d.kind == DIM_T;
  return dim_tdiv(d) > 1 ? x2(L, LX_DIV, e, xi(L, dim_tdiv(d))) : e;  // T / s
}
// prod of dims [from, to) of s
static inline LExpr *dprod(Lo *L, const Shape *s, int from, int to) {
  LExpr *r = xi(L, 1);
  for (int i = from; i < to; i++) r = imul(L, r, xdim(L, s->d[i]));
  return r;
}

static inline LStmt *stmt(Lo *L, LStmtKind kind) {
  LStmt *st = arena_alloc(L->a, sizeof *st);
  st->kind = kind;
  *L->tail[L->depth] = st;
  L->tail[L->depth] = &st->next;
  return st;
}
static inline int let(Lo *L, LExpr *v, const char *name) {
  LStmt *st = stmt(L, LS_LET);
  st->var = new_var(L, v->type, name);
  st->val = v;
  return st->var;
}
static inline void store(Lo *L, int slot, LExpr *idx, LExpr *v) {
  LStmt *st = stmt(L, LS_STORE);
  st->slot = slot, st->idx = idx, st->val = v;
  if (slot < LK_LOCAL0) L->lk->slot_written[slot] = true;
}
// for (var in [lo, hi)) { ... for_end }: returns var.
static inline int for_begin(Lo *L, LExpr *lo, LExpr *hi, bool par, const char *name) {
  LStmt *st = stmt(L, LS_FOR);
  st->var = new_var(L, LT_I64, name);
  st->lo = lo, st->hi = hi, st->par = par;
  L->tail[++L->depth] = &st->body;
  return st->var;
}
static inline void for_end(Lo *L) { L->depth--; }
// var = op over a new index in [lo, hi) of val(index): begin returns the
// index; reduce_end(value) closes it and returns the result variable.
static inline LStmt *reduce_begin(Lo *L, LExprKind op, LExpr *lo, LExpr *hi, int *index) {
  LStmt *st = arena_alloc(L->a, sizeof *st);
  st->kind = LS_REDUCE, st->op = op, st->lo = lo, st->hi = hi;
  st->ivar = *index = new_var(L, LT_I64, "t");
  return st;
}
static inline int reduce_end(Lo *L, LStmt *st, LExpr *val, const char *name) {
  st->val = val;
  st->var = new_var(L, LT_F32, name);
  *L->tail[L->depth] = st;
  L->tail[L->depth] = &st->next;
  return st->var;
}

// C = alpha op(A) op(B) + beta C (LS_GEMM); call's slots marked read
// (C too when beta != 0) and written.
static inline void gemm_call(Lo *L, LCall c) {
  LStmt *st = stmt(L, LS_GEMM);
  st->call = arena_alloc(L->a, sizeof c);
  *st->call = c;
  for (int x = 0; x < 3; x++)
    if (c.slot[x] < LK_LOCAL0 && (x != LC_C || c.beta != 0)) L->lk->slot_read[c.slot[x]] = true;
  if (c.slot[LC_C] < LK_LOCAL0) L->lk->slot_written[c.slot[LC_C]] = true;
}

// A local array of size floats (LK_LOCAL0 + i).
static inline int local(Lo *L, int64_t size) {
  LKernel *lk = L->lk;
  if (lk->nlocals == LK_MAX_LOCALS) {
    fprintf(stderr, "xfc: internal error: lower.c: more than %d local arrays\n", LK_MAX_LOCALS);
    abort();
  }
  lk->local_size[lk->nlocals] = size;
  return LK_LOCAL0 + lk->nlocals++;
}
// A local array of size bf16 elements (LKernel.local_bf16).
static inline int local_bf16(Lo *L, int64_t size) {
  int x = local(L, size);
  L->lk->local_bf16[x - LK_LOCAL0] = true;
  return x;
}

// for (index in [lo, hi)) carrying vars[k] = init[k] (types of init[k]) {
// ... carry_end(next) }: returns the statement; *index the loop variable.
static inline LStmt *carry_begin(Lo *L, LExpr *lo, LExpr *hi, int n, LExpr **init, const char *const *names, int *vars, int *index) {
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
static inline void carry_end(Lo *L, LStmt *st, LExpr **next) {
  for (int k = 0; k < st->ncarry; k++) st->step[k] = next[k];
  L->depth--;
}

// An op the description has no loops for where it stands (inside a group):
// "file:line:col: error: no loop lowering for op 'X' (node %N)", never an identity.
static inline void unlowered(Lo *L, const Node *n) {
  if (L->err[0]) return;
  int at = n->loc.file ? snprintf(L->err, L->errlen, "%s:%d:%d: ", n->loc.file, n->loc.line, n->loc.col) : 0;
  if (at < 0 || (size_t)at >= L->errlen) at = 0;
  snprintf(L->err + at, L->errlen - (size_t)at, "error: no loop lowering for op '%s' (node %%%d)", ir_op_info[n->op].name, n->id);
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
bool lower_out_parts(Lo *L, const Node *n, const int64_t width[3], int64_t row, OutPart part[3]);

// The slot of input i of node n in the kernel (lower.c).
int lower_in_slot(Lo *L, const Node *n, int i);
// SCAN and SCAN_READ / SCAN_READ_GRAD (lower_scan.c).
void lower_scan(Lo *L, const Node *n);
void lower_scan_read(Lo *L, const Node *n);
// A SCAN_READ(_GRAD) node's operands as lower_scan.c reads them: one outer
// index per sequence (p, m) of k [P.., K, M.., dk, 1] (row t of it is
// (p K + t) M + m).
typedef struct {
  const Shape *ks, *as;
  int axis, p, m;        // the sequence's coordinates (variables)
  int64_t dk, dv;
  LExpr *K, *M;
  OutPart part[3];       // SCAN_READ_GRAD's dq, dk, dv
} Rd;
// The offset of the decay a (broadcast to k) at position t, row i.
LExpr *rd_a(Lo *L, const Rd *d, LExpr *t, LExpr *i);
// The row of position t of the sequence: (p K + t) M + m (a variable).
int rd_row(Lo *L, const Rd *d, LExpr *t);
// The chunked forms of SCAN_READ and SCAN_READ_GRAD (lower_scan_chunk.c),
// chunk C = Kernel.scan_chunk.
void lower_scan_read_chunked(Lo *L, Rd *d, const Node *n, int64_t C);
// Whether kernel k is computed in steps on tgt (lower_steps.c).
bool lower_steps_form(const Schedule *s, const Kernel *k, LTarget tgt);

// A step of kernel k's form in steps (LSteps) on tgt: L set up for an
// LKernel `name` of its own outer extent (own_outer), variable 0 the outer
// index (lower_steps.c).
LKernel *step_begin(Lo *L, Arena *a, const Schedule *s, const Kernel *k, LTarget tgt, const char *name);
// Step part (0 the partial sums, 1 their totals) of kernel k's reduction
// over rows in two steps (Kernel.red_split; lower.c).
LKernel *lower_red_step(Arena *a, const Schedule *s, const Kernel *k, int part);
// ROUTED_MATMUL(_DW) and TOPK (lower_route.c).
void lower_routed(Lo *L, const Node *n);
void lower_topk(Lo *L, const Node *n);
// The GPU's steps of a ROUTED_MATMUL(_DW) kernel whose schedule gave it the
// index region (Kernel.xscratch[0]), appended to st; with st NULL only
// whether the kernel has that form.
bool lower_routed_steps(Arena *a, const Schedule *s, const Kernel *k, LSteps *st);
// The GPU's blocked attention gradient (lower_attention.c): its steps into
// st (st NULL: whether kernel k takes that form).
bool lower_attention_steps(Arena *a, const Schedule *s, const Kernel *k, LSteps *st);
// Whether attention node n's gradient takes that form on tgt (a GPU, heads
// too wide for the (sequence, head) form).
bool lower_att_steps(const Graph *g, const Node *n, LTarget tgt);
// The window bound LX_WIN of a loop (lower_attention.c).
LExpr *lower_xwin(Lo *L, int hi);
// Whether attention node n takes the GPU's (sequence, head) form on tgt.
bool lower_att_gpu_form(const Graph *g, const Node *n, LTarget tgt);
// The query rows per block of attention node n's blocked form on tgt, or 0:
// on a CPU Kernel.att_block (the schedule's cost rule); on a GPU where the
// (sequence, head) form does not fit (long contexts, wide heads), with the
// team's GEMMs (LS_GEMM in a block of threads).
int64_t lower_att_block(const Graph *g, const Node *n, const Kernel *k, LTarget tgt);
// Whether the forward (ATTENTION, ATTENTION_LSE) n takes the CPU's short-head
// form (lower_attention_short.c): not blocked, at least 8 heads of at most 8
// features, no score bias, its stack arrays within ATT_KEYS_FLOATS.
bool lower_att_short_fwd(const Graph *g, const Node *n, const Kernel *k, LTarget tgt);
// ATTENTION and ATTENTION_GRAD (lower_attention.c).
void lower_attention(Lo *L, const Node *n);

#endif
