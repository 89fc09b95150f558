// cuda_cost.c: the GPU cost model. A training step's launch table
// (cuda_render) and the descriptions its launches print (loops.h: LKernel,
// LGemm, LSteps) -> a time per launch on an H100 SXM, without a GPU.
//
// Requires: a Schedule and the CudaModule cuda_render made of it.
// Guarantees: one row per kernel class (per step of a class with steps) of
// the training program, in first-launch order, with its launches per step,
// grid and block, work items, the longest chain of dependent iterations a
// thread runs, bytes moved, FLOPs and the estimate; the step's total.
//
// The model (docs/cuda.md, "The cost model"). A launch of an LKernel takes
//   t = max(mem, flop, issue, latency) + launch
//   mem      = the bytes of every buffer it reads or writes, once (caches
//              capture reuse) / 3.35 TB/s
//   flop     = float operations / 67 TFLOP/s (FP32 without tensor cores)
//   issue    = warp instructions / (SMs used x 4 schedulers x 1.98 GHz)
//   latency  = max(sum over an SM's warps of their chains / resident warps,
//                  the longest chain): Little's law, each dependent
//              iteration costing LAT_GLOBAL (it loads global memory),
//              LAT_LOCAL (shared memory only) or LAT_ALU, plus ALU_NS per
//              instruction on the chain
// and a GEMM record max(2mnk / (0.6 peak), bytes / (0.7 BW)) + GEMM_FIXED.
// A kernel is a cliff when its estimate passes 20 us on fewer blocks than
// SMs, or passes 4x the larger of mem and compute (flop, issue on all SMs)
// when over 20 us (below, the launch and the tail decide): a serial chain or
// too little parallelism dominates.
#include "cuda.h"

#include "loops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// H100 SXM (docs/cuda.md): SMs, clock, bandwidth, peaks.
static const double SMS = 132, CLOCK = 1.98e9, BW = 3.35e12, FP32 = 67e12, TF32 = 495e12, BF16 = 990e12;
// Calibrated on efff928's H100 profile: ME's causal_conv_dw, whose longest
// thread (lag 0) runs 1,048,576 dependent iterations of 2 global loads, 49.8
// ms (47 ns each); the embedding gradient, 8,192 iterations of a global load
// and a shared-memory read-modify-write, 752 us (92 ns each).
static const double LAT_GLOBAL = 45e-9, LAT_LOCAL = 25e-9, LAT_ALU = 4e-9, ALU_NS = 0.5e-9;
// A bf16 element's conversions in ptxas's sm_90 code (cuobjdump -sass of a
// tile copy): widening to float a shift, rounding a float to nearest even
// with the NaN test (cuda.c xf_bf16_st) 6 more instructions than a float
// store; a copy of bf16 bits neither.
static const double BF16_WIDEN = 1, BF16_ROUND = 6;

static const double LAUNCH = 1e-6, GEMM_FIXED = 4e-6, GEMM_EFF_FLOP = 0.6, GEMM_EFF_BW = 0.7;
enum { COST_SAMPLES = 32, MAX_BLOCKS = 1 << 16, MAX_THREADS_SM = 2048, MAX_BLOCKS_SM = 32, SHMEM_SM = 228 * 1024 };

// ---- evaluation of index expressions ------------------------------------------------

typedef struct {
  const LKernel *lk;
  int64_t B, T;
  int64_t *val;
  bool *known;
  const LExpr **defs;  // a let variable's expression (walk), or NULL
  int lane;            // >= 0: evaluate with variable lane at val + bump, the
  int64_t bump;        // lets derived from it again from defs (another lane's index)
} Ev;

// The value of an integer or boolean expression where it follows from the
// variables bound so far; loads are unknown except token ids (0).
static bool ev(const Ev *e, const LExpr *x, int64_t *out) {
  int64_t a = 0, b = 0;
  switch (x->kind) {
  case LX_INT: *out = x->ival; return true;
  case LX_DIM: *out = x->ival ? e->T : e->B; return true;
  case LX_VAR:
    if (e->lane >= 0 && x->var == e->lane) return *out = e->val[x->var] + e->bump, e->known[x->var];
    if (e->lane >= 0 && e->defs[x->var]) return ev(e, e->defs[x->var], out);
    *out = e->val[x->var];
    return e->known[x->var];
  case LX_ROW0: case LX_POS0: *out = 0; return true;
  case LX_WIN: *out = x->ival == 1 ? e->T : 0; return true;
  case LX_LOAD: *out = 0; return x->type == LT_I64;
  case LX_SELECT:
    if (ev(e, x->a[0], &a)) return ev(e, x->a[a ? 1 : 2], out);
    if (!ev(e, x->a[1], &a) || !ev(e, x->a[2], &b)) return false;
    *out = a > b ? a : b;
    return true;
  default: break;
  }
  if (x->type == LT_F32 || !x->a[0] || !ev(e, x->a[0], &a)) return false;
  if (x->a[1] && !ev(e, x->a[1], &b)) return false;
  switch (x->kind) {
  case LX_ADD: *out = a + b; return true;
  case LX_SUB: *out = a - b; return true;
  case LX_MUL: *out = a * b; return true;
  case LX_DIV: *out = b ? a / b : 0; return b != 0;
  case LX_REM: *out = b ? a % b : 0; return b != 0;
  case LX_MAX: *out = a > b ? a : b; return true;
  case LX_LT: *out = a < b; return true;
  case LX_GT: *out = a > b; return true;
  case LX_GE: *out = a >= b; return true;
  case LX_EQ: *out = a == b; return true;
  case LX_AND: *out = a && b; return true;
  default: return false;
  }
}

// ---- cost of statements ---------------------------------------------------------------

// An expression's instructions, float operations, and the memory it loads
// (a mask: 2 global, 1 local arrays); shm: the shared-memory wavefronts of
// one warp running it (a local array's access: 1, or the lanes' bank
// conflict degree), replay: those past one per access.
typedef struct {
  double ops, flops, shm, replay, loc;  // loc: local-array accesses
  double lines;                         // global accesses' L1 wavefronts: 128-byte lines per warp access
  int mem;
} XCost;

typedef struct Walk Walk;
static void local_access(const Walk *w, int slot, const LExpr *idx, XCost *c);
static double global_lines(const Walk *w, int slot, const LExpr *idx);
static int64_t slot_esize(const Walk *w, int slot);

// Instructions of an operation; a 64-bit integer division or remainder is
// a routine of about 20 (operands that fit 32 bits, checked at run time),
// by a positive constant 3 (a power of two) or 8 (xcost). e^x: cuda.c's
// xf_exp is 22 instructions in ptxas's sm_90 code (cuobjdump -sass), the
// SFU's __expf an FMUL and an MUFU.EX2 at a quarter of the issue rate: 5.
static double op_weight(LExprKind k, LType t) {
  switch (k) {
  case LX_EXP: return 22;
  case LX_LOG: case LX_SIN: case LX_COS: case LX_TANH: case LX_ERF: return 20;
  case LX_DIV: return t == LT_I64 ? 20 : 8;
  case LX_REM: return t == LT_I64 ? 20 : 1;
  case LX_SQRT: return 4;
  case LX_KEEP: return 100;  // Philox4x32-10 and a double compare
  default: return 1;
  }
}

// w: the walk whose lane variable spreads the lanes (local_wavefronts), or NULL.
static void xcost(const Walk *w, const LExpr *x, XCost *c) {
  if (!x) return;
  switch (x->kind) {
  case LX_INT: case LX_FLT: case LX_DIM: case LX_VAR: case LX_ROW0: case LX_POS0: case LX_WIN: return;
  case LX_LOAD: {
    c->ops += w && slot_esize(w, x->slot) == 2 ? 1 + BF16_WIDEN : 1, c->mem |= x->slot >= LK_LOCAL0 ? 1 : 2;
    if (x->slot >= LK_LOCAL0) local_access(w, x->slot, x->a[0], c);
    else c->lines += global_lines(w, x->slot, x->a[0]);
    xcost(w, x->a[0], c);
    return;
  }
  default: break;
  }
  double n = x->kind == LX_EXP && x->ival ? 5 : op_weight(x->kind, x->type);
  if ((x->kind == LX_DIV || x->kind == LX_REM) && x->type == LT_I64 && x->a[1] && x->a[1]->kind == LX_INT && x->a[1]->ival > 0)
    n = (x->a[1]->ival & (x->a[1]->ival - 1)) ? 8 : 3;  // by a constant: a multiply-high, or a shift (and a sign fix-up)
  c->ops += n;
  if (x->type == LT_F32) c->flops += n;
  for (int i = 0; i < 3; i++) xcost(w, x->a[i], c);
}

// What running a block costs one thread (chain: seconds along its path), and
// the whole team working on one outer index: warp instructions, flops.
typedef struct {
  double chain, winstr, flops;
  double wl1;          // the team's global accesses' L1 wavefronts (lines per warp access)
  double wshm;         // the team's shared-memory wavefronts (warp accesses, conflicts replayed)
  double wshm_ideal;   // the same without bank conflicts
  double chain_iters;  // dependent iterations on the chain (for the table)
} SCost;

struct Walk {
  Ev *e;
  int lanes;   // threads sharing an outer index (1: ELEM mode)
  int warps;   // warps running row-level code
  bool block;  // the team is a block (barriers)
  uint32_t mma;  // the team GEMMs' arithmetic (XfKernelArgs.mma: XF_MMA_*)
  int lane_var;  // the variable of the innermost loop spread over the lanes (consecutive lanes, consecutive values), or -1
};

// ---- shared-memory banks -------------------------------------------------------------------
// Shared memory serves a warp's access in wavefronts of 32 banks of 4
// bytes, word w in bank w mod 32: lanes reading one word share it (a
// broadcast), distinct words of one bank take a wavefront each.

// The 128-byte lines (L1 wavefronts) one warp access touches, its 32 lanes
// at elements addr[0..31] of esize bytes.
static int warp_lines(const int64_t *addr, int64_t esize) {
  int n = 0;
  for (int l = 0; l < 32; l++) {
    bool seen = false;
    for (int j = 0; j < l && !seen; j++) seen = addr[j] * esize / 128 == addr[l] * esize / 128;
    n += !seen;
  }
  return n;
}

// The wavefronts of one warp access whose 32 lanes touch words addr[0..31].
static int warp_wavefronts(const int64_t *addr) {
  int worst = 1;
  for (int l = 0; l < 32; l++) {
    int n = 0;  // the distinct words of lane l's bank
    for (int j = 0; j < 32; j++) {
      bool dup = (addr[j] - addr[l]) % 32 != 0;
      for (int i = 0; i < j && !dup; i++) dup = addr[i] == addr[j];
      n += !dup;
    }
    if (n > worst) worst = n;
  }
  return worst;
}

// The elements idx takes at the 32 lanes of a warp: the lane variable at
// the warp's 32 consecutive values around its current one (from a multiple
// of 32), the lets derived from it evaluated again. False when unknown or
// without a lane variable.
static bool lane_elements(const Walk *w, const LExpr *idx, int64_t *addr) {
  if (!w || w->lane_var < 0 || !idx) return false;
  Ev *e = w->e;
  if (!e->known[w->lane_var]) return false;
  int64_t v = e->val[w->lane_var], base = v - ((v % 32) + 32) % 32;
  bool ok = true;
  e->lane = w->lane_var;
  for (int l = 0; l < 32 && ok; l++) e->bump = base + l - v, ok = ev(e, idx, &addr[l]);
  e->lane = -1;
  return ok;
}

// Bytes per element of slot or local (bf16 storage: 2).
static int64_t slot_esize(const Walk *w, int slot) {
  const LKernel *lk = w->e->lk;
  return slot >= LK_LOCAL0 ? (lk->local_bf16[slot - LK_LOCAL0] ? 2 : 4) : slot >= 0 && slot < KS_COUNT && lk->slot_bf16[slot] ? 2 : 4;
}

// The wavefronts of one warp's access to local array slot at idx (1 where
// the lanes' words are unknown); a bf16 local's elements 2 a word.
static double local_wavefronts(const Walk *w, int slot, const LExpr *idx) {
  int64_t addr[32];
  if (!lane_elements(w, idx, addr)) return 1;
  for (int l = 0; l < 32; l++) addr[l] = addr[l] * slot_esize(w, slot) / 4;
  return warp_wavefronts(addr);
}

// The 128-byte lines one warp's access to global slot at idx touches (its
// L1 wavefronts): 32 for a thread per row of a row-major matrix, 1 for a
// coalesced access of 4-byte elements.
static double global_lines(const Walk *w, int slot, const LExpr *idx) {
  int64_t addr[32];
  return lane_elements(w, idx, addr) ? warp_lines(addr, slot_esize(w, slot)) : 1;
}

// Counts one access to a local array at idx in c.
static void local_access(const Walk *w, int slot, const LExpr *idx, XCost *c) {
  double f = local_wavefronts(w, slot, idx);
  c->shm += f, c->replay += f - 1, c->loc += 1;
}

// An operand of a team GEMM in a local array: element (r, c) of op(X) at
// word r sr + c sc.
typedef struct {
  bool local, global;  // in shared memory (its wavefronts), in global memory (its lines); neither: unknown
  int64_t sr, sc;
  int64_t esize;       // bytes per element
  bool packed;         // bf16 pairs read as one word (lcall_packed): half the accesses
  bool ldsm;           // B by ldmatrix.trans (lcall_ldsm): two 8 x 8 matrices of 16-byte rows
} GemmOperand;

// The wavefronts of one warp's accesses to the local operand x of a team
// GEMM (cuda.c xf_team_gemm): per k step of a tile (operands A and B; C: per
// tile, its stores and, with beta, its loads), and the accesses, for the
// ideal of one wavefront each; of a global operand, the lines instead. Lane l = 4 g + t; float32 (mma 0): lane l
// takes the l-th 4 x 4 tile of C's tn tile columns. A packed operand's
// access reads the pair at the register's first element (bf16 only).
static void gemm_operand_wavefronts(uint32_t mma, int x, GemmOperand o, int64_t tn, bool beta, double *wf, double *acc,
                                    double *lines) {
  *wf = *acc = *lines = 0;
  if (!o.local && !o.global) return;
  int64_t addr[32];
  if (o.local && o.ldsm && x == LC_B && mma == XF_MMA_BF16) {  // matrix r: rows k = 8 r .. 8 r + 7, 4 words each
    for (int r = 0; r < 2; r++) {
      for (int l = 0; l < 32; l++) addr[l] = ((8 * r + l / 4) * o.sr) * o.esize / 4 + l % 4;
      *wf += warp_wavefronts(addr), *acc += 1;
    }
    return;
  }
  bool packed = o.packed && mma == XF_MMA_BF16;
  int ninstr = x == LC_C ? (mma ? 4 : 16) : mma == XF_MMA_BF16 ? (x == LC_A ? 8 : 4) : mma ? (x == LC_A ? 4 : 2) : 4;
  for (int r = 0; r < ninstr; r += packed ? 2 : 1) {
    for (int l = 0; l < 32; l++) {
      int64_t g = l >> 2, t = l & 3, row, col;
      if (!mma) {  // the tile of lane l: rows i0 .. i0 + 3, columns j0 .. j0 + 3; k fixed (A: a row, B: a column)
        int64_t i0 = l / tn * 4, j0 = l % tn * 4;
        if (x == LC_A) row = i0 + r, col = 0;
        else if (x == LC_B) row = 0, col = j0 + r;
        else row = i0 + r / 4, col = j0 + r % 4;
      } else if (x == LC_C) {
        row = g + 8 * (r >> 1), col = 2 * t + (r & 1);
      } else if (mma == XF_MMA_BF16) {  // register r / 2, half r % 2
        int reg = r >> 1, h = r & 1;
        if (x == LC_A) row = g + 8 * (reg & 1), col = 2 * t + 8 * (reg >> 1) + h;
        else row = 2 * t + 8 * reg + h, col = g;
      } else {
        if (x == LC_A) row = g + 8 * (r & 1), col = t + 4 * (r >> 1);
        else row = t + 4 * r, col = g;
      }
      addr[l] = o.global ? row * o.sr + col * o.sc : (row * o.sr + col * o.sc) * o.esize / 4;  // elements, or words
    }
    if (o.local) *wf += warp_wavefronts(addr), *acc += 1;
    else *lines += warp_lines(addr, o.esize);
  }
  if (x == LC_C && beta) *wf *= 2, *acc *= 2, *lines *= 2;
}

static double lat_of(int mem) { return mem ? (mem & 2 ? LAT_GLOBAL : 0) + (mem & 1 ? LAT_LOCAL : 0) : LAT_ALU; }

static int64_t trip_of(Walk *w, const LStmt *st, int64_t *lo) {
  int64_t hi = 0;
  if (!ev(w->e, st->lo, lo)) *lo = 0;
  if (!ev(w->e, st->hi, &hi)) hi = *lo + 1;
  return hi > *lo ? hi - *lo : 0;
}

static SCost walk(Walk *w, const LStmt *st, bool coop);

// The body of a loop over var in [lo, lo + trip), costed at its midpoint.
static SCost walk_body(Walk *w, const LStmt *st, int var, int64_t lo, int64_t trip, bool coop) {
  bool had = w->e->known[var];
  int64_t old = w->e->val[var];
  w->e->val[var] = lo + trip / 2, w->e->known[var] = true;
  SCost c = walk(w, st, coop);
  w->e->val[var] = old, w->e->known[var] = had;
  return c;
}

static SCost walk(Walk *w, const LStmt *st, bool coop) {
  SCost c = {0};
  XCost seg = {0};  // the straight-line run since the last loop: its loads issue together
  double wmul = coop ? w->warps : 1;
  for (; st; st = st->next) {
    if (st->kind == LS_LET || st->kind == LS_STORE) {
      XCost x = {0};
      xcost(w, st->val, &x), xcost(w, st->idx, &x);
      if (st->kind == LS_STORE) x.ops += 1;  // a store does not wait
      if (st->kind == LS_STORE && slot_esize(w, st->slot) == 2)  // cuda.c: bf16 bits copied as they are, else rounded
        x.ops += st->val->kind == LX_LOAD && slot_esize(w, st->val->slot) == 2 ? -BF16_WIDEN : BF16_ROUND;
      if (st->kind == LS_STORE && st->slot >= LK_LOCAL0) local_access(w, st->slot, st->idx, &x);
      if (st->kind == LS_STORE && st->slot < LK_LOCAL0) x.lines += global_lines(w, st->slot, st->idx);
      if (st->kind == LS_LET && st->var >= 0) {
        int64_t v;
        w->e->defs[st->var] = st->val;
        if (ev(w->e, st->val, &v)) w->e->val[st->var] = v, w->e->known[st->var] = true;
      }
      seg.ops += x.ops, seg.flops += x.flops, seg.mem |= x.mem, seg.shm += x.shm, seg.replay += x.replay, seg.loc += x.loc;
      seg.lines += x.lines;
      continue;
    }
    c.chain += seg.ops * ALU_NS + (seg.ops ? lat_of(seg.mem) : 0) + seg.replay / CLOCK;
    c.winstr += seg.ops * wmul, c.flops += seg.flops, c.wshm += seg.shm * wmul, c.wshm_ideal += seg.loc * wmul;
    c.wl1 += seg.lines * wmul;
    seg = (XCost){0};
    if (st->kind == LS_GEMM) {  // xf_team_gemm (cuda.c), and its two barriers
      const LCall *g = st->call;
      int64_t m = 0, n = 0, k = 0;
      ev(w->e, g->m, &m), ev(w->e, g->n, &n), ev(w->e, g->k, &k);
      int mem = 0;
      for (int x = 0; x < 2; x++) mem |= g->slot[x] >= LK_LOCAL0 ? 1 : 2;
      double flops = 2.0 * m * n * k;
      // the local operands' wavefronts: wf[x] per fragment and k step (C: per tile), acc[x] the accesses
      double wf[3], acc[3], lines[3];
      bool packed[3] = {lcall_packed(w->e->lk, g, LC_A), lcall_packed(w->e->lk, g, LC_B), false};
      bool ldsm = lcall_ldsm(w->e->lk, g);
      for (int x = 0; x < 3; x++) {
        int64_t ld = 0;
        bool tr = x == LC_A ? g->ta : x == LC_B ? g->tb : false, known = ev(w->e, g->ld[x], &ld);
        // op(A)(i, q) = A[i lda + q], or A[q lda + i] (ta); op(B)(q, j) = B[q ldb + j], or B[j ldb + q] (tb)
        GemmOperand o = {.local = g->slot[x] >= LK_LOCAL0 && known, .global = g->slot[x] < LK_LOCAL0 && known,
                         .sr = tr ? 1 : ld, .sc = tr ? ld : 1, .esize = slot_esize(w, g->slot[x]),
                         .packed = packed[x], .ldsm = x == LC_B && ldsm};
        gemm_operand_wavefronts(w->mma, x, o, n > 4 ? (n + 3) / 4 : 1, g->beta != 0, &wf[x], &acc[x], &lines[x]);
      }
      // the banks' terms: `serial` warp tiles (lane tiles) on one warp's
      // (lane's) path and `units` warp-level tiles in all, each `steps` k
      // steps reading a fragment of A and `nb` of B, storing `nc` of C
      double serial, units, steps, nb = 1, nc = 1;
      if (w->mma) {  // xf_team_mma_tiles: a warp per 16 x 8 nt tile (xf_team_tile)
        // per k step 22 + 10 nt warp instructions: nvdisasm of ptxas sm_90's
        // code gives 32-34, 41-44 and 59-67 for nt = 1, 2, 4, bf16 (loads,
        // paired conversions, mma) and TF32 alike: 10, A's 8 loads and 4
        // conversions, per tile 4 and B's 4 loads and 2 conversions. A packed
        // operand (bf16) loads its pairs as words, unconverted: A 4, B 2
        int64_t tm = (m + 15) / 16, tn = (n + 7) / 8;
        int nt = XF_TEAM_TILE_N(xf_team_tile(tm, tn, w->warps));
        bool bf = w->mma == XF_MMA_BF16;
        double ia = bf && packed[LC_A] ? 4 : 12, ib = bf && packed[LC_B] ? 2 : bf && ldsm ? 1 : 6;
        double per_step = 10 + ia + nt * (4 + ib);
        units = (double)tm * ceil((double)tn / nt), serial = ceil(units / (coop ? w->warps : 1));
        steps = ceil(k / (bf ? 16.0 : 8.0)), nb = nc = nt;
        c.chain += serial * (steps * (per_step + 8) * ALU_NS + lat_of(mem));
        c.winstr += units * (steps * per_step + 12 + 8 * nt);
        c.flops += flops * FP32 / (w->mma == XF_MMA_BF16 ? BF16 : TF32);  // at the tensor cores' rate
      } else {  // a lane's 4 x 4 tiles of C, per k 8 loads and 16 FMAs
        double tiles = ceil(m / 4.0) * ceil(n / 4.0);
        serial = ceil(tiles / (coop ? w->lanes : 1)), units = ceil(tiles / 32), steps = (double)k;
        c.chain += serial * (k * 26 * ALU_NS + lat_of(mem));
        c.winstr += units * (k * 26 + 40), c.flops += flops;
      }
      double kwf = wf[LC_A] + nb * wf[LC_B], kacc = acc[LC_A] + nb * acc[LC_B];
      c.chain += serial * (steps * (kwf - kacc) + nc * (wf[LC_C] - acc[LC_C])) / CLOCK + (w->block ? 2 * LAT_LOCAL : 0);
      c.chain_iters += serial * steps;
      c.wshm += units * (steps * kwf + nc * wf[LC_C]), c.wshm_ideal += units * (steps * kacc + nc * acc[LC_C]);
      c.wl1 += units * (steps * (lines[LC_A] + nb * lines[LC_B]) + nc * lines[LC_C]);
      continue;
    }
    int64_t lo, trip = trip_of(w, st, &lo);
    bool spread = coop && (st->kind == LS_REDUCE || (st->kind == LS_FOR && st->par));
    double lane_trip = spread ? ceil((double)trip / w->lanes) : (double)trip;
    double wtrip = spread ? ceil((double)trip / 32) : (double)trip;
    SCost b;
    if (st->kind == LS_REDUCE) {
      XCost x = {0};
      bool had = w->e->known[st->ivar];
      int lane_var = w->lane_var;
      w->e->known[st->ivar] = true, w->e->val[st->ivar] = lo + trip / 2;
      if (spread) w->lane_var = st->ivar;
      xcost(w, st->val, &x);
      w->e->known[st->ivar] = had, w->lane_var = lane_var;
      x.ops += 1, x.flops += 1;
      b = (SCost){.chain = x.ops * ALU_NS + lat_of(x.mem) + x.replay / CLOCK, .winstr = x.ops, .flops = x.flops,
                  .wshm = x.shm, .wshm_ideal = x.loc, .wl1 = x.lines, .chain_iters = 1};
      if (st->wide) b.chain += 4 * ALU_NS, b.winstr += 4;
    } else {
      int lane_var = w->lane_var;
      if (spread) w->lane_var = st->var;
      b = walk_body(w, st->body, st->var, lo, trip, coop && !spread);
      w->lane_var = lane_var;
      for (int k = 0; k < st->ncarry; k++) {
        XCost x = {0};
        xcost(w, st->step[k], &x);
        b.chain += x.ops * ALU_NS + x.replay / CLOCK, b.winstr += x.ops * (coop ? w->warps : 1), b.flops += x.flops;
        b.wshm += x.shm * (coop ? w->warps : 1), b.wshm_ideal += x.loc * (coop ? w->warps : 1);
        b.wl1 += x.lines * (coop ? w->warps : 1);
      }
      b.chain_iters = b.chain_iters > 1 ? b.chain_iters : 1;
    }
    c.chain += lane_trip * b.chain, c.chain_iters += lane_trip * b.chain_iters;
    double warp_trip = spread ? wtrip : (double)trip;  // the loop's iterations a warp issues
    c.winstr += warp_trip * b.winstr, c.wshm += warp_trip * b.wshm, c.wshm_ideal += warp_trip * b.wshm_ideal;
    c.wl1 += warp_trip * b.wl1;
    c.flops += (double)trip * b.flops;
    if (spread && st->kind == LS_REDUCE) {  // the combine: a butterfly, or through shared memory with barriers
      double steps = log2(w->lanes > 1 ? w->lanes : 2);
      c.chain += steps * (LAT_LOCAL / 2) + (w->block ? 2 * LAT_LOCAL : 0);
      c.winstr += steps * 2 * w->warps;
    }
    if (st->kind == LS_REDUCE) w->e->known[st->var] = false;
  }
  c.chain += seg.ops * ALU_NS + (seg.ops ? lat_of(seg.mem) : 0) + seg.replay / CLOCK;
  c.winstr += seg.ops * wmul, c.flops += seg.flops, c.wshm += seg.shm * wmul, c.wshm_ideal += seg.loc * wmul;
  c.wl1 += seg.lines * wmul;
  return c;
}

// ---- one launch -------------------------------------------------------------------------

static double sym_at(XfSym z, int64_t B, int64_t T) {
  double v = (double)z.coef;
  for (int i = 0; i < z.pb; i++) v *= (double)B;
  for (int i = 0; i < z.pt; i++) v *= (double)T;
  return v / (double)(z.tdiv > 1 ? z.tdiv : 1);
}

// The bytes of the buffers a launch reads or writes (each once).
static double launch_bytes(const Schedule *s, const XfLaunch *rec, const bool *used, int64_t B, int64_t T) {
  double bytes = 0;
  for (int j = 0; j < XF_NSLOTS; j++) {
    if (rec->slots[j] < 0 || (used && !used[j])) continue;
    bool dup = false;
    for (int i = 0; i < j; i++) dup = dup || (rec->slots[i] == rec->slots[j] && (!used || used[i]));
    const Buffer *b = &s->bufs[rec->slots[j]];
    if (!dup) bytes += (double)symsize_eval(b->size, B, T) * (double)buffer_esize(b);
  }
  return bytes;
}

// The cost of launch rec of description lk.
static CudaCostRow cost_lkernel(const Schedule *s, const XfLaunch *rec, const LKernel *lk, int64_t B, int64_t T, int precision) {
  CudaCostRow r = {0};
  double items = sym_at(rec->items, B, T);
  bool elem = !rec->sync;
  r.block = rec->threads;
  double need = ceil(items / rec->per_block);
  r.grid = (int64_t)(need < MAX_BLOCKS ? need : MAX_BLOCKS);
  r.items = (int64_t)items;
  bool used[XF_NSLOTS] = {0};
  for (int j = 0; j < XF_NSLOTS; j++) used[j] = lk->slot_read[j] || lk->slot_written[j];
  r.bytes = launch_bytes(s, rec, used, B, T);
  int64_t *val = calloc((size_t)lk->nvars + 1, sizeof *val);
  bool *known = calloc((size_t)lk->nvars + 1, sizeof *known);
  const LExpr **defs = calloc((size_t)lk->nvars + 1, sizeof *defs);
  Ev e = {.lk = lk, .B = B, .T = T, .val = val, .known = known, .defs = defs, .lane = -1};
  int lanes = elem ? 1 : rec->threads / rec->per_block;
  Walk w = {.e = &e, .lanes = lanes, .warps = elem ? 1 : (lanes + 31) / 32, .block = lanes > 32,
            .mma = xf_team_mma(precision), .lane_var = -1};
  // the outer index sampled at COST_SAMPLES points of the golden-ratio
  // sequence (evenly spread, and at every residue of an outer index that
  // packs a block number with a power-of-two count: blk = o mod nb) and the
  // last one
  double outer = elem ? items / (double)symsize_eval(lk->ninner, B, T) : items;
  double chain_sum = 0, chain_max = 0, iters_max = 0, winstr = 0, flops = 0, wshm = 0, wshm_ideal = 0, wl1 = 0;
  int ns = 0;
  for (int k = 0; k <= COST_SAMPLES; k++) {
    double u = fmod(0.5 + k * 0.6180339887498949, 1.0);
    int64_t o = k < COST_SAMPLES ? (int64_t)(u * outer) : (int64_t)outer - 1;
    memset(known, 0, sizeof *known * ((size_t)lk->nvars + 1));
    val[0] = o < 0 ? 0 : o, known[0] = true;
    SCost c = walk(&w, lk->body, !elem);
    if (elem) {  // the body's one par loop is a thread's element: cost one iteration, plus the
                 // outer index the printer divides out of the element index (cuda.c XF_ELEM_LOOP)
      const LStmt *st = lk->body;
      while (st && st->kind == LS_LET) st = st->next;
      if (st && st->kind == LS_FOR) {
        int64_t lo, trip = trip_of(&w, st, &lo);
        double t = trip ? (double)trip : 1;
        c.chain /= t, c.chain_iters /= t, c.winstr /= t, c.flops /= t, c.wshm /= t, c.wshm_ideal /= t, c.wl1 /= t;
      }
      c.chain += 20 * ALU_NS, c.winstr += 20;
    }
    if (c.chain > chain_max) chain_max = c.chain;
    if (c.chain_iters > iters_max) iters_max = c.chain_iters;
    if (k < COST_SAMPLES) chain_sum += c.chain, winstr += c.winstr, flops += c.flops, wshm += c.wshm, wshm_ideal += c.wshm_ideal, ns++;
    if (k < COST_SAMPLES) wl1 += c.wl1;
  }
  free(val), free(known), free(defs);
  double chain_avg = chain_sum / ns;
  // totals over the launch: an element per thread (ELEM), or a row per team
  double units = elem ? items : outer, warps_per_unit = elem ? 1.0 / 32 : w.warps;
  double total_winstr = elem ? units * winstr / ns / 32 : units * winstr / ns;
  double total_wshm = (elem ? units / 32 : units) * wshm / ns, total_wshm_ideal = (elem ? units / 32 : units) * wshm_ideal / ns;
  double total_wl1 = (elem ? units / 32 : units) * wl1 / ns;
  r.flops = units * flops / ns;
  r.chain = iters_max;
  double sms = r.grid < SMS ? (double)r.grid : SMS;
  double per_sm = MAX_THREADS_SM / rec->threads;
  if (per_sm > MAX_BLOCKS_SM) per_sm = MAX_BLOCKS_SM;
  if (rec->shmem > 0 && per_sm > SHMEM_SM / (rec->shmem + 1024.0)) per_sm = floor(SHMEM_SM / (rec->shmem + 1024.0));
  if (per_sm < 1) per_sm = 1;
  double blocks_sm = ceil(need / sms), resident = (blocks_sm < per_sm ? blocks_sm : per_sm) * rec->threads / 32;
  if (elem && items < rec->threads * blocks_sm * sms) resident = fmin(resident, ceil(items / 32 / sms));
  double chains_sm = units * warps_per_unit * chain_avg / sms;  // warp-seconds of chain on one SM
  double rounds = ceil(need / (double)r.grid);
  r.mem_us = r.bytes / BW * 1e6;
  r.flop_us = r.flops / FP32 * 1e6;
  r.issue_us = total_winstr / (SMS * 4 * CLOCK) * 1e6;
  double issue_used = total_winstr / (sms * 4 * CLOCK) * 1e6;
  r.lat_us = fmax(chains_sm / fmax(resident, 1), chain_max * rounds) * 1e6;
  // shared memory: a wavefront per clock per SM
  r.shm_us = total_wshm / (sms * CLOCK) * 1e6, r.shm_ideal_us = total_wshm_ideal / (sms * CLOCK) * 1e6;
  // global accesses: a 128-byte line per clock per SM through L1, the
  // pipeline that serves shared memory too
  r.l1_us = total_wl1 / (sms * CLOCK) * 1e6;
  r.us = fmax(fmax(r.mem_us, r.flop_us), fmax(issue_used + r.shm_us + r.l1_us, r.lat_us)) + LAUNCH * 1e6;
  return r;
}

// count products C = op(A) op(B) of m x k by k x n; an operand shared by
// every entry (shared[LG_*]) is read once; types: XF_GEMM_*_BF16, the
// operands of 2 bytes an element.
static CudaCostRow cost_product(double m, double n, double k, double cnt, const bool shared[3], int precision, int types) {
  CudaCostRow r = {.gemm = true};
  r.flops = 2 * m * n * k * cnt;
  double ea = types & XF_GEMM_A_BF16 ? 2 : 4, eb = types & XF_GEMM_B_BF16 ? 2 : 4, ec = types & XF_GEMM_C_BF16 ? 2 : 4;
  r.bytes = ea * m * k * (shared[LG_A] ? 1 : cnt) + eb * k * n * (shared[LG_B] ? 1 : cnt) + ec * m * n * (shared[LG_C] ? 1 : cnt);
  r.items = (int64_t)(m * n * cnt);
  double peak = precision == XF_PRECISION_FP32 ? FP32 : precision == XF_PRECISION_BF16 ? BF16 : TF32;
  r.mem_us = r.bytes / BW * 1e6, r.flop_us = r.flops / peak * 1e6;
  r.us = fmax(r.flops / (GEMM_EFF_FLOP * peak), r.bytes / (GEMM_EFF_BW * BW)) * 1e6 + GEMM_FIXED * 1e6;
  return r;
}

// A GEMM record.
static CudaCostRow cost_gemm(const XfLaunch *rec, int64_t B, int64_t T, int precision) {
  bool shared[3] = {sym_at(rec->stride_a, B, T) == 0, sym_at(rec->stride_b, B, T) == 0, sym_at(rec->stride_c, B, T) == 0};
  return cost_product(sym_at(rec->m, B, T), sym_at(rec->n, B, T), sym_at(rec->k, B, T), sym_at(rec->count, B, T), shared,
                      precision, rec->types);
}

// The direct product of a batch that is not flat (cuda.c render_gemm_direct):
// a thread per element of C, its k terms in order, on the FP32 cores; every
// operand counted once per entry.
static CudaCostRow cost_gemm_direct(const XfLaunch *rec, const LGemm *gm, int64_t B, int64_t T) {
  bool shared[3] = {false, false, false};
  double k = (double)symsize_eval(gm->k, B, T);
  CudaCostRow r = cost_product((double)symsize_eval(gm->m, B, T), (double)symsize_eval(gm->n, B, T), k,
                               (double)symsize_eval(gm->count, B, T), shared, XF_PRECISION_FP32, 0);
  r.gemm = false, r.block = rec->threads;
  r.grid = (int64_t)fmin(ceil((double)r.items / rec->per_block), MAX_BLOCKS);
  r.chain = k, r.lat_us = k * (LAT_GLOBAL + 2 * ALU_NS) * 1e6;
  r.us = fmax(r.mem_us, fmax(r.flop_us, r.lat_us)) + LAUNCH * 1e6;
  return r;
}

// ---- the training step -------------------------------------------------------------------

static int find_row(CudaCost *c, int cls, int step) {
  for (int i = 0; i < c->nrows; i++)
    if (c->rows[i].cls == cls && c->rows[i].step == step) return i;
  return -1;
}

static void add_launch(CudaCost *c, CudaCostRow r, int cls, int step, const char *what, const Node *n) {
  int i = find_row(c, cls, step);
  if (i < 0) {
    i = c->nrows++;
    r.cls = cls, r.step = step, r.what = what, r.node = n, r.launches = 0;
    c->rows[i] = r;
  }
  c->rows[i].launches++;
  c->total_us += r.us;
  if (r.gemm) c->ngemms++;
  else c->nkernels++;
}

// The optimizer of a step without --accum (cuda.c render_optimizer), a
// block of XF_OPT_THREADS per chunk of XF_ADAM_CHUNK: the gradient norm's
// partial sums (every gradient read once, a double per chunk written), their
// sum in one block (a thread's chain: its share of the chunks), and AdamW
// (w m v g read, w m v written, and a bf16 twin where a parameter has one).
// A chain link is a dependent global load.
static void add_optimizer(CudaCost *c, double params, double twins) {
  double chunks = ceil(params / XF_ADAM_CHUNK), grid = fmin(chunks, MAX_BLOCKS);
  const struct {
    const char *what;
    double items, bytes, flops, grid, chain;
  } k[3] = {{"grad_norm", params, 4 * params + 8 * chunks, 2 * params, grid, XF_ADAM_CHUNK / XF_OPT_THREADS},
            {"grad_norm_sum", chunks, 8 * chunks, chunks, 1, ceil(chunks / XF_OPT_THREADS)},
            {"adamw", params, 28 * params + 2 * twins, 14 * params, grid, XF_ADAM_CHUNK / XF_OPT_THREADS}};
  for (int i = 0; i < 3; i++) {
    CudaCostRow r = {.what = k[i].what, .cls = -1, .step = 0, .items = (int64_t)k[i].items, .bytes = k[i].bytes,
                     .flops = k[i].flops, .block = XF_OPT_THREADS, .grid = (int64_t)k[i].grid, .chain = k[i].chain};
    r.mem_us = r.bytes / BW * 1e6, r.flop_us = r.flops / FP32 * 1e6, r.lat_us = r.chain * LAT_GLOBAL * 1e6;
    r.us = fmax(fmax(r.mem_us, r.flop_us), r.lat_us) + LAUNCH * 1e6;
    r.launches = 1;
    c->rows[c->nrows++] = r;
    c->total_us += r.us, c->nkernels++;
  }
}

CudaCost *cuda_cost(Arena *a, const Schedule *s, const CudaModule *m, int64_t B, int64_t T, int precision,
                    char *err, size_t errlen) {
  const Graph *g = s->g;
  CudaCost *c = arena_alloc(a, sizeof *c);
  c->B = B, c->T = T;
  int nl = m->nlaunch[PROG_TRAIN];
  c->rows = arena_alloc(a, sizeof(CudaCostRow) * (size_t)(nl + 4));
  err[0] = 0;
  const XfLaunch *L = m->launch[PROG_TRAIN];
  const CudaLaunchDesc *D = m->desc[PROG_TRAIN];
  for (int i = 0; i < nl; i++) {
    const Kernel *k = &s->kernels[L[i].kernel];
    const Node *n = &g->nodes[k->node];
    const CudaLaunchDesc *d = &D[i];
    if (d->lk) add_launch(c, cost_lkernel(s, &L[i], d->lk, B, T, precision), k->cls, d->step, d->lk->name, n);
    else if (d->gm && L[i].kind == XF_LAUNCH_GEMM)
      add_launch(c, cost_gemm(&L[i], B, T, precision), k->cls, d->step ? d->step : -1, d->step ? "conv_gemm" : "gemm", n);
    else if (d->gm) add_launch(c, cost_gemm_direct(&L[i], d->gm, B, T), k->cls, -2, "gemm_direct", n);
    else {
      snprintf(err, errlen, "internal error: cuda_cost: launch %d (kernel %d, %s) has no description", i, L[i].kernel,
               ir_op_info[n->op].name);
      return NULL;
    }
  }
  double params = 0, twins = 0;
  for (int b = 0; b < s->nbufs; b++) {
    if (s->bufs[b].role == BUF_PARAM && s->bufs[b].alias_of < 0) params += (double)symsize_eval(s->bufs[b].size, B, T);
    if (s->bufs[b].role == BUF_TWIN) twins += (double)symsize_eval(s->bufs[b].size, B, T);
  }
  add_optimizer(c, params, twins);
  for (int i = 0; i < c->nrows; i++) {
    CudaCostRow *q = &c->rows[i];
    double bound = fmax(q->mem_us, fmax(q->flop_us, q->issue_us));
    q->few_blocks = !q->gemm && q->grid < SMS && q->us > 20;
    q->serial = !q->gemm && q->us > 20 && q->us > 4 * fmax(bound, q->shm_us + q->l1_us);
    q->banks = !q->gemm && q->us > 20 && q->shm_us - q->shm_ideal_us > 0.5 * q->us;
  }
  return c;
}

void cuda_cost_print(FILE *f, const CudaCost *c) {
  fprintf(f, "# GPU cost of a training step at B %lld, T %lld on an H100 SXM (132 SMs, 3.35 TB/s, 67 TFLOP/s FP32,\n"
             "# 495 TFLOP/s TF32; docs/cuda.md, \"The cost model\"): per kernel class, the estimate of one launch\n",
          (long long)c->B, (long long)c->T);
  fprintf(f, "%-8s %-26s %8s %7s %5s %11s %9s %9s %9s %9s %9s %9s %9s  %s\n", "class", "kernel", "launches", "grid",
          "block", "items", "chain", "MB", "GFLOP", "mem us", "cmp us", "lat us", "est us", "where");
  for (int i = 0; i < c->nrows; i++) {
    const CudaCostRow *r = &c->rows[i];
    char cls[32];
    if (r->cls < 0) snprintf(cls, sizeof cls, "-");
    else if (r->step > 0) snprintf(cls, sizeof cls, "k%d.s%d", r->cls, r->step);
    else if (r->step == CUDA_STEP_STAGE) snprintf(cls, sizeof cls, "k%d.st", r->cls);
    else snprintf(cls, sizeof cls, "k%d", r->cls);
    char where[300] = "";
    if (r->node && r->node->loc.file) snprintf(where, sizeof where, "%s:%d", r->node->loc.file, r->node->loc.line);
    fprintf(f, "%-8s %-26s %8d %7lld %5d %11lld %9.0f %9.2f %9.3f %9.1f %9.1f %9.1f %9.1f  %s%s%s%s\n", cls, r->what,
            r->launches, (long long)r->grid, r->block, (long long)r->items, r->chain, r->bytes / 1048576.0, r->flops / 1e9,
            r->mem_us, fmax(fmax(r->flop_us, r->issue_us), r->shm_us + r->l1_us), r->lat_us, r->us, where,
            r->few_blocks ? " CLIFF:few-blocks" : "", r->serial ? " CLIFF:serial" : "", r->banks ? " CLIFF:banks" : "");
  }
  int cliffs = 0;
  for (int i = 0; i < c->nrows; i++) cliffs += c->rows[i].few_blocks || c->rows[i].serial || c->rows[i].banks;
  fprintf(f, "cliffs: %d\n", cliffs);
  fprintf(f, "total: %d kernel launches, %d GEMMs, estimated %.0f us per training step\n", c->nkernels, c->ngemms,
          c->total_us);
}
