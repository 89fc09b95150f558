// lower_att.h: the attention lowering's description of one attention node
// and the helpers its files share (lower_attention.c: the forward, the CPU's
// and the small-head GPU gradients, the score bias's gradient;
// lower_attention_steps.c: the GPU's blocked gradient in steps). Internal to
// codegen/, after lower_impl.h.
#ifndef XF_LOWER_ATT_H
#define XF_LOWER_ATT_H

#include "lower_impl.h"

// ATTENTION and ATTENTION_GRAD (interp.c has the equations) in fuse_attention's
// layouts: row r of [..., T, NH, width] (axis 1, time-major heads) or of
// [..., T, width] (axis 0, NH = 1), a head's `width` features contiguous. Every
// loop over heads is a par loop, so a backend works across heads (seed 001's
// transformer has 32 heads of 4 features) rather than along a head's few
// features; scores and probabilities of a query row live in a local array
// [t_max, NH].
typedef struct {
  int64_t NH, h, e, w;  // heads; features of q and k, of v, of the output
  int64_t G;            // query sequences per key and value sequence (ir_attention_group)
  LExpr *T;
  int S, M, Ls, X;      // the row forward's locals: scores [t_max NH]; max, sum [NH]; output
  // ATTENTION_GRAD's parts p = dq, dk, dv (out_parts): feature c of row r,
  // head hd at slot[p][(r NH + hd) w + off + c]: the [..., T, NH, 2h + e]
  // rows in KS_OUT (w = 2h + e, off 0, h, 2h), or with Kernel.nout 3 each
  // part in a [..., T, NH, width] buffer of its own (w = h, h, e, off 0)
  OutPart part[3];
  int bslot;            // the score bias's slot (ir_attention_bias), or -1
  const Shape *bs;      // its shape, broadcast against the scores [seq[0 .. ns), T, T]
  Dim seq[IR_MAX_RANK + 1];
  int ns;
  int64_t W;            // the key window (Node.start): keys j <= i - W are
                        // masked and skipped; 0: none
  bool Wmask;           // the window is the op's own mask (no bias masks it):
                        // keys a form reads below the window score ATT_FAR
  int Bl;               // the CPU row form's local [t_max, NH] of a query row's
                        // bias per head (its keys along j, heads side by side), or -1
  bool Bl_kept;         // Bl holds the row already (att_bias_row): att_scores reads it
  int lse;              // the slot of the rows' L_i = m_i + log l_i (ATTENTION_LSE's
                        // layout [..., T, NH]: row r, head hd at r NH + hd), or -1
  bool no_o;            // ATTENTION_LSE alone: the forward writes L only
  int hv;               // the CPU row form's heads: [h0, h0 + HG) with h0 the
  int64_t HG;           // variable hv, or every head (hv -1; HG unused)
  int Bg, Gg;           // the row gradient of a head group (schedule_att_dbias_heads):
                        // locals [t_max, t_max, HG] of the group's bias, read
                        // once, and of its gradient summed over the sequences, or -1
  int dbias;            // the slot of the ATTENTION_DBIAS the gradient's kernel
                        // writes (Kernel.terms), or -1
} Att;

// Threads of a GPU block working on one attention (LKernel.team): the
// (sequence, head) form's, and the blocked forms' (the forward's, the
// gradient's steps), whose team GEMMs give each of its 8 warps a 1 x 4 warp
// tile of a 64 x 64 product (--emit=cost on GPT-2-small, bf16: forward 728
// us a launch with 128 threads, 595 with 256).
enum { ATT_TEAM = 128, ATT_BLOCK_TEAM = 256 };
// The most floats of locals the short-head forms take (512 KiB of a pool
// thread's stack); the forward's parts of a sequence's query rows.
enum { ATT_KEYS_FLOATS = 128 * 1024, ATT_SHORT_PARTS = 4 };

// The attention node n's description; *tax: q's time axis.
Att att_of(Lo *L, const Node *n, int *tax);
// The first key rows from query row i on may read: max(0, i - W + 1), or 0.
LExpr *att_first_key(Lo *L, const Att *a, LExpr *i);
// Row 0 of the key and value sequence of the query sequence whose row 0 is r0.
int kv_rows(Lo *L, const Att *a, int r0);
// Element (row, head hd, feature c) of a slot of rows NH n wide (n per head).
LExpr *att_at(Lo *L, const Att *a, int64_t n, LExpr *row, int hd, LExpr *c);
// Feature c of part p of the gradient, row `row`, head hd.
LExpr *att_part_at(Lo *L, const Att *a, int p, LExpr *row, int hd, LExpr *c);
// Offset of row `row`'s head hd in rows of NH heads of n features.
LExpr *att_head(Lo *L, const Att *a, int64_t n, LExpr *row, int hd);
// sum_{c < len} sa[abase + c] * sb[bbase + c] (abase, bbase variables).
LExpr *att_vdot(Lo *L, int sa, int abase, int sb, int bbase, int64_t len);
// A GEMM call C = alpha op(A) op(B) + beta C of m x nn by k; att_operand sets
// operand x (LC_A, LC_B, LC_C): slot, offset, leading dimension.
LCall att_call(Lo *L, bool ta, bool tb, LExpr *m, LExpr *nn, int64_t k, double alpha, double beta);
void att_operand(LCall *c, int x, int slot, LExpr *at, LExpr *ld);
// S[ii ld + jj] += b of sequence m at (i0 + ii, k0 + jj), ii < nq, jj < nk.
void att_block_bias(Lo *L, const Att *a, int S, int64_t ld, int nq, int nk, LExpr *m, int i0, int k0);
// Rows [0, nr) of local tile (rows ld apart, n features) <- rows row0 + r of
// slot, head hd, a thread per element (coalesced); with tile2 >= 0 also
// tile2 <- slot2.
void att_load_tile(Lo *L, const Att *a, int hd, int64_t n, int64_t ld, LExpr *row0, int nr, int tile, int slot, int tile2, int slot2);
// K's rows krow + [0, nk) (input 1) into tile Kt (rows ldh apart) and V's
// (input 2) into Vt (lde apart): one loop where the widths agree.
void att_load_kv(Lo *L, const Att *a, int hd, LExpr *krow, int nk, int Kt, int64_t ldh, int Vt, int64_t lde);
// A tile of rows of n features a GPU block stages for its team GEMMs'
// operands: bf16 where the schedule asks (Schedule.tiles_bf16), rows
// gpu_tile_ld_bf16(n) apart, read by the GEMMs as packed pairs along k
// (half the shared memory, loads and no conversions); else float32, rows
// gpu_tile_ld(n) apart. att_stage_esize: its bytes per element.
int64_t att_stage_ld(const Lo *L, int64_t n);
int64_t att_stage_esize(const Lo *L);
int att_stage_tile(Lo *L, int64_t size);
// The most bytes of shared memory a GPU block of the blocked forms takes
// (the forward's staged tiles, the gradient's steps' block size).
enum { ATT_STAGE_BYTES = 160 * 1024 };

// Whether ATTENTION_GRAD a takes the keys-outer form (lower_attention_short.c):
// the CPU, heads of at most 8 features, at least 8 heads, no score bias,
// its locals within ATT_KEYS_FLOATS at t_max.
bool att_grad_keys_form(const Att *a, LTarget tgt, int64_t t_max);
// That form: one sequence per outer index.
void lower_attention_grad_keys(Lo *L, Att *a, const Node *n);
// The short-head forward (lower_att_short_fwd): a part of a sequence's query
// rows per outer index (sequences x ATT_SHORT_PARTS).
void lower_attention_fwd_short(Lo *L, Att *a, const Node *n);

#endif
