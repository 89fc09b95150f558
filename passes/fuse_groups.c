// fuse_groups.c: which nodes the schedule computes inside another node's
// kernel (fusion groups), on the graph IR, for every backend.
//
// Requires: a verified graph with its backward pass (autodiff).
// Guarantees: into[n] = the root node whose kernel computes n, or -1 when n
// gets its own kernel (or computes nothing); kind[r] = the group kind of a
// root r (FG_NONE for a kernel of its own); stored[r] = the member of r's
// FG_MAP or FG_MATMUL_MAP group whose value the kernel also stores (read by
// kernels after it), or -1; terms[r] and after[s], row terms and an
// attention's statistics (below), or -1. Groups:
//   FG_WEIGHT_GRAD  sum(transpose(x) @ dy, axes 0 .. r - 3) with x [.., P, d]
//                   and dy [.., P, c] of rank r >= 3 (x [B, T, d]): the
//                   gradient of an unbatched weight, one GEMM [d, R] @ [R, c]
//                   over all R rows; the transpose and the batched product
//                   are inside it.
//   FG_MAP          a tree of elementwise ops evaluated per output element,
//                   its intermediates not stored (but one, below). A node n
//                   joins the group of its user u when: n is not an output
//                   and u is its only user, or u is its first user, every
//                   other user comes after the group's root and no other
//                   member of the group is stored (n becomes the stored
//                   member: the kernel writes n's buffer too, before any
//                   other user runs); n and u have the same shape (same
//                   coordinates);
//                   u is elementwise (unary, binary, dropout) or in the
//                   group; n is unary, binary, dropout, expand, onehot,
//                   causal_mask, or softmax over the last axis of a stored
//                   input (its row maximum and sum are computed per row in
//                   the kernel). At most FG_MAX_LEAVES stored inputs and
//                   one dropout per group.
//   FG_MATMUL_MAP   an FG_MAP group (or one elementwise node) that also holds
//                   the matrix product x @ W feeding it (x [..., m, k], W
//                   [k, n] unbatched, one user, the group's shape): the
//                   product is written into the group's output rows, then
//                   the elementwise tree runs over them in place: a bias,
//                   residual or activation as the product's epilogue.
//   FG_NORM_MAP     an FG_MAP group without softmax (or one elementwise node)
//                   that also holds the row op feeding it (LAYERNORM,
//                   RMSNORM, their _DX; the group's shape; its only user
//                   the group, or as the stored member as above): each row
//                   of the row op is computed, then the elementwise tree
//                   over it, the row op's value never stored (unless it is
//                   the stored member).
//   FG_NORM_DG      a sum d over every axis but the last of a LAYERNORM_DYXH
//                   or RMSNORM_DYXH p (the gain gradient, p read by d
//                   only) with the stored member sum(dy) over the same
//                   axes, dy = p's dy (the bias gradient): two sums over
//                   the same rows in one kernel, when sum(dy) comes before
//                   d and nothing but reshapes reads it before d.
// Every member but an attention's statistics comes before its root in node
// order, so the root's kernel runs after every kernel a member reads. Two
// kinds of member are not part of their root's value:
//   row terms       a LAYERNORM_DYXH or RMSNORM_DYXH p computed by the kernel
//                   of the matching _DX q (the same x, dy and eps; q alone or
//                   the row op of an FG_NORM_MAP group rooted at r): terms[r]
//                   = p, written from the row statistics q has (a second
//                   output). p's one reader is a sum s over its rows; when
//                   s comes before r, after[s] = r: s's kernel runs right
//                   after r's, allowed when nothing but reshapes reads s or
//                   its stored member before r.
//   statistics      an ATTENTION_LSE p that autodiff placed after the
//                   ATTENTION r of the same inputs and attributes, or a
//                   CROSS_ENTROPY_LSE p after the CROSS_ENTROPY r of the same
//                   logits: terms[r] = p, written by r's kernel from the
//                   rows' maximum and sum it has (a second output); p reads
//                   nothing r does not.
#include <stdlib.h>
#include <string.h>

#include "passes.h"

static bool elementwise(const Node *n) {
  OpCategory c = ir_op_info[n->op].cat;
  return c == OPC_UNARY || c == OPC_BINARY || n->op == OP_DROPOUT;
}

static bool joins(const Graph *g, const Node *n) {
  if (elementwise(n) || n->op == OP_EXPAND || n->op == OP_ONEHOT || n->op == OP_CAUSAL_MASK) return n->dtype == DT_F32;
  return n->op == OP_SOFTMAX && n->axis == n->shape.rank - 1 && g->nodes[n->in[0]].dtype == DT_F32;
}

static void weight_grads(const Graph *g, const int *users, int *into, int *kind) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *s = &g->nodes[i];
    if (s->op != OP_SUM || s->axis != 0) continue;
    const Node *m = &g->nodes[s->in[0]];
    int r = m->shape.rank;
    if (m->op != OP_MATMUL || users[m->id] != 1 || r < 3 || ir_reduce_end(s) != r - 3) continue;
    const Node *t = &g->nodes[m->in[0]], *dy = &g->nodes[m->in[1]];
    if (t->op != OP_TRANSPOSE || users[t->id] != 1 || t->shape.rank != r || t->axis + t->axis2 != 2 * r - 3 ||
        (t->axis != r - 1 && t->axis2 != r - 1))
      continue;
    const Node *x = &g->nodes[t->in[0]];
    bool rows = x->shape.rank == r && dy->shape.rank == r;
    for (int a = 0; rows && a < r - 1; a++) rows = dim_eq(x->shape.d[a], dy->shape.d[a]);
    if (!rows) continue;
    into[t->id] = into[m->id] = i;
    kind[i] = FG_WEIGHT_GRAD;
  }
}

// Whether every reader of s (through reshapes, which alias it) comes after node d.
static bool read_after(const Graph *g, int s, int d) {
  int alias[8], na = 0;
  alias[na++] = s;
  for (int j = s + 1; j <= d; j++) {
    const Node *u = &g->nodes[j];
    for (int k = 0; k < u->nin; k++)
      for (int a = 0; a < na; a++) {
        if (u->in[k] != alias[a]) continue;
        if (u->op != OP_RESHAPE || j == d || na == 8) return false;
        alias[na++] = j;
      }
  }
  return true;
}

// Whether node i may join root's group (root: its first user's): i has no
// other user, or it becomes root's stored member: its next user runs after
// root, and root stores no other member.
static bool may_join(int i, int root, const int *users, const int *second, const int *stored) {
  return users[i] == 1 || (second[i] > root && stored[root] < 0);
}

static bool row_op(const Node *n) {
  return (ir_op_info[n->op].props & IR_P_ROW_NORM) && n->dtype == DT_F32;
}

static bool has_softmax(const Graph *g, const int *into, int root) {
  for (int j = 0; j < root; j++)
    if (into[j] == root && g->nodes[j].op == OP_SOFTMAX) return true;
  return false;
}

// Whether node i sums x over every axis but the last.
static bool row_sum(const Graph *g, int i, int x) {
  const Node *s = &g->nodes[i];
  const Node *xn = &g->nodes[x];
  return s->op == OP_SUM && s->in[0] == x && s->axis == 0 && ir_reduce_end(s) == xn->shape.rank - 2 &&
         xn->dtype == DT_F32;
}

static void norm_dg(const Graph *g, const int *users, const int *first, int *into, int *kind, int *stored) {
  int n = g->nnodes;
  int *dg_of = malloc(((size_t)n + 1) * sizeof(int));  // dg_of[dy]: the last gain-gradient sum over _DYXH(x, dy)
  for (int i = 0; i < n; i++) dg_of[i] = -1;
  for (int i = 0; i < n; i++) {
    const Node *p = &g->nodes[i];
    if ((ir_op_info[p->op].props & IR_P_ROW_TERMS) && users[i] == 1 && row_sum(g, first[i], i))
      dg_of[p->in[1]] = first[i];
  }
  for (int i = 0; i < n; i++) {
    const Node *s = &g->nodes[i];
    if (s->op != OP_SUM || into[i] >= 0 || kind[i] != FG_NONE) continue;
    int dy = s->in[0], d = dg_of[dy];
    if (d < i || !row_sum(g, i, dy)) continue;
    if (kind[d] != FG_NONE || stored[d] >= 0 || !read_after(g, i, d)) continue;
    into[i] = d, kind[d] = FG_NORM_DG, stored[d] = i;
  }
  free(dg_of);
}

// The _DX of the same norm, x, dy and eps as row terms p, or -1.
static int matching_dx(const Graph *g, const Node *p) {
  OpKind want = p->op == OP_LAYERNORM_DYXH ? OP_LAYERNORM_DX : OP_RMSNORM_DX;
  for (int i = p->id + 1; i < g->nnodes; i++) {
    const Node *q = &g->nodes[i];
    if (q->op == want && q->in[0] == p->in[0] && q->in[2] == p->in[1] && q->fval == p->fval) return i;
  }
  return -1;
}

static void row_terms(const Graph *g, const int *users, const int *first, int *into, const int *stored, int *terms,
                      int *after) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *p = &g->nodes[i];
    if (!(ir_op_info[p->op].props & IR_P_ROW_TERMS) || into[i] >= 0 || users[i] != 1) continue;
    int q = matching_dx(g, p);
    if (q < 0 || p->dtype != DT_F32) continue;
    int r = into[q] >= 0 ? into[q] : q, s = first[i];
    if (terms[r] >= 0) continue;
    if (s < r) {
      if (!read_after(g, s, r) || (stored[s] >= 0 && !read_after(g, stored[s], r))) continue;
      after[s] = r;
    }
    into[i] = r, terms[r] = i;
  }
}

// An ATTENTION_LSE p (autodiff's, after the forward) with the inputs and
// attributes of an ATTENTION a, or a CROSS_ENTROPY_LSE p with the logits of
// a CROSS_ENTROPY a: a's kernel writes p as its row statistics.
static void row_statistics(const Graph *g, int *into, int *terms) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *p = &g->nodes[i];
    if ((p->op != OP_ATTENTION_LSE && p->op != OP_CROSS_ENTROPY_LSE) || into[i] >= 0) continue;
    for (int r = 0; r < i; r++) {
      const Node *a = &g->nodes[r];
      bool same = p->op == OP_ATTENTION_LSE ? a->op == OP_ATTENTION && a->nin == p->nin && a->axis == p->axis && a->fval == p->fval &&
                                                  a->start == p->start
                                            : a->op == OP_CROSS_ENTROPY;
      for (int k = 0; same && k < p->nin; k++) same = a->in[k] == p->in[k];
      if (!same || terms[r] >= 0 || into[r] >= 0) continue;
      into[i] = r, terms[r] = i;
      break;
    }
  }
}

void fuse_groups(const Graph *g, bool enable, int *into, int *kind, int *stored, int *terms, int *after) {
  int n = g->nnodes;
  int *users = calloc((size_t)n + 1, sizeof(int));
  int *leaves = calloc((size_t)n + 1, sizeof(int)), *drops = calloc((size_t)n + 1, sizeof(int));
  // first[i], second[i]: the users of the first two edges out of i in node order, -1 none
  int *first = malloc(((size_t)n + 1) * sizeof(int)), *second = malloc(((size_t)n + 1) * sizeof(int));
  bool *output = calloc((size_t)n + 1, sizeof(bool));
  for (int i = 0; i < n; i++) into[i] = -1, kind[i] = FG_NONE, stored[i] = -1, terms[i] = after[i] = -1;
  for (int i = 0; i < n; i++) first[i] = second[i] = -1;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].nin; k++) {
      int x = g->nodes[i].in[k];
      users[x]++;
      if (first[x] < 0) first[x] = i;
      else if (second[x] < 0) second[x] = i;
    }
  for (int o = 0; o < g->noutputs; o++) users[g->outputs[o].node] += 2, output[g->outputs[o].node] = true;
  if (!enable) goto done;
  weight_grads(g, users, into, kind);
  // in reverse order, so a node's user has decided its group first
  for (int i = n - 1; i >= 0; i--) {
    const Node *p = &g->nodes[i];
    if (into[i] >= 0) continue;
    if (leaves[i] == 0) leaves[i] = p->nin;
    drops[i] = p->op == OP_DROPOUT;
    if (output[i] || first[i] < 0 || !joins(g, p)) continue;
    const Node *u = &g->nodes[first[i]];
    int root = into[u->id] >= 0 ? into[u->id] : u->id;
    bool store = users[i] > 1;
    if (!may_join(i, root, users, second, stored)) continue;
    if (kind[root] == FG_WEIGHT_GRAD || !shape_eq(&p->shape, &u->shape)) continue;
    if (into[u->id] < 0 && !elementwise(u)) continue;                  // u must be elementwise or inside a group
    if (u->op == OP_SOFTMAX || u->op == OP_ONEHOT) continue;            // they read a stored input
    if (leaves[root] - 1 + p->nin > FG_MAX_LEAVES || drops[root] + drops[i] > 1) continue;
    into[i] = root;
    kind[root] = FG_MAP;
    leaves[root] += p->nin - 1;
    drops[root] += drops[i];
    if (store) stored[root] = i;
  }
  // matmul epilogues
  for (int i = 0; i < n; i++) {
    const Node *m = &g->nodes[i];
    if (m->op != OP_MATMUL || users[i] != 1 || into[i] >= 0 || kind[i] != FG_NONE) continue;
    const Node *u = &g->nodes[first[i]];  // its only user
    int root = into[u->id] >= 0 ? into[u->id] : u->id;
    const Shape *xs = &g->nodes[m->in[0]].shape, *ws = &g->nodes[m->in[1]].shape;
    if (!shape_eq(&m->shape, &u->shape) || ws->rank != 2 || xs->rank != m->shape.rank || m->shape.rank < 2) continue;
    if (kind[root] == FG_MATMUL_MAP || kind[root] == FG_WEIGHT_GRAD || (into[u->id] < 0 && !elementwise(u))) continue;
    if (u->op == OP_SOFTMAX || u->op == OP_ONEHOT || leaves[root] + 1 > FG_MAX_LEAVES) continue;
    into[i] = root;
    kind[root] = FG_MATMUL_MAP;
    leaves[root] += 1;
  }
  // row ops before elementwise groups
  for (int i = 0; i < n; i++) {
    const Node *x = &g->nodes[i];
    if (!row_op(x) || into[i] >= 0 || kind[i] != FG_NONE || output[i] || first[i] < 0) continue;
    const Node *u = &g->nodes[first[i]];
    int root = into[u->id] >= 0 ? into[u->id] : u->id;
    bool store = users[i] > 1;
    if (!may_join(i, root, users, second, stored)) continue;
    if (!shape_eq(&x->shape, &u->shape) || !(kind[root] == FG_MAP || (kind[root] == FG_NONE && elementwise(u)))) continue;
    if (leaves[root] - 1 + x->nin > FG_MAX_LEAVES || has_softmax(g, into, root)) continue;
    into[i] = root;
    kind[root] = FG_NORM_MAP;
    leaves[root] += x->nin - 1;
    if (store) stored[root] = i;
  }
  norm_dg(g, users, first, into, kind, stored);
  row_terms(g, users, first, into, stored, terms, after);
  row_statistics(g, into, terms);
done:
  free(users), free(leaves), free(drops), free(first), free(second), free(output);
}
