// lower_attention.c: fused causal attention (ATTENTION, ATTENTION_LSE,
// ATTENTION_GRAD, ATTENTION_DBIAS) -> loop descriptions (loops.h), on the CPU
// and in a GPU's (sequence, head) blocks; the GPU's blocked gradient is in
// lower_attention_steps.c. Part of the lowering of lower.c (lower_impl.h,
// lower_att.h).
#include "lower_att.h"

#include <math.h>
#include <stdlib.h>

// ---- fused causal attention -------------------------------------------------------

// The first key rows from query row i on may read: max(0, i - W + 1), or 0.
LExpr *att_first_key(Lo *L, const Att *a, LExpr *i) {
  return a->W ? imax(L, xi(L, 0), x2(L, LX_SUB, i, xi(L, a->W - 1))) : xi(L, 0);
}

// The first key of a block of key rows whose query rows start at i: that
// of row i rounded down to a multiple of ATT_KEY_ALIGN, so that a block of
// BQ rows under a window W reads W + BQ keys, not W + BQ - 1 (the extra
// keys are outside every row's window: masked, as before the window). The
// products with the keys as columns (S = Q K^T, dP = dO V^T) run at 67
// GFLOP/s for 159 columns and 95 for 160 (dnnl_sgemm NT, 32 x n x 64, one
// AMD EPYC core).
enum { ATT_KEY_ALIGN = 16 };
static LExpr *att_block_first_key(Lo *L, const Att *a, LExpr *i) {
  if (!a->W) return xi(L, 0);
  return imul(L, x2(L, LX_DIV, att_first_key(L, a, i), xi(L, ATT_KEY_ALIGN)), xi(L, ATT_KEY_ALIGN));
}

// The score bias's element of sequence m (m's coordinates on its axes,
// numpy's broadcasting against the scores), query i, key j (NULL: 0).
static LExpr *att_bias_at(Lo *L, const Att *a, LExpr *m, LExpr *i, LExpr *j) {
  const Shape *bs = a->bs;
  LExpr *stride[IR_MAX_RANK + 1], *off = xi(L, 0), *div = xi(L, 1);
  stride[bs->rank] = xi(L, 1);
  for (int x = bs->rank - 1; x >= 0; x--) stride[x] = imul(L, stride[x + 1], xdim(L, bs->d[x]));
  int ai = ir_attention_bias_axis(bs, a->ns, a->ns), aj = ir_attention_bias_axis(bs, a->ns, a->ns + 1);
  if (aj >= 0 && j) off = j;
  if (ai >= 0 && i) off = iadd(L, off, imul(L, i, stride[ai + 1]));
  for (int s = a->ns - 1; s >= 0; s--) {
    int x = ir_attention_bias_axis(bs, a->ns, s);
    if (x >= 0) {
      LExpr *c = x2(L, LX_DIV, m, div);
      if (s > 0) c = x2(L, LX_REM, c, xdim(L, a->seq[s]));
      off = iadd(L, off, imul(L, c, stride[x + 1]));
    }
    div = imul(L, div, xdim(L, a->seq[s]));
  }
  return off;
}

// Whether the bias differs between the heads of one position (axis 1).
static bool att_bias_per_head(const Att *a) { return a->NH > 1 && ir_attention_bias_axis(a->bs, a->ns, a->ns - 1) >= 0; }

// Score s (the scaled product) of query i, key j of sequence m, plus the
// bias's element when the op has one; ATT_FAR below the op's own window.
// A score that no key inside the window reaches, whose e^(s - max) is 0 in
// float32, as a masking bias of -1e30 gives.
#define ATT_FAR (-1e30)

// s plus the bias's element (i, j) of sequence m, s without a bias.
static LExpr *att_bias_add(Lo *L, const Att *a, LExpr *s, LExpr *m, LExpr *i, LExpr *j) {
  return a->bslot >= 0 ? x2(L, LX_ADD, s, load(L, a->bslot, att_bias_at(L, a, m, i, j))) : s;
}
static LExpr *att_biased(Lo *L, const Att *a, LExpr *s, LExpr *m, LExpr *i, LExpr *j) {
  s = att_bias_add(L, a, s, m, i, j);
  if (a->Wmask) s = xsel(L, x2(L, LX_GE, x2(L, LX_SUB, i, j), xi(L, a->W)), xf(L, ATT_FAR), s);
  return s;
}

// Row 0 of the key and value sequence of the query sequence whose row 0 is
// r0: r0 itself, or with grouped queries (G > 1) row (r0 / T / G) T.
int kv_rows(Lo *L, const Att *a, int r0) {
  if (a->G == 1) return r0;
  return let(L, imul(L, x2(L, LX_DIV, x2(L, LX_DIV, xvar(L, r0), a->T), xi(L, a->G)), a->T), "kv0");
}

// Element (row, head hd, feature c) of slot, rows NH n wide (n per head).
LExpr *att_at(Lo *L, const Att *a, int64_t n, LExpr *row, int hd, LExpr *c) {
  return iadd(L, imul(L, iadd(L, imul(L, row, xi(L, a->NH)), xvar(L, hd)), xi(L, n)), c);
}
// Feature c of part p of the gradient, row `row`, head hd (slot a->part[p].slot).
LExpr *att_part_at(Lo *L, const Att *a, int p, LExpr *row, int hd, LExpr *c) {
  return att_at(L, a, a->part[p].w, row, hd, iadd(L, xi(L, a->part[p].off), c));
}


// sum_{c < len} a[abase + c] * b[bbase + c]: straight-line for short heads,
// else a reduction.
LExpr *att_vdot(Lo *L, int sa, int abase, int sb, int bbase, int64_t len) {
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

// The par loop over the row form's heads [h0, h0 + HG) (Att.hv, Att.HG).
static int att_heads(Lo *L, const Att *a) {
  int k = for_begin(L, xi(L, 0), xi(L, a->hv >= 0 ? a->HG : a->NH), true, "hd");  // a constant trip count
  return a->hv >= 0 ? let(L, iadd(L, xvar(L, a->hv), xvar(L, k)), "hd") : k;
}
// Element (i, j, hd - h0) of a head group's local [t_max, t_max, HG] (Att.Bg, Gg).
static LExpr *att_group_at(Lo *L, const Att *a, LExpr *i, LExpr *j, int hd) {
  LExpr *h0 = a->hv >= 0 ? xvar(L, a->hv) : xi(L, 0);
  LExpr *ij = iadd(L, imul(L, i, xi(L, L->g->t_max)), j);
  return iadd(L, imul(L, ij, xi(L, a->HG)), x2(L, LX_SUB, xvar(L, hd), h0));
}

// A bias per head: row i of every head's block for row o into Bl [j, hd],
// read along j per head (nothing without one).
static void att_bias_row(Lo *L, Att *a, int o, int i) {
  if (a->bslot >= 0 && att_bias_per_head(a) && a->Bl < 0) a->Bl = local(L, L->g->t_max * a->NH);
  if (a->Bl < 0) return;
  int hd = for_begin(L, xi(L, 0), xi(L, a->NH), true, "hd");
  LExpr *mb = iadd(L, imul(L, x2(L, LX_DIV, xvar(L, o), a->T), xi(L, a->NH)), xvar(L, hd));
  int jb = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), true, "j");
  store(L, a->Bl, LOC_AT(jb, hd), att_biased(L, a, xf(L, 0), mb, xvar(L, i), xvar(L, jb)));
  for_end(L);
  for_end(L);
}

// The row form's score of query row o (position i) and key j, head hd, at
// key row kr: scale q_o . k_kr plus the bias's element (the head group's Bg,
// the row's Bl, or read where it lies), ATT_FAR below the op's own window.
static LExpr *att_row_score(Lo *L, Att *a, const Node *n, int o, int i, int j, LExpr *kr, int hd) {
  int qb = let(L, att_head(L, a, a->h, xvar(L, o), hd), "qb"), kb = let(L, att_head(L, a, a->h, kr, hd), "kb");
  LExpr *m = iadd(L, imul(L, x2(L, LX_DIV, xvar(L, o), a->T), xi(L, a->NH)), xvar(L, hd));
  LExpr *sc = x2(L, LX_MUL, att_vdot(L, KS_IN0, qb, KS_IN1, kb, a->h), xf(L, n->fval));
  return a->Bg >= 0  ? x2(L, LX_ADD, sc, load(L, a->Bg, att_group_at(L, a, xvar(L, i), xvar(L, j), hd)))
         : a->Bl >= 0 ? x2(L, LX_ADD, sc, LOC(a->Bl, j, hd))
                      : att_biased(L, a, sc, m, xvar(L, i), xvar(L, j));
}

// Row o's scores s_j = scale q_o . k_j over j <= i (key rows kv0 + j) into S
// and their maximum per head into M; then (probs) p_j = exp(s_j - M) into S
// and sum p_j into Ls.
static void att_scores(Lo *L, Att *a, const Node *n, int o, int i, int kv0, bool probs) {
  int hd = att_heads(L, a);
  store(L, a->M, xvar(L, hd), xf(L, -INFINITY));
  store(L, a->Ls, xvar(L, hd), xf(L, 0));
  for_end(L);
  if (!a->Bl_kept && a->Bg < 0) att_bias_row(L, a, o, i);
  int j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  int kr = let(L, iadd(L, xvar(L, kv0), xvar(L, j)), "krow");
  hd = att_heads(L, a);
  int s = let(L, att_row_score(L, a, n, o, i, j, xvar(L, kr), hd), "s");
  store(L, a->S, LOC_AT(j, hd), xvar(L, s));
  store(L, a->M, xvar(L, hd), x2(L, LX_MAX, xvar(L, s), load(L, a->M, xvar(L, hd))));
  for_end(L);
  for_end(L);
  if (!probs) return;
  j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  hd = att_heads(L, a);
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, LOC(a->S, j, hd), load(L, a->M, xvar(L, hd)))), "p");
  store(L, a->S, LOC_AT(j, hd), xvar(L, p));
  store(L, a->Ls, xvar(L, hd), x2(L, LX_ADD, load(L, a->Ls, xvar(L, hd)), xvar(L, p)));
  for_end(L);
  for_end(L);
}

// L of row `row`, head hd <- m + log l (nothing without a slot for it).
static void att_store_lse(Lo *L, const Att *a, LExpr *row, int hd, LExpr *m, LExpr *l) {
  if (a->lse >= 0) store(L, a->lse, att_at(L, a, 1, row, hd, xi(L, 0)), x2(L, LX_ADD, m, x1(L, LX_LOG, l)));
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
  int kv0 = kv_rows(L, a, r0);
  att_scores(L, a, n, o, i, kv0, false);
  int j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  int vr = let(L, imul(L, iadd(L, xvar(L, kv0), xvar(L, j)), xi(L, a->NH * a->e)), "vrow");
  int hd = for_begin(L, xi(L, 0), xi(L, a->NH), true, "hd");
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, LOC(a->S, j, hd), load(L, a->M, xvar(L, hd)))), "p");
  store(L, a->Ls, xvar(L, hd), x2(L, LX_ADD, load(L, a->Ls, xvar(L, hd)), xvar(L, p)));
  for (Feat f = feat_begin(L, a->e); feat_more(L, &f);) {
    int ai = let(L, iadd(L, imul(L, xvar(L, hd), xi(L, a->e)), feat_c(L, &f)), "ai");
    int xa = f.var < 0 ? let(L, iadd(L, imul(L, feat_c(L, &f), xi(L, a->NH)), xvar(L, hd)), "xa") : ai;
    LExpr *vv = load(L, KS_IN2, iadd(L, xvar(L, vr), xvar(L, ai)));
    store(L, a->X, xvar(L, xa), x2(L, LX_ADD, load(L, a->X, xvar(L, xa)), x2(L, LX_MUL, xvar(L, p), vv)));
  }
  for_end(L);
  for_end(L);
  hd = for_begin(L, xi(L, 0), xi(L, a->NH), true, "hd");
  att_store_lse(L, a, xvar(L, o), hd, load(L, a->M, xvar(L, hd)), load(L, a->Ls, xvar(L, hd)));
  int inv = let(L, x2(L, LX_DIV, xf(L, 1), load(L, a->Ls, xvar(L, hd))), "inv");
  for (Feat f = feat_begin(L, a->no_o ? 0 : a->e); feat_more(L, &f);) {
    int ao = let(L, iadd(L, imul(L, xvar(L, hd), xi(L, a->e)), feat_c(L, &f)), "ai");
    int xa = f.var < 0 ? let(L, iadd(L, imul(L, feat_c(L, &f), xi(L, a->NH)), xvar(L, hd)), "xa") : ao;
    store(L, KS_OUT, iadd(L, imul(L, xvar(L, o), xi(L, a->NH * a->e)), xvar(L, ao)), x2(L, LX_MUL, load(L, a->X, xvar(L, xa)), xvar(L, inv)));
  }
  for_end(L);
}

// Gradient of the sequence whose rows are r0 .. r0 + T, the row form's heads
// (att_heads), query rows i in order: the rows of its dq, dk, dv parts
// (Att.part) zeroed, then for each i, from the forward's L_i = m_i + log l_i
// (KS_IN0 + 4) and output o_i (KS_IN0 + 5), in one pass over j:
// P_ij = exp(s_ij - L_i), dP_ij = do_i . v_j, D_i = do_i . o_i
// (= sum_j P_ij dP_ij), dS_ij = scale P_ij (dP_ij - D_i); dq_i += dS_ij k_j,
// dk_j += dS_ij q_i, dv_j += P_ij do_i, each output element accumulated in
// the order of i, then j; with a head group's db (Att.Gg), G_ij += P_ij
// (dP_ij - D_i).
static void att_grad_seq(Lo *L, Att *a, const Node *n, int r0) {
  int64_t NH = a->NH, h = a->h, e = a->e;
  int Lr = local(L, NH), D = local(L, NH);  // L_i, D_i per head
  for (int pt = 0; pt < 3 && (pt == 0 || a->part[pt].slot != a->part[0].slot); pt++) {  // one buffer: zeroed whole
    int64_t pw = a->part[pt].w;
    if (a->hv < 0) {  // every head: the sequence's rows
      int x = for_begin(L, xi(L, 0), imul(L, a->T, xi(L, NH * pw)), true, "x");
      store(L, a->part[pt].slot, iadd(L, imul(L, xvar(L, r0), xi(L, NH * pw)), xvar(L, x)), xf(L, 0));
      for_end(L);
      continue;
    }
    int i = for_begin(L, xi(L, 0), a->T, true, "i");
    int hd = att_heads(L, a);
    int c = for_begin(L, xi(L, 0), xi(L, pw), true, "c");
    store(L, a->part[pt].slot, att_at(L, a, pw, iadd(L, xvar(L, r0), xvar(L, i)), hd, xvar(L, c)), xf(L, 0));
    for_end(L);
    for_end(L);
    for_end(L);
  }
  int kv0 = kv_rows(L, a, r0);
  int i = for_begin(L, xi(L, 0), a->T, false, "i");
  int o = let(L, iadd(L, xvar(L, r0), xvar(L, i)), "o");
  if (!a->Bl_kept && a->Bg < 0) att_bias_row(L, a, o, i);
  int hd = att_heads(L, a);  // Lr <- L_i, D <- do_i . o_i
  int ob = let(L, att_head(L, a, e, xvar(L, o), hd), "ob");
  store(L, Lr, xvar(L, hd), load(L, KS_IN0 + 4, att_at(L, a, 1, xvar(L, o), hd, xi(L, 0))));
  store(L, D, xvar(L, hd), att_vdot(L, KS_IN0 + 3, ob, KS_IN0 + 5, ob, e));
  for_end(L);
  int j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  int jr = let(L, iadd(L, xvar(L, r0), xvar(L, j)), "jr");  // dk, dv: the query sequence's rows
  int jk = a->G == 1 ? jr : let(L, iadd(L, xvar(L, kv0), xvar(L, j)), "jk");  // k: its key sequence's
  hd = att_heads(L, a);
  LExpr *sb = att_row_score(L, a, n, o, i, j, xvar(L, jk), hd);
  int qb = let(L, att_head(L, a, h, xvar(L, o), hd), "qb"), kb = let(L, att_head(L, a, h, xvar(L, jk), hd), "kb");
  int yb = let(L, att_head(L, a, e, xvar(L, o), hd), "yb"), vb = let(L, att_head(L, a, e, xvar(L, jk), hd), "vb");
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, sb, load(L, Lr, xvar(L, hd)))), "p");
  int dp = let(L, att_vdot(L, KS_IN0 + 3, yb, KS_IN2, vb, e), "dp");
  int pd = let(L, x2(L, LX_MUL, xvar(L, p), x2(L, LX_SUB, xvar(L, dp), load(L, D, xvar(L, hd)))), "pd");
  int ds = let(L, x2(L, LX_MUL, xf(L, n->fval), xvar(L, pd)), "ds");
  if (a->Gg >= 0) {
    int at = let(L, att_group_at(L, a, xvar(L, i), xvar(L, j), hd), "g");
    store(L, a->Gg, xvar(L, at), x2(L, LX_ADD, load(L, a->Gg, xvar(L, at)), xvar(L, pd)));
  }
  int oq = let(L, att_part_at(L, a, 0, xvar(L, o), hd, xi(L, 0)), "oq");
  int ok = let(L, att_part_at(L, a, 1, xvar(L, jr), hd, xi(L, 0)), "ok");
  int ov = let(L, att_part_at(L, a, 2, xvar(L, jr), hd, xi(L, 0)), "ov");
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

// Gradient, one sequence per outer index (att_grad_seq, every head).
static void lower_attention_grad(Lo *L, Att *a, const Node *n) {
  att_grad_seq(L, a, n, let(L, imul(L, xvar(L, 0), a->T), "r0"));
}

static LExpr *att_seq_of(Lo *L, const Att *a, LExpr *c, LExpr *u, LExpr **nfree);

// Gradient with the score bias's (schedule_att_dbias_heads: b [.., NH, T, T]
// broadcast along the other sequence axes): one group of HG heads
// [h0, h0 + HG) per outer index, h0 = o HG. The group's bias rows into Bg
// [i, j, hd - h0] and G = 0; every sequence of those heads in order
// (att_grad_seq, which adds P_ij (dP_ij - D_i) into G); then db of the
// group's heads: G, 0 after the diagonal.
static void lower_attention_grad_heads(Lo *L, Att *a, const Node *n, int64_t HG) {
  int64_t NH = a->NH, tm = L->g->t_max;
  a->HG = HG;
  a->hv = let(L, imul(L, xvar(L, 0), xi(L, HG)), "h0");
  a->Bg = local(L, tm * tm * HG), a->Gg = local(L, tm * tm * HG);
  int i = for_begin(L, xi(L, 0), a->T, true, "i");
  int j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), true, "j");
  int hd = att_heads(L, a);
  int at = let(L, att_group_at(L, a, xvar(L, i), xvar(L, j), hd), "g");
  store(L, a->Bg, xvar(L, at), att_biased(L, a, xf(L, 0), xvar(L, hd), xvar(L, i), xvar(L, j)));  // sequence hd reads head hd's block
  store(L, a->Gg, xvar(L, at), xf(L, 0));
  for_end(L);
  for_end(L);
  for_end(L);
  LExpr *nfree;
  att_seq_of(L, a, NULL, NULL, &nfree);
  int u = for_begin(L, xi(L, 0), nfree, false, "u");
  int m0 = let(L, att_seq_of(L, a, xvar(L, a->hv), xvar(L, u), &nfree), "m0");  // head h0's u-th sequence
  att_grad_seq(L, a, n, let(L, imul(L, x2(L, LX_DIV, xvar(L, m0), xi(L, NH)), a->T), "r0"));
  for_end(L);
  hd = att_heads(L, a);
  i = for_begin(L, xi(L, 0), a->T, true, "i");
  j = for_begin(L, xi(L, 0), a->T, true, "j");
  LExpr *g = load(L, a->Gg, att_group_at(L, a, xvar(L, i), imin(L, xvar(L, j), xvar(L, i)), hd));
  store(L, a->dbias, att_bias_at(L, a, xvar(L, hd), xvar(L, i), xvar(L, j)), xsel(L, x2(L, LX_LT, xvar(L, i), xvar(L, j)), xf(L, 0), g));
  for_end(L);
  for_end(L);
  for_end(L);
}

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
enum { ATT_TILE = 64, ATT_QT = 32, ATT_KQ = 4, ATT_LOCAL_BUDGET = 64 * 1024 };

// Floats of local arrays of the forward (grad false) or the gradient.
static int64_t att_gpu_locals(int64_t tmax, int64_t h, int64_t e, bool grad) {
  return grad ? tmax * (2 + 2 * h + e) + (ATT_TILE + ATT_QT) * (h + e) + 2 * ATT_QT * ATT_TILE : tmax * (2 + e) + ATT_TILE * (h + e);
}

// Whether attention node n takes the GPU's (sequence, head) form on tgt:
// its block's state fits ATT_LOCAL_BUDGET bytes of shared memory and the
// cost rule prefers it to the blocked forms on the tensor cores (else those,
// lower_att_block). Per score pair, in units of --emit=cost's estimates
// (codegen/cuda_cost.c, H100, TF32, 8,192 tokens per step, no GPU timing):
//   rows     a thread per query row, its dot products serial:
//            0.35 (h + e) + 0.4
//   blocked  64-row tiles through mma (h, e padded to 8), the online
//            softmax over the tile and the diagonal's partial tiles:
//            2.6 + 0.1 max(0, h + e - 16) + 190 / T
// Estimated per layer (forward and gradient, us): heads of 4 at T 128 rows
// 95 against blocked 138, at 512 442 against 400; of 2 at 512 515 against
// 793; of 8 at 128 87 against 72; of 16 at 128 83 against 52; of 32 at 128
// the forward alone 177 against 17. The rule picks rows, blocked, rows,
// blocked, blocked, blocked.
static bool att_gpu_rows_win(int64_t h, int64_t e, int64_t T) {
  double hw = (double)(h + e), rows = 0.35 * hw + 0.4, blocked = 2.6 + 0.1 * (hw > 16 ? hw - 16 : 0) + 190.0 / (double)T;
  return rows < blocked;
}
bool lower_att_gpu_form(const Graph *g, const Node *n, LTarget tgt) {
  if (tgt != LTARGET_GPU || (n->op != OP_ATTENTION && n->op != OP_ATTENTION_LSE && n->op != OP_ATTENTION_GRAD)) return false;
  const Shape *qs = &g->nodes[n->in[0]].shape, *vs = &g->nodes[n->in[2]].shape;
  int r = qs->rank;
  int64_t h = qs->d[r - 1].n, e = vs->d[r - 1].n;
  int64_t loc = att_gpu_locals(g->t_max, h, e, n->op == OP_ATTENTION_GRAD);
  return loc * (int64_t)sizeof(float) <= ATT_LOCAL_BUDGET && att_gpu_rows_win(h, e, g->t_max);
}

LExpr *lower_xwin(Lo *L, int hi) {
  LExpr *e = ex(L, LX_WIN, LT_I64);
  e->ival = hi;
  return e;
}

// Local tile [rows, n] <- rows r0 + [k0, k0 + rows) of slot, head hd,
// by all threads; rows clamped to hi - 1 (a clamped row is a copy no thread
// reads: every reader stops at a row < hi).
static void att_tile_rows(Lo *L, const Att *a, int tile, int slot, int64_t n, int r0, int hd, int k0, int hi, int64_t rows) {
  int x = for_begin(L, xi(L, 0), xi(L, rows * n), true, "x");
  LExpr *row = imin(L, iadd(L, xvar(L, k0), x2(L, LX_DIV, xvar(L, x), xi(L, n))), x2(L, LX_SUB, xvar(L, hi), xi(L, 1)));
  store(L, tile, xvar(L, x), load(L, slot, att_at(L, a, n, iadd(L, xvar(L, r0), row), hd, x2(L, LX_REM, xvar(L, x), xi(L, n)))));
  for_end(L);
}
static void att_tile(Lo *L, const Att *a, int tile, int slot, int64_t n, int r0, int hd, int k0, int hi) {
  att_tile_rows(L, a, tile, slot, n, r0, hd, k0, hi, ATT_TILE);
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

// Row ii of a local tile [rows, n] at base (a variable): its values as
// variables when n <= 16, else read where used (att_tile_dot).
static AttRow att_tile_row(Lo *L, int tile, int base, int64_t n, const char *name) {
  AttRow w = {.slot = tile, .hd = base, .n = n};
  for (int64_t c = 0; c < n && n <= 16; c++) w.var[c] = let(L, load(L, tile, iadd(L, xvar(L, base), xi(L, c))), name);
  return w;
}
// sum_c row_c tile[t n + c] for a row of att_tile_row.
static LExpr *att_tile_dot(Lo *L, const AttRow *w, int tile, LExpr *t) {
  if (w->n > 16) {
    int tb = let(L, imul(L, t, xi(L, w->n)), "tb");
    return att_vdot(L, w->slot, w->hd, tile, tb, w->n);
  }
  LExpr *base = imul(L, t, xi(L, w->n)), *acc = NULL;
  for (int64_t c = 0; c < w->n; c++) {
    LExpr *p = x2(L, LX_MUL, xvar(L, w->var[c]), load(L, tile, iadd(L, base, xi(L, c))));
    acc = acc ? x2(L, LX_ADD, acc, p) : p;
  }
  return acc ? acc : xf(L, 0);
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
static int att_tile_max(Lo *L, Att *a, const AttRow *q, int Kt, int jn, int M, int i, double scale, int *al, LExpr *m, int k0) {
  int jj;
  LStmt *rd = reduce_begin(L, LX_MAX, xi(L, 0), xvar(L, jn), &jj);
  LExpr *s = att_biased(L, a, x2(L, LX_MUL, att_dot(L, a, q, Kt, xvar(L, jj)), xf(L, scale)), m, xvar(L, i), iadd(L, xvar(L, k0), xvar(L, jj)));
  int mt = reduce_end(L, rd, s, "mt");
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
  int r0 = let(L, imul(L, xvar(L, b), a->T), "r0"), kv0 = kv_rows(L, a, r0);
  int lo = let(L, lower_xwin(L, 0), "lo"), hi = let(L, imin(L, lower_xwin(L, 1), a->T), "hi");
  int M = local(L, tm), Ls = local(L, tm), A = local(L, tm * e), Kt = local(L, ATT_TILE * h), Vt = local(L, ATT_TILE * e);
  int i = for_begin(L, xvar(L, lo), xvar(L, hi), true, "i");
  store(L, M, xvar(L, i), xf(L, -INFINITY));
  store(L, Ls, xvar(L, i), xf(L, 0));
  for (Feat f = feat_begin(L, e); feat_more(L, &f);) store(L, A, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i)), xf(L, 0));
  for_end(L);
  LExpr *ntile = x2(L, LX_DIV, iadd(L, xvar(L, hi), xi(L, ATT_TILE - 1)), xi(L, ATT_TILE));
  int kt = for_begin(L, x2(L, LX_DIV, att_first_key(L, a, xvar(L, lo)), xi(L, ATT_TILE)), ntile, false, "kt");  // tiles before the window: skipped
  int k0 = let(L, imul(L, xvar(L, kt), xi(L, ATT_TILE)), "k0");
  att_tile(L, a, Kt, KS_IN1, h, kv0, hd, k0, hi);
  att_tile(L, a, Vt, KS_IN2, e, kv0, hd, k0, hi);
  i = for_begin(L, imax(L, xvar(L, lo), xvar(L, k0)), xvar(L, hi), true, "i");
  int jn = let(L, imin(L, iadd(L, x2(L, LX_SUB, xvar(L, i), xvar(L, k0)), xi(L, 1)), xi(L, ATT_TILE)), "jn");
  AttRow q = att_row(L, a, KS_IN0, h, iadd(L, xvar(L, r0), xvar(L, i)), hd, "q");
  int al, mn = att_tile_max(L, a, &q, Kt, jn, M, i, n->fval, &al, xvar(L, 0), k0);
  AttState w = att_state(L, 1 + e);
  int l = att_state_add(&w, Ls, xvar(L, i)), acc = att_state_acc(L, &w, A, e, i);
  att_state_begin(L, &w, xi(L, 0), xvar(L, jn), "st", xvar(L, al));
  int jj = w.index;
  int s = let(L, att_biased(L, a, x2(L, LX_MUL, att_dot(L, a, &q, Kt, xvar(L, jj)), xf(L, n->fval)), xvar(L, 0), xvar(L, i),
                            iadd(L, xvar(L, k0), xvar(L, jj))), "s");
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, xvar(L, s), xvar(L, mn))), "p");
  w.next[l] = x2(L, LX_ADD, xvar(L, w.var[l]), xvar(L, p));
  att_state_axpy(L, &w, acc, e, NULL, xvar(L, p), Vt, xvar(L, jj));
  att_state_end(L, &w);
  for_end(L);
  for_end(L);
  i = for_begin(L, xvar(L, lo), xvar(L, hi), true, "i");
  att_store_lse(L, a, iadd(L, xvar(L, r0), xvar(L, i)), hd, load(L, M, xvar(L, i)), load(L, Ls, xvar(L, i)));
  int inv = let(L, x2(L, LX_DIV, xf(L, 1), load(L, Ls, xvar(L, i))), "inv");
  for (Feat f = feat_begin(L, a->no_o ? 0 : e); feat_more(L, &f);)
    store(L, KS_OUT, att_at(L, a, e, iadd(L, xvar(L, r0), xvar(L, i)), hd, feat_c(L, &f)),
          x2(L, LX_MUL, load(L, A, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i))), xvar(L, inv)));
  for_end(L);
}

// Gradient, every row. With L_i the forward's (input 4), P_ij = e^(s_ij -
// L_i), dP_ij = do_i . v_j, D_i = do_i . o_i (o input 5; = sum_j P_ij dP_ij),
// dS_ij = scale P_ij (dP_ij - D_i): dq_i = sum_j dS_ij k_j, dk_j = sum_i
// dS_ij q_i, dv_j = sum_i P_ij do_i, each summed in index order. One sweep
// over key tiles, per query tile from it: P and dS of the tile's pairs once
// into shared memory, then dq by query rows and dk, dv by key rows.
static void lower_attention_grad_gpu(Lo *L, Att *a, const Node *n) {
  int64_t NH = a->NH, h = a->h, e = a->e, tm = L->g->t_max;
  int b = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, NH)), "b"), hd = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, NH)), "hd");
  int r0 = let(L, imul(L, xvar(L, b), a->T), "r0"), kv0 = kv_rows(L, a, r0);
  int T = let(L, a->T, "T");
  int M = local(L, tm), D = local(L, tm), DQ = local(L, tm * h), DK = local(L, tm * h), DV = local(L, tm * e);  // M: L_i
  int Kt = local(L, ATT_TILE * h), Vt = local(L, ATT_TILE * e);  // K, V tiles
  int Qt = local(L, ATT_QT * h), Ot = local(L, ATT_QT * e);        // Q, dO tiles
  int64_t pld = gpu_tile_ld(ATT_TILE);  // Pt's and Xt's rows: a thread per row meets no bank conflict
  int Pt = local(L, ATT_QT * pld), Xt = local(L, ATT_QT * pld);  // P, dS of a query tile against a key tile
  int i = for_begin(L, xi(L, 0), xvar(L, T), true, "i");
  for (Feat f = feat_begin(L, h); feat_more(L, &f);) {
    store(L, DQ, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i)), xf(L, 0));
    store(L, DK, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i)), xf(L, 0));
  }
  for (Feat f = feat_begin(L, e); feat_more(L, &f);) store(L, DV, iadd(L, imul(L, feat_c(L, &f), xi(L, tm)), xvar(L, i)), xf(L, 0));
  for_end(L);
  LExpr *ntile = x2(L, LX_DIV, iadd(L, xvar(L, T), xi(L, ATT_TILE - 1)), xi(L, ATT_TILE));
  // the rows' L_i (the forward's) and D_i = do_i . o_i (= sum_j P_ij dP_ij)
  i = for_begin(L, xi(L, 0), xvar(L, T), true, "i");
  {
    LExpr *row = iadd(L, xvar(L, r0), xvar(L, i));
    store(L, M, xvar(L, i), load(L, KS_IN0 + 4, att_at(L, a, 1, row, hd, xi(L, 0))));
    int ob = let(L, att_at(L, a, e, row, hd, xi(L, 0)), "ob");
    store(L, D, xvar(L, i), att_vdot(L, KS_IN0 + 3, ob, KS_IN0 + 5, ob, e));
  }
  for_end(L);
  // per key tile, per query tile of ATT_QT rows from it: (a) P_ij and dS_ij
  // into Pt and Xt; (b) a query row per
  // thread, dq_i += sum_j dS_ij k_j; (c) a key row per thread, dk_j +=
  // sum_i dS_ij q_i and dv_j += sum_i P_ij do_i
  int kt = for_begin(L, xi(L, 0), ntile, false, "kt");
  int k0 = let(L, imul(L, xvar(L, kt), xi(L, ATT_TILE)), "k0");
  att_tile(L, a, Kt, KS_IN1, h, kv0, hd, k0, T);
  att_tile(L, a, Vt, KS_IN2, e, kv0, hd, k0, T);
  LExpr *nqt = x2(L, LX_DIV, iadd(L, xvar(L, T), xi(L, ATT_QT - 1)), xi(L, ATT_QT));
  int qt = for_begin(L, x2(L, LX_DIV, xvar(L, k0), xi(L, ATT_QT)), nqt, false, "qt");
  int q0 = let(L, imul(L, xvar(L, qt), xi(L, ATT_QT)), "q0");
  int nq = let(L, imin(L, x2(L, LX_SUB, xvar(L, T), xvar(L, q0)), xi(L, ATT_QT)), "nq");
  att_tile_rows(L, a, Qt, KS_IN0, h, r0, hd, q0, T, ATT_QT);
  att_tile_rows(L, a, Ot, KS_IN0 + 3, e, r0, hd, q0, T, ATT_QT);
  // (a): a thread per (query row, ATT_TILE / ATT_KQ keys), its rows of Q and dO
  // in registers for heads of at most 16
  int x = for_begin(L, xi(L, 0), imul(L, xvar(L, nq), xi(L, ATT_KQ)), true, "x");
  int ii = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, ATT_KQ)), "ii"), kc = let(L, x2(L, LX_REM, xvar(L, x), xi(L, ATT_KQ)), "kc");
  int iq = let(L, iadd(L, xvar(L, q0), xvar(L, ii)), "iq");
  int qb = let(L, imul(L, xvar(L, ii), xi(L, h)), "qb"), ob = let(L, imul(L, xvar(L, ii), xi(L, e)), "ob");
  int Li = let(L, load(L, M, xvar(L, iq)), "Li"), Di = let(L, load(L, D, xvar(L, iq)), "Di");
  AttRow qr = att_tile_row(L, Qt, qb, h, "q"), dr = att_tile_row(L, Ot, ob, e, "dy");
  int t = for_begin(L, xi(L, 0), xi(L, ATT_TILE / ATT_KQ), false, "t");
  int jj = let(L, iadd(L, imul(L, xvar(L, t), xi(L, ATT_KQ)), xvar(L, kc)), "jj");  // a warp's ATT_KQ keys side by side
  int jk = let(L, iadd(L, xvar(L, k0), xvar(L, jj)), "jk");
  int s = let(L, att_biased(L, a, x2(L, LX_MUL, att_tile_dot(L, &qr, Kt, xvar(L, jj)), xf(L, n->fval)), xvar(L, 0), xvar(L, iq), xvar(L, jk)), "s");
  LExpr *seen = x2(L, LX_AND, x2(L, LX_GE, xvar(L, iq), xvar(L, jk)), x2(L, LX_LT, xvar(L, jk), xvar(L, T)));
  int p = let(L, xsel(L, seen, x1(L, LX_EXP, x2(L, LX_SUB, xvar(L, s), xvar(L, Li))), xf(L, 0)), "p");
  int dp = let(L, att_tile_dot(L, &dr, Vt, xvar(L, jj)), "dp");
  int at = let(L, iadd(L, imul(L, xvar(L, ii), xi(L, pld)), xvar(L, jj)), "at");
  store(L, Pt, xvar(L, at), xvar(L, p));
  store(L, Xt, xvar(L, at), x2(L, LX_MUL, xf(L, n->fval), x2(L, LX_MUL, xvar(L, p), x2(L, LX_SUB, xvar(L, dp), xvar(L, Di)))));
  for_end(L);
  for_end(L);
  i = for_begin(L, xvar(L, q0), iadd(L, xvar(L, q0), xvar(L, nq)), true, "i");  // (b)
  {
    int jn = let(L, imin(L, iadd(L, x2(L, LX_SUB, xvar(L, i), xvar(L, k0)), xi(L, 1)), xi(L, ATT_TILE)), "jn");
    int xb = let(L, imul(L, x2(L, LX_SUB, xvar(L, i), xvar(L, q0)), xi(L, pld)), "xb");
    AttState st = att_state(L, h);
    int dq = att_state_acc(L, &st, DQ, h, i);
    att_state_begin(L, &st, xi(L, 0), xvar(L, jn), "st", NULL);
    int t = st.index;
    att_state_axpy(L, &st, dq, h, NULL, load(L, Xt, iadd(L, xvar(L, xb), xvar(L, t))), Kt, xvar(L, t));
    att_state_end(L, &st);
  }
  for_end(L);
  int j = for_begin(L, xvar(L, k0), imin(L, iadd(L, xvar(L, k0), xi(L, ATT_TILE)), xvar(L, T)), true, "j");  // (c)
  {
    int jc = let(L, x2(L, LX_SUB, xvar(L, j), xvar(L, k0)), "jc");
    int ilo = let(L, x2(L, LX_SUB, imax(L, xvar(L, j), xvar(L, q0)), xvar(L, q0)), "ilo");
    AttState st = att_state(L, h + e);
    int dk = att_state_acc(L, &st, DK, h, j), dv = att_state_acc(L, &st, DV, e, j);
    att_state_begin(L, &st, xvar(L, ilo), xvar(L, nq), "st", NULL);
    int t = st.index;
    int at = let(L, iadd(L, imul(L, xvar(L, t), xi(L, pld)), xvar(L, jc)), "at");
    att_state_axpy(L, &st, dk, h, NULL, load(L, Xt, xvar(L, at)), Qt, xvar(L, t));
    att_state_axpy(L, &st, dv, e, NULL, load(L, Pt, xvar(L, at)), Ot, xvar(L, t));
    att_state_end(L, &st);
  }
  for_end(L);
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

// ---- the CPU's blocked form (Kernel.att_block = BQ) --------------------------------
//
// Blocks of BQ query rows of one head against the keys through GEMM calls
// (LS_GEMM: the runtime's GEMM on the calling thread), the softmax over the
// block of scores between them; the causal mask ends each block's keys at
// its last row, so the key blocks past it are never read.
// Keys per forward block (scores [BQ, BK] on the stack, in a GPU block's
// shared memory), and a GPU's query rows per block: BQ of the forward; the
// gradient's as many as keep its two [BQ, t_max] arrays of whole rows
// within ATT_GPU_GRAD_BYTES.
enum { ATT_BK_CPU = 256, ATT_BK_GPU = 64, ATT_BQ_GPU = 64, ATT_GPU_GRAD_BYTES = 160 * 1024 };

int64_t lower_att_block(const Graph *g, const Node *n, const Kernel *k, LTarget tgt) {
  if (n->op != OP_ATTENTION && n->op != OP_ATTENTION_LSE && n->op != OP_ATTENTION_GRAD && n->op != OP_ATTENTION_DBIAS) return 0;
  if (tgt == LTARGET_CPU) return k->att_block;
  if (n->op == OP_ATTENTION_DBIAS) return 0;
  if (lower_att_gpu_form(g, n, tgt)) return 0;
  if (n->op != OP_ATTENTION_GRAD) return ATT_BQ_GPU;
  int64_t bq = ATT_BQ_GPU;
  while (bq > 1 && 2 * bq * g->t_max * (int64_t)sizeof(float) > ATT_GPU_GRAD_BYTES) bq /= 2;
  return 2 * bq * g->t_max * (int64_t)sizeof(float) <= ATT_GPU_GRAD_BYTES ? bq : 0;
}

// Offset of row `row`'s head hd in rows of NH heads of n features.
LExpr *att_head(Lo *L, const Att *a, int64_t n, LExpr *row, int hd) { return att_at(L, a, n, row, hd, xi(L, 0)); }

LCall att_call(Lo *L, bool ta, bool tb, LExpr *m, LExpr *nn, int64_t k, double alpha, double beta) {
  return (LCall){.ta = ta, .tb = tb, .m = m, .n = nn, .k = xi(L, k), .alpha = alpha, .beta = beta};
}
void att_operand(LCall *c, int x, int slot, LExpr *at, LExpr *ld) { c->slot[x] = slot, c->at[x] = at, c->ld[x] = ld; }

// S[ii ld + jj] += b of sequence m at (i0 + ii, k0 + jj) for ii < nq, jj < nk: the
// score bias over a block of scores (nothing without one). The blocked
// forms apply the op's own window as each row's first key (att_row_start),
// not as scores.
void att_block_bias(Lo *L, const Att *a, int S, int64_t ld, int nq, int nk, LExpr *m, int i0, int k0) {
  if (a->bslot < 0) return;
  int ii = for_begin(L, xi(L, 0), xvar(L, nq), true, "ii");
  int jj = for_begin(L, xi(L, 0), xvar(L, nk), true, "jj");
  LExpr *at = iadd(L, imul(L, xvar(L, ii), xi(L, ld)), xvar(L, jj));
  store(L, S, at, att_bias_add(L, a, load(L, S, at), m, iadd(L, xvar(L, i0), xvar(L, ii)), iadd(L, xvar(L, k0), xvar(L, jj))));
  for_end(L);
  for_end(L);
}

// The first column of a block of scores whose keys start at k0 that query
// row i sees: max(0, i - W + 1 - k0) under the op's own window, else 0. A
// row may see none (the result >= the block's columns): its exponentials
// are all 0. -1 without the window: every column from 0.
static int att_row_start(Lo *L, const Att *a, LExpr *i, int k0) {
  if (!a->Wmask) return -1;
  return let(L, imax(L, xi(L, 0), x2(L, LX_SUB, x2(L, LX_SUB, i, xi(L, a->W - 1)), xvar(L, k0))), "js");
}

// Row sb of a block of scores, nk columns of which [js, jn) are keys the
// row sees: S_jj <- e^(S_jj - m) there, 0 elsewhere; returns the variable
// holding their sum.
static int att_row_exp(Lo *L, int S, int sb, int js, int jn, int nk, int m) {
  int jj = for_begin(L, xi(L, 0), xvar(L, nk), true, "jj");
  LExpr *at = iadd(L, xvar(L, sb), xvar(L, jj));
  LExpr *in = x2(L, LX_LT, xvar(L, jj), xvar(L, jn));
  if (js >= 0) in = x2(L, LX_AND, x2(L, LX_GE, xvar(L, jj), xvar(L, js)), in);
  store(L, S, at, xsel(L, in, x1(L, LX_EXP, x2(L, LX_SUB, load(L, S, at), xvar(L, m))), xf(L, 0)));
  for_end(L);
  LStmt *rd = reduce_begin(L, LX_ADD, xi(L, 0), xvar(L, nk), &jj);
  return reduce_end(L, rd, load(L, S, iadd(L, xvar(L, sb), xvar(L, jj))), "l");
}

// Rows [0, nr) of tile (rows ld apart, n features) <- rows row0 + r of
// slot, head hd, a thread per element, consecutive threads consecutive
// features (coalesced); with tile2 >= 0 also tile2 <- slot2 (the same rows).
void att_load_tile(Lo *L, const Att *a, int hd, int64_t n, int64_t ld, LExpr *row0, int nr, int tile, int slot, int tile2, int slot2) {
  int x = for_begin(L, xi(L, 0), imul(L, xvar(L, nr), xi(L, n)), true, "x");
  int r = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, n)), "r"), c = let(L, x2(L, LX_REM, xvar(L, x), xi(L, n)), "c");
  int at = let(L, iadd(L, imul(L, xvar(L, r), xi(L, ld)), xvar(L, c)), "at");
  int src = let(L, att_at(L, a, n, iadd(L, row0, xvar(L, r)), hd, xvar(L, c)), "src");
  store(L, tile, xvar(L, at), load(L, slot, xvar(L, src)));
  if (tile2 >= 0) store(L, tile2, xvar(L, at), load(L, slot2, xvar(L, src)));
  for_end(L);
}

static bool att_stage_bf16(const Lo *L) { return L->tgt == LTARGET_GPU && L->s->tiles_bf16; }
int64_t att_stage_ld(const Lo *L, int64_t n) { return att_stage_bf16(L) ? gpu_tile_ld_bf16(n) : gpu_tile_ld(n); }
int64_t att_stage_esize(const Lo *L) { return att_stage_bf16(L) ? 2 : 4; }
int att_stage_tile(Lo *L, int64_t size) { return att_stage_bf16(L) ? local_bf16(L, size) : local(L, size); }

void att_load_kv(Lo *L, const Att *a, int hd, LExpr *krow, int nk, int Kt, int64_t ldh, int Vt, int64_t lde) {
  if (a->h == a->e && ldh == lde) {
    att_load_tile(L, a, hd, a->h, ldh, krow, nk, Kt, KS_IN1, Vt, KS_IN2);
    return;
  }
  att_load_tile(L, a, hd, a->h, ldh, krow, nk, Kt, KS_IN1, -1, 0);
  att_load_tile(L, a, hd, a->e, lde, krow, nk, Vt, KS_IN2, -1, 0);
}

// Forward, one (sequence, head, query block) per outer index, the block's
// rows [lo, hi) clipped to the step program's window. Per key block of
// BK keys j < hi (the online softmax, seed 003's kernel fusion):
// S = scale Q K^T, m' = max(m, max_j S_ij), A_i <- A_i e^(m - m') +
// sum_j e^(S_ij - m') v_j, l_i likewise; then o_i = A_i / l_i. On a GPU the
// team GEMMs read Q's rows (staged once) and each key block's K and V rows
// from shared memory where the tiles fit ATT_STAGE_BYTES, and the
// exponentials and A's rescaling run an element per thread (a row per
// thread would leave 192 of the 256 idle); --emit=cost on GPT-2-small: 774
// us a launch reading global memory with 128 threads, 559 staged with 256.
static void lower_attention_fwd_blocked(Lo *L, Att *a, const Node *n, int64_t BQ) {
  const int64_t BK = L->tgt == LTARGET_GPU ? ATT_BK_GPU : ATT_BK_CPU;
  int64_t NH = a->NH, h = a->h, e = a->e, nqb = (L->g->t_max + BQ - 1) / BQ;
  int qb = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, nqb)), "qb"), sh = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, nqb)), "sh");
  int hd = let(L, x2(L, LX_REM, xvar(L, sh), xi(L, NH)), "hd");
  int r0 = let(L, imul(L, x2(L, LX_DIV, xvar(L, sh), xi(L, NH)), a->T), "r0"), kv0 = kv_rows(L, a, r0);
  int q0 = let(L, imul(L, xvar(L, qb), xi(L, BQ)), "q0");
  int lo = let(L, imax(L, xvar(L, q0), lower_xwin(L, 0)), "lo");
  int q1 = let(L, imin(L, imin(L, iadd(L, xvar(L, q0), xi(L, BQ)), a->T), lower_xwin(L, 1)), "q1");
  int hi = let(L, imax(L, xvar(L, q1), xvar(L, lo)), "hi");
  int nq = let(L, x2(L, LX_SUB, xvar(L, hi), xvar(L, lo)), "nq");
  int kend = let(L, xsel(L, x2(L, LX_LT, xvar(L, lo), xvar(L, hi)), xvar(L, hi), xi(L, 0)), "kend");
  // the rows of S and A: on a GPU padded against shared memory's bank conflicts
  bool gpu = L->tgt == LTARGET_GPU;
  int64_t ld = gpu ? gpu_tile_ld(BK) : att_score_ld(BK), ae = gpu ? gpu_tile_ld(e) : e;
  int S = local(L, BQ * ld), A = local(L, BQ * ae), M = local(L, BQ), Ls = local(L, BQ);
  // on a GPU, Q's rows staged once and each key block's K and V rows, where
  // they fit (att_stage_tile): the team GEMMs read shared memory
  int64_t ldh = att_stage_ld(L, h), lde = att_stage_ld(L, e);
  bool stage = gpu && BQ * (ld + ae + 3) * (int64_t)sizeof(float) + (BQ * ldh + BK * (ldh + lde)) * att_stage_esize(L) <= ATT_STAGE_BYTES;
  int Qt = stage ? att_stage_tile(L, BQ * ldh) : -1, Kt = stage ? att_stage_tile(L, BK * ldh) : -1;
  int Vt = stage ? att_stage_tile(L, BK * lde) : -1;
  if (stage) att_load_tile(L, a, hd, h, ldh, iadd(L, xvar(L, r0), xvar(L, lo)), nq, Qt, KS_IN0, -1, 0);
  int Al = gpu ? local(L, BQ) : -1;  // the rows' rescaling e^(m - m') of a key block
  int ii = for_begin(L, xi(L, 0), xvar(L, nq), true, "ii");
  store(L, M, xvar(L, ii), xf(L, a->Wmask ? ATT_FAR : -INFINITY));  // finite: a block may hold none of a row's keys
  store(L, Ls, xvar(L, ii), xf(L, 0));
  for (Feat f = feat_begin(L, e); feat_more(L, &f);) store(L, A, iadd(L, imul(L, xvar(L, ii), xi(L, ae)), feat_c(L, &f)), xf(L, 0));
  for_end(L);
  int kf = let(L, imin(L, att_block_first_key(L, a, xvar(L, lo)), xvar(L, kend)), "kf");  // keys before the window: skipped
  LExpr *nkb = x2(L, LX_DIV, iadd(L, x2(L, LX_SUB, xvar(L, kend), xvar(L, kf)), xi(L, BK - 1)), xi(L, BK));
  int kb = for_begin(L, xi(L, 0), nkb, false, "kb");
  int k0 = let(L, iadd(L, xvar(L, kf), imul(L, xvar(L, kb), xi(L, BK))), "k0");
  int nk = let(L, imin(L, xi(L, BK), x2(L, LX_SUB, xvar(L, kend), xvar(L, k0))), "nk");
  LExpr *krow = iadd(L, xvar(L, kv0), xvar(L, k0));
  if (stage) att_load_kv(L, a, hd, krow, nk, Kt, ldh, Vt, lde);
  LCall c = att_call(L, false, true, xvar(L, nq), xvar(L, nk), h, n->fval, 0);  // S = scale Q K^T
  if (stage) {
    att_operand(&c, LC_A, Qt, xi(L, 0), xi(L, ldh));
    att_operand(&c, LC_B, Kt, xi(L, 0), xi(L, ldh));
  } else {
    att_operand(&c, LC_A, KS_IN0, att_head(L, a, h, iadd(L, xvar(L, r0), xvar(L, lo)), hd), xi(L, NH * h));
    att_operand(&c, LC_B, KS_IN1, att_head(L, a, h, krow, hd), xi(L, NH * h));
  }
  att_operand(&c, LC_C, S, xi(L, 0), xi(L, ld));
  gemm_call(L, c);
  att_block_bias(L, a, S, ld, nq, nk, xvar(L, sh), lo, k0);
  ii = for_begin(L, xi(L, 0), xvar(L, nq), true, "ii");
  int jn = let(L, imin(L, xvar(L, nk), x2(L, LX_SUB, iadd(L, xvar(L, lo), xvar(L, ii)), iadd(L, xvar(L, k0), xi(L, -1)))), "jn");
  int js = att_row_start(L, a, iadd(L, xvar(L, lo), xvar(L, ii)), k0);
  int sb = let(L, imul(L, xvar(L, ii), xi(L, ld)), "sb");
  int jj;
  LStmt *rd = reduce_begin(L, LX_MAX, js >= 0 ? xvar(L, js) : xi(L, 0), xvar(L, jn), &jj);
  int mt = reduce_end(L, rd, load(L, S, iadd(L, xvar(L, sb), xvar(L, jj))), "mt");
  int mo = let(L, load(L, M, xvar(L, ii)), "mo");
  int mn = let(L, x2(L, LX_MAX, xvar(L, mt), xvar(L, mo)), "mn");
  int al = let(L, x1(L, LX_EXP, x2(L, LX_SUB, xvar(L, mo), xvar(L, mn))), "al");
  store(L, M, xvar(L, ii), xvar(L, mn));
  if (Al >= 0) {  // a GPU's block: the exponentials and A's rescaling an element per thread
    store(L, Al, xvar(L, ii), xvar(L, al));
    for_end(L);
    int x = for_begin(L, xi(L, 0), imul(L, xvar(L, nq), xi(L, BK)), true, "x");
    ii = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, BK)), "ii");
    int jx = let(L, x2(L, LX_REM, xvar(L, x), xi(L, BK)), "jj");
    LExpr *i = iadd(L, xvar(L, lo), xvar(L, ii));
    LExpr *in = x2(L, LX_AND, x2(L, LX_LT, xvar(L, jx), xvar(L, nk)), x2(L, LX_GE, i, iadd(L, xvar(L, k0), xvar(L, jx))));
    js = att_row_start(L, a, i, k0);
    if (js >= 0) in = x2(L, LX_AND, in, x2(L, LX_GE, xvar(L, jx), xvar(L, js)));
    int at = let(L, iadd(L, imul(L, xvar(L, ii), xi(L, ld)), xvar(L, jx)), "at");
    store(L, S, xvar(L, at), xsel(L, in, x1(L, LX_EXP, x2(L, LX_SUB, load(L, S, xvar(L, at)), load(L, M, xvar(L, ii)))), xf(L, 0)));
    for_end(L);
    x = for_begin(L, xi(L, 0), imul(L, xvar(L, nq), xi(L, e)), true, "x");
    ii = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, e)), "ii");
    at = let(L, iadd(L, imul(L, xvar(L, ii), xi(L, ae)), x2(L, LX_REM, xvar(L, x), xi(L, e))), "at");
    store(L, A, xvar(L, at), x2(L, LX_MUL, load(L, A, xvar(L, at)), load(L, Al, xvar(L, ii))));
    for_end(L);
    ii = for_begin(L, xi(L, 0), xvar(L, nq), true, "ii");
    LStmt *rs = reduce_begin(L, LX_ADD, xi(L, 0), xvar(L, nk), &jj);
    int ls = reduce_end(L, rs, load(L, S, iadd(L, imul(L, xvar(L, ii), xi(L, ld)), xvar(L, jj))), "l");
    store(L, Ls, xvar(L, ii), x2(L, LX_ADD, x2(L, LX_MUL, load(L, Ls, xvar(L, ii)), load(L, Al, xvar(L, ii))), xvar(L, ls)));
    for_end(L);
  } else {
    int ls = att_row_exp(L, S, sb, js, jn, nk, mn);
    store(L, Ls, xvar(L, ii), x2(L, LX_ADD, x2(L, LX_MUL, load(L, Ls, xvar(L, ii)), xvar(L, al)), xvar(L, ls)));
    for (Feat f = feat_begin(L, e); feat_more(L, &f);) {
      int at = let(L, iadd(L, imul(L, xvar(L, ii), xi(L, ae)), feat_c(L, &f)), "at");
      store(L, A, xvar(L, at), x2(L, LX_MUL, load(L, A, xvar(L, at)), xvar(L, al)));
    }
    for_end(L);
  }
  c = att_call(L, false, false, xvar(L, nq), xi(L, e), 0, 1, 1);  // A += P V
  c.k = xvar(L, nk);
  att_operand(&c, LC_A, S, xi(L, 0), xi(L, ld));
  if (stage) att_operand(&c, LC_B, Vt, xi(L, 0), xi(L, lde));
  else att_operand(&c, LC_B, KS_IN2, att_head(L, a, e, krow, hd), xi(L, NH * e));
  att_operand(&c, LC_C, A, xi(L, 0), xi(L, ae));
  gemm_call(L, c);
  for_end(L);
  ii = for_begin(L, xi(L, 0), xvar(L, nq), true, "ii");
  att_store_lse(L, a, iadd(L, xvar(L, r0), iadd(L, xvar(L, lo), xvar(L, ii))), hd, load(L, M, xvar(L, ii)), load(L, Ls, xvar(L, ii)));
  int inv = let(L, x2(L, LX_DIV, xf(L, 1), load(L, Ls, xvar(L, ii))), "inv");
  for (Feat f = feat_begin(L, a->no_o ? 0 : e); feat_more(L, &f);)
    store(L, KS_OUT, att_at(L, a, e, iadd(L, xvar(L, r0), iadd(L, xvar(L, lo), xvar(L, ii))), hd, feat_c(L, &f)),
          x2(L, LX_MUL, load(L, A, iadd(L, imul(L, xvar(L, ii), xi(L, ae)), feat_c(L, &f))), xvar(L, inv)));
  for_end(L);
}

// The blocked gradients' products of BQ query rows [i0, i0 + nq) of
// sequence m (rows from qrow, head hd) against the keys [ks, ks + nk) (rows
// from kv0 + ks): S = scale Q K^T + b and dP = dO V^T into the locals S and
// X ([BQ, t_max]); then opens the loop over the rows ii, in which
// S_jj <- e^(S_jj - m_i) (0 outside the row's keys) and rb->inv = 1 / l_i,
// rb->D = sum_j P_ij dP_ij; the caller ends that loop.
typedef struct {
  int ii, sb, inv, D;
} AttRows;
static AttRows att_block_rows(Lo *L, Att *a, const Node *n, int S, int X, LExpr *qrow, int hd, int kv0, int ks, int nq, int nk,
                              LExpr *m, int i0) {
  int64_t NH = a->NH, h = a->h, e = a->e, sld = att_score_ld(L->g->t_max);  // the score rows' stride
  LCall c = att_call(L, false, true, xvar(L, nq), xvar(L, nk), h, n->fval, 0);  // S = scale Q K^T
  att_operand(&c, LC_A, KS_IN0, att_head(L, a, h, qrow, hd), xi(L, NH * h));
  att_operand(&c, LC_B, KS_IN1, att_head(L, a, h, iadd(L, xvar(L, kv0), xvar(L, ks)), hd), xi(L, NH * h));
  att_operand(&c, LC_C, S, xi(L, 0), xi(L, sld));
  gemm_call(L, c);
  att_block_bias(L, a, S, sld, nq, nk, m, i0, ks);
  c = att_call(L, false, true, xvar(L, nq), xvar(L, nk), e, 1, 0);  // dP = dO V^T
  att_operand(&c, LC_A, KS_IN0 + 3, att_head(L, a, e, qrow, hd), xi(L, NH * e));
  att_operand(&c, LC_B, KS_IN2, att_head(L, a, e, iadd(L, xvar(L, kv0), xvar(L, ks)), hd), xi(L, NH * e));
  att_operand(&c, LC_C, X, xi(L, 0), xi(L, sld));
  gemm_call(L, c);
  AttRows r;
  r.ii = for_begin(L, xi(L, 0), xvar(L, nq), true, "ii");
  int jn = let(L, x2(L, LX_SUB, iadd(L, iadd(L, xvar(L, i0), xvar(L, r.ii)), xi(L, 1)), xvar(L, ks)), "jn");
  int js = att_row_start(L, a, iadd(L, xvar(L, i0), xvar(L, r.ii)), ks);  // the row's first key, < jn
  r.sb = let(L, imul(L, xvar(L, r.ii), xi(L, sld)), "sb");
  int jj;
  LStmt *rd = reduce_begin(L, LX_MAX, js >= 0 ? xvar(L, js) : xi(L, 0), xvar(L, jn), &jj);
  int mx = reduce_end(L, rd, load(L, S, iadd(L, xvar(L, r.sb), xvar(L, jj))), "m");
  r.inv = let(L, x2(L, LX_DIV, xf(L, 1), xvar(L, att_row_exp(L, S, r.sb, js, jn, nk, mx))), "inv");
  rd = reduce_begin(L, LX_ADD, xi(L, 0), xvar(L, nk), &jj);
  LExpr *at = iadd(L, xvar(L, r.sb), xvar(L, jj));
  r.D = let(L, x2(L, LX_MUL, xvar(L, reduce_end(L, rd, x2(L, LX_MUL, load(L, S, at), load(L, X, at)), "ud")), xvar(L, r.inv)), "D");
  return r;
}

// Gradient, one (sequence, head) per outer index, its dk and dv rows zeroed,
// then per block of BQ query rows [i0, i1) against the keys j < i1 (whole
// rows of scores, so the softmax is exact in one pass):
// S = scale Q K^T, dP = dO V^T, P_ij = e^(S_ij - m_i) / l_i (0 for j > i),
// D_i = sum_j P_ij dP_ij, dS_ij = scale P_ij (dP_ij - D_i);
// dQ = dS K, dK += dS^T Q, dV += P^T dO (the blocks in order of i0).
static void lower_attention_grad_blocked(Lo *L, Att *a, const Node *n, int64_t BQ) {
  int64_t NH = a->NH, h = a->h, e = a->e, sld = att_score_ld(L->g->t_max);  // the score rows' stride
  int hd = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, NH)), "hd");
  int r0 = let(L, imul(L, x2(L, LX_DIV, xvar(L, 0), xi(L, NH)), a->T), "r0"), kv0 = kv_rows(L, a, r0);
  int T = let(L, a->T, "T");
  int S = local(L, BQ * sld), X = local(L, BQ * sld);
  int i = for_begin(L, xi(L, 0), xvar(L, T), true, "i");
  for (int p = 1; p < 3; p++)
    for (Feat f = feat_begin(L, p == 1 ? h : e); feat_more(L, &f);)
      store(L, a->part[p].slot, att_part_at(L, a, p, iadd(L, xvar(L, r0), xvar(L, i)), hd, feat_c(L, &f)), xf(L, 0));
  for_end(L);
  int qb = for_begin(L, xi(L, 0), x2(L, LX_DIV, iadd(L, xvar(L, T), xi(L, BQ - 1)), xi(L, BQ)), false, "qb");
  int i0 = let(L, imul(L, xvar(L, qb), xi(L, BQ)), "i0");
  int i1 = let(L, imin(L, iadd(L, xvar(L, i0), xi(L, BQ)), xvar(L, T)), "i1");
  int nq = let(L, x2(L, LX_SUB, xvar(L, i1), xvar(L, i0)), "nq");
  int ks = let(L, att_block_first_key(L, a, xvar(L, i0)), "ks");  // keys [ks, i1): column jj is key ks + jj
  int nk = let(L, x2(L, LX_SUB, xvar(L, i1), xvar(L, ks)), "nk");
  LExpr *qrow = iadd(L, xvar(L, r0), xvar(L, i0));
  AttRows rw = att_block_rows(L, a, n, S, X, qrow, hd, kv0, ks, nq, nk, xvar(L, 0), i0);
  int jj = for_begin(L, xi(L, 0), xvar(L, nk), true, "jj");
  LExpr *at = iadd(L, xvar(L, rw.sb), xvar(L, jj));
  int p = let(L, x2(L, LX_MUL, load(L, S, at), xvar(L, rw.inv)), "p");
  store(L, S, at, xvar(L, p));
  store(L, X, at, x2(L, LX_MUL, xf(L, n->fval), x2(L, LX_MUL, xvar(L, p), x2(L, LX_SUB, load(L, X, at), xvar(L, rw.D)))));
  for_end(L);
  for_end(L);
  int64_t ld[3];
  for (int pt = 0; pt < 3; pt++) ld[pt] = NH * a->part[pt].w;
  LCall c = att_call(L, false, false, xvar(L, nq), xi(L, h), 0, 1, 0);  // dQ = dS K
  c.k = xvar(L, nk);
  att_operand(&c, LC_A, X, xi(L, 0), xi(L, sld));
  att_operand(&c, LC_B, KS_IN1, att_head(L, a, h, iadd(L, xvar(L, kv0), xvar(L, ks)), hd), xi(L, NH * h));
  att_operand(&c, LC_C, a->part[0].slot, att_part_at(L, a, 0, qrow, hd, xi(L, 0)), xi(L, ld[0]));
  gemm_call(L, c);
  c = att_call(L, true, false, xvar(L, nk), xi(L, h), 0, 1, 1);  // dK += dS^T Q
  c.k = xvar(L, nq);
  att_operand(&c, LC_A, X, xi(L, 0), xi(L, sld));
  att_operand(&c, LC_B, KS_IN0, att_head(L, a, h, qrow, hd), xi(L, NH * h));
  att_operand(&c, LC_C, a->part[1].slot, att_part_at(L, a, 1, iadd(L, xvar(L, r0), xvar(L, ks)), hd, xi(L, 0)), xi(L, ld[1]));
  gemm_call(L, c);
  c = att_call(L, true, false, xvar(L, nk), xi(L, e), 0, 1, 1);  // dV += P^T dO
  c.k = xvar(L, nq);
  att_operand(&c, LC_A, S, xi(L, 0), xi(L, sld));
  att_operand(&c, LC_B, KS_IN0 + 3, att_head(L, a, e, qrow, hd), xi(L, NH * e));
  att_operand(&c, LC_C, a->part[2].slot, att_part_at(L, a, 2, iadd(L, xvar(L, r0), xvar(L, ks)), hd, xi(L, 0)), xi(L, ld[2]));
  gemm_call(L, c);
  for_end(L);
}

// ---- the score bias's gradient (ATTENTION_DBIAS) ----------------------------------

// The sequence m whose coordinates are block c's on the bias's axes and the
// u-th combination of the axes the bias broadcasts along (free) elsewhere;
// *nfree: the number of such combinations (c, u NULL: that only).
static LExpr *att_seq_of(Lo *L, const Att *a, LExpr *c, LExpr *u, LExpr **nfree) {
  const Shape *bs = a->bs;
  int off = a->ns + 2 - bs->rank;  // score axis s reads bias axis s - off
  LExpr *m = xi(L, 0), *mstride = xi(L, 1), *cdiv = xi(L, 1), *udiv = xi(L, 1);
  for (int s = a->ns - 1; s >= 0; s--) {
    LExpr *ns = xdim(L, a->seq[s]), *coord;
    int ax = ir_attention_bias_axis(bs, a->ns, s);
    if (ax >= 0) {
      coord = c ? x2(L, LX_REM, x2(L, LX_DIV, c, cdiv), ns) : NULL;
      cdiv = imul(L, cdiv, ns);
    } else {
      coord = u ? x2(L, LX_REM, x2(L, LX_DIV, u, udiv), ns) : NULL;
      udiv = imul(L, udiv, ns);
      if (s - off >= 0) cdiv = imul(L, cdiv, xdim(L, bs->d[s - off]));  // an axis of 1 in the bias's layout
    }
    if (coord) m = iadd(L, m, imul(L, coord, mstride));
    mstride = imul(L, mstride, ns);
  }
  *nfree = udiv;
  return m;
}

// One row of db per outer index o: with a query axis, block o / T of the
// bias at query i = o mod T; without, block o at every query. Over the
// sequences m that read the block, in order: row i of m's scores and
// probabilities recomputed, dP_j = do_i . v_j, D = sum_j P_j dP_j,
// db[i, j] += P_j (dP_j - D) (no scale: the bias is added after it; without
// a key axis the keys' terms sum into one element, in order).
static void lower_attention_dbias(Lo *L, Att *a, const Node *n) {
  int64_t NH = a->NH, h = a->h, e = a->e, tm = L->g->t_max;
  bool hi = ir_attention_bias_axis(a->bs, a->ns, a->ns) >= 0, hj = ir_attention_bias_axis(a->bs, a->ns, a->ns + 1) >= 0;
  LExpr *rowlen = hj ? a->T : xi(L, 1);
  int orow = let(L, imul(L, xvar(L, 0), rowlen), "orow");
  int S = local(L, tm), X = local(L, tm);
  int j = for_begin(L, xi(L, 0), rowlen, true, "j");
  store(L, KS_OUT, iadd(L, xvar(L, orow), xvar(L, j)), xf(L, 0));
  for_end(L);
  int c = let(L, hi ? x2(L, LX_DIV, xvar(L, 0), a->T) : xvar(L, 0), "c");  // the block
  LExpr *nfree;
  att_seq_of(L, a, NULL, NULL, &nfree);
  int u = for_begin(L, xi(L, 0), nfree, false, "u");
  int m = let(L, att_seq_of(L, a, xvar(L, c), xvar(L, u), &nfree), "m");  // the u-th sequence reading block c
  int hd = let(L, x2(L, LX_REM, xvar(L, m), xi(L, NH)), "hd");
  int r0 = let(L, imul(L, x2(L, LX_DIV, xvar(L, m), xi(L, NH)), a->T), "r0"), kv0 = kv_rows(L, a, r0);
  int i = hi ? let(L, x2(L, LX_REM, xvar(L, 0), a->T), "i") : for_begin(L, xi(L, 0), a->T, false, "i");
  int row = let(L, iadd(L, xvar(L, r0), xvar(L, i)), "row");
  int jf = let(L, att_first_key(L, a, xvar(L, i)), "jf"), jn = let(L, iadd(L, xvar(L, i), xi(L, 1)), "jn");
  int qb = let(L, att_at(L, a, h, xvar(L, row), hd, xi(L, 0)), "qb"), yb = let(L, att_at(L, a, e, xvar(L, row), hd, xi(L, 0)), "yb");
  j = for_begin(L, xvar(L, jf), xvar(L, jn), true, "j");
  int kb = let(L, att_at(L, a, h, iadd(L, xvar(L, kv0), xvar(L, j)), hd, xi(L, 0)), "kb");
  int vb = let(L, att_at(L, a, e, iadd(L, xvar(L, kv0), xvar(L, j)), hd, xi(L, 0)), "vb");
  LExpr *sc = x2(L, LX_MUL, att_vdot(L, KS_IN0, qb, KS_IN1, kb, h), xf(L, n->fval));
  store(L, S, xvar(L, j), att_biased(L, a, sc, xvar(L, m), xvar(L, i), xvar(L, j)));
  store(L, X, xvar(L, j), att_vdot(L, KS_IN0 + 3, yb, KS_IN2, vb, e));
  for_end(L);
  LStmt *rd = reduce_begin(L, LX_MAX, xvar(L, jf), xvar(L, jn), &j);
  int mx = reduce_end(L, rd, load(L, S, xvar(L, j)), "mx");
  j = for_begin(L, xvar(L, jf), xvar(L, jn), true, "j");
  store(L, S, xvar(L, j), x1(L, LX_EXP, x2(L, LX_SUB, load(L, S, xvar(L, j)), xvar(L, mx))));
  for_end(L);
  rd = reduce_begin(L, LX_ADD, xvar(L, jf), xvar(L, jn), &j);
  int inv = let(L, x2(L, LX_DIV, xf(L, 1), xvar(L, reduce_end(L, rd, load(L, S, xvar(L, j)), "l"))), "inv");
  rd = reduce_begin(L, LX_ADD, xvar(L, jf), xvar(L, jn), &j);
  int D = let(L, x2(L, LX_MUL, xvar(L, reduce_end(L, rd, x2(L, LX_MUL, load(L, S, xvar(L, j)), load(L, X, xvar(L, j))), "ud")), xvar(L, inv)), "D");
  j = for_begin(L, xvar(L, jf), xvar(L, jn), hj, "j");  // without a key axis, one element: in order
  int at = let(L, iadd(L, xvar(L, orow), hj ? xvar(L, j) : xi(L, 0)), "at");
  int p = let(L, x2(L, LX_MUL, load(L, S, xvar(L, j)), xvar(L, inv)), "p");
  store(L, KS_OUT, xvar(L, at), x2(L, LX_ADD, load(L, KS_OUT, xvar(L, at)), x2(L, LX_MUL, xvar(L, p), x2(L, LX_SUB, load(L, X, xvar(L, j)), xvar(L, D)))));
  for_end(L);
  if (!hi) for_end(L);
  for_end(L);
}

// The CPU's blocked form of db for a bias with a query and a key axis
// (Kernel.att_block = BQ): one (block c of the bias, block of BQ query rows
// [i0, i1)) per outer index; over the sequences m reading block c, in
// order, as lower_attention_grad_blocked: S = scale Q K^T + b and
// dP = dO V^T as GEMMs against the keys [ks, i1), P_ij = e^(S_ij - m_i) / l_i
// (0 outside the row's keys), D_i = sum_j P_ij dP_ij,
// G_ij += P_ij (dP_ij - D_i); then rows [i0, i1) of db: G, 0 elsewhere.
static void lower_attention_dbias_blocked(Lo *L, Att *a, const Node *n, int64_t BQ) {
  int64_t NH = a->NH, tm = L->g->t_max, nqb = (tm + BQ - 1) / BQ;
  int qb = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, nqb)), "qb"), c = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, nqb)), "c");
  int T = let(L, a->T, "T");
  int i0 = let(L, imul(L, xvar(L, qb), xi(L, BQ)), "i0");
  int i1 = let(L, imax(L, imin(L, iadd(L, xvar(L, i0), xi(L, BQ)), xvar(L, T)), xvar(L, i0)), "i1");
  int nq = let(L, x2(L, LX_SUB, xvar(L, i1), xvar(L, i0)), "nq");  // 0 past T
  int ks = let(L, imin(L, att_block_first_key(L, a, xvar(L, i0)), xvar(L, i1)), "ks");  // keys [ks, i1): column jj is key ks + jj
  int nk = let(L, x2(L, LX_SUB, xvar(L, i1), xvar(L, ks)), "nk");
  int64_t ld = att_score_ld(tm);  // the score rows' stride
  int S = local(L, BQ * ld), X = local(L, BQ * ld), G = local(L, BQ * ld);
  int x = for_begin(L, xi(L, 0), imul(L, xvar(L, nq), xi(L, ld)), true, "x");
  store(L, G, xvar(L, x), xf(L, 0));
  for_end(L);
  LExpr *nfree;
  att_seq_of(L, a, NULL, NULL, &nfree);
  int u = for_begin(L, xi(L, 0), xsel(L, x2(L, LX_LT, xi(L, 0), xvar(L, nq)), nfree, xi(L, 0)), false, "u");
  int m = let(L, att_seq_of(L, a, xvar(L, c), xvar(L, u), &nfree), "m");  // the u-th sequence reading block c
  int hd = let(L, x2(L, LX_REM, xvar(L, m), xi(L, NH)), "hd");
  int r0 = let(L, imul(L, x2(L, LX_DIV, xvar(L, m), xi(L, NH)), xvar(L, T)), "r0"), kv0 = kv_rows(L, a, r0);
  AttRows rw = att_block_rows(L, a, n, S, X, iadd(L, xvar(L, r0), xvar(L, i0)), hd, kv0, ks, nq, nk, xvar(L, m), i0);
  int jj = for_begin(L, xi(L, 0), xvar(L, nk), true, "jj");
  LExpr *at = iadd(L, xvar(L, rw.sb), xvar(L, jj));
  LExpr *g = x2(L, LX_MUL, x2(L, LX_MUL, load(L, S, at), xvar(L, rw.inv)), x2(L, LX_SUB, load(L, X, at), xvar(L, rw.D)));
  store(L, G, at, x2(L, LX_ADD, load(L, G, at), g));
  for_end(L);
  for_end(L);
  for_end(L);
  int ii = for_begin(L, xi(L, 0), xvar(L, nq), false, "ii");
  int orow = let(L, imul(L, iadd(L, imul(L, xvar(L, c), xvar(L, T)), iadd(L, xvar(L, i0), xvar(L, ii))), xvar(L, T)), "orow");
  int j = for_begin(L, xi(L, 0), xvar(L, T), true, "j");
  int jc = let(L, x2(L, LX_SUB, xvar(L, j), xvar(L, ks)), "jc");
  LExpr *in = x2(L, LX_AND, x2(L, LX_GE, xvar(L, jc), xi(L, 0)), x2(L, LX_LT, xvar(L, jc), xvar(L, nk)));
  store(L, KS_OUT, iadd(L, xvar(L, orow), xvar(L, j)),
        xsel(L, in, load(L, G, iadd(L, imul(L, xvar(L, ii), xi(L, ld)), imax(L, imin(L, xvar(L, jc), x2(L, LX_SUB, xvar(L, nk), xi(L, 1))), xi(L, 0)))), xf(L, 0)));
  for_end(L);
  for_end(L);
}

// The CPU's form of db for a bias per head [.., NH, i, j] of time-major
// attention (rows [.., T, NH, h]): one query row i of every head's block per
// outer index o = c' T + i (c' the block's other coordinates), the heads
// side by side as the row form of the forward reads them (att_scores), so
// that a key row of all heads is one contiguous read; over the sequences
// reading the blocks, in order, as lower_attention_dbias.
static bool att_dbias_heads(const Lo *L, const Att *a) {
  bool hi = ir_attention_bias_axis(a->bs, a->ns, a->ns) >= 0, hj = ir_attention_bias_axis(a->bs, a->ns, a->ns + 1) >= 0;
  return L->tgt == LTARGET_CPU && hi && hj && att_bias_per_head(a) && (3 * L->g->t_max + 2) * a->NH * 4 <= 512 * 1024;
}

static void lower_attention_dbias_heads(Lo *L, Att *a, const Node *n) {
  int64_t NH = a->NH, e = a->e, tm = L->g->t_max;
  a->S = local(L, tm * NH), a->M = local(L, NH), a->Ls = local(L, NH);
  int X = local(L, tm * NH), G = local(L, tm * NH), Dh = local(L, NH);
  int i = let(L, x2(L, LX_REM, xvar(L, 0), a->T), "i"), cb = let(L, imul(L, x2(L, LX_DIV, xvar(L, 0), a->T), xi(L, NH)), "cb");
  // G [j, hd]: the row's sum over the sequences, heads side by side
  int x = for_begin(L, xi(L, 0), xi(L, tm * NH), true, "x");
  store(L, G, xvar(L, x), xf(L, 0));
  for_end(L);
  LExpr *nfree;
  att_seq_of(L, a, NULL, NULL, &nfree);
  // the blocks' row i, the same for every sequence reading them: once
  int m00 = let(L, att_seq_of(L, a, xvar(L, cb), xi(L, 0), &nfree), "m00");
  att_bias_row(L, a, let(L, iadd(L, imul(L, x2(L, LX_DIV, xvar(L, m00), xi(L, NH)), a->T), xvar(L, i)), "o00"), i);
  a->Bl_kept = true;
  int u = for_begin(L, xi(L, 0), nfree, false, "u");
  int m0 = let(L, att_seq_of(L, a, xvar(L, cb), xvar(L, u), &nfree), "m0");  // head 0's sequence; head hd's is m0 + hd
  int r0 = let(L, imul(L, x2(L, LX_DIV, xvar(L, m0), xi(L, NH)), a->T), "r0"), kv0 = kv_rows(L, a, r0);
  int o = let(L, iadd(L, xvar(L, r0), xvar(L, i)), "o");
  att_scores(L, a, n, o, i, kv0, true);  // S [j, hd] = e^(s - M), Ls = sum_j
  int j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  int vr = let(L, imul(L, iadd(L, xvar(L, kv0), xvar(L, j)), xi(L, NH * e)), "vrow");
  int hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  int yb = let(L, imul(L, iadd(L, imul(L, xvar(L, o), xi(L, NH)), xvar(L, hd)), xi(L, e)), "yb");
  int vb = let(L, iadd(L, xvar(L, vr), imul(L, xvar(L, hd), xi(L, e))), "vb");
  store(L, X, LOC_AT(j, hd), att_vdot(L, KS_IN0 + 3, yb, KS_IN2, vb, e));  // dP_j = do_i . v_j
  for_end(L);
  for_end(L);
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  store(L, a->Ls, xvar(L, hd), x2(L, LX_DIV, xf(L, 1), load(L, a->Ls, xvar(L, hd))));
  store(L, Dh, xvar(L, hd), xf(L, 0));
  for_end(L);
  j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");  // D = sum_j P_j dP_j, in order per head
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  store(L, Dh, xvar(L, hd), x2(L, LX_ADD, load(L, Dh, xvar(L, hd)), x2(L, LX_MUL, LOC(a->S, j, hd), LOC(X, j, hd))));
  for_end(L);
  for_end(L);
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  store(L, Dh, xvar(L, hd), x2(L, LX_MUL, load(L, Dh, xvar(L, hd)), load(L, a->Ls, xvar(L, hd))));
  for_end(L);
  j = for_begin(L, xi(L, 0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");  // G[j] += P_j (dP_j - D)
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  LExpr *g = x2(L, LX_MUL, x2(L, LX_MUL, LOC(a->S, j, hd), load(L, a->Ls, xvar(L, hd))), x2(L, LX_SUB, LOC(X, j, hd), load(L, Dh, xvar(L, hd))));
  store(L, G, LOC_AT(j, hd), x2(L, LX_ADD, LOC(G, j, hd), g));
  for_end(L);
  for_end(L);
  for_end(L);
  // row i of block cb + hd at ((cb + hd) T + i) T: G's, 0 after the diagonal
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  int orow = let(L, imul(L, iadd(L, imul(L, iadd(L, xvar(L, cb), xvar(L, hd)), a->T), xvar(L, i)), a->T), "orow");
  j = for_begin(L, xi(L, 0), a->T, true, "j");
  store(L, KS_OUT, iadd(L, xvar(L, orow), xvar(L, j)), xsel(L, x2(L, LX_LT, xvar(L, i), xvar(L, j)), xf(L, 0), LOC(G, j, hd)));
  for_end(L);
  for_end(L);
}

// The attention node n's description; *tax: q's time axis.
Att att_of(Lo *L, const Node *n, int *tax) {
  const Shape *qs = &L->g->nodes[n->in[0]].shape, *vs = &L->g->nodes[n->in[2]].shape;
  int r = qs->rank, bi = ir_attention_bias(n);
  *tax = r - 2 - (n->axis != 0);
  bool lse = n->op == OP_ATTENTION_LSE;
  Att a = {.NH = n->axis ? qs->d[r - 2].n : 1, .h = qs->d[r - 1].n, .e = vs->d[r - 1].n, .w = lse ? 0 : n->shape.d[r - 1].n,
           .G = ir_attention_group(L->g, n), .T = xdim(L, qs->d[*tax]), .bslot = bi >= 0 ? lower_in_slot(L, n, bi) : -1,
           .bs = bi >= 0 ? &L->g->nodes[n->in[bi]].shape : NULL, .W = n->start, .Wmask = n->start > 0 && bi < 0, .Bl = -1,
           .lse = lse ? KS_OUT : n->op == OP_ATTENTION && L->k->terms >= 0 ? kernel_terms_slot(L->k) : -1, .no_o = lse, .hv = -1,
           .Bg = -1, .Gg = -1,
           .dbias = n->op == OP_ATTENTION_GRAD && L->k->terms >= 0 ? kernel_terms_slot(L->k) : -1};
  Dim tdim;
  a.ns = ir_attention_seq(L->g, n, a.seq, &tdim);
  return a;
}

void lower_attention(Lo *L, const Node *n) {
  const Shape *qs = &L->g->nodes[n->in[0]].shape;
  int tax;
  bool grad = n->op == OP_ATTENTION_GRAD;
  Att a = att_of(L, n, &tax);
  L->lk->name = ir_op_info[n->op].name;
  L->lk->shape = LK_ROWS;
  if (n->op == OP_ATTENTION_DBIAS) {  // rows of db (single elements without a key axis)
    int end = a.bs->rank - (ir_attention_bias_axis(a.bs, a.ns, a.ns + 1) >= 0);
    L->lk->outer = dprod(L, a.bs, 0, end), L->lk->nouter = symsize_prod(a.bs, 0, end);
    int64_t BQ = lower_att_block(L->g, n, L->k, L->tgt);
    if (BQ > 0) {  // (block, query block) per outer index
      int64_t nqb = (L->g->t_max + BQ - 1) / BQ;
      L->own_outer = true;
      L->lk->outer = imul(L, dprod(L, a.bs, 0, end - 1), xi(L, nqb));
      L->lk->nouter = symsize_mul(symsize_prod(a.bs, 0, end - 1), (SymSize){nqb, 0, 0, 1});
      lower_attention_dbias_blocked(L, &a, n, BQ);
      return;
    }
    if (att_dbias_heads(L, &a)) {  // rows i of all heads' blocks
      L->own_outer = true;
      L->lk->outer = x2(L, LX_DIV, L->lk->outer, xi(L, a.NH));
      L->lk->nouter = symsize_mul(symsize_prod(a.bs, 0, end - 2), symsize_of(a.bs->d[end - 1]));
      lower_attention_dbias_heads(L, &a, n);
      return;
    }
    lower_attention_dbias(L, &a, n);
    return;
  }
  int64_t width[3] = {a.h, a.h, a.e};
  if (!lower_out_parts(L, n, width, a.w, a.part)) return;
  if (lower_att_gpu_form(L->g, n, L->tgt)) {  // (sequence, head) per block
    L->own_outer = true, L->lk->team = ATT_TEAM;
    L->lk->outer = imul(L, dprod(L, qs, 0, tax), xi(L, a.NH));
    L->lk->nouter = symsize_mul(symsize_prod(qs, 0, tax), (SymSize){a.NH, 0, 0, 1});
    if (grad) lower_attention_grad_gpu(L, &a, n);
    else lower_attention_fwd_gpu(L, &a, n);
    return;
  }
  int64_t BQ = lower_att_block(L->g, n, L->k, L->tgt);
  if (BQ > 0) {  // (sequence, head[, query block]) per outer index; on a GPU a block's
    int64_t nqb = grad ? 1 : (L->g->t_max + BQ - 1) / BQ;  // threads, its GEMMs the team's
    L->own_outer = true;
    if (L->tgt == LTARGET_GPU) L->lk->team = ATT_BLOCK_TEAM;
    L->lk->outer = imul(L, dprod(L, qs, 0, tax), xi(L, a.NH * nqb));
    L->lk->nouter = symsize_mul(symsize_prod(qs, 0, tax), (SymSize){a.NH * nqb, 0, 0, 1});
    if (grad) lower_attention_grad_blocked(L, &a, n, BQ);
    else lower_attention_fwd_blocked(L, &a, n, BQ);
    return;
  }
  if (!grad && lower_att_short_fwd(L->g, n, L->k, L->tgt)) {  // (sequence, part of its query rows) per outer index
    L->own_outer = true;
    L->lk->outer = imul(L, dprod(L, qs, 0, tax), xi(L, ATT_SHORT_PARTS));
    L->lk->nouter = symsize_mul(symsize_prod(qs, 0, tax), (SymSize){ATT_SHORT_PARTS, 0, 0, 1});
    lower_attention_fwd_short(L, &a, n);
    return;
  }
  if (!grad) a.S = local(L, L->g->t_max * a.NH), a.M = local(L, a.NH), a.Ls = local(L, a.NH);  // the row forward's
  int64_t HG = a.dbias >= 0 && L->tgt == LTARGET_CPU ? schedule_att_dbias_heads(L->g, n) : 0;
  if (HG > 0) {  // a group of HG heads per outer index
    L->own_outer = true;
    L->lk->outer = xi(L, a.NH / HG), L->lk->nouter = (SymSize){a.NH / HG, 0, 0, 1};
    lower_attention_grad_heads(L, &a, n, HG);
    return;
  }
  if (a.dbias >= 0) {
    unlowered(L, n);  // only the CPU row form writes the bias's gradient too
    return;
  }
  int nouter = grad ? tax : tax + 1;  // sequences, or query rows
  L->lk->outer = dprod(L, qs, 0, nouter), L->lk->nouter = symsize_prod(qs, 0, nouter);
  if (grad && att_grad_keys_form(&a, L->tgt, L->g->t_max)) lower_attention_grad_keys(L, &a, n);
  else if (grad) lower_attention_grad(L, &a, n);
  else lower_attention_fwd(L, &a, n);
}
