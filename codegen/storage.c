// storage.c: bf16 storage of activations (xfc --precision=bf16).
//
// Requires: a built schedule (schedule_build) whose buffers are all float32
// storage; gpu: it is a --target=cuda schedule (its CPU code and its CUDA
// code read the same buffers).
// Guarantees: an activation is stored in bf16 (Buffer.bf16, the root and
// its aliases alike) when every kernel touching it accesses it through a
// form that converts at the access, on the CPU and (gpu) on a GPU: an
// LKernel's LX_LOAD / LS_STORE, an LGemm's operand A, B or C (on a GPU a
// flat one: a GEMM record), unless it is one of the values that keep
// float32:
//   - row statistics and sums: reductions, log-sum-exps, the norms' row
//     terms, per-row losses, softmax probabilities (keeps_f32);
//   - values of no parameter and no input (positions, sizes, masks);
//   - a recurrence's decays (SCAN, SCAN_REV, SCAN_READ(_GRAD) operand a);
//   - what a kernel reads back after writing it (a recurrence's states,
//     sums accumulated in place), a kernel's own scratch and the row terms
//     it writes for another kernel;
//   - what reaches an LX_TOI (indices stored as floats).
// Parameters, their gradients, inputs and outputs are float32, and so is
// every activation a CPU convolution, a GPU's team GEMM on a slot, the C
// a CPU kernel's own GEMM call (LS_GEMM) accumulates into (beta != 0) or
// reads back, a GPU's steps with a GEMM record among them or direct
// product, or a kernel without a lowering touches (a CPU kernel's GEMM call
// reads an A or B, and writes a C, of either storage: xf_gemm_ex). cuBLAS
// multiplies bf16 by bf16 only: a GPU product whose
// A and B differ in storage reads a bf16 copy of the float32 one,
// Kernel.stage: a parameter's twin (BUF_TWIN, persistent, rewritten by the
// optimizer), else a scratch buffer of the kernel's own that it fills before
// the product. Kernel.cls then also tells apart the kernels of one class
// whose slots differ in storage or whose copy is a twin, so that one
// function serves each class (lower_module marks LKernel.slot_bf16 and
// LGemm.bf16 from the class's representative, and rounds a stored value at
// its computation so that a fused kernel's own uses of it see what is
// stored).
//
// A value stored in bf16 is rounded to nearest even as it is written; every
// computation reads it back widened to float32 and computes in float32, as
// the float32 schedule does.
#include <string.h>

#include "loops.h"

// Marks the slots some LS_GEMM of the statements from st on reads as its A
// or B (ab[]), accumulates into as its C (acc[]: beta != 0) or writes as its
// C (out[]: beta 0).
static void gemm_slots(const LStmt *st, bool *ab, bool *acc, bool *out) {
  for (; st; st = st->next) {
    if (st->kind == LS_GEMM)
      for (int x = LC_A; x <= LC_C; x++) {
        int j = st->call->slot[x];
        if (j >= 0 && j < KS_IMM) *(x != LC_C ? &ab[j] : st->call->beta != 0 ? &acc[j] : &out[j]) = true;
      }
    if (st->body) gemm_slots(st->body, ab, acc, out);
  }
}

// The slots whose loads reach an LX_TOI (an index a kernel stored as f32,
// exact below 2^24; bf16 holds integers exactly only to 256), through the
// variables defined from them: OR-ed into *idx. vmask[v]: the slots variable
// v's value was loaded from.
static uint32_t expr_loads(const LExpr *x, const uint32_t *vmask, uint32_t *idx) {
  if (!x) return 0;
  uint32_t m = 0;
  for (int i = 0; i < 3; i++) m |= expr_loads(x->a[i], vmask, idx);
  if (x->kind == LX_LOAD && x->slot >= 0 && x->slot < KS_IMM) m |= 1u << x->slot;
  if (x->kind == LX_VAR) m |= vmask[x->var];
  if (x->kind == LX_TOI) *idx |= m;
  return m;
}

static void stmt_loads(const LStmt *st, uint32_t *vmask, uint32_t *idx) {
  for (; st; st = st->next) {
    uint32_t m = expr_loads(st->val, vmask, idx) | expr_loads(st->idx, vmask, idx) | expr_loads(st->lo, vmask, idx) |
                 expr_loads(st->hi, vmask, idx);
    for (int c = 0; c < st->ncarry; c++) m |= expr_loads(st->init[c], vmask, idx);
    if (st->kind == LS_LET || st->kind == LS_REDUCE) vmask[st->var] |= m;
    for (int c = 0; c < st->ncarry; c++) vmask[st->carry[c]] |= m;
    if (st->body) stmt_loads(st->body, vmask, idx);
    for (int c = 0; c < st->ncarry; c++) vmask[st->carry[c]] |= expr_loads(st->step[c], vmask, idx);
  }
}

// Which of kernel k's slots its class's form accesses element by element
// with a conversion (ok[slot]); false for every slot of a form that takes
// pointers (a convolution, steps with a GEMM record among them, a kernel
// with an error). Steps of loops alone (a GPU's blocked attention gradient)
// count as one kernel's loops.
static void convertible_slots(Arena *a, const LClass *c, LTarget tgt, bool ok[KS_IMM]) {
  for (int j = 0; j < KS_IMM; j++) ok[j] = false;
  if (c->err || c->conv || (c->steps && !lsteps_all_loops(c->steps))) return;
  if (c->gemm)
    for (int x = 0; x < 3; x++) ok[c->gemm->slot[x]] = true;
  const LKernel *v[LSTEPS_MAX + 2] = {c->train, c->infer};
  int nv = 2;
  if (c->steps)
    for (int i = nv = 0; i < c->steps->n; i++) v[nv++] = c->steps->lk[i];
  bool ab[KS_COUNT] = {false}, acc[KS_COUNT] = {false}, out[KS_COUNT] = {false}, elem[KS_IMM] = {false};
  bool read[KS_IMM] = {false}, written[KS_IMM] = {false};
  for (int i = 0; i < nv; i++)
    if (v[i]) gemm_slots(v[i]->body, ab, acc, out);
  for (int i = 0; i < nv; i++)
    for (int j = 0; v[i] && j < KS_IMM; j++) {
      elem[j] |= (v[i]->slot_read[j] || v[i]->slot_written[j]) && !v[i]->slot_int[j];
      read[j] |= v[i]->slot_read[j], written[j] |= v[i]->slot_written[j];
    }
  // a kernel's own GEMM call (LS_GEMM) on a slot: on a CPU (xf_gemm_ex,
  // its types from LKernel.slot_bf16) an A or B of either storage, and a C
  // written (beta 0) and not read back; a C accumulated in place across
  // calls (beta != 0) keeps float32. A GPU's team GEMMs take float32
  // operands in global memory.
  for (int j = 0; j < KS_IMM; j++) {
    bool called = ab[j] || acc[j] || out[j];
    if (elem[j] || called) ok[j] = tgt == LTARGET_GPU ? !called : !acc[j] && !(out[j] && read[j]);
  }
  // a GPU's direct product (not flat) reads and writes float32
  if (c->gemm && tgt == LTARGET_GPU && !c->gemm->flat)
    for (int x = 0; x < 3; x++) ok[c->gemm->slot[x]] = false;
  // a slot the loops (any of the steps) read back after writing it (a
  // recurrence's earlier states, sums accumulated in place) keeps float32,
  // so that nothing is carried through bf16; the epilogue's read of the
  // product's C is not such
  for (int j = 0; j < KS_IMM; j++)
    if (read[j] && written[j] && !(c->gemm && j == c->gemm->slot[LG_C])) ok[j] = false;
  for (int i = 0; i < nv; i++) {
    if (!v[i]) continue;
    uint32_t *vmask = arena_alloc(a, sizeof *vmask * ((size_t)v[i]->nvars + 1)), idx = 0;
    stmt_loads(v[i]->body, vmask, &idx);
    for (int j = 0; j < KS_IMM; j++)
      if (idx >> j & 1) ok[j] = false;
  }
}

// Values kept in float32 whatever their accesses: the statistics of rows
// (reductions, log-sum-exps, the norms' row sums), per-row losses and
// probabilities (softmax), and the top-k's indices.
static bool keeps_f32(const Node *n) {
  switch (n->op) {
  case OP_ATTENTION_LSE: case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_LSE: case OP_LAYERNORM_DYXH: case OP_RMSNORM_DYXH:
  case OP_SOFTMAX: case OP_TOPK: return true;
  default: return ir_op_info[n->op].cat == OPC_REDUCE;
  }
}

// A GPU product's A and B of different storage: its float32 operand's bf16
// copy (Kernel.stage, the operand's size, bf16): a parameter's twin
// (BUF_TWIN, one per parameter, kept current by the optimizer), else a
// scratch copy the kernel makes before the product. False when the
// schedule's buffer table has no room for every copy (then none is made).
static bool stage_products(Schedule *s, const LModule *gpu) {
  int slot[KS_IMM], need = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1 && s->nbufs + need > s->g->nnodes * 4) return false;
    for (int ki = 0; ki < s->nkernels; ki++) {
      Kernel *k = &s->kernels[ki];
      const LGemm *gm = gpu->cls[k->cls].gemm;
      if (!gm) continue;
      kernel_slots(s, k, slot);
      int a = slot[gm->slot[LG_A]], b = slot[gm->slot[LG_B]];
      if (s->bufs[a].bf16 == s->bufs[b].bf16) continue;
      if (pass == 0) {
        need++;
        continue;
      }
      int x = s->bufs[a].bf16 ? b : a;
      k->stage = s->bufs[x].role == BUF_PARAM ? schedule_param_twin(s, x, ki) : schedule_kernel_scratch(s, ki, s->bufs[x].size);
      if (k->stage < 0) return false;
      s->bufs[k->stage].bf16 = true;
    }
  }
  return true;
}

int schedule_storage(Arena *a, Schedule *s, bool gpu) {
  s->tiles_bf16 = gpu;
  LModule *m[2] = {lower_module(a, s, LTARGET_CPU, NULL), gpu ? lower_module(a, s, LTARGET_GPU, NULL) : NULL};
  bool *cand = arena_alloc(a, sizeof(bool) * ((size_t)s->nbufs + 1));
  for (int b = 0; b < s->nbufs; b++)
    cand[b] = s->bufs[b].alias_of < 0 && s->bufs[b].role == BUF_ACT && s->bufs[b].dtype == DT_F32 && s->bufs[b].first >= 0;
  // values that depend on no parameter and no input (positions from iota,
  // sizes, masks, position tables: integers past 256 are not bf16's) keep
  // float32; they have no batch axis, so they are small
  const Graph *g = s->g;
  bool *varies = arena_alloc(a, sizeof(bool) * ((size_t)g->nnodes + 1));
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    varies[i] = n->op == OP_PARAM || n->op == OP_INPUT;
    for (int j = 0; j < n->nin; j++) varies[i] |= varies[n->in[j]];
  }
  for (int b = 0; b < s->nbufs; b++)
    if (keeps_f32(&g->nodes[s->bufs[b].node]) || !varies[s->bufs[b].node]) cand[schedule_root(s, b)] = false;
  // a recurrence's decays (a of SCAN, SCAN_REV, SCAN_READ(_GRAD)) keep
  // float32: their products over many positions would compound the rounding
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    int d = n->op == OP_SCAN || n->op == OP_SCAN_REV ? 0 : n->op == OP_SCAN_READ || n->op == OP_SCAN_READ_GRAD ? 3 : -1;
    if (d >= 0 && s->buf_of[n->in[d]] >= 0) cand[schedule_root(s, s->buf_of[n->in[d]])] = false;
  }
  for (int ki = 0; ki < s->nkernels; ki++) {
    const Kernel *k = &s->kernels[ki];
    int slot[KS_IMM];
    bool ok[KS_IMM], ok_gpu[KS_IMM];
    kernel_slots(s, k, slot);
    convertible_slots(a, &m[0]->cls[k->cls], LTARGET_CPU, ok);
    if (gpu) convertible_slots(a, &m[1]->cls[k->cls], LTARGET_GPU, ok_gpu);
    for (int j = 0; gpu && j < KS_IMM; j++) ok[j] &= ok_gpu[j];
    // a kernel's own scratch (row statistics, partial sums, a scan's state)
    // and the row terms it writes for another kernel stay float32
    if (k->stored < 0 && slot[KS_SCRATCH] >= 0) cand[slot[KS_SCRATCH]] = false;
    if (k->terms >= 0) cand[schedule_root(s, k->terms)] = false;
    for (int i = 0; i < 2; i++)
      if (k->xscratch[i] >= 0) cand[schedule_root(s, k->xscratch[i])] = false;
    for (int j = 0; j < KS_IMM; j++)
      if (slot[j] >= 0 && !ok[j]) cand[slot[j]] = false;
  }
  // cuBLAS rounds a product to a bf16 C only from bf16 operands: a GPU
  // product of float32 A and B keeps a float32 C (to a fixed point: a C made
  // float32 may be another product's operand)
  for (bool changed = gpu; changed;) {
    changed = false;
    for (int ki = 0; ki < s->nkernels; ki++) {
      const LGemm *gm = m[1]->cls[s->kernels[ki].cls].gemm;
      int slot[KS_IMM];
      if (!gm) continue;
      kernel_slots(s, &s->kernels[ki], slot);
      int c = slot[gm->slot[LG_C]];
      if (cand[c] && !cand[slot[gm->slot[LG_A]]] && !cand[slot[gm->slot[LG_B]]]) cand[c] = false, changed = true;
    }
  }
  int nbf16 = 0;
  for (int b = 0; b < s->nbufs; b++) {
    s->bufs[b].bf16 = cand[schedule_root(s, b)];
    nbf16 += s->bufs[b].alias_of < 0 && s->bufs[b].bf16;
  }
  if (gpu && !stage_products(s, m[1])) {  // the buffer table is full: float32 storage throughout
    for (int b = 0; b < s->nbufs; b++) s->bufs[b].bf16 = false;
    return 0;
  }
  // the classes again, now also by the storage of each slot
  uint32_t *key = arena_alloc(a, sizeof(uint32_t) * ((size_t)s->nkernels + 1));
  int *old = arena_alloc(a, sizeof(int) * ((size_t)s->nkernels + 1));
  s->nclasses = 0;
  for (int ki = 0; ki < s->nkernels; ki++) {
    Kernel *k = &s->kernels[ki];
    int slot[KS_IMM];
    kernel_slots(s, k, slot);
    key[ki] = 0;
    for (int j = 0; j < KS_IMM; j++)
      if (slot[j] >= 0 && s->bufs[slot[j]].bf16) key[ki] |= 1u << j;
    if (k->stage >= 0 && s->bufs[k->stage].role == BUF_TWIN) key[ki] |= 1u << KS_IMM;
    old[ki] = k->cls;
    int c = ki;
    for (int j = old[ki]; j < ki; j++)
      if (old[j] == old[ki] && key[j] == key[ki]) {
        c = s->kernels[j].cls;
        break;
      }
    k->cls = c;
    s->nclasses += c == ki;
  }
  return nbf16;
}
