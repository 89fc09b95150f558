// lower_attention_short.c: the CPU's forms of fused causal attention for
// many short heads and no score bias, the sequence's rows copied into stack
// arrays features major, so that a vector holds one feature of every head
// and no access inside the loops over (query, key) is interleaved: the
// forward a part of a sequence's query rows per outer index, the gradient
// keys outer (part of lower_attention.c's lowering; lower_att.h).
#include "lower_att.h"

#include <math.h>

// Heads the forms take: at least 8 of at most 8 features, no score bias.
static bool short_heads(int64_t NH, int64_t h, int64_t e, bool bias) { return NH >= 8 && h <= 8 && e <= 8 && !bias; }

// The forward's locals: Kt [t_max, h, NH], Vt [t_max, e, NH], S [t_max, NH],
// Qi [h, NH], X [e, NH], M, Ls [NH].
static int64_t fwd_floats(int64_t NH, int64_t h, int64_t e, int64_t t_max) {
  return t_max * NH * (h + e + 1) + NH * (h + e + 2);
}

bool lower_att_short_fwd(const Graph *g, const Node *n, const Kernel *k, LTarget tgt) {
  if (tgt != LTARGET_CPU || (n->op != OP_ATTENTION && n->op != OP_ATTENTION_LSE) || lower_att_block(g, n, k, tgt) > 0)
    return false;
  const Shape *qs = &g->nodes[n->in[0]].shape, *vs = &g->nodes[n->in[2]].shape;
  int r = qs->rank;
  int64_t NH = n->axis ? qs->d[r - 2].n : 1, h = qs->d[r - 1].n, e = vs->d[r - 1].n;
  return short_heads(NH, h, e, ir_attention_bias(n) >= 0) && fwd_floats(NH, h, e, g->t_max) <= ATT_KEYS_FLOATS;
}

// The form's locals of one sequence, features major so that a vector holds
// one feature of every head: Qt, dQt [t_max, h, NH], Yt [t_max, e, NH],
// Lt, Dt [t_max, NH]; a key's Kj, dKj [h, NH], Vj, dVj [e, NH].
static int64_t keys_floats(const Att *a, int64_t t_max) {
  return t_max * a->NH * (2 * a->h + a->e + 2) + 2 * a->NH * (a->h + a->e);
}

bool att_grad_keys_form(const Att *a, LTarget tgt, int64_t t_max) {
  return tgt == LTARGET_CPU && short_heads(a->NH, a->h, a->e, a->bslot >= 0) && a->hv < 0 && a->Gg < 0 && a->dbias < 0 &&
         keys_floats(a, t_max) <= ATT_KEYS_FLOATS;
}

// Element (t, c, hd) of a features-major local [.., nf, NH].
static LExpr *fm(Lo *L, const Att *a, LExpr *t, int64_t nf, int64_t c, int hd) {
  return iadd(L, imul(L, t, xi(L, nf * a->NH)), iadd(L, xi(L, c * a->NH), xvar(L, hd)));
}
static void add_to(Lo *L, int slot, LExpr *at, LExpr *v) { store(L, slot, at, x2(L, LX_ADD, load(L, slot, at), v)); }
// Row t of local dst [.., nf, NH], head hd <- row `row` of slot (rows of NH
// heads of nf features).
static void fm_copy(Lo *L, const Att *a, int dst, LExpr *t, int64_t nf, int slot, int row, int hd) {
  for (int64_t c = 0; c < nf; c++) store(L, dst, fm(L, a, t, nf, c, hd), load(L, slot, att_at(L, a, nf, xvar(L, row), hd, xi(L, c))));
}
// sum_c x[tx, c, hd] y[ty, c, hd] over c < nf (features-major locals).
static LExpr *fm_dot(Lo *L, const Att *a, int x, LExpr *tx, int y, LExpr *ty, int64_t nf, int hd) {
  LExpr *s = NULL;
  for (int64_t c = 0; c < nf; c++) {
    LExpr *t = x2(L, LX_MUL, load(L, x, fm(L, a, tx, nf, c, hd)), load(L, y, fm(L, a, ty, nf, c, hd)));
    s = s ? x2(L, LX_ADD, s, t) : t;
  }
  return s ? s : xf(L, 0);
}

// One sequence per outer index (rows r0 .. r0 + T). Its query rows into the
// locals: Qt, Yt (do), Lt (the forward's L_i = m_i + log l_i, KS_IN0 + 4),
// Dt (D_i = do_i . o_i, o the forward's output, KS_IN0 + 5), dQt = 0; then
// for each key j in order, for each query i >= j in order (i < j + W under
// the op's own window W), the heads side by side:
//   P_ij = exp(scale q_i . k_j - L_i), dP_ij = do_i . v_j,
//   dS_ij = scale P_ij (dP_ij - D_i);
//   dq_i += dS_ij k_j, dk_j += dS_ij q_i, dv_j += P_ij do_i,
// every output element summed in the order of the row form (dq_i over j,
// dk_j and dv_j over i, ascending); dk_j, dv_j stored after its queries,
// dq after every key. No interleaved access inside the loop over (j, i).
void lower_attention_grad_keys(Lo *L, Att *a, const Node *n) {
  int64_t NH = a->NH, h = a->h, e = a->e, tm = L->g->t_max;
  double scale = n->fval;
  int r0 = let(L, imul(L, xvar(L, 0), a->T), "r0");
  int kv0 = kv_rows(L, a, r0);
  int Qt = local(L, tm * h * NH), dQt = local(L, tm * h * NH), Yt = local(L, tm * e * NH);
  int Lt = local(L, tm * NH), Dt = local(L, tm * NH);
  int Kj = local(L, h * NH), Vj = local(L, e * NH), dKj = local(L, h * NH), dVj = local(L, e * NH);
  int i = for_begin(L, xi(L, 0), a->T, true, "i");
  int o = let(L, iadd(L, xvar(L, r0), xvar(L, i)), "o");
  int hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  fm_copy(L, a, Qt, xvar(L, i), h, KS_IN0, o, hd);
  for (int64_t c = 0; c < h; c++) store(L, dQt, fm(L, a, xvar(L, i), h, c, hd), xf(L, 0));
  LExpr *dsum = NULL;
  for (int64_t c = 0; c < e; c++) {
    int y = let(L, load(L, KS_IN0 + 3, att_at(L, a, e, xvar(L, o), hd, xi(L, c))), "y");
    store(L, Yt, fm(L, a, xvar(L, i), e, c, hd), xvar(L, y));
    LExpr *t = x2(L, LX_MUL, xvar(L, y), load(L, KS_IN0 + 5, att_at(L, a, e, xvar(L, o), hd, xi(L, c))));
    dsum = dsum ? x2(L, LX_ADD, dsum, t) : t;
  }
  store(L, Lt, fm(L, a, xvar(L, i), 1, 0, hd), load(L, KS_IN0 + 4, att_at(L, a, 1, xvar(L, o), hd, xi(L, 0))));
  store(L, Dt, fm(L, a, xvar(L, i), 1, 0, hd), dsum ? dsum : xf(L, 0));
  for_end(L);
  for_end(L);

  int j = for_begin(L, xi(L, 0), a->T, false, "j");
  int jr = let(L, iadd(L, xvar(L, r0), xvar(L, j)), "jr");  // dk, dv: the query sequence's rows
  int jk = a->G == 1 ? jr : let(L, iadd(L, xvar(L, kv0), xvar(L, j)), "jk");  // k, v: its key sequence's
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  fm_copy(L, a, Kj, xi(L, 0), h, KS_IN1, jk, hd);
  fm_copy(L, a, Vj, xi(L, 0), e, KS_IN2, jk, hd);
  for (int64_t c = 0; c < h; c++) store(L, dKj, fm(L, a, xi(L, 0), h, c, hd), xf(L, 0));
  for (int64_t c = 0; c < e; c++) store(L, dVj, fm(L, a, xi(L, 0), e, c, hd), xf(L, 0));
  for_end(L);
  LExpr *iend = a->W > 0 && a->Wmask ? imin(L, iadd(L, xvar(L, j), xi(L, a->W)), a->T) : a->T;
  i = for_begin(L, xvar(L, j), iend, false, "i");
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  LExpr *sc = x2(L, LX_MUL, fm_dot(L, a, Qt, xvar(L, i), Kj, xi(L, 0), h, hd), xf(L, scale));
  LExpr *dp = fm_dot(L, a, Yt, xvar(L, i), Vj, xi(L, 0), e, hd);
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, sc, load(L, Lt, fm(L, a, xvar(L, i), 1, 0, hd)))), "p");
  LExpr *pd = x2(L, LX_MUL, xvar(L, p), x2(L, LX_SUB, dp, load(L, Dt, fm(L, a, xvar(L, i), 1, 0, hd))));
  int ds = let(L, x2(L, LX_MUL, xf(L, scale), pd), "ds");
  for (int64_t c = 0; c < h; c++) {
    add_to(L, dQt, fm(L, a, xvar(L, i), h, c, hd), x2(L, LX_MUL, xvar(L, ds), load(L, Kj, fm(L, a, xi(L, 0), h, c, hd))));
    add_to(L, dKj, fm(L, a, xi(L, 0), h, c, hd), x2(L, LX_MUL, xvar(L, ds), load(L, Qt, fm(L, a, xvar(L, i), h, c, hd))));
  }
  for (int64_t c = 0; c < e; c++)
    add_to(L, dVj, fm(L, a, xi(L, 0), e, c, hd), x2(L, LX_MUL, xvar(L, p), load(L, Yt, fm(L, a, xvar(L, i), e, c, hd))));
  for_end(L);
  for_end(L);
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");  // dk_j, dv_j
  for (int64_t c = 0; c < h; c++)
    store(L, a->part[1].slot, att_part_at(L, a, 1, xvar(L, jr), hd, xi(L, c)), load(L, dKj, fm(L, a, xi(L, 0), h, c, hd)));
  for (int64_t c = 0; c < e; c++)
    store(L, a->part[2].slot, att_part_at(L, a, 2, xvar(L, jr), hd, xi(L, c)), load(L, dVj, fm(L, a, xi(L, 0), e, c, hd)));
  for_end(L);
  for_end(L);

  i = for_begin(L, xi(L, 0), a->T, true, "i");  // dq
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  for (int64_t c = 0; c < h; c++)
    store(L, a->part[0].slot, att_part_at(L, a, 0, iadd(L, xvar(L, r0), xvar(L, i)), hd, xi(L, c)), load(L, dQt, fm(L, a, xvar(L, i), h, c, hd)));
  for_end(L);
  for_end(L);
}

// Forward: outer index o = m QP + p, sequence m (rows r0 .. r0 + T), part p
// < QP (ATT_SHORT_PARTS): the query rows i = p, p + QP, .. in [w0, w1) (the
// step program's window, LX_WIN; [0, T) elsewhere). Keys [0, w1) into Kt,
// Vt; then per query row i, its keys j from max(0, i - W + 1) (the op's own
// window; 0 without) to i: s_j = scale q_i . k_j into S and their maximum M
// per head, then p_j = exp(s_j - M), l = sum p_j, X = sum p_j v_j;
// o_i = X / l, L_i = M + log l (Att.lse).
void lower_attention_fwd_short(Lo *L, Att *a, const Node *n) {
  int64_t NH = a->NH, h = a->h, e = a->e, tm = L->g->t_max, QP = ATT_SHORT_PARTS;
  double scale = n->fval;
  int m = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, QP)), "m"), part = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, QP)), "part");
  int r0 = let(L, imul(L, xvar(L, m), a->T), "r0");
  int kv0 = kv_rows(L, a, r0);
  int w0 = let(L, lower_xwin(L, 0), "w0"), w1 = let(L, imin(L, lower_xwin(L, 1), a->T), "w1");
  int Kt = local(L, tm * h * NH), Vt = local(L, tm * e * NH), S = local(L, tm * NH);
  int Qi = local(L, h * NH), X = local(L, e * NH), M = local(L, NH), Ls = local(L, NH);
  int j = for_begin(L, xi(L, 0), xvar(L, w1), true, "j");
  int jk = let(L, iadd(L, xvar(L, kv0), xvar(L, j)), "jk");
  int hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  fm_copy(L, a, Kt, xvar(L, j), h, KS_IN1, jk, hd);
  fm_copy(L, a, Vt, xvar(L, j), e, KS_IN2, jk, hd);
  for_end(L);
  for_end(L);
  // the part's first row at or after w0: w0 + ((part - w0) mod QP)
  int i0 = let(L, iadd(L, xvar(L, w0), x2(L, LX_REM, iadd(L, x2(L, LX_SUB, xvar(L, part), xvar(L, w0)), xi(L, QP * tm)), xi(L, QP))), "i0");
  LExpr *nrows = x2(L, LX_DIV, iadd(L, x2(L, LX_SUB, xvar(L, w1), xvar(L, i0)), xi(L, QP - 1)), xi(L, QP));
  int t = for_begin(L, xi(L, 0), xsel(L, x2(L, LX_LT, xvar(L, i0), xvar(L, w1)), nrows, xi(L, 0)), false, "t");
  int i = let(L, iadd(L, xvar(L, i0), imul(L, xvar(L, t), xi(L, QP))), "i");
  int o = let(L, iadd(L, xvar(L, r0), xvar(L, i)), "o");
  int j0 = let(L, att_first_key(L, a, xvar(L, i)), "j0");
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  fm_copy(L, a, Qi, xi(L, 0), h, KS_IN0, o, hd);
  for (int64_t c = 0; c < e; c++) store(L, X, fm(L, a, xi(L, 0), e, c, hd), xf(L, 0));
  store(L, M, xvar(L, hd), xf(L, -INFINITY));
  store(L, Ls, xvar(L, hd), xf(L, 0));
  for_end(L);
  j = for_begin(L, xvar(L, j0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  int sv = let(L, x2(L, LX_MUL, fm_dot(L, a, Qi, xi(L, 0), Kt, xvar(L, j), h, hd), xf(L, scale)), "s");
  store(L, S, fm(L, a, xvar(L, j), 1, 0, hd), xvar(L, sv));
  store(L, M, xvar(L, hd), x2(L, LX_MAX, xvar(L, sv), load(L, M, xvar(L, hd))));
  for_end(L);
  for_end(L);
  j = for_begin(L, xvar(L, j0), iadd(L, xvar(L, i), xi(L, 1)), false, "j");
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, load(L, S, fm(L, a, xvar(L, j), 1, 0, hd)), load(L, M, xvar(L, hd)))), "p");
  add_to(L, Ls, xvar(L, hd), xvar(L, p));
  for (int64_t c = 0; c < e; c++) add_to(L, X, fm(L, a, xi(L, 0), e, c, hd), x2(L, LX_MUL, xvar(L, p), load(L, Vt, fm(L, a, xvar(L, j), e, c, hd))));
  for_end(L);
  for_end(L);
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  if (a->lse >= 0)
    store(L, a->lse, att_at(L, a, 1, xvar(L, o), hd, xi(L, 0)), x2(L, LX_ADD, load(L, M, xvar(L, hd)), x1(L, LX_LOG, load(L, Ls, xvar(L, hd)))));
  int inv = let(L, x2(L, LX_DIV, xf(L, 1), load(L, Ls, xvar(L, hd))), "inv");
  for (int64_t c = 0; !a->no_o && c < e; c++)
    store(L, KS_OUT, att_at(L, a, e, xvar(L, o), hd, xi(L, c)), x2(L, LX_MUL, load(L, X, fm(L, a, xi(L, 0), e, c, hd)), xvar(L, inv)));
  for_end(L);
  for_end(L);
}
