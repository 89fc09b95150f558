// pytorch.c: xfc --emit=pytorch, the graph as written as a PyTorch module.
//
// Requires: a verified forward graph as elaborated (no fusion, no backward).
// Guarantees: a self-contained Python file (torch, and safetensors for
// load_xf) defining
//   - one nn.Module class per block of the model (XfBlock subclasses named
//     after the blocks), instantiated along the block instances, holding the
//     parameters under the names of xf's checkpoints ("lm.layers.0.mixer.Wq"),
//     each drawn from its initialiser (normal, uniform, zeros, ones);
//   - the model's class, whose forward(tokens, targets=None) computes every
//     node of the graph in order, as torch ops of the same semantics (numpy
//     broadcasting, keepdim reductions, the recurrences step by step), and
//     returns the outputs by name ("logits", "loss" when targets are given);
//   - load_xf(model, path): the parameters of an xf safetensors checkpoint.
// Dropout is torch's (F.dropout, the module's training flag), so masks
// differ from xf's; the values of everything else are the same functions.
// An op with no PyTorch form is an error at its source location.
#include "pytorch.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  FILE *f;
  const Graph *g;
  char *err;
  size_t errlen;
  const char *tokens, *targets;  // the INPUT node names of [B, T] ids (B and T come from the first)
} Py;

// A dimension as a Python expression: B, T or the number.
static void dim(FILE *f, Dim d) {
  if (d.kind == DIM_B) fprintf(f, "B");
  else if (d.kind == DIM_T) fprintf(f, "T");
  else fprintf(f, "%lld", (long long)d.n);
}

static void shape(FILE *f, const Shape *s) {
  fprintf(f, "(");
  for (int i = 0; i < s->rank; i++) {
    if (i) fprintf(f, ", ");
    dim(f, s->d[i]);
  }
  fprintf(f, s->rank == 1 ? ",)" : ")");
}

// A float as a Python expression (infinities and NaN as float('inf') ...).
static const char *pyf(char *buf, size_t n, double v) {
  if (isnan(v)) snprintf(buf, n, "float('nan')");
  else if (isinf(v)) snprintf(buf, n, "float('%sinf')", v < 0 ? "-" : "");
  else snprintf(buf, n, "%.17g", v);
  return buf;
}

static bool unsupported(Py *p, const Node *n) {
  int at = n->loc.file ? snprintf(p->err, p->errlen, "%s:%d:%d: ", n->loc.file, n->loc.line, n->loc.col) : 0;
  if (at < 0 || (size_t)at >= p->errlen) at = 0;
  snprintf(p->err + at, p->errlen - (size_t)at, "error: --emit=pytorch has no PyTorch form for op '%s' (node %%%d)",
           ir_op_info[n->op].name, n->id);
  return false;
}

// The Python statement computing node n into v<id>.
static bool node(Py *p, const Node *n) {
  FILE *f = p->f;
  const Graph *g = p->g;
  int x = n->nin > 0 ? n->in[0] : -1, y = n->nin > 1 ? n->in[1] : -1;
  char fv[48];
  pyf(fv, sizeof fv, n->fval);
  fprintf(f, "        v%d = ", n->id);
  switch (n->op) {
  case OP_PARAM: fprintf(f, "P(\"%s\")", n->name); break;
  case OP_INPUT: fprintf(f, "%s", n->name); break;
  case OP_CONST: fprintf(f, "torch.tensor(%s, dtype=dt, device=dev)", fv); break;
  case OP_IOTA: fprintf(f, "torch.arange("), dim(f, n->len), fprintf(f, ", dtype=dt, device=dev)"); break;
  case OP_SIZE: fprintf(f, "torch.tensor(float("), dim(f, n->len), fprintf(f, "), dtype=dt, device=dev)"); break;
  case OP_NEG: fprintf(f, "-v%d", x); break;
  case OP_EXP: fprintf(f, "torch.exp(v%d)", x); break;
  case OP_LOG: fprintf(f, "torch.log(v%d)", x); break;
  case OP_SQRT: fprintf(f, "torch.sqrt(v%d)", x); break;
  case OP_TANH: fprintf(f, "torch.tanh(v%d)", x); break;
  case OP_RELU: fprintf(f, "torch.relu(v%d)", x); break;
  case OP_GELU: fprintf(f, "F.gelu(v%d)", x); break;
  case OP_SIGMOID: fprintf(f, "torch.sigmoid(v%d)", x); break;
  case OP_SIN: fprintf(f, "torch.sin(v%d)", x); break;
  case OP_COS: fprintf(f, "torch.cos(v%d)", x); break;
  case OP_STEP: fprintf(f, "(v%d > 0).to(dt)", x); break;
  case OP_ADD: fprintf(f, "v%d + v%d", x, y); break;
  case OP_SUB: fprintf(f, "v%d - v%d", x, y); break;
  case OP_MUL: fprintf(f, "v%d * v%d", x, y); break;
  case OP_DIV: fprintf(f, "v%d / v%d", x, y); break;
  case OP_EQ: fprintf(f, "(v%d == v%d).to(dt)", x, y); break;
  case OP_SUM: case OP_MEAN: case OP_MAX: {
    fprintf(f, "torch.%s(v%d, dim=(", n->op == OP_SUM ? "sum" : n->op == OP_MEAN ? "mean" : "amax", x);
    for (int a = n->axis; a <= ir_reduce_end(n); a++) fprintf(f, "%d,", a);
    fprintf(f, "), keepdim=True)");
    break;
  }
  case OP_MATMUL: fprintf(f, "torch.matmul(v%d, v%d)", x, y); break;
  case OP_TRANSPOSE: fprintf(f, "v%d.transpose(%d, %d)", x, n->axis, n->axis2); break;
  case OP_RESHAPE: fprintf(f, "v%d.reshape", x), shape(f, &n->shape); break;
  case OP_EXPAND: fprintf(f, "v%d.expand", x), shape(f, &n->shape); break;
  case OP_SLICE: fprintf(f, "v%d.narrow(%d, %lld, ", x, n->axis, (long long)n->start), dim(f, n->len), fprintf(f, ")"); break;
  case OP_CONCAT: fprintf(f, "torch.cat([v%d, v%d], %d)", x, y, n->axis); break;
  case OP_EMBED: fprintf(f, "F.embedding(v%d.long(), v%d)", y, x); break;
  case OP_ONEHOT: fprintf(f, "F.one_hot(v%d.long(), ", x), dim(f, n->len), fprintf(f, ").to(dt)"); break;
  case OP_SHIFT: fprintf(f, "_shift(v%d, %d, %lld)", x, n->axis, (long long)n->start); break;
  case OP_SOFTMAX: fprintf(f, "torch.softmax(v%d, %d)", x, n->axis); break;
  case OP_LAYERNORM:
    fprintf(f, "F.layer_norm(v%d, (v%d.shape[-1],), v%d, v%d, %s)", x, x, y, n->in[2], fv);
    break;
  case OP_RMSNORM: fprintf(f, "v%d * v%d * torch.rsqrt(torch.mean(v%d * v%d, -1, keepdim=True) + %s)", y, x, x, x, fv); break;
  case OP_CAUSAL_MASK: fprintf(f, "_causal_mask(v%d, %s)", x, fv); break;
  case OP_CAUSAL_CONV: fprintf(f, "_causal_conv(v%d, v%d)", x, y); break;
  case OP_DROPOUT: fprintf(f, "F.dropout(v%d, %s, self.training)", x, fv); break;
  case OP_SCAN: fprintf(f, "_scan(v%d, v%d, %d)", x, y, n->axis); break;
  case OP_CROSS_ENTROPY: {
    const Shape *ls = &g->nodes[x].shape;
    fprintf(f, "F.cross_entropy(v%d.reshape(-1, ", x), dim(f, ls->d[ls->rank - 1]);
    fprintf(f, "), v%d.reshape(-1).long())", y);
    break;
  }
  default: return unsupported(p, n);
  }
  fprintf(f, "\n");
  return true;
}

// Python identifier of a block type ("Linear"; scopes of no block: XfBlock).
static const char *block_of(const Graph *g, const char *path, size_t len) {
  for (int s = 0; s < g->nscopes; s++)
    if (strlen(g->scopes[s].path) == len && !strncmp(g->scopes[s].path, path, len)) return g->scopes[s].block;
  return NULL;
}

static const char prelude[] =
    "import math\n"
    "\n"
    "import torch\n"
    "import torch.nn as nn\n"
    "import torch.nn.functional as F\n"
    "\n"
    "\n"
    "class XfBlock(nn.Module):\n"
    "    \"\"\"A block instance of the .xf file: its parameters, its sub-blocks.\"\"\"\n"
    "\n"
    "    def param(self, name, shape, init, a=0.0, b=0.0):\n"
    "        w = torch.empty(shape)\n"
    "        if init == \"normal\":\n"
    "            nn.init.normal_(w, a, b)\n"
    "        elif init == \"uniform\":\n"
    "            nn.init.uniform_(w, a, b)\n"
    "        elif init == \"ones\":\n"
    "            nn.init.ones_(w)\n"
    "        else:\n"
    "            nn.init.zeros_(w)\n"
    "        self.register_parameter(name, nn.Parameter(w))\n"
    "\n"
    "    def add(self, path, blocks, shape, init, a=0.0, b=0.0):\n"
    "        \"\"\"Parameter path ('lm.layers.0.mixer.Wq') in the blocks along it, made of the classes\n"
    "        `blocks` where missing.\"\"\"\n"
    "        m, names = self, path.split(\".\")\n"
    "        for name, cls in zip(names[:-1], blocks):\n"
    "            if name not in m._modules:\n"
    "                m.add_module(name, cls())\n"
    "            m = m._modules[name]\n"
    "        m.param(names[-1], shape, init, a, b)\n"
    "\n"
    "\n"
    "def _shift(x, axis, s):\n"
    "    \"\"\"x_{t-s} along axis, zeros where t - s is outside.\"\"\"\n"
    "    n = x.shape[axis]\n"
    "    if abs(s) >= n:\n"
    "        return torch.zeros_like(x)\n"
    "    z = x.new_zeros(x.shape[:axis] + (abs(s),) + x.shape[axis + 1:])\n"
    "    if s >= 0:\n"
    "        return torch.cat([z, x.narrow(axis, 0, n - s)], axis)\n"
    "    return torch.cat([x.narrow(axis, -s, n + s), z], axis)\n"
    "\n"
    "\n"
    "def _causal_mask(x, fill):\n"
    "    \"\"\"Entries above the diagonal of the last two axes set to fill.\"\"\"\n"
    "    r, c = x.shape[-2], x.shape[-1]\n"
    "    above = torch.ones(r, c, dtype=torch.bool, device=x.device).triu(1)\n"
    "    return x.masked_fill(above, fill)\n"
    "\n"
    "\n"
    "def _causal_conv(x, w):\n"
    "    \"\"\"out_i = sum_{j <= i} x_j (.) w_{i-j} along axis -2 (seed 001): w [L] a scalar\n"
    "    per lag, [L, d] a vector, [L, d, e] a matrix (x_j W_{i-j}).\"\"\"\n"
    "    T = x.shape[-2]\n"
    "    out = None\n"
    "    for k in range(T):\n"
    "        xs = x.narrow(-2, 0, T - k)\n"
    "        term = torch.matmul(xs, w[k]) if w.dim() == 3 else xs * w[k]\n"
    "        pad = term.new_zeros(term.shape[:-2] + (k,) + term.shape[-1:])\n"
    "        term = torch.cat([pad, term], -2)\n"
    "        out = term if out is None else out + term\n"
    "    return out\n"
    "\n"
    "\n"
    "def _scan(a, b, axis):\n"
    "    \"\"\"h_t = a_t o h_{t-1} + b_t along axis, h_{-1} = 0 (seed 003 eq. 6.154).\"\"\"\n"
    "    a = a.expand(b.shape)\n"
    "    hs, h = [], None\n"
    "    for t in range(b.shape[axis]):\n"
    "        bt = b.select(axis, t)\n"
    "        h = bt if h is None else a.select(axis, t) * h + bt\n"
    "        hs.append(h)\n"
    "    return torch.stack(hs, axis)\n"
    "\n"
    "\n"
    "def load_xf(model, path):\n"
    "    \"\"\"The parameters of an xf safetensors checkpoint (xfrun train --save) into model.\"\"\"\n"
    "    from safetensors.torch import load_file\n"
    "    state = {k: v for k, v in load_file(path).items() if not k.startswith(\"optimizer.\")}\n"
    "    model.load_state_dict(state, strict=True)\n"
    "    return model\n";

int pytorch_emit(FILE *f, const Graph *g, char *err, size_t errlen) {
  Py p = {.f = f, .g = g, .err = err, .errlen = errlen};
  int n = g->nforward ? g->nforward : g->nnodes;
  fprintf(f, "# Generated by xfc --emit=pytorch from model '%s' (context %lld). Parameters are named as\n"
             "# in xf's checkpoints; load_xf(model, 'run.safetensors') loads one.\n", g->name, (long long)g->t_max);
  fputs(prelude, f);
  // a class per block type
  const char **seen = calloc((size_t)g->nscopes + 1, sizeof *seen);
  int nseen = 0;
  for (int s = 0; seen && s < g->nscopes; s++) {
    const char *b = g->scopes[s].block;
    bool dup = false;
    for (int k = 0; k < nseen; k++) dup = dup || !strcmp(seen[k], b);
    if (dup || !*g->scopes[s].path) continue;
    seen[nseen++] = b;
    fprintf(f, "\n\nclass %s(XfBlock):\n    \"\"\"Block %s of the .xf file.\"\"\"\n", b, b);
  }
  free(seen);
  // the model: its tree of blocks from the parameters' dotted names
  fprintf(f, "\n\nclass Model(XfBlock):\n    \"\"\"Model %s: forward(tokens, targets=None) -> {output name: tensor}.\"\"\"\n\n", g->name);
  fprintf(f, "    context = %lld\n\n    def __init__(self):\n        super().__init__()\n", (long long)g->t_max);
  for (int i = 0; i < n; i++) {
    const Node *x = &g->nodes[i];
    if (x->op != OP_PARAM) continue;
    fprintf(f, "        self.add(\"%s\", (", x->name);
    for (const char *c = x->name, *dot; (dot = strchr(c, '.')); c = dot + 1) {
      const char *b = block_of(g, x->name, (size_t)(dot - x->name));
      fprintf(f, "%s, ", b ? b : "XfBlock");
    }
    static const char *inits[] = {"zeros", "normal", "uniform", "zeros", "ones"};
    fprintf(f, "), ");
    for (int k = 0; k < x->shape.rank; k++) fprintf(f, k ? ", %lld" : "(%lld", (long long)x->shape.d[k].n);
    fprintf(f, x->shape.rank == 0 ? "()" : x->shape.rank == 1 ? ",)" : ")");
    fprintf(f, ", \"%s\", %.17g, %.17g)\n", inits[x->init.kind], x->init.a, x->init.b);
  }
  // forward: the nodes that need no targets, then those that do
  const char *ids = NULL;
  bool *late = calloc((size_t)n + 1, sizeof *late);
  fprintf(f, "\n    def forward(self");
  for (int i = 0; i < n; i++)
    if (g->nodes[i].op == OP_INPUT) {
      fprintf(f, ", %s%s", g->nodes[i].name, ids ? "=None" : "");
      if (!ids) ids = g->nodes[i].name;
      else late[i] = true;
    }
  fprintf(f, "):\n        P = self.get_parameter\n        first = next(self.parameters())\n"
             "        dt, dev = first.dtype, first.device\n        B, T = %s.shape[0], %s.shape[1]\n", ids ? ids : "None",
          ids ? ids : "None");
  bool ok = late != NULL, any_late = false;
  for (int i = 0; ok && i < n; i++) {
    for (int k = 0; k < g->nodes[i].nin; k++) late[i] = late[i] || late[g->nodes[i].in[k]];
    any_late = any_late || (g->nodes[i].op == OP_INPUT && late[i]);
  }
  for (int i = 0; ok && i < n; i++)
    if (!late[i]) ok = node(&p, &g->nodes[i]);
  fprintf(f, "        out = {}\n");
  for (int pass = 0; ok && pass < 2; pass++) {
    for (int o = 0; o < g->noutputs; o++)
      if (late[g->outputs[o].node] == (pass == 1)) fprintf(f, "        out[\"%s\"] = v%d\n", g->outputs[o].name, g->outputs[o].node);
    if (pass == 1 || !any_late) break;
    fprintf(f, "        if");  // the outputs that need the optional inputs, when they are given
    for (int k = 0, m = 0; k < n; k++)
      if (g->nodes[k].op == OP_INPUT && late[k]) fprintf(f, "%s %s is None", m++ ? " or" : "", g->nodes[k].name);
    fprintf(f, ":\n            return out\n");
    for (int i = 0; ok && i < n; i++)
      if (late[i]) ok = node(&p, &g->nodes[i]);
  }
  fprintf(f, "        return out\n");
  free(late);
  return ok ? 0 : 1;
}
