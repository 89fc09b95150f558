// lower_route.c: the loops of the routing ops: ROUTED_MATMUL and its weight
// gradient (a GEMM per expert over only the rows routed to it) and TOPK.
#include "lower_impl.h"

#include <math.h>

// Whether row r of rows [.., T, inner] is at a position of the step
// program's window [w0, w1) (0 and T in every other program).
static LExpr *inwin(Lo *L, LExpr *r, LExpr *inner, LExpr *T) {
  LExpr *t = x2(L, LX_REM, x2(L, LX_DIV, r, inner), T);
  return x2(L, LX_AND, x2(L, LX_GE, t, lower_xwin(L, 0)), x2(L, LX_LT, t, lower_xwin(L, 1)));
}

// The rows of ROUTED_MATMUL(_DW) node n with expert o (outer index) are
// those whose id lies in [o, o + 1) (the id truncated); off = the rows whose
// id lies in [0, o): expert o's rows are gathered, in row order, to rows
// [off, off + count) of the kernel's scratch, so the experts' rows tile it
// without overlap (one outer index per expert, any order).
//   ROUTED_MATMUL     x [R, d], w [E, d, f], ids [R] -> y [R, f]:
//                     A = x's rows (scratch [R, d]), C = A w[o] (scratch
//                     after A, [R, f]), then y's rows from C; expert 0 also
//                     writes 0 to the rows of an id outside [0, E)
//   ROUTED_MATMUL_DW  x [R, d], dy [R, f], ids [R] -> dw [E, d, f]:
//                     A = x's rows, D = dy's rows (after A), dw[o] = A^T D
//                     (no rows: 0)
void lower_routed(Lo *L, const Node *n) {
  const Graph *g = L->g;
  const Shape *xs = &g->nodes[n->in[0]].shape, *ys = &g->nodes[n->in[1]].shape, *is = &g->nodes[n->in[2]].shape;
  bool fwd = n->op == OP_ROUTED_MATMUL;
  int64_t d = xs->d[xs->rank - 1].n, f = ys->d[ys->rank - 1].n;
  Dim E = fwd ? ys->d[0] : n->len;
  LExpr *R = dprod(L, is, 0, is->rank);
  LKernel *lk = L->lk;
  lk->name = fwd ? "routed_matmul" : "routed_matmul_dw";
  lk->shape = LK_ROWS;
  lk->outer = xdim(L, E), lk->nouter = symsize_of(E);
  if (L->tgt == LTARGET_GPU) lk->team = 256;
  LExpr *e0 = x1(L, LX_TOF, xvar(L, 0)), *e1 = x2(L, LX_ADD, e0, xf(L, 1));
  int tax = -1;  // the time axis of the rows: the step program's window [w0, w1) of it (every position elsewhere)
  for (int i = 0; i < is->rank; i++)
    if (is->d[i].kind == DIM_T) tax = i;
  LExpr *tin = tax >= 0 ? dprod(L, is, tax + 1, is->rank) : NULL;
  int r;
#define INWIN(e) (tax < 0 ? (e) : x2(L, LX_AND, (e), inwin(L, xvar(L, r), tin, xdim(L, is->d[tax]))))
  // off = the rows with an id in [0, o)
  LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), R, &r);
  LExpr *id = load(L, KS_IN2, xvar(L, r));
  LExpr *before = INWIN(x2(L, LX_AND, x2(L, LX_GE, id, xf(L, 0)), x2(L, LX_LT, id, e0)));
  int offf = reduce_end(L, red, xsel(L, before, xf(L, 1), xf(L, 0)), "off");
  int off = let(L, x1(L, LX_TOI, xvar(L, offf)), "off");
  LExpr *Cbase = imul(L, R, xi(L, d));  // C (or D) after A
  // gather: A[off + cnt] = x[r] (and D[off + cnt] = dy[r]) over the rows r of expert o
  LExpr *zero = xi(L, 0);
  int cnt;
  LStmt *gc = carry_begin(L, xi(L, 0), R, 1, &zero, (const char *const[]){"cnt"}, &cnt, &r);
  id = load(L, KS_IN2, xvar(L, r));
  LExpr *mine = INWIN(x2(L, LX_AND, x2(L, LX_GE, id, e0), x2(L, LX_LT, id, e1)));
  LExpr *slot = iadd(L, xvar(L, off), xvar(L, cnt));
  int c = for_begin(L, xi(L, 0), xsel(L, mine, xi(L, d), xi(L, 0)), true, "c");
  store(L, KS_SCRATCH, iadd(L, imul(L, slot, xi(L, d)), xvar(L, c)), load(L, KS_IN0, iadd(L, imul(L, xvar(L, r), xi(L, d)), xvar(L, c))));
  for_end(L);
  if (!fwd) {
    c = for_begin(L, xi(L, 0), xsel(L, mine, xi(L, f), xi(L, 0)), true, "c");
    store(L, KS_SCRATCH, iadd(L, Cbase, iadd(L, imul(L, slot, xi(L, f)), xvar(L, c))),
          load(L, KS_IN1, iadd(L, imul(L, xvar(L, r), xi(L, f)), xvar(L, c))));
    for_end(L);
  }
  LExpr *next = iadd(L, xvar(L, cnt), xsel(L, mine, xi(L, 1), xi(L, 0)));
  carry_end(L, gc, &next);
  int count = cnt;  // after the loop: expert o's rows
  LExpr *aoff = imul(L, xvar(L, off), xi(L, d)), *coff = iadd(L, Cbase, imul(L, xvar(L, off), xi(L, f)));
  if (!fwd) {  // dw[o] = A^T D: [d, count] [count, f]
    gemm_call(L, (LCall){.ta = true, .slot = {KS_SCRATCH, KS_SCRATCH, KS_OUT},
                         .at = {aoff, coff, imul(L, xvar(L, 0), xi(L, d * f))},
                         .ld = {xi(L, d), xi(L, f), xi(L, f)},
                         .m = xi(L, d), .n = xi(L, f), .k = xvar(L, count), .alpha = 1, .beta = 0});
    return;
  }
  // C = A w[o]: [count, d] [d, f]
  gemm_call(L, (LCall){.slot = {KS_SCRATCH, KS_IN1, KS_SCRATCH},
                       .at = {aoff, imul(L, xvar(L, 0), xi(L, d * f)), coff},
                       .ld = {xi(L, d), xi(L, f), xi(L, f)},
                       .m = xvar(L, count), .n = xi(L, f), .k = xi(L, d), .alpha = 1, .beta = 0});
  // y[r] = C[off + cnt] over expert o's rows; expert 0: y[r] = 0 where the id is outside [0, E)
  LStmt *sc = carry_begin(L, xi(L, 0), R, 1, &zero, (const char *const[]){"cnt"}, &cnt, &r);
  id = load(L, KS_IN2, xvar(L, r));
  mine = INWIN(x2(L, LX_AND, x2(L, LX_GE, id, e0), x2(L, LX_LT, id, e1)));
  slot = iadd(L, xvar(L, off), xvar(L, cnt));
  c = for_begin(L, xi(L, 0), xsel(L, mine, xi(L, f), xi(L, 0)), true, "c");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, r), xi(L, f)), xvar(L, c)),
        load(L, KS_SCRATCH, iadd(L, Cbase, iadd(L, imul(L, slot, xi(L, f)), xvar(L, c)))));
  for_end(L);
  LExpr *routed = x2(L, LX_AND, x2(L, LX_GE, id, xf(L, 0)), x2(L, LX_LT, id, x1(L, LX_TOF, xdim(L, E))));
  LExpr *first = INWIN(x2(L, LX_EQ, xvar(L, 0), xi(L, 0)));
  c = for_begin(L, xi(L, 0), xsel(L, routed, xi(L, 0), xsel(L, first, xi(L, f), xi(L, 0))), true, "c");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, r), xi(L, f)), xvar(L, c)), xf(L, 0));
  for_end(L);
  next = iadd(L, xvar(L, cnt), xsel(L, mine, xi(L, 1), xi(L, 0)));
  carry_end(L, sc, &next);
#undef INWIN
}

// TOPK x [.., n] -> [.., k], a row per outer index: output j is the largest
// x_i after (v_{j-1}, i_{j-1}) in the order (value descending, index
// ascending): v_j = max over those, i_j = the lowest index holding it (as
// -max(-i)); NaNs are never after anything, so never chosen.
void lower_topk(Lo *L, const Node *n) {
  const Shape *xs = &L->g->nodes[n->in[0]].shape;
  int64_t nx = xs->d[xs->rank - 1].n, k = n->len.n;
  LKernel *lk = L->lk;
  lk->name = "topk";
  lk->shape = LK_ROWS;
  lk->outer = dprod(L, &n->shape, 0, n->shape.rank - 1), lk->nouter = symsize_prod(&n->shape, 0, n->shape.rank - 1);
  int base = let(L, imul(L, xvar(L, 0), xi(L, nx)), "base");
  LExpr *init[2] = {xf(L, INFINITY), xf(L, -1)};
  int prev[2], j, i;
  LStmt *cs = carry_begin(L, xi(L, 0), xi(L, k), 2, init, (const char *const[]){"pv", "pi"}, prev, &j);
  LStmt *r1 = reduce_begin(L, LX_MAX, xi(L, 0), xi(L, nx), &i);
  LExpr *xv = load(L, KS_IN0, iadd(L, xvar(L, base), xvar(L, i))), *fi = x1(L, LX_TOF, xvar(L, i));
  LExpr *after = xsel(L, x2(L, LX_LT, xv, xvar(L, prev[0])), x2(L, LX_GE, xf(L, 0), xf(L, 0)),
                      x2(L, LX_AND, x2(L, LX_EQ, xv, xvar(L, prev[0])), x2(L, LX_GT, fi, xvar(L, prev[1]))));
  int m = reduce_end(L, r1, xsel(L, after, xv, xf(L, -INFINITY)), "v");
  LStmt *r2 = reduce_begin(L, LX_MAX, xi(L, 0), xi(L, nx), &i);
  xv = load(L, KS_IN0, iadd(L, xvar(L, base), xvar(L, i))), fi = x1(L, LX_TOF, xvar(L, i));
  after = xsel(L, x2(L, LX_LT, xv, xvar(L, prev[0])), x2(L, LX_GE, xf(L, 0), xf(L, 0)),
               x2(L, LX_AND, x2(L, LX_EQ, xv, xvar(L, prev[0])), x2(L, LX_GT, fi, xvar(L, prev[1]))));
  LExpr *at = x2(L, LX_AND, after, x2(L, LX_EQ, xv, xvar(L, m)));
  int best = reduce_end(L, r2, xsel(L, at, x1(L, LX_NEG, fi), xf(L, -INFINITY)), "i");
  int idx = let(L, x1(L, LX_NEG, xvar(L, best)), "idx");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, 0), xi(L, k)), xvar(L, j)), xvar(L, idx));
  LExpr *next[2] = {xvar(L, m), xvar(L, idx)};
  carry_end(L, cs, next);
}
