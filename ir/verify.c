// verify.c: the IR checker, run after every pass in debug builds.
//
// Checks: ids are positions; inputs come strictly before their user (SSA,
// topological order); arity matches the op table; every shape and dtype is
// what ir_infer derives from the inputs; params and inputs are named, params
// uniquely and with an initialiser; dropout nodes that share a mask stream
// (a forward dropout and its gradient) have the same p and shape; scopes
// form a tree; outputs name existing nodes, uniquely, and "loss" is a scalar.
#include "ir.h"

#include <stdlib.h>
#include <string.h>

#define bad ir_errorf

// Open-addressing table of node ids keyed by param name or dropout stream,
// so the uniqueness checks stay linear in the graph size.
typedef struct {
  int *slot;  // node id or -1
  size_t cap;
} Seen;

static uint64_t hash_node(const Node *n) {
  if (n->op == OP_DROPOUT) return (uint64_t)n->seed * 0x9E3779B97F4A7C15ull;
  uint64_t h = 1469598103934665603ull;
  for (const char *c = n->name; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
  return h;
}

static bool same_key(const Node *a, const Node *b) {
  return a->op == OP_DROPOUT ? a->seed == b->seed : !strcmp(a->name, b->name);
}

// Returns the earlier node with the same key as g->nodes[i], or -1 after
// recording i.
static int seen_insert(Seen *s, const Graph *g, int i) {
  const Node *n = &g->nodes[i];
  for (size_t k = hash_node(n) & (s->cap - 1);; k = (k + 1) & (s->cap - 1)) {
    if (s->slot[k] < 0) {
      s->slot[k] = i;
      return -1;
    }
    if (same_key(&g->nodes[s->slot[k]], n)) return s->slot[k];
  }
}

static bool verify_nodes(const Graph *g, Seen *params, Seen *streams, char *err, size_t errlen);

static int by_output_name(const void *a, const void *b) {
  return strcmp((*(const Output *const *)a)->name, (*(const Output *const *)b)->name);
}

// Output names are unique. Sorted, not compared in pairs: after autodiff
// there is one output per parameter.
static bool unique_outputs(const Graph *g, char *err, size_t errlen) {
  const Output **byname = malloc(sizeof *byname * ((size_t)g->noutputs + 1));
  if (!byname) return bad(err, errlen, "out of memory in the verifier");
  for (int o = 0; o < g->noutputs; o++) byname[o] = &g->outputs[o];
  qsort(byname, (size_t)g->noutputs, sizeof *byname, by_output_name);
  const char *dup = NULL;
  for (int o = 1; o < g->noutputs && !dup; o++)
    if (!strcmp(byname[o - 1]->name, byname[o]->name)) dup = byname[o]->name;
  free(byname);
  return dup ? bad(err, errlen, "output %s is defined twice", dup) : true;
}

bool ir_verify(const Graph *g, char *err, size_t errlen) {
  Seen params = {0}, streams = {0};
  size_t cap = 16;
  while (cap < 2 * (size_t)g->nnodes + 2) cap *= 2;
  params.cap = streams.cap = cap;
  params.slot = malloc(sizeof(int) * cap);
  streams.slot = malloc(sizeof(int) * cap);
  if (!params.slot || !streams.slot) {
    free(params.slot), free(streams.slot);
    return bad(err, errlen, "out of memory in the verifier");
  }
  memset(params.slot, 0xff, sizeof(int) * cap);
  memset(streams.slot, 0xff, sizeof(int) * cap);
  bool ok = verify_nodes(g, &params, &streams, err, errlen);
  free(params.slot), free(streams.slot);
  return ok;
}

static bool verify_nodes(const Graph *g, Seen *params, Seen *streams, char *err, size_t errlen) {
  for (int s = 0; s < g->nscopes; s++)
    if (g->scopes[s].parent >= s || (s > 0 && g->scopes[s].parent < 0))
      return bad(err, errlen, "scope %d has parent %d", s, g->scopes[s].parent);
  for (int c = 0; c < g->ncalls; c++)
    if (g->calls[c].parent >= c || (c > 0 && g->calls[c].parent < 0) || g->calls[c].scope < 0 ||
        g->calls[c].scope >= (g->nscopes ? g->nscopes : 1))
      return bad(err, errlen, "call %d has parent %d and scope %d", c, g->calls[c].parent, g->calls[c].scope);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->id != i) return bad(err, errlen, "node at %d has id %d", i, n->id);
    if ((unsigned)n->op >= OP_COUNT) return bad(err, errlen, "%%%d has op %d", i, (int)n->op);
    const char *op = ir_op_info[n->op].name;
    if (!ir_nin_ok(n->op, n->nin))
      return bad(err, errlen, "%%%d (%s) has %d inputs, wants %d", i, op, n->nin,
                 ir_op_info[n->op].nin);
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] < 0 || n->in[k] >= i)
        return bad(err, errlen, "%%%d (%s) uses %%%d before it is defined", i, op, n->in[k]);
    if (n->scope < 0 || n->scope >= (g->nscopes ? g->nscopes : 1))
      return bad(err, errlen, "%%%d (%s) has scope %d", i, op, n->scope);
    if (n->call < 0 || n->call >= (g->ncalls ? g->ncalls : 1))
      return bad(err, errlen, "%%%d (%s) has call %d", i, op, n->call);
    Shape s;
    DType dt;
    char why[256];
    if (!ir_infer(g, n, &s, &dt, why, sizeof why))
      return bad(err, errlen, "%%%d (%s): %s", i, op, why);
    if (!shape_eq(&s, &n->shape) || dt != n->dtype) {
      char a[128], b[128];
      shape_fmt(a, sizeof a, &n->shape);
      shape_fmt(b, sizeof b, &s);
      return bad(err, errlen, "%%%d (%s) is stored as %s but its inputs give %s", i, op, a, b);
    }
    if ((n->op == OP_PARAM || n->op == OP_INPUT) && (!n->name || !*n->name))
      return bad(err, errlen, "%%%d (%s) has no name", i, op);
    if (n->op == OP_PARAM && n->init.kind == INIT_NONE)
      return bad(err, errlen, "param %s has no initialiser", n->name);
    int j = n->op == OP_PARAM ? seen_insert(params, g, i) : n->op == OP_DROPOUT ? seen_insert(streams, g, i) : -1;
    if (j >= 0 && n->op == OP_PARAM)
      return bad(err, errlen, "param name %s is used by %%%d and %%%d", n->name, j, i);
    if (j >= 0 && (g->nodes[j].fval != n->fval || !shape_eq(&g->nodes[j].shape, &n->shape)))
      return bad(err, errlen, "dropout %%%d and %%%d share mask stream %u but differ in p or shape", j, i, n->seed);
  }
  for (int o = 0; o < g->noutputs; o++) {
    const Output *out = &g->outputs[o];
    if (out->node < 0 || out->node >= g->nnodes)
      return bad(err, errlen, "output %s names node %d", out->name, out->node);
    if (!strcmp(out->name, "loss") && g->nodes[out->node].shape.rank != 0)
      return bad(err, errlen, "output loss is not a scalar");
  }
  return unique_outputs(g, err, errlen);
}
