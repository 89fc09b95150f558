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
// the input of a causal convolution, the right operand of a product whose
// rows are the window (q k^T, p v), and every input with a time axis of a
// kernel that computes all of its output (LW_FULL), which then reads the
// rows of earlier positions too. Both targets' forms are consulted, so one
// plan serves the CPU and the GPU.
#include <stdlib.h>

#include "loops.h"

// Whether kernel k, on either target, reads rows of its input leaf `leaf`
// (an IR node whose value it reads) outside the window of the run.
static bool reads_history(const Schedule *s, const int *ta, const Kernel *k, int leaf) {
  const Graph *g = s->g;
  if (ta[leaf] < 0) return false;  // no positions: the same value at every step
  for (int t = 0; t < 2; t++)
    if (lower_window(s, ta, k, t ? LTARGET_GPU : LTARGET_CPU).kind == LW_FULL) return true;
  for (int i = 0; i < g->nnodes; i++) {
    if (i != k->node && s->group[i] != k->node) continue;
    const Node *n = &g->nodes[i];
    switch (n->op) {
    case OP_ATTENTION:  // q [.., T, h] at the window's rows; k, v at every earlier one
      if (leaf == n->in[1] || leaf == n->in[2]) return true;
      break;
    case OP_CAUSAL_CONV:  // out_i = sum_{j <= i} x_j (.) w_{i-j}
      if (leaf == n->in[0]) return true;
      break;
    case OP_MATMUL: {  // rows of the left operand are the window's; the right one is read whole
      const Node *y = &g->nodes[n->in[1]];
      if (leaf == n->in[1] || (y->op == OP_TRANSPOSE && leaf == y->in[0])) return true;
      break;
    }
    default: break;
    }
  }
  return false;
}

int step_buffers(const Schedule *s, const int *time_axis, StepBuf *out) {
  int n = 0, *at = malloc(sizeof(int) * ((size_t)s->nbufs + 1));
  if (!at) return -1;
  for (int b = 0; b < s->nbufs; b++) at[b] = -1;
  for (int i = 0; i < s->nprog[PROG_SAMPLE]; i++) {
    int ki = s->prog[PROG_SAMPLE][i];
    const Kernel *k = &s->kernels[ki];
    int slot[KS_IMM];
    kernel_slots(s, k, slot);
    for (int j = 0; j < KS_IMM; j++) {
      int b = slot[j];
      if (b < 0 || s->bufs[b].role == BUF_PARAM) continue;
      if (at[b] < 0) {
        at[b] = n;
        out[n++] = (StepBuf){.buf = b, .cache = s->bufs[b].role == BUF_INPUT, .first = ki, .last = ki};
      }
      StepBuf *sb = &out[at[b]];
      sb->last = s->bufs[b].role == BUF_OUTPUT ? s->nkernels : ki;
      if (j >= KS_IN0 && j < KS_IN0 + k->nin && reads_history(s, time_axis, k, k->leaf[j - KS_IN0])) sb->cache = true;
    }
  }
  free(at);
  return n;
}
