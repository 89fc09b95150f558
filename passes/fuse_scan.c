// fuse_scan.c: a scan of outer products read out by a contraction of its
// rows (linear attention, gated linear attention, retention) found as a
// graph pattern and replaced by one SCAN_READ node, whose kernels keep the
// state S [dk, dv] of a sequence in local memory instead of storing it at
// every position.
//
// Requires: a verified forward graph (no backward yet: autodiff then derives
// SCAN_READ_GRAD, which recomputes the states).
// Guarantees: every match of
//     o = sum(q * scan(a, k * v, t), R - 2)      (either operand order)
// with k, q [.., dk, 1] and v [.., 1, dv] of rank R (equal leading axes, dk
// and dv fixed, t < R - 2 not the batch axis), a broadcast to k, the scan
// and the product each used only by the next op of the pattern and not an
// output, dk dv <= SCAN_READ_MAX_STATE, and a decay whose gradient the
// identity of ir.h gives exactly (one that needs no gradient, or exp(.) or
// sigmoid(.) seen through moves: where those are 0 in float32, so is their
// derivative), has o rewritten in place to SCAN_READ(q, k, v, a), axis t.
// The scan and the product lose their last user and drop out of every
// program. The graph verifies. Seed 003 eqs. (6.156)-(6.160): the memory
// mu_j = a_j o mu_{j-1} + k_j^T v_j read out as q_j mu_j.
#include <stdlib.h>

#include "passes.h"

// The state of one sequence lives in a local array (a GPU block's shared
// memory): at most 8192 floats, 32 KiB.
enum { SCAN_READ_MAX_STATE = 8192 };

// Whether the value of node id passes through moves from an exp or a sigmoid.
static bool through_exp(const Graph *g, int id) {
  const Node *n = &g->nodes[id];
  while (n->op == OP_RESHAPE || n->op == OP_TRANSPOSE || n->op == OP_EXPAND) n = &g->nodes[n->in[0]];
  return n->op == OP_EXP || n->op == OP_SIGMOID;
}

int fuse_scan(Graph *g) {
  int n = g->nnodes;
  int *users = calloc((size_t)n + 1, sizeof(int));
  bool *param = calloc((size_t)n + 1, sizeof(bool));  // depends on a parameter
  for (int i = 0; i < n; i++) {
    const Node *x = &g->nodes[i];
    param[i] = x->op == OP_PARAM;
    for (int k = 0; k < x->nin; k++) users[x->in[k]]++, param[i] = param[i] || param[x->in[k]];
  }
  for (int o = 0; o < g->noutputs; o++) users[g->outputs[o].node] += 2;  // an output is never internal
  int fused = 0;
  for (int i = 0; i < n; i++) {
    Node *o = &g->nodes[i];
    int r = o->shape.rank;
    if (o->op != OP_SUM || r < 3 || o->axis != r - 2 || ir_reduce_end(o) != r - 2) continue;
    const Node *m = &g->nodes[o->in[0]];
    if (m->op != OP_MUL || users[m->id] != 1) continue;
    int side = g->nodes[m->in[0]].op == OP_SCAN ? 0 : 1;
    const Node *h = &g->nodes[m->in[side]], *q = &g->nodes[m->in[1 - side]];
    if (h->op != OP_SCAN || users[h->id] != 1 || h->shape.rank != r || h->axis >= r - 2) continue;
    const Node *b = &g->nodes[h->in[1]];
    if (b->op != OP_MUL) continue;
    int kv = g->nodes[b->in[0]].shape.rank == r && g->nodes[b->in[0]].shape.d[r - 2].kind == DIM_CONST &&
                     g->nodes[b->in[0]].shape.d[r - 2].n == 1
                 ? 1 : 0;  // the operand that is k
    const Node *k = &g->nodes[b->in[kv]], *v = &g->nodes[b->in[1 - kv]];
    const Shape *hs = &h->shape;
    if (!shape_eq(&q->shape, &k->shape) || k->shape.rank != r || v->shape.rank != r) continue;
    Dim dk = hs->d[r - 2], dv = hs->d[r - 1];
    bool ok = dk.kind == DIM_CONST && dv.kind == DIM_CONST && dk.n * dv.n <= SCAN_READ_MAX_STATE &&
              dim_eq(k->shape.d[r - 2], dk) && k->shape.d[r - 1].kind == DIM_CONST && k->shape.d[r - 1].n == 1 &&
              v->shape.d[r - 2].kind == DIM_CONST && v->shape.d[r - 2].n == 1 && dim_eq(v->shape.d[r - 1], dv) &&
              hs->d[h->axis].kind != DIM_B;
    for (int a = 0; ok && a < r - 2; a++) ok = dim_eq(k->shape.d[a], hs->d[a]) && dim_eq(v->shape.d[a], hs->d[a]);
    const Node *dec = &g->nodes[h->in[0]];
    const Shape *as = &dec->shape;
    ok = ok && as->rank <= r && (as->rank < 1 || (as->d[as->rank - 1].kind == DIM_CONST && as->d[as->rank - 1].n == 1));
    if (!ok || (param[dec->id] && !through_exp(g, dec->id))) continue;
    int qi = q->id, ki = k->id, vi = v->id, ai = dec->id, ax = h->axis;
    *o = (Node){.id = o->id, .op = OP_SCAN_READ, .dtype = DT_F32, .shape = o->shape, .nin = 4, .in = {qi, ki, vi, ai},
                .axis = ax, .scope = o->scope, .loc = o->loc};
    users[m->id]--;
    fused++;
  }
  free(users);
  free(param);
  return fused;
}
