// lower_attention_steps.c: the GPU's blocked attention gradient as steps
// (loops.h LSteps). Part of the lowering of lower.c (lower_impl.h,
// lower_att.h).
#include "lower_att.h"

// ---- the GPU's blocked gradient in steps (loops.h LSteps) --------------------------
//
// Where the blocked form takes the gradient on a GPU (not the small-head
// form), two launches, each a block of ATT_TEAM threads per (sequence, head,
// block of ATT_BS rows), so the grid covers every block of queries or keys
// (FlashAttention-2's split; the one-launch form ran a block per (sequence,
// head), its query blocks in turn). With s_ij = scale q_i . k_j + b_ij over
// the keys row i sees, L_i the forward's (ATTENTION_LSE, input 4), P_ij =
// e^(s_ij - L_i), dP_ij = do_i . v_j and D_i = do_i . o_i (o input 5; =
// sum_j P_ij dP_ij), dS_ij = scale P_ij (dP_ij - D_i):
//   attention_dkdv   per key block [k0, k1), per query block from k0 to the
//                    last query that sees a key of it: S = scale Q K^T + b,
//                    dP = dO V^T, P and dS; dV += P^T dO, dK += dS^T Q (the
//                    rows zeroed first)
//   attention_dq     per query block, per key block: S, dP, P, dS; dQ += dS K
// Every product is a team GEMM (LS_GEMM) on [ATT_BS, ATT_BS] blocks of
// scores in shared memory, rows gpu_tile_ld(ATT_BS) apart (no bank
// conflicts for a thread per row, at most 2 words per bank for the
// tensor-core fragments); each launch writes its rows whole.
enum { ATT_BS = 64 };

bool lower_att_steps(const Graph *g, const Node *n, LTarget tgt) {
  return tgt == LTARGET_GPU && n->op == OP_ATTENTION_GRAD && !lower_att_gpu_form(g, n, tgt);
}

typedef struct {
  Att a;
  const Node *n;
  int blk, sh, hd, r0, kv0;  // variables: the outer index's block, (sequence, head), head, row 0, its k and v's row 0
  int b0, nb0;               // variables: the block's first row and its rows (0 past T)
  int S, X, Ll, Dl;          // locals: S and X [ATT_BS, ATT_BS] (rows sld apart), L_i and D_i [ATT_BS]
  int64_t sld;               // gpu_tile_ld(ATT_BS)
  int64_t nb;                // blocks per (sequence, head)
} AttStep;

static LKernel *att_step_begin(Lo *L, Arena *a, const Schedule *s, const Kernel *k, const char *name, AttStep *st) {
  LKernel *lk = step_begin(L, a, s, k, LTARGET_GPU, name);
  const Node *n = &s->g->nodes[k->node];
  const Shape *qs = &s->g->nodes[n->in[0]].shape;
  int tax;
  st->a = att_of(L, n, &tax);
  st->n = n;
  int64_t width[3] = {st->a.h, st->a.h, st->a.e};
  lower_out_parts(L, n, width, st->a.w, st->a.part);
  st->nb = (s->g->t_max + ATT_BS - 1) / ATT_BS;
  lk->shape = LK_ROWS, lk->team = ATT_TEAM;
  lk->outer = imul(L, dprod(L, qs, 0, tax), xi(L, st->a.NH * st->nb));
  lk->nouter = symsize_mul(symsize_prod(qs, 0, tax), (SymSize){st->a.NH * st->nb, 0, 0, 1});
  st->blk = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, st->nb)), "blk");
  st->sh = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, st->nb)), "sh");
  st->hd = let(L, x2(L, LX_REM, xvar(L, st->sh), xi(L, st->a.NH)), "hd");
  st->r0 = let(L, imul(L, x2(L, LX_DIV, xvar(L, st->sh), xi(L, st->a.NH)), st->a.T), "r0");
  st->kv0 = kv_rows(L, &st->a, st->r0);
  st->b0 = let(L, imul(L, xvar(L, st->blk), xi(L, ATT_BS)), "b0");
  LExpr *b1 = imin(L, iadd(L, xvar(L, st->b0), xi(L, ATT_BS)), st->a.T);
  st->nb0 = let(L, imax(L, xi(L, 0), x2(L, LX_SUB, b1, xvar(L, st->b0))), "nb0");
  st->sld = gpu_tile_ld(ATT_BS);
  st->S = local(L, ATT_BS * st->sld), st->X = local(L, ATT_BS * st->sld), st->Ll = local(L, ATT_BS), st->Dl = local(L, ATT_BS);
  return lk;
}

// Ll[ii] <- L_i, Dl[ii] <- D_i = do_i . o_i of query rows i0 + ii, ii < nq.
static void att_step_rows(Lo *L, const AttStep *st, int i0, int nq) {
  int Ll = st->Ll, Dl = st->Dl;
  const Att *a = &st->a;
  int ii = for_begin(L, xi(L, 0), xvar(L, nq), true, "ii");
  LExpr *row = iadd(L, xvar(L, st->r0), iadd(L, xvar(L, i0), xvar(L, ii)));
  store(L, Ll, xvar(L, ii), load(L, KS_IN0 + 4, att_at(L, a, 1, row, st->hd, xi(L, 0))));
  int ob = let(L, att_at(L, a, a->e, row, st->hd, xi(L, 0)), "ob");
  store(L, Dl, xvar(L, ii), att_vdot(L, KS_IN0 + 3, ob, KS_IN0 + 5, ob, a->e));
  for_end(L);
}

// S = scale Q K^T + b and X = dO V^T for query rows [i0, i0 + nq) against
// keys [k0, k0 + nk), into the locals S and X ([ATT_BS, ATT_BS]).
static void att_step_products(Lo *L, const AttStep *st, int i0, int nq, int k0, int nk) {
  const Att *a = &st->a;
  const Node *n = st->n;
  int S = st->S, X = st->X;
  LExpr *qrow = iadd(L, xvar(L, st->r0), xvar(L, i0)), *krow = iadd(L, xvar(L, st->kv0), xvar(L, k0));
  LCall c = att_call(L, false, true, xvar(L, nq), xvar(L, nk), a->h, n->fval, 0);
  att_operand(&c, LC_A, KS_IN0, att_head(L, a, a->h, qrow, st->hd), xi(L, a->NH * a->h));
  att_operand(&c, LC_B, KS_IN1, att_head(L, a, a->h, krow, st->hd), xi(L, a->NH * a->h));
  att_operand(&c, LC_C, S, xi(L, 0), xi(L, st->sld));
  gemm_call(L, c);
  att_block_bias(L, a, S, st->sld, nq, nk, xvar(L, st->sh), i0, k0);
  c = att_call(L, false, true, xvar(L, nq), xvar(L, nk), a->e, 1, 0);
  att_operand(&c, LC_A, KS_IN0 + 3, att_head(L, a, a->e, qrow, st->hd), xi(L, a->NH * a->e));
  att_operand(&c, LC_B, KS_IN2, att_head(L, a, a->e, krow, st->hd), xi(L, a->NH * a->e));
  att_operand(&c, LC_C, X, xi(L, 0), xi(L, st->sld));
  gemm_call(L, c);
}

// Over the block's scores, an element per thread: S <- P_ij, X <- dS_ij
// (0 outside the keys row i sees: j <= i, and the window's first key).
static void att_step_ds(Lo *L, const AttStep *st, int i0, int nq, int k0, int nk) {
  const Att *a = &st->a;
  int S = st->S, X = st->X, Ll = st->Ll, Dl = st->Dl;
  int x = for_begin(L, xi(L, 0), imul(L, xvar(L, nq), xi(L, ATT_BS)), true, "x");
  int ii = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, ATT_BS)), "ii"), jj = let(L, x2(L, LX_REM, xvar(L, x), xi(L, ATT_BS)), "jj");
  int at = let(L, iadd(L, imul(L, xvar(L, ii), xi(L, st->sld)), xvar(L, jj)), "at");
  int i = let(L, iadd(L, xvar(L, i0), xvar(L, ii)), "i"), j = let(L, iadd(L, xvar(L, k0), xvar(L, jj)), "j");
  LExpr *in = x2(L, LX_AND, x2(L, LX_LT, xvar(L, jj), xvar(L, nk)), x2(L, LX_GE, xvar(L, i), xvar(L, j)));
  if (a->Wmask) in = x2(L, LX_AND, in, x2(L, LX_LT, x2(L, LX_SUB, xvar(L, i), xvar(L, j)), xi(L, a->W)));
  int inside = let(L, in, "in");
  LExpr *e = x1(L, LX_EXP, x2(L, LX_SUB, load(L, S, xvar(L, at)), load(L, Ll, xvar(L, ii))));
  int p = let(L, xsel(L, xvar(L, inside), e, xf(L, 0)), "p");
  store(L, S, xvar(L, at), xvar(L, p));
  LExpr *dd = x2(L, LX_SUB, load(L, X, xvar(L, at)), load(L, Dl, xvar(L, ii)));
  store(L, X, xvar(L, at), x2(L, LX_MUL, xf(L, st->n->fval), x2(L, LX_MUL, xvar(L, p), dd)));
  for_end(L);
}

// Rows [r, r + nr) of part p (head hd) <- 0.
static void att_step_zero(Lo *L, const AttStep *st, int p, int r, int nr) {
  int64_t w = p < 2 ? st->a.h : st->a.e;
  int x = for_begin(L, xi(L, 0), imul(L, xvar(L, nr), xi(L, w)), true, "x");
  LExpr *row = iadd(L, xvar(L, st->r0), iadd(L, xvar(L, r), x2(L, LX_DIV, xvar(L, x), xi(L, w))));
  store(L, st->a.part[p].slot, att_part_at(L, &st->a, p, row, st->hd, x2(L, LX_REM, xvar(L, x), xi(L, w))), xf(L, 0));
  for_end(L);
}

// The key blocks of the query block (rows [b0, b0 + nb0)) from the window's
// first key: the loop over them opened, *k0 and *nk set.
static void att_step_keys(Lo *L, const AttStep *st, int *k0, int *nk) {
  int i1 = let(L, imin(L, iadd(L, xvar(L, st->b0), xi(L, ATT_BS)), st->a.T), "i1");
  int kf = let(L, imin(L, att_first_key(L, &st->a, xvar(L, st->b0)), xvar(L, i1)), "kf");
  LExpr *nkb = x2(L, LX_DIV, iadd(L, imax(L, xi(L, 0), x2(L, LX_SUB, xvar(L, i1), xvar(L, kf))), xi(L, ATT_BS - 1)), xi(L, ATT_BS));
  int kb = for_begin(L, xi(L, 0), nkb, false, "kb");
  *k0 = let(L, iadd(L, xvar(L, kf), imul(L, xvar(L, kb), xi(L, ATT_BS))), "k0");
  *nk = let(L, imin(L, xi(L, ATT_BS), x2(L, LX_SUB, xvar(L, i1), xvar(L, *k0))), "nk");
}

static LKernel *att_step_dkdv(Arena *ar, const Schedule *s, const Kernel *k) {
  Lo Lw, *L = &Lw;
  AttStep st;
  LKernel *lk = att_step_begin(L, ar, s, k, "attention_dkdv", &st);
  const Att *a = &st.a;
  int k0 = st.b0, nk = st.nb0;  // the key block
  int k1 = let(L, iadd(L, xvar(L, k0), xvar(L, nk)), "k1");
  att_step_zero(L, &st, 1, k0, nk);
  att_step_zero(L, &st, 2, k0, nk);
  // queries [k0, qe): the last that sees key k1 - 1 is k1 - 1 + W - 1
  LExpr *qend = a->W ? imin(L, a->T, iadd(L, xvar(L, k1), xi(L, a->W - 1))) : a->T;
  int qe = let(L, xsel(L, x2(L, LX_LT, xi(L, 0), xvar(L, nk)), qend, xvar(L, k0)), "qe");
  LExpr *nqb = x2(L, LX_DIV, iadd(L, imax(L, xi(L, 0), x2(L, LX_SUB, xvar(L, qe), xvar(L, k0))), xi(L, ATT_BS - 1)), xi(L, ATT_BS));
  int qb = for_begin(L, xi(L, 0), nqb, false, "qb");
  int i0 = let(L, iadd(L, xvar(L, k0), imul(L, xvar(L, qb), xi(L, ATT_BS))), "i0");
  int nq = let(L, imin(L, xi(L, ATT_BS), x2(L, LX_SUB, xvar(L, qe), xvar(L, i0))), "nq");
  att_step_rows(L, &st, i0, nq);
  att_step_products(L, &st, i0, nq, k0, nk);
  att_step_ds(L, &st, i0, nq, k0, nk);
  LExpr *qrow = iadd(L, xvar(L, st.r0), xvar(L, i0)), *krow = iadd(L, xvar(L, st.r0), xvar(L, k0));
  LCall c = att_call(L, true, false, xvar(L, nk), xi(L, a->h), 0, 1, 1);  // dK += dS^T Q
  c.k = xvar(L, nq);
  att_operand(&c, LC_A, st.X, xi(L, 0), xi(L, st.sld));
  att_operand(&c, LC_B, KS_IN0, att_head(L, a, a->h, qrow, st.hd), xi(L, a->NH * a->h));
  att_operand(&c, LC_C, a->part[1].slot, att_part_at(L, a, 1, krow, st.hd, xi(L, 0)), xi(L, a->NH * a->part[1].w));
  gemm_call(L, c);
  c = att_call(L, true, false, xvar(L, nk), xi(L, a->e), 0, 1, 1);  // dV += P^T dO
  c.k = xvar(L, nq);
  att_operand(&c, LC_A, st.S, xi(L, 0), xi(L, st.sld));
  att_operand(&c, LC_B, KS_IN0 + 3, att_head(L, a, a->e, qrow, st.hd), xi(L, a->NH * a->e));
  att_operand(&c, LC_C, a->part[2].slot, att_part_at(L, a, 2, krow, st.hd, xi(L, 0)), xi(L, a->NH * a->part[2].w));
  gemm_call(L, c);
  for_end(L);
  return lk;
}

static LKernel *att_step_dq(Arena *ar, const Schedule *s, const Kernel *k) {
  Lo Lw, *L = &Lw;
  AttStep st;
  LKernel *lk = att_step_begin(L, ar, s, k, "attention_dq", &st);
  const Att *a = &st.a;
  int i0 = st.b0, nq = st.nb0;  // the query block
  att_step_zero(L, &st, 0, i0, nq);
  att_step_rows(L, &st, i0, nq);
  int k0, nk;
  att_step_keys(L, &st, &k0, &nk);
  att_step_products(L, &st, i0, nq, k0, nk);
  att_step_ds(L, &st, i0, nq, k0, nk);
  LCall c = att_call(L, false, false, xvar(L, nq), xi(L, a->h), 0, 1, 1);  // dQ += dS K
  c.k = xvar(L, nk);
  att_operand(&c, LC_A, st.X, xi(L, 0), xi(L, st.sld));
  att_operand(&c, LC_B, KS_IN1, att_head(L, a, a->h, iadd(L, xvar(L, st.kv0), xvar(L, k0)), st.hd), xi(L, a->NH * a->h));
  att_operand(&c, LC_C, a->part[0].slot, att_part_at(L, a, 0, iadd(L, xvar(L, st.r0), xvar(L, i0)), st.hd, xi(L, 0)),
              xi(L, a->NH * a->part[0].w));
  gemm_call(L, c);
  for_end(L);
  return lk;
}

bool lower_attention_steps(Arena *a, const Schedule *s, const Kernel *k, LSteps *st) {
  if (!lower_att_steps(s->g, &s->g->nodes[k->node], LTARGET_GPU)) return false;
  if (!st) return true;
  st->lk[st->n++] = att_step_dkdv(a, s, k);
  st->lk[st->n++] = att_step_dq(a, s, k);
  return true;
}
