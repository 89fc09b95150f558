// lower_attention_keys.c: the CPU's gradient of fused causal attention with
// short heads and no score bias, keys outer (part of lower_attention.c's
// lowering; lower_att.h).
#include "lower_att.h"

// The form's locals of one sequence, features major so that a vector holds
// one feature of every head: Qt, dQt [t_max, h, NH], Yt [t_max, e, NH],
// Lt, Dt [t_max, NH]; a key's Kj, dKj [h, NH], Vj, dVj [e, NH].
static int64_t keys_floats(const Att *a, int64_t t_max) {
  return t_max * a->NH * (2 * a->h + a->e + 2) + 2 * a->NH * (a->h + a->e);
}

bool att_grad_keys_form(const Att *a, LTarget tgt, int64_t t_max) {
  return tgt == LTARGET_CPU && a->bslot < 0 && a->hv < 0 && a->Gg < 0 && a->dbias < 0 && a->h <= 8 && a->e <= 8 &&
         a->NH >= 8 && keys_floats(a, t_max) <= ATT_KEYS_FLOATS;
}

// Element (t, c, hd) of a features-major local [.., nf, NH].
static LExpr *fm(Lo *L, const Att *a, LExpr *t, int64_t nf, int64_t c, int hd) {
  return iadd(L, imul(L, t, xi(L, nf * a->NH)), iadd(L, xi(L, c * a->NH), xvar(L, hd)));
}
static LExpr *ld(Lo *L, int slot, LExpr *at) { return load(L, slot, at); }
static void add_to(Lo *L, int slot, LExpr *at, LExpr *v) { store(L, slot, at, x2(L, LX_ADD, load(L, slot, at), v)); }

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
  for (int64_t c = 0; c < h; c++) {
    store(L, Qt, fm(L, a, xvar(L, i), h, c, hd), ld(L, KS_IN0, att_at(L, a, h, xvar(L, o), hd, xi(L, c))));
    store(L, dQt, fm(L, a, xvar(L, i), h, c, hd), xf(L, 0));
  }
  LExpr *dsum = NULL;
  for (int64_t c = 0; c < e; c++) {
    int y = let(L, ld(L, KS_IN0 + 3, att_at(L, a, e, xvar(L, o), hd, xi(L, c))), "y");
    store(L, Yt, fm(L, a, xvar(L, i), e, c, hd), xvar(L, y));
    LExpr *t = x2(L, LX_MUL, xvar(L, y), ld(L, KS_IN0 + 5, att_at(L, a, e, xvar(L, o), hd, xi(L, c))));
    dsum = dsum ? x2(L, LX_ADD, dsum, t) : t;
  }
  store(L, Lt, fm(L, a, xvar(L, i), 1, 0, hd), ld(L, KS_IN0 + 4, att_at(L, a, 1, xvar(L, o), hd, xi(L, 0))));
  store(L, Dt, fm(L, a, xvar(L, i), 1, 0, hd), dsum ? dsum : xf(L, 0));
  for_end(L);
  for_end(L);

  int j = for_begin(L, xi(L, 0), a->T, false, "j");
  int jr = let(L, iadd(L, xvar(L, r0), xvar(L, j)), "jr");  // dk, dv: the query sequence's rows
  int jk = a->G == 1 ? jr : let(L, iadd(L, xvar(L, kv0), xvar(L, j)), "jk");  // k, v: its key sequence's
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  for (int64_t c = 0; c < h; c++) {
    store(L, Kj, fm(L, a, xi(L, 0), h, c, hd), ld(L, KS_IN1, att_at(L, a, h, xvar(L, jk), hd, xi(L, c))));
    store(L, dKj, fm(L, a, xi(L, 0), h, c, hd), xf(L, 0));
  }
  for (int64_t c = 0; c < e; c++) {
    store(L, Vj, fm(L, a, xi(L, 0), e, c, hd), ld(L, KS_IN2, att_at(L, a, e, xvar(L, jk), hd, xi(L, c))));
    store(L, dVj, fm(L, a, xi(L, 0), e, c, hd), xf(L, 0));
  }
  for_end(L);
  LExpr *iend = a->W > 0 && a->Wmask ? imin(L, iadd(L, xvar(L, j), xi(L, a->W)), a->T) : a->T;
  i = for_begin(L, xvar(L, j), iend, false, "i");
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  LExpr *s = NULL, *dp = NULL;
  for (int64_t c = 0; c < h; c++) {
    LExpr *t = x2(L, LX_MUL, ld(L, Qt, fm(L, a, xvar(L, i), h, c, hd)), ld(L, Kj, fm(L, a, xi(L, 0), h, c, hd)));
    s = s ? x2(L, LX_ADD, s, t) : t;
  }
  for (int64_t c = 0; c < e; c++) {
    LExpr *t = x2(L, LX_MUL, ld(L, Yt, fm(L, a, xvar(L, i), e, c, hd)), ld(L, Vj, fm(L, a, xi(L, 0), e, c, hd)));
    dp = dp ? x2(L, LX_ADD, dp, t) : t;
  }
  LExpr *sc = x2(L, LX_MUL, s ? s : xf(L, 0), xf(L, scale));
  int p = let(L, x1(L, LX_EXP, x2(L, LX_SUB, sc, ld(L, Lt, fm(L, a, xvar(L, i), 1, 0, hd)))), "p");
  LExpr *pd = x2(L, LX_MUL, xvar(L, p), x2(L, LX_SUB, dp ? dp : xf(L, 0), ld(L, Dt, fm(L, a, xvar(L, i), 1, 0, hd))));
  int ds = let(L, x2(L, LX_MUL, xf(L, scale), pd), "ds");
  for (int64_t c = 0; c < h; c++) {
    add_to(L, dQt, fm(L, a, xvar(L, i), h, c, hd), x2(L, LX_MUL, xvar(L, ds), ld(L, Kj, fm(L, a, xi(L, 0), h, c, hd))));
    add_to(L, dKj, fm(L, a, xi(L, 0), h, c, hd), x2(L, LX_MUL, xvar(L, ds), ld(L, Qt, fm(L, a, xvar(L, i), h, c, hd))));
  }
  for (int64_t c = 0; c < e; c++)
    add_to(L, dVj, fm(L, a, xi(L, 0), e, c, hd), x2(L, LX_MUL, xvar(L, p), ld(L, Yt, fm(L, a, xvar(L, i), e, c, hd))));
  for_end(L);
  for_end(L);
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");  // dk_j, dv_j
  for (int64_t c = 0; c < h; c++)
    store(L, a->part[1].slot, att_part_at(L, a, 1, xvar(L, jr), hd, xi(L, c)), ld(L, dKj, fm(L, a, xi(L, 0), h, c, hd)));
  for (int64_t c = 0; c < e; c++)
    store(L, a->part[2].slot, att_part_at(L, a, 2, xvar(L, jr), hd, xi(L, c)), ld(L, dVj, fm(L, a, xi(L, 0), e, c, hd)));
  for_end(L);
  for_end(L);

  i = for_begin(L, xi(L, 0), a->T, true, "i");  // dq
  hd = for_begin(L, xi(L, 0), xi(L, NH), true, "hd");
  for (int64_t c = 0; c < h; c++)
    store(L, a->part[0].slot, att_part_at(L, a, 0, iadd(L, xvar(L, r0), xvar(L, i)), hd, xi(L, c)), ld(L, dQt, fm(L, a, xvar(L, i), h, c, hd)));
  for_end(L);
  for_end(L);
}
