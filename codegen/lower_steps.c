// lower_steps.c: the matrix-kind causal convolutions on a GPU as chunked
// GEMMs in steps (loops.h LSteps). Part of the lowering of lower.c
// (lower_impl.h).
#include "lower_impl.h"

#include <math.h>
#include <stdlib.h>

// ---- the chunked convolutions (loops.h LSteps) -------------------------------------

typedef struct {
  const Shape *xs;     // the unfolded operand: x [.., T, din] (dy for CONV_DX)
  int64_t C, NC, L;    // chunk, chunks, lags
  int64_t din, f;      // features of the unfolded operand; of the product's rows (Y, S)
  SymSize rows;        // R: the rows of xs
  bool rev;            // CONV_DX: time reversed
} Chunked;

LKernel *step_begin(Lo *L, Arena *a, const Schedule *s, const Kernel *k, LTarget tgt, const char *name) {
  *L = (Lo){.a = a, .s = s, .g = s->g, .k = k, .tgt = tgt, .train = true, .own_outer = true};
  L->lk = arena_alloc(a, sizeof *L->lk);
  L->tail[0] = &L->lk->body;
  L->lk->name = name;
  L->lk->ninner = (SymSize){1, 0, 0, 1};
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
  lk->inner = xi(&L, w), lk->ninner = (SymSize){w, 0, 0, 1};
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
  lk->outer = xi(&L, c->L * e), lk->nouter = (SymSize){c->L * e, 0, 0, 1};
  lk->inner = xi(&L, d), lk->ninner = (SymSize){d, 0, 0, 1};
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
  lk->outer = imul(&L, xi(&L, c->NC), R), lk->nouter = symsize_mul((SymSize){c->NC, 0, 0, 1}, c->rows);
  lk->inner = xi(&L, c->f), lk->ninner = (SymSize){c->f, 0, 0, 1};
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
  gm->nbatch = 1, gm->batch[0] = (SymSize){nc, 0, 0, 1}, gm->count = gm->batch[0];
  gm->stride[LG_A][0] = (SymSize){0, 0, 0, 1}, gm->stride[LG_B][0] = stride_b, gm->stride[LG_C][0] = stride_c;
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
  lk->nouter = symsize_mul(symsize_prod(xs, 0, r - 2), (SymSize){nt, 0, 0, 1});
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
  lk->outer = xi(L, lags), lk->nouter = (SymSize){lags, 0, 0, 1};
  int v;
  if (n->conv == CONV_SCALAR) {  // a warp per lag: P[v, k] over v = (g, t)
    lk->shape = LK_ROWS;
    LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), imul(L, dprod(L, xs, 0, r - 2), xi(L, d / ct)), &v);
    int sum = reduce_end(L, red, load(L, KS_SCRATCH, iadd(L, imul(L, xvar(L, v), xi(L, lags)), xvar(L, 0))), "sum");
    store(L, KS_OUT, xvar(L, 0), xvar(L, sum));
    return lk;
  }
  lk->shape = LK_ELEMENTS;  // a thread per (k, c): P[g, k, c] over g in order
  lk->inner = xi(L, d), lk->ninner = (SymSize){d, 0, 0, 1};
  int c = for_begin(L, xi(L, 0), xi(L, d), true, "c");
  LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), dprod(L, xs, 0, r - 2), &v);
  LExpr *at = iadd(L, imul(L, iadd(L, imul(L, xvar(L, v), xi(L, lags)), xvar(L, 0)), xi(L, d)), xvar(L, c));
  int sum = reduce_end(L, red, load(L, KS_SCRATCH, at), "sum");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, 0), xi(L, d)), xvar(L, c)), xvar(L, sum));
  for_end(L);
  return lk;
}

// SCATTER_ADD on a GPU (the embedding gradient, out [V, d] = 0; out[ids[r]]
// += dy[r]) in four steps, ids [lead, Tc] (Tc its last axis), r = b Tc + i,
// through F [lead, V] (KS_SCRATCH), U [rows, d] (KS_CONV_Y) and N [rows, 2]
// (KS_CONV_WT):
//   scatter_first    a warp per (b, v): F[b, v] = Tc - (the first i with
//                    ids[b, i] = v), 0 when v is not in sequence b
//   scatter_next     a warp per r: N[r] = (the next i' > i with
//                    ids[b, i'] = ids[r], else Tc; the count of i' >= i with
//                    ids[b, i'] = ids[r])
//   scatter_combine  a thread per (r, c): at the first row r of its id in
//                    its sequence, U[r, c] = sum over those i' in order of
//                    dy[b Tc + i', c], walking N's links (else 0)
//   scatter_gather   a thread per (v, c): out[v, c] = sum over b in order of
//                    U[first row of v in b, c] where v is in b
// Each sum has a fixed order (rows in order within a sequence, then
// sequences in order): the same bits every run. Ids outside [0, V) add nothing.
// Row r's position i in its sequence, its id and its sequence's first row
// (scatter_next, scatter_combine).
typedef struct {
  int i, id, row0;
} ScatterRow;
static ScatterRow scatter_row(Lo *L, LExpr *Tc) {
  ScatterRow w;
  w.i = let(L, x2(L, LX_REM, xvar(L, 0), Tc), "i");
  w.id = let(L, load(L, KS_IN1, xvar(L, 0)), "id");
  w.row0 = let(L, x2(L, LX_SUB, xvar(L, 0), xvar(L, w.i)), "row0");
  return w;
}
// Whether position j of row w's sequence holds w's id.
static LExpr *scatter_same(Lo *L, ScatterRow w, int j) {
  return x2(L, LX_EQ, load(L, KS_IN1, iadd(L, xvar(L, w.row0), xvar(L, j))), xvar(L, w.id));
}

static LKernel *step_scatter(Arena *a, const Schedule *s, const Kernel *k, int part) {
  static const char *names[] = {"scatter_first", "scatter_next", "scatter_combine", "scatter_gather"};
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
  if (part == 0) {  // a warp per (b, v), its lanes over i
    lk->shape = LK_ROWS;
    lk->outer = imul(L, lead, xi(L, V)), lk->nouter = symsize_mul(symsize_prod(is, 0, r - 1), (SymSize){V, 0, 0, 1});
    int b = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, V)), "b"), v = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, V)), "v");
    LStmt *red = reduce_begin(L, LX_MAX, xi(L, 0), Tc, &j);
    LExpr *hit = x2(L, LX_EQ, load(L, KS_IN1, iadd(L, imul(L, xvar(L, b), Tc), xvar(L, j))), xvar(L, v));
    x = reduce_end(L, red, xsel(L, hit, x1(L, LX_TOF, x2(L, LX_SUB, Tc, xvar(L, j))), xf(L, 0)), "first");
    store(L, KS_SCRATCH, xvar(L, 0), xvar(L, x));
    return lk;
  }
  if (part == 1) {  // a warp per row, its lanes over i' (two reductions)
    lk->shape = LK_ROWS;
    lk->outer = dprod(L, is, 0, r), lk->nouter = symsize_prod(is, 0, r);
    ScatterRow w = scatter_row(L, Tc);
    LStmt *red = reduce_begin(L, LX_MAX, iadd(L, xvar(L, w.i), xi(L, 1)), Tc, &j);
    // Tc - next; 0 where none follows (the last position's range is empty: -inf)
    int nx0 = reduce_end(L, red, xsel(L, scatter_same(L, w, j), x1(L, LX_TOF, x2(L, LX_SUB, Tc, xvar(L, j))), xf(L, 0)), "nx0");
    int nx = let(L, x2(L, LX_MAX, xvar(L, nx0), xf(L, 0)), "nx");
    red = reduce_begin(L, LX_ADD, xvar(L, w.i), Tc, &j);
    int cnt = reduce_end(L, red, xsel(L, scatter_same(L, w, j), xf(L, 1), xf(L, 0)), "cnt");
    store(L, KS_CONV_WT, imul(L, xvar(L, 0), xi(L, 2)), x2(L, LX_SUB, x1(L, LX_TOF, Tc), xvar(L, nx)));
    store(L, KS_CONV_WT, iadd(L, imul(L, xvar(L, 0), xi(L, 2)), xi(L, 1)), xvar(L, cnt));
    return lk;
  }
  if (part == 2) {
    lk->outer = dprod(L, is, 0, r), lk->nouter = symsize_prod(is, 0, r);
    lk->inner = xi(L, d), lk->ninner = (SymSize){d, 0, 0, 1};
    ScatterRow w = scatter_row(L, Tc);
    int ok = let(L, x2(L, LX_AND, x2(L, LX_GE, xvar(L, w.id), xi(L, 0)), x2(L, LX_LT, xvar(L, w.id), xi(L, V))), "ok");
    LExpr *fi = iadd(L, imul(L, x2(L, LX_DIV, xvar(L, 0), Tc), xi(L, V)), xsel(L, xvar(L, ok), xvar(L, w.id), xi(L, 0)));
    LExpr *first = x2(L, LX_AND, xvar(L, ok),
                      x2(L, LX_EQ, load(L, KS_SCRATCH, fi), x1(L, LX_TOF, x2(L, LX_SUB, Tc, xvar(L, w.i)))));
    LExpr *cnt = x1(L, LX_TOI, load(L, KS_CONV_WT, iadd(L, imul(L, xvar(L, 0), xi(L, 2)), xi(L, 1))));
    int len = let(L, xsel(L, first, cnt, xi(L, 0)), "len");
    int c = for_begin(L, xi(L, 0), xi(L, d), true, "c");
    LExpr *init[2] = {xvar(L, w.i), xf(L, 0)};
    int cv[2];
    LStmt *cs = carry_begin(L, xi(L, 0), xvar(L, len), 2, init, (const char *const[]){"at", "u"}, cv, &j);
    int row = let(L, iadd(L, xvar(L, w.row0), xvar(L, cv[0])), "row");
    LExpr *next[2] = {x1(L, LX_TOI, load(L, KS_CONV_WT, imul(L, xvar(L, row), xi(L, 2)))),
                      x2(L, LX_ADD, xvar(L, cv[1]), load(L, KS_IN0, iadd(L, imul(L, xvar(L, row), xi(L, d)), xvar(L, c))))};
    carry_end(L, cs, next);
    store(L, KS_CONV_Y, iadd(L, imul(L, xvar(L, 0), xi(L, d)), xvar(L, c)), xvar(L, cv[1]));
    for_end(L);
    return lk;
  }
  lk->outer = xi(L, V), lk->nouter = (SymSize){V, 0, 0, 1};
  lk->inner = xi(L, d), lk->ninner = (SymSize){d, 0, 0, 1};
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

bool lower_steps_form(const Schedule *s, const Kernel *k, LTarget tgt) {
  return tgt == LTARGET_GPU &&
         (k->chunk || k->red_split || dw_tile(s, k, tgt) || scatter_sorted(s, k, tgt) || lower_routed_steps(NULL, s, k, NULL) ||
          lower_attention_steps(NULL, s, k, NULL));
}

bool lsteps_all_loops(const LSteps *st) {
  for (int i = 0; i < st->n; i++)
    if (!st->lk[i]) return false;
  return true;
}

LSteps *lower_steps(Arena *a, const Schedule *s, const Kernel *k, LTarget tgt) {
  const Graph *g = s->g;
  const Node *n = &g->nodes[k->node];
  if (!lower_steps_form(s, k, tgt)) return NULL;
  LSteps *st = arena_alloc(a, sizeof *st);
  if (lower_routed_steps(a, s, k, st) || lower_attention_steps(a, s, k, st)) return st;
  if (scatter_sorted(s, k, tgt)) {
    for (int part = 0; part < 4; part++) st->lk[st->n++] = step_scatter(a, s, k, part);
    return st;
  }
  if (k->red_split) {
    for (int part = 0; part < 2; part++) st->lk[st->n++] = lower_red_step(a, s, k, part);
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
  SymSize cd = {c.C * c.din, 0, 0, 1}, f = {c.f, 0, 0, 1};
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
