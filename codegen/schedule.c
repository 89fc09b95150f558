// schedule.c: graph IR -> unfused kernel schedule (see kernel.h).
//
// Requires: a verified graph with a backward pass (autodiff) and outputs
// "loss", "logits" (optional) and "grad.<param>".
// Guarantees: every IR node has a buffer (aliases for reshapes); every node
// that computes has exactly one kernel; each program lists the kernels it
// needs, in topological order: PROG_TRAIN everything reaching the loss and
// the gradients, PROG_EVAL the loss's forward cone, PROG_SAMPLE the logits'.
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

static SymSize sym_of(Dim d) {
  if (d.kind == DIM_B) return (SymSize){1, 1, 0};
  if (d.kind == DIM_T) return (SymSize){1, 0, 1};
  return (SymSize){d.n, 0, 0};
}

static SymSize sym_mul(SymSize a, SymSize b) { return (SymSize){a.coef * b.coef, a.pb + b.pb, a.pt + b.pt}; }

static SymSize sym_prod(const Shape *s, int from, int to) {
  SymSize r = {1, 0, 0};
  for (int i = from; i < to; i++) r = sym_mul(r, sym_of(s->d[i]));
  return r;
}

int64_t symsize_eval(SymSize s, int64_t B, int64_t T) {
  int64_t v = s.coef;
  for (int i = 0; i < s.pb; i++) v *= B;
  for (int i = 0; i < s.pt; i++) v *= T;
  return v;
}

// The parallel outer extent of the kernel computing n.
static SymSize outer_of(const Graph *g, const Node *n) {
  const Shape *s = &n->shape;
  const Shape *x = n->nin ? &g->nodes[n->in[0]].shape : NULL;
  switch (n->op) {
  case OP_MATMUL: return sym_prod(s, 0, s->rank - 2);                 // one gemm per batch entry
  case OP_SUM: case OP_MEAN: case OP_MAX: return sym_prod(x, 0, n->axis);
  case OP_SOFTMAX: return sym_prod(x, 0, n->axis);
  case OP_CROSS_ENTROPY: return sym_prod(x, 0, x->rank - 1);          // phase 0: rows
  case OP_SCATTER_ADD: return (SymSize){1, 0, 0};                     // serial
  case OP_CONV_DW: return sym_of(n->shape.d[0]);                      // one lag each
  case OP_CAUSAL_CONV: case OP_CONV_DX:                               // matrix kind: one sequence each
    if (n->conv == CONV_MATRIX) return sym_prod(x, 0, x->rank - 2);
    return sym_prod(s, 0, s->rank - 1);
  default: return s->rank ? sym_prod(s, 0, s->rank - 1) : (SymSize){1, 0, 0};  // rows
  }
}

static bool computes(OpKind op) {
  return op != OP_PARAM && op != OP_INPUT && op != OP_RESHAPE;
}

// Marks the nodes of every KF_WEIGHT_GRAD pattern: fused_into[t] and
// fused_into[m] name the SUM that absorbs them; pattern[sum] = KF_WEIGHT_GRAD.
static void find_weight_grads(const Graph *g, int *users, int *fused_into, int *pattern) {
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nin; k++) users[g->nodes[i].in[k]]++;
  for (int o = 0; o < g->noutputs; o++) users[g->outputs[o].node]++;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *s = &g->nodes[i];
    if (s->op != OP_SUM || s->axis != 0) continue;
    const Node *m = &g->nodes[s->in[0]];
    if (m->op != OP_MATMUL || users[m->id] != 1 || m->shape.rank != 3) continue;
    const Node *t = &g->nodes[m->in[0]], *dy = &g->nodes[m->in[1]];
    if (t->op != OP_TRANSPOSE || users[t->id] != 1 || t->shape.rank != 3 || t->axis + t->axis2 != 3) continue;
    const Node *x = &g->nodes[t->in[0]];
    if (x->shape.rank != 3 || dy->shape.rank != 3 || !dim_eq(x->shape.d[0], dy->shape.d[0]) ||
        !dim_eq(x->shape.d[1], dy->shape.d[1]))
      continue;
    fused_into[t->id] = fused_into[m->id] = i;
    pattern[i] = KF_WEIGHT_GRAD;
  }
}

Schedule *schedule_build(Arena *a, const Graph *g, bool fuse) {
  Schedule *s = arena_alloc(a, sizeof *s);
  s->g = g;
  s->buf_of = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  s->bufs = arena_alloc(a, sizeof(Buffer) * (size_t)g->nnodes * 2);
  s->kernels = arena_alloc(a, sizeof(Kernel) * (size_t)g->nnodes * 2);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->op == OP_RESHAPE) {  // alias
      s->buf_of[i] = s->buf_of[n->in[0]];
      continue;
    }
    Buffer *b = &s->bufs[s->nbufs];
    *b = (Buffer){.role = n->op == OP_PARAM ? BUF_PARAM : n->op == OP_INPUT ? BUF_INPUT : BUF_ACT,
                  .dtype = n->dtype, .size = sym_prod(&n->shape, 0, n->shape.rank), .node = i, .name = n->name,
                  .alias_of = -1};
    s->buf_of[i] = s->nbufs++;
  }
  for (int o = 0; o < g->noutputs; o++) {  // outputs: gradients and read-back values
    Buffer *b = &s->bufs[s->buf_of[g->outputs[o].node]];
    if (b->role != BUF_ACT) continue;  // an output that is a param or input (never in practice)
    b->role = strncmp(g->outputs[o].name, "grad.", 5) ? BUF_OUTPUT : BUF_GRAD;
    b->name = g->outputs[o].name;
  }
  int *kernel_of = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  int *users = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  int *fused_into = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  int *pattern = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  for (int i = 0; i < g->nnodes; i++) fused_into[i] = -1;
  if (fuse) find_weight_grads(g, users, fused_into, pattern);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    kernel_of[i] = -1;
    if (!computes(n->op) || fused_into[i] >= 0) continue;
    Kernel *k = &s->kernels[s->nkernels];
    k->node = i;
    k->out = s->buf_of[i];
    k->nin = n->nin;
    for (int j = 0; j < n->nin; j++) k->in[j] = s->buf_of[n->in[j]];
    k->outer = outer_of(g, n);
    k->scratch = -1;
    if (pattern[i] == KF_WEIGHT_GRAD) {  // reads x and dy, one column block of dW per outer index
      const Node *m = &g->nodes[n->in[0]];
      int x = g->nodes[m->in[0]].in[0], dy = m->in[1];
      k->fusion = KF_WEIGHT_GRAD;
      k->src[0] = x, k->src[1] = dy;
      k->nin = 2;
      k->in[0] = s->buf_of[x], k->in[1] = s->buf_of[dy];
      k->outer = sym_of(g->nodes[dy].shape.d[2]);
    }
    kernel_of[i] = s->nkernels++;
    if (n->op == OP_CROSS_ENTROPY) {  // per-row losses in scratch, then their mean
      s->bufs[s->nbufs] = (Buffer){.role = BUF_ACT, .dtype = DT_F32, .size = k->outer, .node = i, .name = "",
                                   .alias_of = -1};
      k->scratch = s->nbufs++;
      Kernel *k2 = &s->kernels[s->nkernels++];
      *k2 = *k;
      k2->phase = 1;
      k2->outer = (SymSize){1, 0, 0};
    }
  }
  // programs: the cone of nodes each one needs
  bool *need = arena_alloc(a, sizeof(bool) * (size_t)g->nnodes);
  for (int p = 0; p < PROG_COUNT; p++) {
    memset(need, 0, sizeof(bool) * (size_t)g->nnodes);
    for (int o = 0; o < g->noutputs; o++) {
      const char *name = g->outputs[o].name;
      bool want = p == PROG_TRAIN ? (!strcmp(name, "loss") || !strncmp(name, "grad.", 5))
                  : p == PROG_EVAL ? !strcmp(name, "loss") : !strcmp(name, "logits");
      if (want) need[g->outputs[o].node] = true;
    }
    for (int i = g->nnodes - 1; i >= 0; i--)
      if (need[i])
        for (int j = 0; j < g->nodes[i].nin; j++) need[g->nodes[i].in[j]] = true;
    // a fused kernel reads the pattern's inputs directly (already needed above)
    s->prog[p] = arena_alloc(a, sizeof(int) * (size_t)(s->nkernels + 1));
    // kernel_of[i] + 1 is the second phase of a two-phase op
    for (int i = 0; i < g->nnodes; i++)
      if (need[i] && kernel_of[i] >= 0) {
        s->prog[p][s->nprog[p]++] = kernel_of[i];
        if (g->nodes[i].op == OP_CROSS_ENTROPY) s->prog[p][s->nprog[p]++] = kernel_of[i] + 1;
      }
  }
  return s;
}
