// remat.c: rematerialisation. Cheap forward values are recomputed in the
// backward pass instead of being kept alive from the forward pass to the
// backward: a trade of a little arithmetic for memory, off by default
// (xfc --remat, or a model's `config remat = 1`).
//
// Requires: a verified graph with its backward pass (autodiff).
// Guarantees: every forward node F that is elementwise (unary, binary,
// dropout) or an expand, is not an output, is read by some backward node,
// and whose inputs are leaves (params, inputs, constants) or values the
// backward reads anyway, gets a copy F' placed just before its first
// backward reader; every backward reader reads F' instead. F then dies with
// its last forward reader, and recomputing it keeps nothing extra alive.
// The copy computes the same value (same op, same inputs; a dropout copy
// draws the same counter-based mask). Node ids are renumbered (forward
// nodes keep theirs); outputs follow. The graph verifies.
#include <stdlib.h>
#include <string.h>

#include "passes.h"

static bool cheap(const Node *n) {
  OpCategory c = ir_op_info[n->op].cat;
  return c == OPC_UNARY || c == OPC_BINARY || n->op == OP_DROPOUT || n->op == OP_EXPAND;
}

int remat(Graph *g) {
  int n = g->nnodes, nf = g->nforward;
  if (nf <= 0) return 0;
  bool *bw_read = calloc((size_t)n + 1, sizeof(bool)), *is_out = calloc((size_t)n + 1, sizeof(bool));
  bool *pick = calloc((size_t)n + 1, sizeof(bool));
  for (int i = nf; i < n; i++)
    for (int k = 0; k < g->nodes[i].nin; k++) bw_read[g->nodes[i].in[k]] = true;
  for (int o = 0; o < g->noutputs; o++) is_out[g->outputs[o].node] = true;
  int count = 0;
  for (int i = 0; i < nf; i++) {
    const Node *f = &g->nodes[i];
    if (!cheap(f) || is_out[i] || !bw_read[i]) continue;
    bool kept = true;
    for (int k = 0; k < f->nin && kept; k++) {
      const Node *x = &g->nodes[f->in[k]];
      kept = ir_op_info[x->op].cat == OPC_LEAF || (bw_read[x->id] && !pick[x->id]);
    }
    if (kept) pick[i] = true, count++;
  }
  if (count == 0) {
    free(bw_read), free(is_out), free(pick);
    return 0;
  }
  // rebuild: forward nodes as they are, each copy just before its first backward reader
  Node *old = g->nodes;
  Node *nodes = arena_alloc(g->arena, sizeof(Node) * (size_t)(n + count + 1));
  int *map = malloc(sizeof(int) * (size_t)(n + 1)), *copy = malloc(sizeof(int) * (size_t)(n + 1));
  int m = 0;
  for (int i = 0; i < n; i++) copy[i] = -1;
  for (int i = 0; i < n; i++) {
    Node nd = old[i];
    if (i >= nf)
      for (int k = 0; k < nd.nin; k++) {
        int x = nd.in[k];
        if (!pick[x] || copy[x] >= 0) continue;
        Node c = old[x];
        for (int j = 0; j < c.nin; j++) c.in[j] = map[c.in[j]];
        c.id = m;
        nodes[m] = c;
        copy[x] = m++;
      }
    for (int k = 0; k < nd.nin; k++) nd.in[k] = i >= nf && pick[nd.in[k]] ? copy[nd.in[k]] : map[nd.in[k]];
    nd.id = m;
    nodes[m] = nd;
    map[i] = m++;
  }
  for (int o = 0; o < g->noutputs; o++) g->outputs[o].node = map[g->outputs[o].node];
  g->nodes = nodes, g->nnodes = m, g->cap_nodes = n + count + 1;
  free(bw_read), free(is_out), free(pick), free(map), free(copy);
  return count;
}
