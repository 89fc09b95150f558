// verify.c: the IR checker, run after every pass in debug builds.
//
// Checks: ids are positions; inputs come strictly before their user (SSA,
// topological order); arity matches the op table; every shape and dtype is
// what ir_infer derives from the inputs; params and inputs are named, params
// uniquely and with an initialiser; dropout nodes that share a mask stream
// (a forward dropout and its gradient) have the same p and shape; scopes
// form a tree; outputs name existing nodes, uniquely, and "loss" is a scalar.
#include "ir.h"

#include <stdarg.h>
#include <string.h>

static bool bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool bad(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return false;
}

bool ir_verify(const Graph *g, char *err, size_t errlen) {
  for (int s = 0; s < g->nscopes; s++)
    if (g->scopes[s].parent >= s || (s > 0 && g->scopes[s].parent < 0))
      return bad(err, errlen, "scope %d has parent %d", s, g->scopes[s].parent);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->id != i) return bad(err, errlen, "node at %d has id %d", i, n->id);
    if ((unsigned)n->op >= OP_COUNT) return bad(err, errlen, "%%%d has op %d", i, (int)n->op);
    const char *op = ir_op_info[n->op].name;
    if (n->nin != ir_op_info[n->op].nin)
      return bad(err, errlen, "%%%d (%s) has %d inputs, wants %d", i, op, n->nin,
                 ir_op_info[n->op].nin);
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] < 0 || n->in[k] >= i)
        return bad(err, errlen, "%%%d (%s) uses %%%d before it is defined", i, op, n->in[k]);
    if (n->scope < 0 || n->scope >= (g->nscopes ? g->nscopes : 1))
      return bad(err, errlen, "%%%d (%s) has scope %d", i, op, n->scope);
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
    for (int j = 0; j < i; j++) {
      const Node *m = &g->nodes[j];
      if (n->op == OP_PARAM && m->op == OP_PARAM && !strcmp(m->name, n->name))
        return bad(err, errlen, "param name %s is used by %%%d and %%%d", n->name, j, i);
      if (n->op == OP_DROPOUT && m->op == OP_DROPOUT && m->seed == n->seed &&
          (m->fval != n->fval || !shape_eq(&m->shape, &n->shape)))
        return bad(err, errlen, "dropout %%%d and %%%d share mask stream %u but differ in p or shape", j, i,
                   n->seed);
    }
  }
  for (int o = 0; o < g->noutputs; o++) {
    const Output *out = &g->outputs[o];
    if (out->node < 0 || out->node >= g->nnodes)
      return bad(err, errlen, "output %s names node %d", out->name, out->node);
    for (int p = 0; p < o; p++)
      if (!strcmp(g->outputs[p].name, out->name))
        return bad(err, errlen, "output %s is defined twice", out->name);
    if (!strcmp(out->name, "loss") && g->nodes[out->node].shape.rank != 0)
      return bad(err, errlen, "output loss is not a scalar");
  }
  return true;
}
