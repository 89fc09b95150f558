// lower_scan.c: the linear recurrences (SCAN) and a scan of outer products
// read out (SCAN_READ, passes/fuse_scan.c) -> loop descriptions (loops.h).
// Part of the lowering of lower.c (lower_impl.h).
#include "lower_impl.h"

#include <math.h>
#include <stdlib.h>

// ---- linear recurrences ------------------------------------------------------------

// SCAN, SCAN_REV over a, b [P.., K, Q..] along axis: an outer index per
// sequence p < P and block of JB of the Q states of a position (JB 256 on a
// CPU, 32 on a GPU: one per lane, so that few sequences still fill the SMs:
// --emit=cost 15.5 -> 8.8 us for GLA's at 64 x 128), the positions in order, the block's
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

void lower_scan(Lo *L, const Node *n) {
  const Shape *s = &n->shape, *as = &L->g->nodes[n->in[0]].shape;
  bool fwd = n->op == OP_SCAN, same = shape_eq(as, s);
  bool win = schedule_scan_state(n);
  int sa = lower_in_slot(L, n, 0), sb = lower_in_slot(L, n, 1);
  LExpr *K = xdim(L, s->d[n->axis]), *Q = dprod(L, s, n->axis + 1, s->rank);
  L->lk->name = ir_op_info[n->op].name;
  L->lk->shape = LK_ROWS;
  // an outer index per (sequence p, block of JB states): the states of a
  // position are independent, so wide ones spread over threads (warps)
  int64_t JB = L->tgt == LTARGET_GPU ? 32 : 256;
  int64_t NJ = Q->kind == LX_INT && Q->ival > JB ? (Q->ival + JB - 1) / JB : 1;
  L->own_outer = NJ > 1;
  L->lk->outer = imul(L, dprod(L, s, 0, n->axis), xi(L, NJ));
  L->lk->nouter = symsize_mul(symsize_prod(s, 0, n->axis), (SymSize){NJ, 0, 0, 1});
  int p = NJ > 1 ? let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, NJ)), "p") : 0;  // 0: the outer index itself
  LExpr *j0 = NJ > 1 ? imul(L, x2(L, LX_REM, xvar(L, 0), xi(L, NJ)), xi(L, JB)) : xi(L, 0);
  LExpr *j1 = NJ > 1 ? imin(L, iadd(L, j0, xi(L, JB)), Q) : Q;
  if (NJ > 1) {
    int jl = let(L, j0, "j0"), jh = let(L, j1, "j1");
    j0 = xvar(L, jl), j1 = xvar(L, jh);
  }
  LExpr *w0 = win ? lower_xwin(L, 0) : xi(L, 0);
  int st = for_begin(L, w0, win ? lower_xwin(L, 1) : K, false, fwd ? "t" : "s");
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
  LExpr *wk = lower_xwin(L, 2);
  for_begin(L, xi(L, 0), xsel(L, x2(L, LX_GT, wk, xi(L, 0)), xi(L, 1), xi(L, 0)), false, "keep");
  int krow = let(L, imul(L, iadd(L, imul(L, xvar(L, p), K), x2(L, LX_SUB, wk, xi(L, 1))), Q), "krow");
  j = for_begin(L, j0, j1, true, "j");
  store(L, KS_SCRATCH, iadd(L, hrow, xvar(L, j)), load(L, KS_OUT, iadd(L, xvar(L, krow), xvar(L, j))));
  for_end(L);
  for_end(L);
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
//   SCAN_READ_GRAD  in order: S^T [dv, dk] (rows j), dq_t = sum_j dy_t[j]
//                   S_t^T[j, :]; then from t = K - 1 down G [dk, dv] and G^T
//                   beside it, G = a_{t+1} o G + q_t^T dy_t, dv_t = sum_i
//                   k_t[i] G[i, :], dk_t = sum_j v_t[j] G^T[j, :] (each
//                   accumulated as the rows are made, a vector of the other
//                   axis: no dot product per row)
// Every sum runs over i (or j) in index order. The chunked forms are
// lower_scan_chunk.c's (Kernel.scan_chunk).

// The offset of the decay a (broadcast to k) at position t, row i: scan_bcast
// over k's shape, whose axes after the time axis are (m, i) and a last of 1.
LExpr *rd_a(Lo *L, const Rd *d, LExpr *t, LExpr *i) {
  return scan_bcast(L, d->as, d->ks, d->axis, xvar(L, d->p), t, iadd(L, imul(L, xvar(L, d->m), xi(L, d->dk)), i));
}

// Row t of the sequence: (p K + t) M + m.
int rd_row(Lo *L, const Rd *d, LExpr *t) {
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

// local A [dk] <- the decay at position ta (0 where has >= 0 and !has).
static void rd_decay_row(Lo *L, const Rd *d, int A, int sa, int ta, int has) {
  int i = for_begin(L, xi(L, 0), xi(L, d->dk), true, "i");
  LExpr *a = load(L, sa, rd_a(L, d, xvar(L, ta), xvar(L, i)));
  store(L, A, xvar(L, i), has >= 0 ? xsel(L, xvar(L, has), a, xf(L, 0)) : a);
  for_end(L);
}

// Row j of a transposed state M^T [dv, dk] (local MT) as a par loop over
// its columns i: MT[j, i] = A[i] MT[j, i] + y x[row, i] (x: slot sx, rows of
// dk; A: local, rd_decay_row), and acc[i] += z MT[j, i] (y, z: variables):
// a column of the gradient summed over j with the lanes on i, where M's
// rows would need a dot product per i.
static void rd_update_t(Lo *L, const Rd *d, int MT, int j, int A, int y, int sx, int row, int acc, int z) {
  int i = for_begin(L, xi(L, 0), xi(L, d->dk), true, "i");
  int si = let(L, iadd(L, imul(L, xvar(L, j), xi(L, d->dk)), xvar(L, i)), "si");
  LExpr *a = load(L, A, xvar(L, i));
  LExpr *xi_ = load(L, sx, iadd(L, imul(L, xvar(L, row), xi(L, d->dk)), xvar(L, i)));
  int mn = let(L, x2(L, LX_ADD, x2(L, LX_MUL, a, load(L, MT, xvar(L, si))), x2(L, LX_MUL, xvar(L, y), xi_)), "s");
  store(L, MT, xvar(L, si), xvar(L, mn));
  store(L, acc, xvar(L, i), x2(L, LX_ADD, load(L, acc, xvar(L, i)), x2(L, LX_MUL, xvar(L, z), xvar(L, mn))));
  for_end(L);
}

// Part `out` of the gradient at row `row` <- local X [w].
static void rd_store(Lo *L, int X, int64_t w, int row, const OutPart *out) {
  int i = for_begin(L, xi(L, 0), xi(L, w), true, "i");
  store(L, out->slot, iadd(L, imul(L, xvar(L, row), xi(L, out->w)), iadd(L, xi(L, out->off), xvar(L, i))), load(L, X, xvar(L, i)));
  for_end(L);
}

static void lower_scan_read_fwd(Lo *L, Rd *d, const Node *n) {
  bool win = schedule_scan_state(n);
  int sq = lower_in_slot(L, n, 0), sk = lower_in_slot(L, n, 1), sv = lower_in_slot(L, n, 2), sa = lower_in_slot(L, n, 3);
  int64_t dk = d->dk, dv = d->dv;
  int S = local(L, dk * dv), O = local(L, dv);
  LExpr *w0 = win ? lower_xwin(L, 0) : xi(L, 0), *hrow = imul(L, xvar(L, 0), xi(L, dk * dv));
  int x = for_begin(L, xi(L, 0), xi(L, dk * dv), true, "x");
  LExpr *h = win ? xsel(L, x2(L, LX_GT, w0, xi(L, 0)), load(L, KS_SCRATCH, iadd(L, hrow, xvar(L, x))), xf(L, 0)) : xf(L, 0);
  store(L, S, xvar(L, x), h);
  for_end(L);
  int t = for_begin(L, w0, win ? lower_xwin(L, 1) : d->K, false, "t");
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
    LExpr *last = x2(L, LX_EQ, xvar(L, t), x2(L, LX_SUB, lower_xwin(L, 2), xi(L, 1)));
    for_begin(L, xi(L, 0), xsel(L, last, xi(L, 1), xi(L, 0)), false, "keep");
    x = for_begin(L, xi(L, 0), xi(L, dk * dv), true, "x");
    store(L, KS_SCRATCH, iadd(L, hrow, xvar(L, x)), load(L, S, xvar(L, x)));
    for_end(L);
    for_end(L);
  }
  for_end(L);
}

static void lower_scan_read_grad(Lo *L, Rd *d, const Node *n) {
  int sq = lower_in_slot(L, n, 0), sk = lower_in_slot(L, n, 1), sv = lower_in_slot(L, n, 2), sa = lower_in_slot(L, n, 3), sy = lower_in_slot(L, n, 4);
  int64_t dk = d->dk, dv = d->dv;
  int S = local(L, dk * dv), ST = local(L, dv * dk), DK = local(L, dk), DV = local(L, dv), A = local(L, dk);
  // dq, in order: S^T, dq_t = sum_j dy_t[j] S_t^T[j, :]
  rd_fill(L, ST, dv * dk, NULL);
  int t = for_begin(L, xi(L, 0), d->K, false, "t");
  int row = rd_row(L, d, xvar(L, t));
  rd_fill(L, DK, dk, NULL);
  rd_decay_row(L, d, A, sa, t, -1);
  int j = for_begin(L, xi(L, 0), xi(L, dv), false, "j");
  int vj = let(L, load(L, sv, iadd(L, imul(L, xvar(L, row), xi(L, dv)), xvar(L, j))), "v");
  int yj = let(L, load(L, sy, iadd(L, imul(L, xvar(L, row), xi(L, dv)), xvar(L, j))), "dy");
  rd_update_t(L, d, ST, j, A, vj, sk, row, DK, yj);
  for_end(L);
  rd_store(L, DK, dk, row, &d->part[0]);
  for_end(L);
  // G and G^T, dk, dv, from the last position down: G = a_{t+1} o G + q_t^T
  // dy_t; dv_t = sum_i k_t[i] G[i, :] (rows of G), dk_t = sum_j v_t[j] G^T[j, :]
  rd_fill(L, S, dk * dv, NULL);
  rd_fill(L, ST, dv * dk, NULL);
  int s = for_begin(L, xi(L, 0), d->K, false, "s");
  t = let(L, x2(L, LX_SUB, x2(L, LX_SUB, d->K, xi(L, 1)), xvar(L, s)), "t");
  int has = let(L, x2(L, LX_LT, iadd(L, xvar(L, t), xi(L, 1)), d->K), "has");
  int tn = let(L, xsel(L, xvar(L, has), iadd(L, xvar(L, t), xi(L, 1)), xvar(L, t)), "tn");  // in bounds either way
  row = rd_row(L, d, xvar(L, t));
  rd_fill(L, DV, dv, NULL);
  rd_fill(L, DK, dk, NULL);
  int i = for_begin(L, xi(L, 0), xi(L, dk), false, "i");
  int ki = let(L, iadd(L, imul(L, xvar(L, row), xi(L, dk)), xvar(L, i)), "ki");
  int av = let(L, xsel(L, xvar(L, has), load(L, sa, rd_a(L, d, xvar(L, tn), xvar(L, i))), xf(L, 0)), "an");
  int kv = let(L, load(L, sk, xvar(L, ki)), "k");
  int qv = let(L, load(L, sq, xvar(L, ki)), "q");
  rd_update(L, d, S, i, av, qv, sy, row, DV, kv);
  for_end(L);
  rd_decay_row(L, d, A, sa, tn, has);
  j = for_begin(L, xi(L, 0), xi(L, dv), false, "j");
  vj = let(L, load(L, sv, iadd(L, imul(L, xvar(L, row), xi(L, dv)), xvar(L, j))), "v");
  yj = let(L, load(L, sy, iadd(L, imul(L, xvar(L, row), xi(L, dv)), xvar(L, j))), "dy");
  rd_update_t(L, d, ST, j, A, yj, sq, row, DK, vj);
  for_end(L);
  rd_store(L, DK, dk, row, &d->part[1]);
  rd_store(L, DV, dv, row, &d->part[2]);
  for_end(L);
}

void lower_scan_read(Lo *L, const Node *n) {
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
  int64_t C = L->k->scan_chunk;
  if (n->op == OP_SCAN_READ) {
    if (C > 0) lower_scan_read_chunked(L, &d, n, C);
    else lower_scan_read_fwd(L, &d, n);
    return;
  }
  int64_t width[3] = {d.dk, d.dk, d.dv};
  if (!lower_out_parts(L, n, width, 2 * d.dk + d.dv, d.part)) return;
  if (C > 0) lower_scan_read_chunked(L, &d, n, C);
  else lower_scan_read_grad(L, &d, n);
}
