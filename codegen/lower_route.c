// lower_route.c: the loops of the routing ops: ROUTED_MATMUL and its weight
// gradient (a GEMM per expert over only the rows routed to it) and TOPK.
#include "lower_impl.h"

#include <math.h>

// A ROUTED_MATMUL(_DW) node as both forms read it: rows x [R, d] (R = the
// ids' elements), w [E, d, f] or dy [R, f], ids [R].
typedef struct {
  const Shape *is;        // the ids' shape
  bool fwd;
  int64_t d, f, E, last;  // last: the size of the ids' last axis (0: not a constant)
  int tax;                // the ids' time axis, or -1
} Route;

static Route route_of(const Graph *g, const Node *n) {
  const Shape *xs = &g->nodes[n->in[0]].shape, *ys = &g->nodes[n->in[1]].shape;
  Route r = {.is = &g->nodes[n->in[2]].shape, .fwd = n->op == OP_ROUTED_MATMUL, .tax = -1};
  r.d = xs->d[xs->rank - 1].n, r.f = ys->d[ys->rank - 1].n, r.E = r.fwd ? ys->d[0].n : n->len.n;
  r.last = !r.is->rank ? 1 : r.is->d[r.is->rank - 1].kind == DIM_CONST ? r.is->d[r.is->rank - 1].n : 0;
  for (int i = 0; i < r.is->rank; i++)
    if (r.is->d[i].kind == DIM_T) r.tax = i;
  return r;
}
static LExpr *rt_rows(Lo *L, const Route *r) { return dprod(L, r->is, 0, r->is->rank); }
// v, and (with a time axis) row j at a position of the step program's
// window [w0, w1) (0 and T in every other program); v NULL: the latter alone
// (with a time axis only).
static LExpr *rt_inwin(Lo *L, const Route *r, LExpr *j, LExpr *v) {
  if (r->tax < 0) return v;
  LExpr *t = x2(L, LX_REM, x2(L, LX_DIV, j, dprod(L, r->is, r->tax + 1, r->is->rank)), xdim(L, r->is->d[r->tax]));
  LExpr *w = x2(L, LX_AND, x2(L, LX_GE, t, lower_xwin(L, 0)), x2(L, LX_LT, t, lower_xwin(L, 1)));
  return v ? x2(L, LX_AND, v, w) : w;
}
// Whether row j's id lies in [lo, hi) (f32) and the row is in the window.
static LExpr *rt_in(Lo *L, const Route *r, LExpr *j, LExpr *lo, LExpr *hi) {
  LExpr *id = load(L, KS_IN2, j);
  return rt_inwin(L, r, j, x2(L, LX_AND, x2(L, LX_GE, id, lo), x2(L, LX_LT, id, hi)));
}
// Whether row j is routed (an id in [0, E)) and in the window.
static LExpr *rt_valid(Lo *L, const Route *r, LExpr *j) { return rt_in(L, r, j, xf(L, 0), xf(L, (double)r->E)); }
// Whether row j has expert e (LT_I64) and is in the window.
static LExpr *rt_mine(Lo *L, const Route *r, LExpr *j, LExpr *e) {
  LExpr *ef = x1(L, LX_TOF, e);
  return rt_in(L, r, j, ef, x2(L, LX_ADD, ef, xf(L, 1)));
}

// Outer index o = s E + e: expert e, part s < S (kernel.h: ROUTE_SPLIT
// forward, ROUTE_SPLIT_DW for the weight gradient). The
// rows with expert e are those whose id lies in [e, e + 1) (the id
// truncated), taken in row order, CH at a time (rt_chunk): a scan of the
// ids stores each row's number in I [CH] (f32: R < 2^24) and keeps it when
// the row is e's; a full chunk is gathered into the calling thread's locals
// (the rows' addresses known before their loads, so the loads overlap), then
//   ROUTED_MATMUL     x [R, d], w [E, d, f], ids [R] -> y [R, f]; part s:
//                     the rows [s R / S, (s + 1) R / S): A [CH, d] = the
//                     chunk's rows of x, C [CH, f] = A w[e], y[I[i]] = C[i];
//                     expert 0 also writes 0 to the part's rows of an id
//                     outside [0, E)
//   ROUTED_MATMUL_DW  x [R, d], dy [R, f], ids [R] -> dw [E, d, f]; part s:
//                     columns [s c, min((s + 1) c, n)) of dw[e]'s longer
//                     axis (n = d or f, c = ceil(n / S)): that block of
//                     dw[e] = 0, then per chunk A [CH, d'] and D [CH, f'] =
//                     its rows of x and dy on the part's columns,
//                     dw[e][part] += A^T D
// so the gathered rows and products stay in cache (no [R, d + f] scratch),
// and every part sums its rows in the same order whatever the thread count.
// Every row test keeps to the step program's window (lower_window LW_BODY).
enum { RT_LOCAL_FLOATS = 64 * 1024 };
static int64_t rt_chunk(int64_t d, int64_t f) {
  int64_t ch = 128;
  while (ch > 8 && ch * (d + f) > RT_LOCAL_FLOATS) ch /= 2;
  return ch;
}

void lower_routed(Lo *L, const Node *n) {
  Route rt = route_of(L->g, n);
  const Route *q = &rt;
  int64_t d = rt.d, f = rt.f, S = rt.fwd ? ROUTE_SPLIT : ROUTE_SPLIT_DW;
  LExpr *R = rt_rows(L, q);
  LKernel *lk = L->lk;
  lk->name = rt.fwd ? "routed_matmul" : "routed_matmul_dw";
  lk->shape = LK_ROWS;
  lk->outer = xi(L, rt.E * S), lk->nouter = (SymSize){rt.E * S, 0, 0, 1};
  int e = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, rt.E)), "e"), s = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, rt.E)), "s");
  // the part: rows [r0, r1) of the ids; columns [dc0, dc0 + dn) of x, [fc0, fc0 + fn) of dy
  int r0 = let(L, rt.fwd ? x2(L, LX_DIV, imul(L, xvar(L, s), R), xi(L, S)) : xi(L, 0), "r0");
  int r1 = let(L, rt.fwd ? x2(L, LX_DIV, imul(L, iadd(L, xvar(L, s), xi(L, 1)), R), xi(L, S)) : R, "r1");
  bool split_d = !rt.fwd && d >= f;
  int64_t dl = split_d ? (d + S - 1) / S : d, fl = !rt.fwd && !split_d ? (f + S - 1) / S : f;  // local widths
  int64_t cw = split_d ? dl : fl;  // a part's columns of the split axis
  int c0 = let(L, imul(L, xvar(L, s), xi(L, cw)), "c0");
  LExpr *nlong = xi(L, split_d ? d : f);
  int cn = let(L, rt.fwd ? xi(L, f) : x2(L, LX_SUB, imin(L, iadd(L, xvar(L, c0), xi(L, cw)), nlong), imin(L, xvar(L, c0), nlong)), "cn");
  LExpr *dc0 = split_d ? xvar(L, c0) : xi(L, 0), *dn = split_d ? xvar(L, cn) : xi(L, d);
  LExpr *fc0 = rt.fwd || split_d ? xi(L, 0) : xvar(L, c0), *fn = rt.fwd || split_d ? xi(L, f) : xvar(L, cn);
  int64_t CH = rt_chunk(dl, fl);
  int A = local(L, CH * dl), C = local(L, CH * fl), I = local(L, CH);
  LExpr *wbase = iadd(L, imul(L, xvar(L, e), xi(L, d * f)), iadd(L, imul(L, dc0, xi(L, f)), fc0));  // dw[e][dc0, fc0]
  if (!rt.fwd) {  // dw[e][part] = 0
    int i = for_begin(L, xi(L, 0), xsel(L, x2(L, LX_GT, xvar(L, cn), xi(L, 0)), dn, xi(L, 0)), true, "i");
    int c = for_begin(L, xi(L, 0), fn, true, "c");
    store(L, KS_OUT, iadd(L, wbase, iadd(L, imul(L, xvar(L, i), xi(L, f)), xvar(L, c))), xf(L, 0));
    for_end(L);
    for_end(L);
  }
  LExpr *zero = xi(L, 0);
  int m, r;
  // no rows for an empty part (more parts than columns)
  LExpr *rend = rt.fwd ? xvar(L, r1) : xsel(L, x2(L, LX_GT, xvar(L, cn), xi(L, 0)), xvar(L, r1), xvar(L, r0));
  LStmt *gc = carry_begin(L, xvar(L, r0), rend, 1, &zero, (const char *const[]){"m"}, &m, &r);
  int mine = let(L, xsel(L, rt_mine(L, q, xvar(L, r), xvar(L, e)), xi(L, 1), xi(L, 0)), "mine");
  store(L, I, xvar(L, m), x1(L, LX_TOF, xvar(L, r)));  // I[m] = r, kept only when mine
  int m1 = let(L, iadd(L, xvar(L, m), xvar(L, mine)), "m1");
  // full: the chunk's rows when it is full or the part's rows end, else 0
  LExpr *last = x2(L, LX_EQ, xvar(L, r), x2(L, LX_SUB, xvar(L, r1), xi(L, 1)));
  int full = let(L, xsel(L, x2(L, LX_EQ, xvar(L, m1), xi(L, CH)), xvar(L, m1), xsel(L, last, xvar(L, m1), xi(L, 0))), "full");
  for_begin(L, xi(L, 0), xsel(L, x2(L, LX_GT, xvar(L, full), xi(L, 0)), xi(L, 1), xi(L, 0)), false, "z");  // once, if full > 0
  int i = for_begin(L, xi(L, 0), xvar(L, full), true, "i");  // A[i] = x[I[i]] (and D[i] = dy[I[i]] into C)
  int row = let(L, x1(L, LX_TOI, load(L, I, xvar(L, i))), "row");
  int c = for_begin(L, xi(L, 0), dn, true, "c");
  store(L, A, iadd(L, imul(L, xvar(L, i), xi(L, dl)), xvar(L, c)),
        load(L, KS_IN0, iadd(L, imul(L, xvar(L, row), xi(L, d)), iadd(L, dc0, xvar(L, c)))));
  for_end(L);
  if (!rt.fwd) {
    c = for_begin(L, xi(L, 0), fn, true, "c");
    store(L, C, iadd(L, imul(L, xvar(L, i), xi(L, fl)), xvar(L, c)),
          load(L, KS_IN1, iadd(L, imul(L, xvar(L, row), xi(L, f)), iadd(L, fc0, xvar(L, c)))));
    for_end(L);
  }
  for_end(L);
  if (!rt.fwd)  // dw[e][part] += A^T D: [dn, full] [full, fn]
    gemm_call(L, (LCall){.ta = true, .slot = {A, C, KS_OUT}, .at = {xi(L, 0), xi(L, 0), wbase},
                         .ld = {xi(L, dl), xi(L, fl), xi(L, f)}, .m = dn, .n = fn, .k = xvar(L, full),
                         .alpha = 1, .beta = 1});
  else {  // C = A w[e]: [full, d] [d, f]; y[I[i]] = C[i]
    gemm_call(L, (LCall){.slot = {A, KS_IN1, C}, .at = {xi(L, 0), imul(L, xvar(L, e), xi(L, d * f)), xi(L, 0)},
                         .ld = {xi(L, d), xi(L, f), xi(L, f)}, .m = xvar(L, full), .n = xi(L, f), .k = xi(L, d),
                         .alpha = 1, .beta = 0});
    i = for_begin(L, xi(L, 0), xvar(L, full), true, "i");
    row = let(L, x1(L, LX_TOI, load(L, I, xvar(L, i))), "row");
    c = for_begin(L, xi(L, 0), xi(L, f), true, "c");
    store(L, KS_OUT, iadd(L, imul(L, xvar(L, row), xi(L, f)), xvar(L, c)), load(L, C, iadd(L, imul(L, xvar(L, i), xi(L, f)), xvar(L, c))));
    for_end(L);
    for_end(L);
  }
  for_end(L);
  LExpr *next = xsel(L, x2(L, LX_GT, xvar(L, full), xi(L, 0)), xi(L, 0), xvar(L, m1));
  carry_end(L, gc, &next);
  if (!rt.fwd) return;
  // expert 0: y[r] = 0 where the id is outside [0, E)
  r = for_begin(L, xvar(L, r0), xsel(L, x2(L, LX_EQ, xvar(L, e), xi(L, 0)), xvar(L, r1), xvar(L, r0)), false, "r");
  LExpr *id = load(L, KS_IN2, xvar(L, r));
  LExpr *routed = x2(L, LX_AND, x2(L, LX_GE, id, xf(L, 0)), x2(L, LX_LT, id, xf(L, (double)rt.E)));
  LExpr *win = rt_inwin(L, q, xvar(L, r), NULL);
  c = for_begin(L, xi(L, 0), xsel(L, routed, xi(L, 0), win ? xsel(L, win, xi(L, f), xi(L, 0)) : xi(L, f)), true, "c");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, r), xi(L, f)), xvar(L, c)), xf(L, 0));
  for_end(L);
  for_end(L);
}

// TOPK x [.., n] -> [.., k], a row per outer index: output j is the largest
// x_i after (v_{j-1}, i_{j-1}) in the order (value descending, index
// ascending): v_j = max over those, i_j = the lowest index holding it (as
// -max(-i)); NaNs are never after anything, so never chosen.
// Whether x_i (xv) comes after (v, i) = (prev[0], prev[1]) in that order:
// x_i < v, or x_i = v and i later (the comparison x_i < v is its own true).
static LExpr *topk_after(Lo *L, LExpr *xv, int i, const int prev[2]) {
  LExpr *below = x2(L, LX_LT, xv, xvar(L, prev[0]));
  return xsel(L, below, below, x2(L, LX_AND, x2(L, LX_EQ, xv, xvar(L, prev[0])), x2(L, LX_GT, x1(L, LX_TOF, xvar(L, i)), xvar(L, prev[1]))));
}

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
  LExpr *xv = load(L, KS_IN0, iadd(L, xvar(L, base), xvar(L, i)));
  int m = reduce_end(L, r1, xsel(L, topk_after(L, xv, i, prev), xv, xf(L, -INFINITY)), "v");
  LStmt *r2 = reduce_begin(L, LX_MAX, xi(L, 0), xi(L, nx), &i);
  xv = load(L, KS_IN0, iadd(L, xvar(L, base), xvar(L, i)));
  LExpr *fi = x1(L, LX_TOF, xvar(L, i));
  LExpr *at = x2(L, LX_AND, topk_after(L, xv, i, prev), x2(L, LX_EQ, xv, xvar(L, m)));
  int best = reduce_end(L, r2, xsel(L, at, x1(L, LX_NEG, fi), xf(L, -INFINITY)), "i");
  int idx = let(L, x1(L, LX_NEG, xvar(L, best)), "idx");
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, 0), xi(L, k)), xvar(L, j)), xvar(L, idx));
  LExpr *next[2] = {xvar(L, m), xvar(L, idx)};
  carry_end(L, cs, next);
}

// ---- the GPU's form, in steps (lower_steps) ------------------------------------------

// ROUTED_MATMUL(_DW) on a GPU: the rows of expert e at rows off_e + rank of
// A (and D) in the kernel's scratch, rank = the rows before it with expert e
// (row order: the same placement, and the same sums, every run), through the
// index region IX (KS_CONV_Y, R (E + 3) floats): pos [R] (a row's place, -1
// unrouted), off [E], cnt [E], then per chunk of RT_CH rows the count of
// each expert's rows in it [NCH, E]:
//   route_offsets  a block per expert e: each chunk's rows of e (a thread
//                  per chunk), off_e (the rows with a smaller expert), cnt_e
//   route_place    a row per outer index: its rank = e's rows in the chunks
//                  before its own and in its chunk before it; pos = off_e +
//                  rank; A[pos] = x[r] (D[pos] = dy[r])
//   route_gemm     a block per (expert, tile of RT_TM rows): C = A w[e]
//                  (_DW: a block per (expert, column tile): dw[e] = A^T D)
//   route_scatter  a row per outer index: y[r] = C[pos] (0 unrouted)
// Each step reads and writes rows at positions [w0, w1) only (LX_WIN).
enum { RT_CH = 64, RT_TM = 64, RT_TN = 64 };

// A step of the GPU's form: a row-level kernel.
static LKernel *route_begin(Lo *L, Arena *a, const Schedule *s, const Kernel *k, const char *name) {
  LKernel *lk = step_begin(L, a, s, k, LTARGET_GPU, name);
  lk->shape = LK_ROWS;
  return lk;
}
// IX offsets: off_e at R + e, cnt_e at R + E + e, chunk c's entry for e at R + 2E + c E + e.
static LExpr *ix_off(Lo *L, const Route *r, LExpr *e) { return iadd(L, rt_rows(L, r), e); }
static LExpr *ix_cnt(Lo *L, const Route *r, LExpr *e) { return iadd(L, iadd(L, rt_rows(L, r), xi(L, r->E)), e); }
static LExpr *ix_chunk(Lo *L, const Route *r, LExpr *c, LExpr *e) {
  return iadd(L, iadd(L, rt_rows(L, r), xi(L, 2 * r->E)), iadd(L, imul(L, c, xi(L, r->E)), e));
}

static LKernel *route_offsets(Arena *a, const Schedule *s, const Kernel *k, const Route *r) {
  Lo Lw, *L = &Lw;
  LKernel *lk = route_begin(L, a, s, k, "route_offsets");
  LExpr *R = rt_rows(L, r);
  lk->outer = xi(L, r->E), lk->nouter = (SymSize){r->E, 0, 0, 1};
  lk->team = 256;
  LExpr *nch = x2(L, LX_DIV, iadd(L, R, xi(L, RT_CH - 1)), xi(L, RT_CH));
  int j, c = for_begin(L, xi(L, 0), nch, true, "c");  // each chunk's rows of expert o
  LExpr *c0 = imul(L, xvar(L, c), xi(L, RT_CH));
  LStmt *red = reduce_begin(L, LX_ADD, c0, imin(L, iadd(L, c0, xi(L, RT_CH)), R), &j);
  int cc = reduce_end(L, red, xsel(L, rt_mine(L, r, xvar(L, j), xvar(L, 0)), xf(L, 1), xf(L, 0)), "cc");
  store(L, KS_CONV_Y, ix_chunk(L, r, xvar(L, c), xvar(L, 0)), xvar(L, cc));
  for_end(L);
  red = reduce_begin(L, LX_ADD, xi(L, 0), R, &j);
  LExpr *below = rt_in(L, r, xvar(L, j), xf(L, 0), x1(L, LX_TOF, xvar(L, 0)));  // an id in [0, o)
  int off = reduce_end(L, red, xsel(L, below, xf(L, 1), xf(L, 0)), "off");
  store(L, KS_CONV_Y, ix_off(L, r, xvar(L, 0)), xvar(L, off));
  red = reduce_begin(L, LX_ADD, xi(L, 0), nch, &j);
  int cnt = reduce_end(L, red, load(L, KS_CONV_Y, ix_chunk(L, r, xvar(L, j), xvar(L, 0))), "cnt");
  store(L, KS_CONV_Y, ix_cnt(L, r, xvar(L, 0)), xvar(L, cnt));
  return lk;
}

static LKernel *route_place(Arena *a, const Schedule *s, const Kernel *k, const Route *r) {
  Lo Lw, *L = &Lw;
  LKernel *lk = route_begin(L, a, s, k, "route_place");
  LExpr *R = rt_rows(L, r);
  lk->outer = R, lk->nouter = symsize_prod(r->is, 0, r->is->rank);
  int ok = let(L, rt_valid(L, r, xvar(L, 0)), "ok");
  int e = let(L, xsel(L, xvar(L, ok), x1(L, LX_TOI, load(L, KS_IN2, xvar(L, 0))), xi(L, 0)), "e");
  int c = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, RT_CH)), "c"), j;
  LStmt *red = reduce_begin(L, LX_ADD, xi(L, 0), xvar(L, c), &j);  // the rows of e in the chunks before
  int before = reduce_end(L, red, load(L, KS_CONV_Y, ix_chunk(L, r, xvar(L, j), xvar(L, e))), "before");
  red = reduce_begin(L, LX_ADD, imul(L, xvar(L, c), xi(L, RT_CH)), xvar(L, 0), &j);  // and in its chunk before it
  int rank = reduce_end(L, red, xsel(L, rt_mine(L, r, xvar(L, j), xvar(L, e)), xf(L, 1), xf(L, 0)), "rank");
  LExpr *p = x2(L, LX_ADD, x2(L, LX_ADD, load(L, KS_CONV_Y, ix_off(L, r, xvar(L, e))), xvar(L, before)), xvar(L, rank));
  int pos = let(L, x1(L, LX_TOI, p), "pos");
  store(L, KS_CONV_Y, xvar(L, 0), xsel(L, xvar(L, ok), x1(L, LX_TOF, xvar(L, pos)), xf(L, -1)));
  int q = for_begin(L, xi(L, 0), xsel(L, xvar(L, ok), xi(L, r->d), xi(L, 0)), true, "q");
  store(L, KS_SCRATCH, iadd(L, imul(L, xvar(L, pos), xi(L, r->d)), xvar(L, q)),
        load(L, KS_IN0, iadd(L, imul(L, xvar(L, 0), xi(L, r->d)), xvar(L, q))));
  for_end(L);
  if (!r->fwd) {
    q = for_begin(L, xi(L, 0), xsel(L, xvar(L, ok), xi(L, r->f), xi(L, 0)), true, "q");
    store(L, KS_SCRATCH, iadd(L, imul(L, R, xi(L, r->d)), iadd(L, imul(L, xvar(L, pos), xi(L, r->f)), xvar(L, q))),
          load(L, KS_IN1, iadd(L, imul(L, xvar(L, 0), xi(L, r->f)), xvar(L, q))));
    for_end(L);
  }
  return lk;
}

// The rows of a tile: a multiple of the ids' last axis, so that the tiles of
// every expert number at most the rows of the other axes (the launch's
// extent; with a last axis of B or T, RT_TM rows and an extent of every row).
static int64_t rt_tile(const Route *r) { return r->last * ((RT_TM + r->last - 1) / r->last); }
// The column tile of the weight gradient: the largest divisor of f up to RT_TN.
static int64_t rt_cols(const Route *r) {
  int64_t tn = r->f < RT_TN ? r->f : RT_TN;
  while (r->f % tn) tn--;
  return tn;
}

static LKernel *route_gemm(Arena *a, const Schedule *s, const Kernel *k, const Route *r) {
  Lo Lw, *L = &Lw;
  LKernel *lk = route_begin(L, a, s, k, r->fwd ? "route_gemm" : "route_gemm_dw");
  lk->team = 256;
  LExpr *R = rt_rows(L, r), *d = xi(L, r->d), *f = xi(L, r->f);
  LExpr *cbase = imul(L, R, d);
  if (r->fwd) {  // (e, t): rows [t TM, t TM + m) of expert e's, m = min(TM, cnt_e - t TM) (none: m 0)
    int lr = r->last ? r->is->rank - 1 : r->is->rank;  // the tiles of an expert: at most the rows over the last axis
    LExpr *lead = dprod(L, r->is, 0, lr);
    lk->outer = imul(L, xi(L, r->E), lead), lk->nouter = symsize_mul((SymSize){r->E, 0, 0, 1}, symsize_prod(r->is, 0, lr));
    int64_t tm = r->last ? rt_tile(r) : RT_TM;
    int e = let(L, x2(L, LX_DIV, xvar(L, 0), lead), "e");
    int lo = let(L, imul(L, x2(L, LX_REM, xvar(L, 0), lead), xi(L, tm)), "lo");
    int cnt = let(L, x1(L, LX_TOI, load(L, KS_CONV_Y, ix_cnt(L, r, xvar(L, e)))), "cnt");
    int row = let(L, iadd(L, x1(L, LX_TOI, load(L, KS_CONV_Y, ix_off(L, r, xvar(L, e)))), xvar(L, lo)), "row");
    LExpr *m = imax(L, imin(L, xi(L, tm), x2(L, LX_SUB, xvar(L, cnt), xvar(L, lo))), xi(L, 0));
    gemm_call(L, (LCall){.slot = {KS_SCRATCH, KS_IN1, KS_SCRATCH},
                         .at = {imul(L, xvar(L, row), d), imul(L, xvar(L, e), xi(L, r->d * r->f)), iadd(L, cbase, imul(L, xvar(L, row), f))},
                         .ld = {d, f, f}, .m = m, .n = f, .k = d, .alpha = 1, .beta = 0});
    return lk;
  }
  int64_t tn = rt_cols(r), nt = r->f / tn;  // (e, j): columns [j TN, (j + 1) TN) of dw[e] = A_e^T D_e
  lk->outer = xi(L, r->E * nt), lk->nouter = (SymSize){r->E * nt, 0, 0, 1};
  int e = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, nt)), "e");
  int j = let(L, imul(L, x2(L, LX_REM, xvar(L, 0), xi(L, nt)), xi(L, tn)), "j");
  int cnt = let(L, x1(L, LX_TOI, load(L, KS_CONV_Y, ix_cnt(L, r, xvar(L, e)))), "cnt");
  int off = let(L, x1(L, LX_TOI, load(L, KS_CONV_Y, ix_off(L, r, xvar(L, e)))), "off");
  gemm_call(L, (LCall){.ta = true, .slot = {KS_SCRATCH, KS_SCRATCH, KS_OUT},
                       .at = {imul(L, xvar(L, off), d), iadd(L, cbase, iadd(L, imul(L, xvar(L, off), f), xvar(L, j))),
                              iadd(L, imul(L, xvar(L, e), xi(L, r->d * r->f)), xvar(L, j))},
                       .ld = {d, f, f}, .m = d, .n = xi(L, tn), .k = xvar(L, cnt), .alpha = 1, .beta = 0});
  return lk;
}

static LKernel *route_scatter(Arena *a, const Schedule *s, const Kernel *k, const Route *r) {
  Lo Lw, *L = &Lw;
  LKernel *lk = route_begin(L, a, s, k, "route_scatter");
  LExpr *R = rt_rows(L, r), *f = xi(L, r->f);
  lk->outer = R, lk->nouter = symsize_prod(r->is, 0, r->is->rank);
  int pos = let(L, x1(L, LX_TOI, load(L, KS_CONV_Y, xvar(L, 0))), "pos");
  LExpr *hi = r->tax < 0 ? f : xsel(L, rt_inwin(L, r, xvar(L, 0), NULL), f, xi(L, 0));
  int q = for_begin(L, xi(L, 0), hi, true, "q");
  LExpr *src = iadd(L, imul(L, R, xi(L, r->d)), iadd(L, imul(L, imax(L, xvar(L, pos), xi(L, 0)), f), xvar(L, q)));
  store(L, KS_OUT, iadd(L, imul(L, xvar(L, 0), f), xvar(L, q)),
        xsel(L, x2(L, LX_GE, xvar(L, pos), xi(L, 0)), load(L, KS_SCRATCH, src), xf(L, 0)));
  for_end(L);
  return lk;
}

bool lower_routed_steps(Arena *a, const Schedule *s, const Kernel *k, LSteps *st) {
  const Graph *g = s->g;
  const Node *n = &g->nodes[k->node];
  if ((n->op != OP_ROUTED_MATMUL && n->op != OP_ROUTED_MATMUL_DW) || k->xscratch[0] < 0) return false;
  if (!st) return true;
  Route r = route_of(g, n);
  st->lk[st->n++] = route_offsets(a, s, k, &r);
  st->lk[st->n++] = route_place(a, s, k, &r);
  st->lk[st->n++] = route_gemm(a, s, k, &r);
  if (r.fwd) st->lk[st->n++] = route_scatter(a, s, k, &r);
  return true;
}
