// stepmem.c: the storage of the step program (incremental decoding): which
// of its buffers are caches and which are workspace.
//
// Requires: a schedule and the time axes of causal_analyze for its graph.
// Guarantees: every storage root the sampling program touches, beside the
// parameters, once, in the order the program first touches it, with
//   - cache: a later run of the step program reads rows of it outside its own
//     window (positions computed by earlier runs), so it keeps its contents
//     between runs and has storage of its own; also the token input;
//   - else workspace: every run writes the rows it reads before reading them,
//     so its contents may die with the run: lifetime [first, last] in the
//     global kernel order (last = nkernels: the host reads it after the run,
//     the logits), for memplan to share storage between such buffers.
//
// A run computes positions [w0, w1) of every value with a time axis
// (lower_window); it reads rows outside that window only where an op mixes
// positions (passes/causal.c lists them): the keys and values of attention,
// the input of a causal convolution, the input of a shift along time, the
// state row of a scan along time (h_{w0-1}, one position per sequence), the
// right operand of a product whose rows are the window (q k^T, p v), an
// operand of an elementwise op indexed by key position (a bias f(i, j) built
// from iota(T) as [1, T]), and
// every input with a time axis of a kernel that computes all of its output
// (LW_FULL), which then reads the rows of earlier positions too. Both targets' forms are consulted, so one
// plan serves the CPU and the GPU.
#include <stdlib.h>

#include "loops.h"

enum { BACK_ALL = -1 };  // a lookback without bound: every earlier position

// back[i]: how many positions before the run's window kernel k, on either
// target, reads of its input i (leaf k->leaf[i]): 0 none, BACK_ALL every one.
static void history_inputs(const Schedule *s, const int *ta, const Kernel *k, int64_t back[KERNEL_MAX_IN]) {
  const Graph *g = s->g;
  bool full = false;
  for (int t = 0; t < 2; t++) full = full || lower_window(s, ta, k, t ? LTARGET_GPU : LTARGET_CPU).kind == LW_FULL;
  for (int i = 0; i < k->nin; i++) back[i] = full && ta[k->leaf[i]] >= 0 ? BACK_ALL : 0;  // no positions: the same at every step
  if (full) return;
  for (int m = 0; m < g->nnodes; m++) {
    if (m != k->node && s->group[m] != k->node) continue;
    const Node *n = &g->nodes[m];
    int reads[IR_MAX_IN + 1], nr = 0;  // the leaves n reads at earlier positions (ir.h IR_P_HIST) ...
    int64_t by[IR_MAX_IN + 1];         // ... and how far back
    for (int i = 0; i < n->nin; i++)
      if (ir_op_info[n->op].props & IR_P_HIST(i)) {
        int64_t b = BACK_ALL;
        if (n->op == OP_SHIFT) b = n->start;                                        // x_{t-s}
        if (n->op == OP_CAUSAL_CONV) b = g->nodes[n->in[1]].shape.d[0].n - 1;       // x_{t-L+1} .. x_t
        if ((n->op == OP_ATTENTION || n->op == OP_ATTENTION_LSE) && n->start > 0) b = n->start - 1;  // keys i - W < j <= i
        by[nr] = b, reads[nr++] = n->in[i];
      }
    if (n->op == OP_SHIFT && !(n->start > 0 && ta[n->in[0]] == n->axis)) nr = 0;  // later positions, or none
    if (ir_op_info[n->op].cat == OPC_UNARY || ir_op_info[n->op].cat == OPC_BINARY)
      for (int i = 0; i < n->nin; i++) {  // an operand indexed by key position (causal.c): read at every key
        const Node *in = &g->nodes[n->in[i]];
        int a = ta[in->id] < 0 ? -1 : ta[in->id] + n->shape.rank - in->shape.rank;
        if (a >= 0 && ta[m] >= 0 && a != ta[m]) by[nr] = BACK_ALL, reads[nr++] = in->id;
      }
    if (n->op == OP_MATMUL) {  // rows of the left operand are the window's; the right one is read whole
      const Node *y = &g->nodes[n->in[1]];
      by[nr] = BACK_ALL, reads[nr++] = n->in[1];
      if (y->op == OP_TRANSPOSE) by[nr] = BACK_ALL, reads[nr++] = y->in[0];
    }
    for (int i = 0; i < k->nin; i++)
      for (int r = 0; r < nr; r++)
        if (ta[k->leaf[i]] >= 0 && k->leaf[i] == reads[r] && back[i] != BACK_ALL && by[r] != 0)
          back[i] = by[r] == BACK_ALL || by[r] > back[i] ? by[r] : back[i];
  }
}

int64_t step_frame(const Schedule *s, const StepBuf *sb, int n) {
  int64_t H = 1;  // a scan's first position is told by w0 > 0: one earlier row at least
  for (int i = 0; i < n; i++) {
    if (sb[i].back == BACK_ALL) return 0;
    if (sb[i].back > H) H = sb[i].back;
  }
  if (n < 0 || H + 1 >= s->g->t_max) return 0;
  // the runtime moves each cache along its one time axis (runtime/sampler.c)
  for (int i = 0; i < n; i++) {
    const Buffer *b = &s->bufs[sb[i].buf];
    const Shape *sh = &s->g->nodes[b->node].shape;
    int nt = 0;
    for (int a = 0; a < sh->rank; a++) nt += sh->d[a].kind == DIM_T;
    if (sb[i].cache && b->size.pt > 0 && !(b->size.pt == 1 && nt == 1 && symsize_eq(b->size, symsize_prod(sh, 0, sh->rank))))
      return 0;
  }
  return H + 1;
}

int step_buffers(const Schedule *s, const int *time_axis, StepBuf *out) {
  int n = 0, *at = malloc(sizeof(int) * ((size_t)s->nbufs + 1));
  if (!at) return -1;
  for (int b = 0; b < s->nbufs; b++) at[b] = -1;
  for (int i = 0; i < s->nprog[PROG_SAMPLE]; i++) {
    int ki = s->prog[PROG_SAMPLE][i];
    const Kernel *k = &s->kernels[ki];
    int slot[KS_IMM];
    int64_t back[KERNEL_MAX_IN];
    kernel_slots(s, k, slot);
    history_inputs(s, time_axis, k, back);
    // a scan along time starts from its state row, h_{w0-1} as the run before left it
    const Node *kn = &s->g->nodes[k->node];
    bool state = schedule_scan_state(kn) && time_axis[k->node] == kn->axis;
    for (int j = 0; j < KS_IMM; j++) {
      int b = slot[j];
      if (b < 0 || s->bufs[b].role == BUF_PARAM || s->bufs[b].role == BUF_TWIN) continue;  // the runtime's
      if (at[b] < 0) {
        at[b] = n;
        out[n++] = (StepBuf){.buf = b, .cache = s->bufs[b].role == BUF_INPUT, .first = ki, .last = ki};
      }
      StepBuf *sb = &out[at[b]];
      sb->last = s->bufs[b].role == BUF_OUTPUT ? s->nkernels : ki;
      int64_t bk = j >= KS_IN0 && j < KS_IN0 + k->nin ? back[j - KS_IN0] : 0;
      if (bk != 0) sb->cache = true;
      if (bk == BACK_ALL || (sb->back != BACK_ALL && bk > sb->back)) sb->back = bk;
      if (j == KS_SCRATCH && state) sb->cache = sb->state = true;
    }
  }
  free(at);
  return n;
}
