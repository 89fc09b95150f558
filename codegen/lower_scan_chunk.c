// lower_scan_chunk.c: the chunked forms of SCAN_READ and SCAN_READ_GRAD
// (Kernel.scan_chunk = C > 0; schedule_scan_chunk): a sequence's positions
// in chunks of C, the products within a chunk as GEMMs (a GPU block's team
// GEMMs, on the tensor cores under --precision=tf32 or bf16), the state
// S [dk, dv] carried across chunks in a local array in float32. Part of the
// lowering of lower_scan.c (lower_impl.h); the sequential form there is the
// oracle.
//
// Within a chunk of positions t0 .. t0 + nc - 1 (local rows tt < nc), with
//   l_tt = sum_{r <= tt} log|a_r|,  g_tt = prod_{r <= tt} sign(a_r)
// (per key row i when the decay varies along it, else one per position;
// log|a| at least -87, so a 0 decays by 1.6e-38, and NaN stays NaN) and
//   E(t, s) = g_t g_s e^(l_t - l_s) = prod_{s < r <= t} a_r      (s <= t)
//   F(t)    = g_t e^(l_t)           = prod_{r <= t} a_r
//   Bk(s)   = E(nc - 1, s),  A = F(nc - 1)
// the recurrence S_t = a_t o S_{t-1} + k_t^T v_t, y_t = q_t S_t (seed 003
// eqs. 6.156-6.160) over the chunk is, from the state S before it,
//   y = (q o F) S + P v,   P[t, s] = sum_i q_t[i] k_s[i] E_i(t, s), s <= t
//   S <- A o S + (k o Bk)^T v
// and the gradient (G_t = a_{t+1} o G_{t+1} + q_t^T dy_t; H = a_{t0'} o
// G_{t0'} from the chunk after, 0 after the last), with R = dy v^T, s <= t:
//   dq[t, i] = F_i(t) (dy_t S^T)[i] + sum_{s <= t} R[t, s] k_s[i] E_i(t, s)
//   dk[t, i] = Bk_i(t) (v_t H^T)[i] + sum_{u >= t} R[u, t] q_u[i] E_i(u, t)
//   dv[t]    = (k_t o Bk(t)) H + sum_{u >= t} P[u, t] dy_u
//   H <- A o H + (q o F)^T dy
// in two passes, dq with S over the chunks in order, dk and dv with H from
// the last chunk down. With one decay per position, E is a scalar per pair
// and the sums over s and u are GEMMs of P o E and R o E; per key row they
// are loops over the pairs (a thread per row on a GPU).
#include "lower_impl.h"

// A GPU block's threads per sequence.
enum { SCAN_TEAM = 128 };
// log|a| at least this: e^-87 = 1.6e-38, the smallest normal float32's order.
#define SCAN_LOG_MIN (-87.0)

typedef struct {
  Rd *d;
  int64_t C, dk, dv;
  bool per_key;           // the decay varies along the key rows; else one per position
  bool pos;               // the decay is positive (an exp or a sigmoid, a positive constant): g = 1
  int sa;                 // the decay's slot
  int Lg, Sg;             // locals [C, dk] (per_key) or [C]: l and g above (Sg: none when pos)
  int t0, nc;             // variables: the chunk's first position, its length
  bool gpu;               // the blocks' rows padded in shared memory (gpu_tile_ld)
} Ck;

// The row stride of a local block n wide: on a GPU padded against bank
// conflicts (kernel.h gpu_tile_ld), else n.
static int64_t pad(bool gpu, int64_t n) { return gpu ? gpu_tile_ld(n) : n; }

// Locals of the gradient (the forward's are fewer): S [dk, dv], Lg, Sg, Qr,
// Kr, W, D [C, dk], Vr, Yr, DV [C, dv], P, R [C, C], rows padded on a GPU.
int64_t scan_chunk_floats(int64_t C, int64_t dk, int64_t dv, bool per_key, bool gpu) {
  return dk * pad(gpu, dv) + 2 * C * (per_key ? dk : 1) + 4 * C * pad(gpu, dk) + 3 * C * pad(gpu, dv) + 2 * C * pad(gpu, C);
}

// Whether the value of node id is positive by construction: an exp or a
// sigmoid (passes/fuse_scan.c's decays), a positive constant, through moves.
static bool positive(const Graph *g, int id) {
  const Node *n = &g->nodes[id];
  while (n->op == OP_RESHAPE || n->op == OP_TRANSPOSE || n->op == OP_EXPAND) n = &g->nodes[n->in[0]];
  return n->op == OP_EXP || n->op == OP_SIGMOID || (n->op == OP_CONST && n->fval > 0);
}

// Whether a decay of shape as (broadcast to k [.., dk, 1]) varies along the key rows (its axis rank - 2).
bool scan_decay_per_key(const Shape *as) {
  int ax = as->rank - 2;
  return ax >= 0 && !(as->d[ax].kind == DIM_CONST && as->d[ax].n == 1);
}

static LExpr *lg_at(Lo *L, const Ck *c, int slot, LExpr *tt, LExpr *i) {
  return load(L, slot, c->per_key ? iadd(L, imul(L, tt, xi(L, c->dk)), i) : tt);
}
// E_i(t, s) = g_t g_s e^(l_t - l_s)
static LExpr *dec_pair(Lo *L, const Ck *c, LExpr *t, LExpr *s, LExpr *i) {
  LExpr *e = x1(L, LX_EXP, x2(L, LX_SUB, lg_at(L, c, c->Lg, t, i), lg_at(L, c, c->Lg, s, i)));
  return c->pos ? e : x2(L, LX_MUL, x2(L, LX_MUL, lg_at(L, c, c->Sg, t, i), lg_at(L, c, c->Sg, s, i)), e);
}
// F_i(t) = g_t e^(l_t)
static LExpr *dec_to(Lo *L, const Ck *c, LExpr *t, LExpr *i) {
  LExpr *e = x1(L, LX_EXP, lg_at(L, c, c->Lg, t, i));
  return c->pos ? e : x2(L, LX_MUL, lg_at(L, c, c->Sg, t, i), e);
}
static LExpr *last(Lo *L, const Ck *c) { return x2(L, LX_SUB, xvar(L, c->nc), xi(L, 1)); }

// A par loop over the elements of a [nc, w] block of a local (rows
// pad(w) apart); *tt, *j their row and column (variables); returns the
// variable of the element's index in the local. Close with for_end.
static int block_begin(Lo *L, const Ck *c, int64_t w, int *tt, int *j) {
  int x = for_begin(L, xi(L, 0), imul(L, xvar(L, c->nc), xi(L, w)), true, "x");
  *tt = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, w)), "tt");
  *j = let(L, x2(L, LX_REM, xvar(L, x), xi(L, w)), "j");
  int64_t ld = pad(c->gpu, w);
  return ld == w ? x : let(L, iadd(L, imul(L, xvar(L, *tt), xi(L, ld)), xvar(L, *j)), "at");
}

// Element (i, j) of a local block n wide.
static LExpr *at2(Lo *L, const Ck *c, LExpr *i, LExpr *j, int64_t n) { return iadd(L, imul(L, i, xi(L, pad(c->gpu, n))), j); }

// Element x of S [dk, dv] in the flat order, in the local (rows pad(dv) apart).
static LExpr *s_at(Lo *L, const Ck *c, int x) {
  if (pad(c->gpu, c->dv) == c->dv) return xvar(L, x);
  return at2(L, c, x2(L, LX_DIV, xvar(L, x), xi(L, c->dv)), x2(L, LX_REM, xvar(L, x), xi(L, c->dv)), c->dv);
}

// local[tt, :] <- rows t0 + tt of slot (w wide), tt < nc.
static void copy_in(Lo *L, const Ck *c, int slot, int64_t w, int loc) {
  int tt, j, x = block_begin(L, c, w, &tt, &j);
  int row = rd_row(L, c->d, iadd(L, xvar(L, c->t0), xvar(L, tt)));
  store(L, loc, xvar(L, x), load(L, slot, iadd(L, imul(L, xvar(L, row), xi(L, w)), xvar(L, j))));
  for_end(L);
}

// rows t0 + tt of out (element i at row * w + off + i) <- local[tt, :] (n wide).
static void copy_out(Lo *L, const Ck *c, int slot, int64_t w, int64_t off, int64_t n, int loc) {
  int tt, j, x = block_begin(L, c, n, &tt, &j);
  int row = rd_row(L, c->d, iadd(L, xvar(L, c->t0), xvar(L, tt)));
  store(L, slot, iadd(L, imul(L, xvar(L, row), xi(L, w)), iadd(L, xi(L, off), xvar(L, j))), load(L, loc, xvar(L, x)));
  for_end(L);
}

// Lg, Sg: per key row (or once), the running sums of log|a| and products of signs.
static void decays(Lo *L, const Ck *c) {
  int i = for_begin(L, xi(L, 0), xi(L, c->per_key ? c->dk : 1), true, "i"), tt, v[2];
  LStmt *st = carry_begin(L, xi(L, 0), xvar(L, c->nc), c->pos ? 1 : 2, (LExpr *[]){xf(L, 0), xf(L, 1)}, (const char *const[]){"l", "g"}, v, &tt);
  int av = let(L, load(L, c->sa, rd_a(L, c->d, iadd(L, xvar(L, c->t0), xvar(L, tt)), xvar(L, i))), "a");
  LExpr *mag = c->pos ? xvar(L, av) : x2(L, LX_MAX, xvar(L, av), x1(L, LX_NEG, xvar(L, av)));
  int l = let(L, x2(L, LX_ADD, xvar(L, v[0]), x2(L, LX_MAX, xf(L, SCAN_LOG_MIN), x1(L, LX_LOG, mag))), "ln");
  int g = c->pos ? -1 : let(L, xsel(L, x2(L, LX_LT, xvar(L, av), xf(L, 0)), x1(L, LX_NEG, xvar(L, v[1])), xvar(L, v[1])), "gn");
  LExpr *at = c->per_key ? iadd(L, imul(L, xvar(L, tt), xi(L, c->dk)), xvar(L, i)) : xvar(L, tt);
  store(L, c->Lg, at, xvar(L, l));
  if (!c->pos) store(L, c->Sg, at, xvar(L, g));
  carry_end(L, st, (LExpr *[]){xvar(L, l), c->pos ? NULL : xvar(L, g)});
  for_end(L);
}

// X [nc, nc] (rows pad(C) apart) = A B^T of two [nc, w] locals, kept where s <= t
// (0 elsewhere), times E(t, s) with one decay per position when scale.
static void pairs_gemm(Lo *L, const Ck *c, int A, int B, int64_t w, int X, bool scale) {
  LExpr *nc = xvar(L, c->nc);
  int64_t lw = pad(c->gpu, w);
  gemm_call(L, (LCall){.tb = true, .slot = {A, B, X}, .at = {xi(L, 0), xi(L, 0), xi(L, 0)},
                       .ld = {xi(L, lw), xi(L, lw), xi(L, pad(c->gpu, c->C))}, .m = nc, .n = nc, .k = xi(L, w), .alpha = 1});
  int x = for_begin(L, xi(L, 0), imul(L, nc, nc), true, "x");
  int t = let(L, x2(L, LX_DIV, xvar(L, x), nc), "t"), s = let(L, x2(L, LX_REM, xvar(L, x), nc), "s");
  int at = let(L, at2(L, c, xvar(L, t), xvar(L, s), c->C), "ts");
  LExpr *v = load(L, X, xvar(L, at));
  if (scale) v = x2(L, LX_MUL, v, dec_pair(L, c, xvar(L, t), xvar(L, s), xi(L, 0)));
  store(L, X, xvar(L, at), xsel(L, x2(L, LX_GE, xvar(L, t), xvar(L, s)), v, xf(L, 0)));
  for_end(L);
}

// P [nc, nc] (rows pad(C) apart): P[t, s] = sum_i Qr[t, i] Kr[s, i] E_i(t, s), s <= t, else 0.
static void scores(Lo *L, const Ck *c, int Qr, int Kr, int P) {
  if (!c->per_key) {
    pairs_gemm(L, c, Qr, Kr, c->dk, P, true);
    return;
  }
  LExpr *nc = xvar(L, c->nc);
  int x = for_begin(L, xi(L, 0), imul(L, nc, nc), true, "x"), i;
  int t = let(L, x2(L, LX_DIV, xvar(L, x), nc), "t"), s = let(L, x2(L, LX_REM, xvar(L, x), nc), "s");
  LStmt *st = reduce_begin(L, LX_ADD, xi(L, 0), xsel(L, x2(L, LX_GE, xvar(L, t), xvar(L, s)), xi(L, c->dk), xi(L, 0)), &i);
  LExpr *qk = x2(L, LX_MUL, load(L, Qr, at2(L, c, xvar(L, t), xvar(L, i), c->dk)), load(L, Kr, at2(L, c, xvar(L, s), xvar(L, i), c->dk)));
  int v = reduce_end(L, st, x2(L, LX_MUL, qk, dec_pair(L, c, xvar(L, t), xvar(L, s), xvar(L, i))), "p");
  store(L, P, at2(L, c, xvar(L, t), xvar(L, s), c->C), xvar(L, v));
  for_end(L);
}

// D [nc, dk] += the pairs' sum of a gradient: with `rows` (dq) D[t, i] +=
// sum_{s <= t} R[t, s] X[s, i] E_i(t, s), else (dk) D[t, i] += sum_{u >= t}
// R[u, t] X[u, i] E_i(u, t); R already scaled by E with one decay per position.
static void pair_sums(Lo *L, const Ck *c, int R, int X, int D, bool rows) {
  LExpr *nc = xvar(L, c->nc), *dk = xi(L, c->dk);
  if (!c->per_key) {
    LExpr *ldk = xi(L, pad(c->gpu, c->dk));
    gemm_call(L, (LCall){.ta = !rows, .slot = {R, X, D}, .at = {xi(L, 0), xi(L, 0), xi(L, 0)}, .ld = {xi(L, pad(c->gpu, c->C)), ldk, ldk},
                         .m = nc, .n = dk, .k = nc, .alpha = 1, .beta = 1});
    return;
  }
  int t, i, s, x = block_begin(L, c, c->dk, &t, &i);
  LStmt *st = reduce_begin(L, LX_ADD, rows ? xi(L, 0) : xvar(L, t), rows ? iadd(L, xvar(L, t), xi(L, 1)) : nc, &s);
  LExpr *r = rows ? load(L, R, at2(L, c, xvar(L, t), xvar(L, s), c->C)) : load(L, R, at2(L, c, xvar(L, s), xvar(L, t), c->C));
  LExpr *e = rows ? dec_pair(L, c, xvar(L, t), xvar(L, s), xvar(L, i)) : dec_pair(L, c, xvar(L, s), xvar(L, t), xvar(L, i));
  int v = reduce_end(L, st, x2(L, LX_MUL, x2(L, LX_MUL, r, load(L, X, at2(L, c, xvar(L, s), xvar(L, i), c->dk))), e), "ds");
  store(L, D, xvar(L, x), x2(L, LX_ADD, load(L, D, xvar(L, x)), xvar(L, v)));
  for_end(L);
}

// D [nc, dk] o= F(t) (to) or Bk(t) = E(nc - 1, t); into W when W >= 0 (D
// then read, W written).
static void scale_rows(Lo *L, const Ck *c, int D, int W, bool to) {
  int t, i, x = block_begin(L, c, c->dk, &t, &i);
  LExpr *f = to ? dec_to(L, c, xvar(L, t), xvar(L, i)) : dec_pair(L, c, last(L, c), xvar(L, t), xvar(L, i));
  store(L, W >= 0 ? W : D, xvar(L, x), x2(L, LX_MUL, load(L, D, xvar(L, x)), f));
  for_end(L);
}

// S <- A o S + W^T Y: rows i of S scaled by F_i(nc - 1), then the product
// of W [nc, dk] and Y [nc, dv].
static void carry_state(Lo *L, const Ck *c, int S, int W, int Y) {
  int x = for_begin(L, xi(L, 0), xi(L, c->dk * c->dv), true, "x");
  int i = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, c->dv)), "i"), at = let(L, s_at(L, c, x), "at");
  store(L, S, xvar(L, at), x2(L, LX_MUL, load(L, S, xvar(L, at)), dec_to(L, c, last(L, c), xvar(L, i))));
  for_end(L);
  int64_t lk = pad(c->gpu, c->dk), lv = pad(c->gpu, c->dv);
  gemm_call(L, (LCall){.ta = true, .slot = {W, Y, S}, .at = {xi(L, 0), xi(L, 0), xi(L, 0)}, .ld = {xi(L, lk), xi(L, lv), xi(L, lv)},
                       .m = xi(L, c->dk), .n = xi(L, c->dv), .k = xvar(L, c->nc), .alpha = 1, .beta = 1});
}

// X [nc, n] (rows pad(n) apart) = A [nc, k] op(B) (+ X with acc): A's rows
// lda wide, B [k, n], or with tb stored [n, k] (rows padded alike).
static void chunk_gemm(Lo *L, const Ck *c, int A, int64_t lda, bool ta, int B, bool tb, int X, int64_t n, int64_t k, bool acc) {
  gemm_call(L, (LCall){.ta = ta, .tb = tb, .slot = {A, B, X}, .at = {xi(L, 0), xi(L, 0), xi(L, 0)},
                       .ld = {xi(L, pad(c->gpu, lda)), xi(L, pad(c->gpu, tb ? k : n)), xi(L, pad(c->gpu, n))},
                       .m = xvar(L, c->nc), .n = xi(L, n), .k = k < 0 ? xvar(L, c->nc) : xi(L, k), .alpha = 1, .beta = acc ? 1 : 0});
}

static void fill(Lo *L, int loc, int64_t n) {
  int x = for_begin(L, xi(L, 0), xi(L, n), true, "x");
  store(L, loc, xvar(L, x), xf(L, 0));
  for_end(L);
}

// The chunk [t0, t0 + nc): variables t0 and nc of c.
static void chunk_at(Lo *L, Ck *c, LExpr *t0, LExpr *end) {
  c->t0 = let(L, t0, "t0");
  c->nc = let(L, imin(L, xi(L, c->C), x2(L, LX_SUB, end, xvar(L, c->t0))), "nc");
}

static void chunked_fwd(Lo *L, Ck *c, const Node *n) {
  Rd *d = c->d;
  bool win = schedule_scan_state(n);
  int sq = lower_in_slot(L, n, 0), sk = lower_in_slot(L, n, 1), sv = lower_in_slot(L, n, 2);
  int64_t C = c->C, dk = c->dk, dv = c->dv, dkv = dk * dv;
  int64_t lk = pad(c->gpu, dk), lv = pad(c->gpu, dv), lc = pad(c->gpu, C);
  int S = local(L, dk * lv), Qr = local(L, C * lk), Kr = local(L, C * lk), Vr = local(L, C * lv), W = local(L, C * lk);
  int P = local(L, C * lc), O = local(L, C * lv);
  // [w0, w1) cut at ws = wk (the step program keeps S after wk - 1): nA
  // chunks of [w0, ws), then those of [ws, w1); elsewhere [0, K), nA = 0
  LExpr *w0 = win ? lower_xwin(L, 0) : xi(L, 0), *w1 = win ? lower_xwin(L, 1) : d->K, *wk = win ? lower_xwin(L, 2) : xi(L, 0);
  int v0 = let(L, w0, "w0"), v1 = let(L, w1, "w1");
  int ws = let(L, xsel(L, x2(L, LX_GT, wk, xvar(L, v0)), imin(L, wk, xvar(L, v1)), xvar(L, v0)), "ws");
  int na = let(L, x2(L, LX_DIV, iadd(L, x2(L, LX_SUB, xvar(L, ws), xvar(L, v0)), xi(L, C - 1)), xi(L, C)), "na");
  int nb = let(L, x2(L, LX_DIV, iadd(L, x2(L, LX_SUB, xvar(L, v1), xvar(L, ws)), xi(L, C - 1)), xi(L, C)), "nb");
  LExpr *hrow = imul(L, xvar(L, 0), xi(L, dkv));
  int x = for_begin(L, xi(L, 0), xi(L, dkv), true, "x");
  LExpr *h = win ? xsel(L, x2(L, LX_GT, xvar(L, v0), xi(L, 0)), load(L, KS_SCRATCH, iadd(L, hrow, xvar(L, x))), xf(L, 0)) : xf(L, 0);
  store(L, S, s_at(L, c, x), h);
  for_end(L);
  int ch = for_begin(L, xi(L, 0), iadd(L, xvar(L, na), xvar(L, nb)), false, "c");
  int first = let(L, x2(L, LX_LT, xvar(L, ch), xvar(L, na)), "inA");
  LExpr *t0 = xsel(L, xvar(L, first), iadd(L, xvar(L, v0), imul(L, xvar(L, ch), xi(L, C))),
                   iadd(L, xvar(L, ws), imul(L, x2(L, LX_SUB, xvar(L, ch), xvar(L, na)), xi(L, C))));
  chunk_at(L, c, t0, xsel(L, xvar(L, first), xvar(L, ws), xvar(L, v1)));
  copy_in(L, c, sq, dk, Qr);
  copy_in(L, c, sk, dk, Kr);
  copy_in(L, c, sv, dv, Vr);
  decays(L, c);
  scores(L, c, Qr, Kr, P);
  scale_rows(L, c, Qr, W, true);                  // q o F
  chunk_gemm(L, c, W, dk, false, S, false, O, dv, dk, false);  // O = (q o F) S
  chunk_gemm(L, c, P, C, false, Vr, false, O, dv, -1, true);   // O += P v
  copy_out(L, c, KS_OUT, dv, 0, dv, O);
  scale_rows(L, c, Kr, W, false);                 // k o Bk
  carry_state(L, c, S, W, Vr);
  if (win) {  // H <- S after the chunk ending at wk - 1: a loop of one iteration there, else none
    LExpr *keep = x2(L, LX_AND, x2(L, LX_EQ, xvar(L, ch), x2(L, LX_SUB, xvar(L, na), xi(L, 1))), x2(L, LX_GT, wk, xi(L, 0)));
    for_begin(L, xi(L, 0), xsel(L, keep, xi(L, 1), xi(L, 0)), false, "keep");
    x = for_begin(L, xi(L, 0), xi(L, dkv), true, "x");
    store(L, KS_SCRATCH, iadd(L, hrow, xvar(L, x)), load(L, S, s_at(L, c, x)));
    for_end(L);
    for_end(L);
  }
  for_end(L);
}

static void chunked_grad(Lo *L, Ck *c, const Node *n) {
  Rd *d = c->d;
  int sq = lower_in_slot(L, n, 0), sk = lower_in_slot(L, n, 1), sv = lower_in_slot(L, n, 2), sy = lower_in_slot(L, n, 4);
  int64_t C = c->C, dk = c->dk, dv = c->dv;
  int64_t lk = pad(c->gpu, dk), lv = pad(c->gpu, dv), lc = pad(c->gpu, C);
  int S = local(L, dk * lv), Qr = local(L, C * lk), Kr = local(L, C * lk), Vr = local(L, C * lv), Yr = local(L, C * lv);
  int W = local(L, C * lk), P = local(L, C * lc), R = local(L, C * lc), D = local(L, C * lk), DV = local(L, C * lv);
  LExpr *nch = x2(L, LX_DIV, iadd(L, d->K, xi(L, C - 1)), xi(L, C));
  // dq, the chunks in order, S carried
  fill(L, S, dk * lv);
  int ch = for_begin(L, xi(L, 0), nch, false, "c");
  chunk_at(L, c, imul(L, xvar(L, ch), xi(L, C)), d->K);
  copy_in(L, c, sk, dk, Kr);
  copy_in(L, c, sv, dv, Vr);
  copy_in(L, c, sy, dv, Yr);
  decays(L, c);
  chunk_gemm(L, c, Yr, dv, false, S, true, D, dk, dv, false);  // D = dy S^T
  scale_rows(L, c, D, -1, true);
  pairs_gemm(L, c, Yr, Vr, dv, R, !c->per_key);                 // R = dy v^T, s <= t
  pair_sums(L, c, R, Kr, D, true);
  copy_out(L, c, d->part[0].slot, d->part[0].w, d->part[0].off, dk, D);
  scale_rows(L, c, Kr, W, false);
  carry_state(L, c, S, W, Vr);
  for_end(L);
  // dk, dv, from the last chunk down, H carried in S
  fill(L, S, dk * lv);
  ch = for_begin(L, xi(L, 0), nch, false, "c");
  LExpr *cc = x2(L, LX_SUB, x2(L, LX_SUB, nch, xi(L, 1)), xvar(L, ch));
  chunk_at(L, c, imul(L, cc, xi(L, C)), d->K);
  copy_in(L, c, sq, dk, Qr);
  copy_in(L, c, sk, dk, Kr);
  copy_in(L, c, sv, dv, Vr);
  copy_in(L, c, sy, dv, Yr);
  decays(L, c);
  scores(L, c, Qr, Kr, P);
  pairs_gemm(L, c, Yr, Vr, dv, R, !c->per_key);
  chunk_gemm(L, c, Vr, dv, false, S, true, D, dk, dv, false);  // D = v H^T
  scale_rows(L, c, D, -1, false);
  pair_sums(L, c, R, Qr, D, false);
  copy_out(L, c, d->part[1].slot, d->part[1].w, d->part[1].off, dk, D);
  scale_rows(L, c, Kr, W, false);                               // k o Bk
  chunk_gemm(L, c, W, dk, false, S, false, DV, dv, dk, false);  // DV = (k o Bk) H
  chunk_gemm(L, c, P, C, true, Yr, false, DV, dv, -1, true);    // DV += P^T dy
  copy_out(L, c, d->part[2].slot, d->part[2].w, d->part[2].off, dv, DV);
  scale_rows(L, c, Qr, W, true);                                // q o F
  carry_state(L, c, S, W, Yr);
  for_end(L);
}

void lower_scan_read_chunked(Lo *L, Rd *d, const Node *n, int64_t C) {
  Ck c = {.d = d, .C = C, .dk = d->dk, .dv = d->dv, .per_key = scan_decay_per_key(d->as), .pos = positive(L->g, n->in[3]),
          .sa = lower_in_slot(L, n, 3), .Sg = -1, .gpu = L->tgt == LTARGET_GPU};
  int64_t w = c.per_key ? C * c.dk : C;
  if (L->tgt == LTARGET_GPU) L->lk->team = SCAN_TEAM;
  c.Lg = local(L, w);
  if (!c.pos) c.Sg = local(L, w);
  if (n->op == OP_SCAN_READ) chunked_fwd(L, &c, n);
  else chunked_grad(L, &c, n);
}
