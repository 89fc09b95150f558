// print.c: the textual IR (xfc --emit=ir). One line per node:
//   %id = op %in, ... {attributes} : dtype[shape]  # scope @ file:line:col
// The format is stable: golden tests diff it.
#include "ir.h"

static void print_init(FILE *f, Init in) {
  switch (in.kind) {
  case INIT_NORMAL: fprintf(f, " normal(%g, %g)", in.a, in.b); break;
  case INIT_UNIFORM: fprintf(f, " uniform(%g, %g)", in.a, in.b); break;
  case INIT_ZEROS: fprintf(f, " zeros"); break;
  case INIT_ONES: fprintf(f, " ones"); break;
  case INIT_CONSTANT: fprintf(f, " constant(%g)", in.a); break;
  case INIT_TRUNC_NORMAL: fprintf(f, " trunc_normal(%g, %g)", in.a, in.b); break;
  case INIT_NONE: fprintf(f, " <no init>"); break;
  }
}

static const char *conv_names[] = {"scalar", "vector", "matrix"};

void ir_print(FILE *f, const Graph *g) {
  fprintf(f, "graph %s (T <= %lld%s)\n", g->name, (long long)g->t_max, g->noncausal ? ", noncausal" : "");
  for (int i = 0; i < g->nconfig; i++) {
    const ConfigEntry *c = &g->config[i];
    if (c->is_float) fprintf(f, "config %s = %g\n", c->name, c->value);
    else fprintf(f, "config %s = %lld\n", c->name, (long long)c->value);
  }
  for (int i = 0; i < g->nscopes; i++) {
    const Scope *s = &g->scopes[i];
    fprintf(f, "scope %d %s = %s", i, *s->path ? s->path : "<model>", s->block);
    if (s->parent >= 0) fprintf(f, " in %d", s->parent);
    if (s->loc.file) fprintf(f, " @ %s:%d:%d", s->loc.file, s->loc.line, s->loc.col);
    fprintf(f, "\n");
  }
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    char sh[160];
    shape_fmt(sh, sizeof sh, &n->shape);
    fprintf(f, "%%%d = %s", i, ir_op_info[n->op].name);
    for (int k = 0; k < n->nin; k++) fprintf(f, "%s%%%d", k ? ", " : " ", n->in[k]);
    switch (n->op) {
    case OP_PARAM: fprintf(f, " %s", n->name); print_init(f, n->init); break;
    case OP_INPUT: fprintf(f, " %s", n->name); break;
    case OP_CONST: fprintf(f, " %.9g", n->fval); break;
    case OP_SIZE:
      if (n->len.kind == DIM_CONST) fprintf(f, " %lld", (long long)n->len.n);
      else fprintf(f, " %s", n->len.kind == DIM_B ? "B" : "T");
      break;
    case OP_CONV_DX: case OP_CONV_DW: fprintf(f, " kernel=%s", conv_names[n->conv]); break;
    case OP_SUM: case OP_MEAN: case OP_MAX: case OP_SOFTMAX: case OP_CONCAT:
      if (ir_reduce_end(n) > n->axis) fprintf(f, " axes=%d..%d", n->axis, ir_reduce_end(n));
      else fprintf(f, " axis=%d", n->axis);
      break;
    case OP_TRANSPOSE: fprintf(f, " axes=%d,%d", n->axis, n->axis2); break;
    case OP_SCAN: case OP_SCAN_REV: case OP_SCAN_READ: case OP_SCAN_READ_GRAD: fprintf(f, " axis=%d", n->axis); break;
    case OP_SHIFT: fprintf(f, " axis=%d by=%lld", n->axis, (long long)n->start); break;
    case OP_SLICE: case OP_PAD: fprintf(f, " axis=%d start=%lld", n->axis, (long long)n->start); break;
    case OP_CAUSAL_MASK: fprintf(f, " fill=%g", n->fval); break;
    case OP_ATTENTION: case OP_ATTENTION_LSE: case OP_ATTENTION_GRAD: case OP_ATTENTION_DBIAS:
      fprintf(f, " scale=%g%s", n->fval, n->axis ? " heads=time_major" : "");
      if (n->start) fprintf(f, " window=%lld", (long long)n->start);
      break;
    case OP_LAYERNORM: case OP_LAYERNORM_DX: case OP_LAYERNORM_DYXH:
    case OP_RMSNORM: case OP_RMSNORM_DX: case OP_RMSNORM_DYXH: fprintf(f, " eps=%g", n->fval); break;
    case OP_CAUSAL_CONV: fprintf(f, " kernel=%s", conv_names[n->conv]); break;
    case OP_DROPOUT: fprintf(f, " p=%g stream=%u", n->fval, n->seed); break;
    default: break;
    }
    fprintf(f, " : %s%s", n->dtype == DT_I32 ? "i32" : "f32", sh);
    if (g->nscopes) fprintf(f, "  # %s", *g->scopes[n->scope].path ? g->scopes[n->scope].path : "<model>");
    if (n->loc.file) fprintf(f, " @ %s:%d:%d", n->loc.file, n->loc.line, n->loc.col);
    fprintf(f, "\n");
  }
  if (g->nforward) fprintf(f, "backward from %%%d\n", g->nforward);
  for (int o = 0; o < g->noutputs; o++)
    fprintf(f, "output %s = %%%d\n", g->outputs[o].name, g->outputs[o].node);
}
