// lower_attention_steps.c: the GPU's blocked attention gradient as steps
// (loops.h LSteps). Part of the lowering of lower.c (lower_impl.h,
// lower_att.h).
#include "lower_att.h"

// ---- the GPU's blocked gradient in steps (loops.h LSteps) --------------------------
//
// Where the blocked form takes the gradient on a GPU (not the small-head
// form), two launches, each a block of ATT_BLOCK_TEAM threads per (sequence, head,
// block of bs rows), so the grid covers every block of queries or keys
// (FlashAttention-2's split). With s_ij = scale q_i . k_j + b_ij over the
// keys row i sees, L_i the forward's (ATTENTION_LSE, input 4), P_ij =
// e^(s_ij - L_i), dP_ij = do_i . v_j and D_i = do_i . o_i (o input 5; =
// sum_j P_ij dP_ij), dS_ij = scale P_ij (dP_ij - D_i):
//   attention_dkdv   per key block [k0, k1): K and V staged once, dK and dV
//                    summed in shared memory; per query block from k0 to the
//                    last query that sees a key of it: Q, dO (and O for D)
//                    staged, S = scale Q K^T + b, dP = dO V^T, P and dS;
//                    dV += P^T dO, dK += dS^T Q; then dK and dV written once
//   attention_dq     per query block: Q, dO staged and D computed once, dQ
//                    summed in shared memory; per key block: K, V staged,
//                    S, dP, P, dS; dQ += dS K; then dQ written once
// Every operand of the team GEMMs (LS_GEMM) is a tile in shared memory,
// copied from global memory a thread per element, consecutive threads
// consecutive features of a row (coalesced): the staged Q, K, V, dO (and O)
// att_stage_tile's (bf16 under Schedule.tiles_bf16), S, dP and the sums
// float32, rows gpu_tile_ld apart (no bank conflicts for a thread per row,
// at most 2 words per bank for the tensor-core fragments); dK, dV, dQ
// written back the way they were read.
//
// The block bs: 64 rows, halved (down to 8) while attention_dkdv's locals
// would pass ATT_STAGE_BYTES of shared memory. --emit=cost on GPT-2-small
// (heads of 64, T 1024, bf16, 8 x 1024): attention_dkdv 474 and
// attention_dq 459 us a launch at 64 with bf16 tiles (105.5 KiB, two
// blocks an SM); with float32 tiles 591 and 647 (138.5 KiB, one), 930 and
// 1025 at 32; the form before staging (Q, K, V and dO read by the team
// GEMMs from global memory, dK and dV summed there) 1390 and 1320.
enum { ATT_STEP_BS = 64 };

bool lower_att_steps(const Graph *g, const Node *n, LTarget tgt) {
  return tgt == LTARGET_GPU && n->op == OP_ATTENTION_GRAD && !lower_att_gpu_form(g, n, tgt);
}

// Bytes of attention_dkdv's locals (the larger launch's) at block bs: the
// staged K, V, Q (or O), dO tiles; dK, dV, S and dP, L and D in float32.
static int64_t att_step_bytes(const Lo *L, int64_t bs, int64_t h, int64_t e) {
  int64_t ldh = att_stage_ld(L, h), lde = att_stage_ld(L, e);
  return bs * (2 * ldh + 2 * lde + (ldh > lde ? ldh : lde)) * att_stage_esize(L) +
         bs * (gpu_tile_ld(h) + gpu_tile_ld(e) + 2 * gpu_tile_ld(bs) + 2) * (int64_t)sizeof(float);
}

typedef struct {
  Att a;
  const Node *n;
  int64_t bs;                // rows per block
  int64_t ldh, lde, sld;     // gpu_tile_ld of h, e and bs: the float32 tiles' row strides
  int64_t sh_ld, se_ld;      // att_stage_ld of h and e: the staged tiles' row strides
  int64_t ldm;               // max(sh_ld, se_ld): the staged tile of O's rows, then Q's
  int blk, sh, hd, r0, kv0;  // variables: the outer index's block, (sequence, head), head, row 0, its k and v's row 0
  int b0, nb0;               // variables: the block's first row and its rows (0 past T)
  int S, X, Ll, Dl;          // locals: S and X [bs, sld], L_i and D_i [bs]
  int Qt, Ot, Kt, Vt;        // staged locals: Q [bs, ldm] (O's rows first, se_ld apart, for D), dO [bs, se_ld], K, V
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
  st->bs = ATT_STEP_BS;
  while (st->bs > 8 && att_step_bytes(L, st->bs, st->a.h, st->a.e) > ATT_STAGE_BYTES) st->bs /= 2;
  st->ldh = gpu_tile_ld(st->a.h), st->lde = gpu_tile_ld(st->a.e), st->sld = gpu_tile_ld(st->bs);
  st->sh_ld = att_stage_ld(L, st->a.h), st->se_ld = att_stage_ld(L, st->a.e);
  st->ldm = st->sh_ld > st->se_ld ? st->sh_ld : st->se_ld;
  st->nb = (s->g->t_max + st->bs - 1) / st->bs;
  lk->shape = LK_ROWS, lk->team = ATT_BLOCK_TEAM;
  lk->outer = imul(L, dprod(L, qs, 0, tax), xi(L, st->a.NH * st->nb));
  lk->nouter = symsize_mul(symsize_prod(qs, 0, tax), (SymSize){st->a.NH * st->nb, 0, 0, 1});
  st->blk = let(L, x2(L, LX_REM, xvar(L, 0), xi(L, st->nb)), "blk");
  st->sh = let(L, x2(L, LX_DIV, xvar(L, 0), xi(L, st->nb)), "sh");
  st->hd = let(L, x2(L, LX_REM, xvar(L, st->sh), xi(L, st->a.NH)), "hd");
  st->r0 = let(L, imul(L, x2(L, LX_DIV, xvar(L, st->sh), xi(L, st->a.NH)), st->a.T), "r0");
  st->kv0 = kv_rows(L, &st->a, st->r0);
  st->b0 = let(L, imul(L, xvar(L, st->blk), xi(L, st->bs)), "b0");
  LExpr *b1 = imin(L, iadd(L, xvar(L, st->b0), xi(L, st->bs)), st->a.T);
  st->nb0 = let(L, imax(L, xi(L, 0), x2(L, LX_SUB, b1, xvar(L, st->b0))), "nb0");
  st->S = local(L, st->bs * st->sld), st->X = local(L, st->bs * st->sld), st->Ll = local(L, st->bs), st->Dl = local(L, st->bs);
  st->Kt = att_stage_tile(L, st->bs * st->sh_ld), st->Vt = att_stage_tile(L, st->bs * st->se_ld);
  st->Ot = att_stage_tile(L, st->bs * st->se_ld), st->Qt = att_stage_tile(L, st->bs * st->ldm);
  return lk;
}

// Rows [0, nr) of tile (rows ld apart) <- 0 over part p's width.
static void att_step_zero(Lo *L, const AttStep *st, int p, int tile, int64_t ld, int nr) {
  int64_t w = p < 2 ? st->a.h : st->a.e;
  int x = for_begin(L, xi(L, 0), imul(L, xvar(L, nr), xi(L, w)), true, "x");
  store(L, tile, iadd(L, imul(L, x2(L, LX_DIV, xvar(L, x), xi(L, w)), xi(L, ld)), x2(L, LX_REM, xvar(L, x), xi(L, w))), xf(L, 0));
  for_end(L);
}

// Rows row0 + [0, nr) of part p (head hd) <- rows of tile (ld apart).
static void att_step_store(Lo *L, const AttStep *st, int p, int tile, int64_t ld, LExpr *row0, int nr) {
  int64_t w = p < 2 ? st->a.h : st->a.e;
  int x = for_begin(L, xi(L, 0), imul(L, xvar(L, nr), xi(L, w)), true, "x");
  int r = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, w)), "r"), c = let(L, x2(L, LX_REM, xvar(L, x), xi(L, w)), "c");
  store(L, st->a.part[p].slot, att_part_at(L, &st->a, p, iadd(L, row0, xvar(L, r)), st->hd, xvar(L, c)),
        load(L, tile, iadd(L, imul(L, xvar(L, r), xi(L, ld)), xvar(L, c))));
  for_end(L);
}

// Query rows i0 + [0, nq): dO into st->Ot, O into st->Qt (rows se_ld
// apart), then Ll[ii] <- L_i and Dl[ii] <- D_i = do_i . o_i of the staged
// rows (both launches the same D: bf16's where the tiles are bf16, as
// FlashAttention-2's from bf16 O and dO), then Q's rows into st->Qt.
static void att_step_rows(Lo *L, const AttStep *st, int i0, int nq) {
  const Att *a = &st->a;
  LExpr *qrow = iadd(L, xvar(L, st->r0), xvar(L, i0));
  att_load_tile(L, a, st->hd, a->e, st->se_ld, qrow, nq, st->Ot, KS_IN0 + 3, st->Qt, KS_IN0 + 5);
  int ii = for_begin(L, xi(L, 0), xvar(L, nq), true, "ii");
  store(L, st->Ll, xvar(L, ii), load(L, KS_IN0 + 4, att_at(L, a, 1, iadd(L, qrow, xvar(L, ii)), st->hd, xi(L, 0))));
  int ob = let(L, imul(L, xvar(L, ii), xi(L, st->se_ld)), "ob");
  store(L, st->Dl, xvar(L, ii), att_vdot(L, st->Ot, ob, st->Qt, ob, a->e));
  for_end(L);
  att_load_tile(L, a, st->hd, a->h, st->sh_ld, qrow, nq, st->Qt, KS_IN0, -1, 0);
}

// S = scale Q K^T and X = dO V^T for the staged query rows (nq) against the
// staged keys (nk, from k0), into the locals S and X ([bs, sld]); the
// score bias of rows i0 + ii, keys k0 + jj added to S.
static void att_step_products(Lo *L, const AttStep *st, int i0, int nq, int k0, int nk) {
  const Att *a = &st->a;
  LCall c = att_call(L, false, true, xvar(L, nq), xvar(L, nk), a->h, st->n->fval, 0);
  att_operand(&c, LC_A, st->Qt, xi(L, 0), xi(L, st->sh_ld));
  att_operand(&c, LC_B, st->Kt, xi(L, 0), xi(L, st->sh_ld));
  att_operand(&c, LC_C, st->S, xi(L, 0), xi(L, st->sld));
  gemm_call(L, c);
  att_block_bias(L, a, st->S, st->sld, nq, nk, xvar(L, st->sh), i0, k0);
  c = att_call(L, false, true, xvar(L, nq), xvar(L, nk), a->e, 1, 0);
  att_operand(&c, LC_A, st->Ot, xi(L, 0), xi(L, st->se_ld));
  att_operand(&c, LC_B, st->Vt, xi(L, 0), xi(L, st->se_ld));
  att_operand(&c, LC_C, st->X, xi(L, 0), xi(L, st->sld));
  gemm_call(L, c);
}

// Over the block's scores, an element per thread: S <- P_ij, X <- dS_ij
// (0 outside the keys row i sees: j <= i, and the window's first key).
static void att_step_ds(Lo *L, const AttStep *st, int i0, int nq, int k0, int nk) {
  const Att *a = &st->a;
  int S = st->S, X = st->X, Ll = st->Ll, Dl = st->Dl;
  int x = for_begin(L, xi(L, 0), imul(L, xvar(L, nq), xi(L, st->bs)), true, "x");
  int ii = let(L, x2(L, LX_DIV, xvar(L, x), xi(L, st->bs)), "ii"), jj = let(L, x2(L, LX_REM, xvar(L, x), xi(L, st->bs)), "jj");
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

// The key blocks of the query block (rows [b0, b0 + nb0)) from the window's
// first key: the loop over them opened, *k0 and *nk set.
static void att_step_keys(Lo *L, const AttStep *st, int *k0, int *nk) {
  int i1 = let(L, imin(L, iadd(L, xvar(L, st->b0), xi(L, st->bs)), st->a.T), "i1");
  int kf = let(L, imin(L, att_first_key(L, &st->a, xvar(L, st->b0)), xvar(L, i1)), "kf");
  LExpr *nkb = x2(L, LX_DIV, iadd(L, imax(L, xi(L, 0), x2(L, LX_SUB, xvar(L, i1), xvar(L, kf))), xi(L, st->bs - 1)), xi(L, st->bs));
  int kb = for_begin(L, xi(L, 0), nkb, false, "kb");
  *k0 = let(L, iadd(L, xvar(L, kf), imul(L, xvar(L, kb), xi(L, st->bs))), "k0");
  *nk = let(L, imin(L, xi(L, st->bs), x2(L, LX_SUB, xvar(L, i1), xvar(L, *k0))), "nk");
}

static LKernel *att_step_dkdv(Arena *ar, const Schedule *s, const Kernel *k) {
  Lo Lw, *L = &Lw;
  AttStep st;
  LKernel *lk = att_step_begin(L, ar, s, k, "attention_dkdv", &st);
  const Att *a = &st.a;
  int dK = local(L, st.bs * st.ldh), dV = local(L, st.bs * st.lde);
  int k0 = st.b0, nk = st.nb0;  // the key block
  int k1 = let(L, iadd(L, xvar(L, k0), xvar(L, nk)), "k1");
  LExpr *krow = iadd(L, xvar(L, st.kv0), xvar(L, k0));
  att_load_kv(L, a, st.hd, krow, nk, st.Kt, st.sh_ld, st.Vt, st.se_ld);
  att_step_zero(L, &st, 1, dK, st.ldh, nk);
  att_step_zero(L, &st, 2, dV, st.lde, nk);
  // queries [k0, qe): the last that sees key k1 - 1 is k1 - 1 + W - 1
  LExpr *qend = a->W ? imin(L, a->T, iadd(L, xvar(L, k1), xi(L, a->W - 1))) : a->T;
  int qe = let(L, xsel(L, x2(L, LX_LT, xi(L, 0), xvar(L, nk)), qend, xvar(L, k0)), "qe");
  LExpr *nqb = x2(L, LX_DIV, iadd(L, imax(L, xi(L, 0), x2(L, LX_SUB, xvar(L, qe), xvar(L, k0))), xi(L, st.bs - 1)), xi(L, st.bs));
  int qb = for_begin(L, xi(L, 0), nqb, false, "qb");
  int i0 = let(L, iadd(L, xvar(L, k0), imul(L, xvar(L, qb), xi(L, st.bs))), "i0");
  int nq = let(L, imin(L, xi(L, st.bs), x2(L, LX_SUB, xvar(L, qe), xvar(L, i0))), "nq");
  att_step_rows(L, &st, i0, nq);
  att_step_products(L, &st, i0, nq, k0, nk);
  att_step_ds(L, &st, i0, nq, k0, nk);
  LCall c = att_call(L, true, false, xvar(L, nk), xi(L, a->h), 0, 1, 1);  // dK += dS^T Q
  c.k = xvar(L, nq);
  att_operand(&c, LC_A, st.X, xi(L, 0), xi(L, st.sld));
  att_operand(&c, LC_B, st.Qt, xi(L, 0), xi(L, st.sh_ld));
  att_operand(&c, LC_C, dK, xi(L, 0), xi(L, st.ldh));
  gemm_call(L, c);
  c = att_call(L, true, false, xvar(L, nk), xi(L, a->e), 0, 1, 1);  // dV += P^T dO
  c.k = xvar(L, nq);
  att_operand(&c, LC_A, st.S, xi(L, 0), xi(L, st.sld));
  att_operand(&c, LC_B, st.Ot, xi(L, 0), xi(L, st.se_ld));
  att_operand(&c, LC_C, dV, xi(L, 0), xi(L, st.lde));
  gemm_call(L, c);
  for_end(L);
  LExpr *prow = iadd(L, xvar(L, st.r0), xvar(L, k0));
  att_step_store(L, &st, 1, dK, st.ldh, prow, nk);
  att_step_store(L, &st, 2, dV, st.lde, prow, nk);
  return lk;
}

static LKernel *att_step_dq(Arena *ar, const Schedule *s, const Kernel *k) {
  Lo Lw, *L = &Lw;
  AttStep st;
  LKernel *lk = att_step_begin(L, ar, s, k, "attention_dq", &st);
  const Att *a = &st.a;
  int dQ = local(L, st.bs * st.ldh);
  int i0 = st.b0, nq = st.nb0;  // the query block
  LExpr *qrow = iadd(L, xvar(L, st.r0), xvar(L, i0));
  att_step_rows(L, &st, i0, nq);
  att_step_zero(L, &st, 0, dQ, st.ldh, nq);
  int k0, nk;
  att_step_keys(L, &st, &k0, &nk);
  LExpr *krow = iadd(L, xvar(L, st.kv0), xvar(L, k0));
  att_load_kv(L, a, st.hd, krow, nk, st.Kt, st.sh_ld, st.Vt, st.se_ld);
  att_step_products(L, &st, i0, nq, k0, nk);
  att_step_ds(L, &st, i0, nq, k0, nk);
  LCall c = att_call(L, false, false, xvar(L, nq), xi(L, a->h), 0, 1, 1);  // dQ += dS K
  c.k = xvar(L, nk);
  att_operand(&c, LC_A, st.X, xi(L, 0), xi(L, st.sld));
  att_operand(&c, LC_B, st.Kt, xi(L, 0), xi(L, st.sh_ld));
  att_operand(&c, LC_C, dQ, xi(L, 0), xi(L, st.ldh));
  gemm_call(L, c);
  for_end(L);
  att_step_store(L, &st, 0, dQ, st.ldh, qrow, nq);
  return lk;
}

bool lower_attention_steps(Arena *a, const Schedule *s, const Kernel *k, LSteps *st) {
  if (!lower_att_steps(s->g, &s->g->nodes[k->node], LTARGET_GPU)) return false;
  if (!st) return true;
  st->lk[st->n++] = att_step_dkdv(a, s, k);
  st->lk[st->n++] = att_step_dq(a, s, k);
  return true;
}
