// pytorch.c: xfc --emit=pytorch, the graph as written as a PyTorch module.
//
// Requires: a verified forward graph as elaborated (no fusion, no backward),
// with its scopes and the block calls of elaboration (Graph.calls).
// Guarantees: a self-contained Python file (torch, and safetensors for
// load_xf) defining
//   - one nn.Module class per block instance structure: each block instance
//     (scope) is a module holding its own parameters under their local names
//     and its sub-instances, so the parameters' dotted names are xf's
//     ("lm.layers.0.mixer.Wq"); instances of one block whose text differs
//     (other sizes or constants) get classes suffixed _2, _3, ...;
//   - per class a forward from the block's calls: it takes the values that
//     flow into the call (in the order of their first use), computes the
//     call's own nodes as torch ops of the same semantics (numpy
//     broadcasting, keepdim reductions, the recurrences step by step), calls
//     the sub-instances for theirs, and returns what flows out (one value, or
//     a tuple). B and T are read from the arguments' shapes, never baked in.
//     A block that calls an instance it does not own (a block passed as an
//     argument: PreNorm's f) reaches it through a reference that the lowest
//     instance owning both sets (XfBlock.link), or that the caller passes
//     when making the block alone (PreNorm(f=module));
//   - the model's class Model, whose forward(tokens, targets=None) returns
//     the outputs by name ("logits", "loss" when targets are given);
//   - load_xf(model, path): the parameters of an xf checkpoint or of an
//     `xfrun export` file (F32 or BF16), in the module's dtype.
// Dropout is torch's (F.dropout, the module's training flag), so masks
// differ from xf's; the values of everything else are the same functions.
// An op with no PyTorch form is an error at its source location.
#include "pytorch.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

// ---- a growing string ----------------------------------------------------------------

typedef struct {
  char *s;
  size_t len, cap;
  bool oom;
} Buf;

static void put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Buf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return (void)(b->oom = true);
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) return (void)(b->oom = true);
    b->s = s, b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

// A list of ints (node ids, scope ids), in insertion order.
typedef struct {
  int *v;
  int n, cap;
  bool oom;
} Ints;

static bool ints_has(const Ints *l, int x) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == x) return true;
  return false;
}

static void ints_add(Ints *l, int x) {
  if (ints_has(l, x) || l->oom) return;
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 4;
    int *v = realloc(l->v, sizeof *v * (size_t)cap);
    if (!v) return (void)(l->oom = true);
    l->v = v, l->cap = cap;
  }
  l->v[l->n++] = x;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

// ---- the calls and what flows through them ---------------------------------------

typedef struct {
  Ints need;        // values read in the call's subtree that come from outside it (params it does not own too)
  Ints outs;        // values made in the subtree and read outside it, or graph outputs; by node id
  int first;        // the first node of the subtree (-1: it made none)
  bool arg_b, arg_t;  // B, T as trailing arguments: no argument carries them
  int method;       // which forward of its scope's class (0: forward)
} CallInfo;

typedef struct {
  Buf text;         // the class body (docstring, __init__, methods) without the class line
  Ints refs;        // instances it calls but does not own: refs.v[i] the scope, named ref_name[i]
  const char **ref_name;
  Ints links;       // link lines of this scope's __init__ (indices into a Link table)
  char **methods;   // distinct forward texts: "(self, x):\n ..." bodies
  int nmethods;
  const char *cls;  // its class name
} ScopeInfo;

typedef struct {
  int owner, user, target;  // owner's __init__: user's reference ref_name[k] is target
  int k;
} Link;

typedef struct {
  const Graph *g;
  int n;            // forward nodes
  int ncalls;
  CallInfo *calls;
  ScopeInfo *scopes;
  Link *links;
  int nlinks, cap_links;
  char *err;
  size_t errlen;
  bool failed;
  // the call being written
  int c;
  int *nm;          // node -> its name in the call: >= 0 local v<k>, < -1 argument x<-2 - nm>; INT_MIN none
  int nargs;
  bool use_b, use_t, use_dt, use_p;
} Py;

static int call_of(const Py *p, int i) { return p->g->ncalls ? p->g->nodes[i].call : 0; }
static int call_scope(const Py *p, int c) { return p->g->ncalls ? p->g->calls[c].scope : 0; }
static int call_parent(const Py *p, int c) { return p->g->ncalls ? p->g->calls[c].parent : -1; }

// Whether call k is call c or below it.
static bool call_under(const Py *p, int k, int c) {
  while (k > c) k = call_parent(p, k);
  return k == c;
}

static bool scope_under(const Graph *g, int s, int a) {
  while (s > a) s = g->scopes[s].parent;
  return s == a;
}

// The parameter's name relative to scope s (which owns it or an ancestor of its owner).
static const char *param_rel(const Graph *g, int node, int s) {
  const char *path = g->scopes[s].path, *name = g->nodes[node].name;
  size_t l = strlen(path);
  return l ? name + l + 1 : name;
}

static bool param_local(const Py *p, int node, int c) {
  return p->g->nscopes && scope_under(p->g, p->g->nodes[node].scope, call_scope(p, c));
}

static void flows(Py *p) {
  const Graph *g = p->g;
  for (int i = 0; i < p->n; i++) {
    const Node *x = &g->nodes[i];
    if (x->op == OP_PARAM) continue;
    int m = call_of(p, i);
    if (x->op != OP_INPUT && p->calls[m].first < 0)
      for (int k = m; k >= 0 && p->calls[k].first < 0; k = call_parent(p, k)) p->calls[k].first = i;
    for (int a = 0; a < x->nin; a++) {
      int u = x->in[a];
      if (g->nodes[u].op == OP_PARAM) {
        for (int k = m; k > 0 && !param_local(p, u, k); k = call_parent(p, k)) ints_add(&p->calls[k].need, u);
        continue;
      }
      int d = call_of(p, u);
      for (int k = m; !call_under(p, d, k); k = call_parent(p, k)) ints_add(&p->calls[k].need, u);
      for (int j = d; !call_under(p, m, j); j = call_parent(p, j)) ints_add(&p->calls[j].outs, u);
    }
  }
  for (int o = 0; o < g->noutputs; o++)
    for (int j = call_of(p, g->outputs[o].node); j > 0; j = call_parent(p, j)) ints_add(&p->calls[j].outs, g->outputs[o].node);
  for (int c = 0; c < p->ncalls; c++) {
    CallInfo *ci = &p->calls[c];
    if (ci->need.oom || ci->outs.oom) p->failed = true;
    if (ci->outs.n) qsort(ci->outs.v, (size_t)ci->outs.n, sizeof *ci->outs.v, cmp_int);
  }
}

// ---- Python text --------------------------------------------------------------------

static bool ident(const char *s) {
  static const char *reserved[] = {"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
                                   "continue", "def", "del", "elif", "else", "except", "finally", "for", "from",
                                   "global", "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass",
                                   "raise", "return", "try", "while", "with", "yield", "training", "forward", "param",
                                   "link", "P", "B", "T", "dt", "dev"};
  if (!s || !*s || (*s >= '0' && *s <= '9')) return false;
  for (const char *c = s; *c; c++)
    if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) return false;
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (!strcmp(s, reserved[i])) return false;
  return s[0] != '_';
}

static bool digits(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return false;
  return n > 0;
}

// self.a.b[0].c for the dotted path rel (get_submodule where a part is no identifier).
static void sub_ref(Buf *b, const char *rel) {
  Buf t = {0};
  bool plain = true;
  put(&t, "self");
  for (const char *c = rel, *dot; *c; c = dot + (*dot != 0)) {
    dot = strchr(c, '.');
    if (!dot) dot = c + strlen(c);
    char part[256];
    size_t n = (size_t)(dot - c);
    if (n >= sizeof part) plain = false, n = sizeof part - 1;
    memcpy(part, c, n), part[n] = 0;
    if (digits(part, n)) put(&t, "[%s]", part);
    else if (ident(part)) put(&t, ".%s", part);
    else plain = false;
  }
  if (plain && !t.oom) put(b, "%s", t.s);
  else put(b, "self.get_submodule(\"%s\")", rel);
  free(t.s);
}

// A dimension as a Python expression: B, T, (T // s) or the number.
static void dim(Py *p, Buf *b, Dim d) {
  if (d.kind == DIM_B) put(b, "B"), p->use_b = true;
  else if (d.kind == DIM_T && dim_tdiv(d) > 1) put(b, "(T // %lld)", (long long)dim_tdiv(d)), p->use_t = true;
  else if (d.kind == DIM_T) put(b, "T"), p->use_t = true;
  else put(b, "%lld", (long long)d.n);
}

static void shape(Py *p, Buf *b, const Shape *s) {
  put(b, "(");
  for (int i = 0; i < s->rank; i++) {
    if (i) put(b, ", ");
    dim(p, b, s->d[i]);
  }
  put(b, s->rank == 1 ? ",)" : ")");
}

// A float as a Python expression (infinities and NaN as float('inf') ...).
static const char *pyf(char *buf, size_t n, double v) {
  if (isnan(v)) snprintf(buf, n, "float('nan')");
  else if (isinf(v)) snprintf(buf, n, "float('%sinf')", v < 0 ? "-" : "");
  else snprintf(buf, n, "%.17g", v);
  return buf;
}

static void fail_at(Py *p, const Node *n, const char *what) {
  int at = n->loc.file ? snprintf(p->err, p->errlen, "%s:%d:%d: ", n->loc.file, n->loc.line, n->loc.col) : 0;
  if (at < 0 || (size_t)at >= p->errlen) at = 0;
  snprintf(p->err + at, p->errlen - (size_t)at, "error: --emit=pytorch: %s '%s' (node %%%d)", what,
           ir_op_info[n->op].name, n->id);
  p->failed = true;
}

static void name_of(Py *p, Buf *b, int v) {
  int k = p->nm[v];
  if (k >= 0) put(b, "v%d", k);
  else if (k != INT_MIN) put(b, p->nargs == 1 ? "x" : "x%d", -2 - k);
}

// The value of node u in the call being written: its name, a parameter the
// call's instance owns, or (the model's forward) an input by name.
static void val(Py *p, Buf *b, int u) {
  const Node *x = &p->g->nodes[u];
  if (p->nm[u] != INT_MIN) return name_of(p, b, u);
  if (x->op == OP_PARAM && param_local(p, u, p->c)) {
    p->use_p = true;
    return put(b, "P(\"%s\")", param_rel(p->g, u, call_scope(p, p->c)));
  }
  if (x->op == OP_INPUT && p->c == 0) return put(b, "%s", x->name);
  fail_at(p, x, "internal error: no value in the call for");
}

// The Python expression of node n's value.
static void expr(Py *p, Buf *b, const Node *n) {
  const Graph *g = p->g;
  char fv[48];
  pyf(fv, sizeof fv, n->fval);
#define X(k) val(p, b, n->in[k])
  switch (n->op) {
  case OP_CONST: put(b, "torch.tensor(%s, dtype=dt, device=dev)", fv), p->use_dt = true; break;
  case OP_IOTA: put(b, "torch.arange("), dim(p, b, n->len), put(b, ", dtype=dt, device=dev)"), p->use_dt = true; break;
  case OP_SIZE:
    put(b, "torch.tensor(float("), dim(p, b, n->len), put(b, "), dtype=dt, device=dev)"), p->use_dt = true;
    break;
  case OP_NEG: put(b, "-"), X(0); break;
  case OP_STEP: put(b, "("), X(0), put(b, " > 0).to(dt)"), p->use_dt = true; break;
  case OP_ADD: X(0), put(b, " + "), X(1); break;
  case OP_SUB: X(0), put(b, " - "), X(1); break;
  case OP_MUL: X(0), put(b, " * "), X(1); break;
  case OP_DIV: X(0), put(b, " / "), X(1); break;
  case OP_EQ: put(b, "("), X(0), put(b, " == "), X(1), put(b, ").to(dt)"), p->use_dt = true; break;
  case OP_LT: put(b, "("), X(0), put(b, " < "), X(1), put(b, ").to(dt)"), p->use_dt = true; break;
  case OP_LE: put(b, "("), X(0), put(b, " <= "), X(1), put(b, ").to(dt)"), p->use_dt = true; break;
  case OP_MAXIMUM: case OP_MINIMUM: case OP_POW: put(b, "torch.%s(", ir_op_info[n->op].name), X(0), put(b, ", "), X(1), put(b, ")"); break;
  case OP_STOP_GRADIENT: X(0), put(b, ".detach()"); break;
  case OP_SUM: case OP_MEAN: case OP_MAX: {
    put(b, "torch.%s(", n->op == OP_SUM ? "sum" : n->op == OP_MEAN ? "mean" : "amax"), X(0), put(b, ", dim=(");
    for (int a = n->axis; a <= ir_reduce_end(n); a++) put(b, "%d,", a);
    put(b, "), keepdim=True)");
    break;
  }
  case OP_MATMUL: put(b, "torch.matmul("), X(0), put(b, ", "), X(1), put(b, ")"); break;
  case OP_TRANSPOSE: X(0), put(b, ".transpose(%d, %d)", n->axis, n->axis2); break;
  case OP_RESHAPE:  // to a scalar: .reshape(()), as .reshape() takes no empty argument list
    X(0), put(b, ".reshape");
    if (n->shape.rank) shape(p, b, &n->shape);
    else put(b, "(())");
    break;
  case OP_EXPAND: X(0), put(b, ".expand"), shape(p, b, &n->shape); break;
  case OP_SLICE: X(0), put(b, ".narrow(%d, %lld, ", n->axis, (long long)n->start), dim(p, b, n->len), put(b, ")"); break;
  case OP_CONCAT: put(b, "torch.cat(["), X(0), put(b, ", "), X(1), put(b, "], %d)", n->axis); break;
  case OP_EMBED: put(b, "F.embedding("), X(1), put(b, ".long(), "), X(0), put(b, ")"); break;
  case OP_ONEHOT:
    put(b, "F.one_hot("), X(0), put(b, ".long(), "), dim(p, b, n->len), put(b, ").to(dt)"), p->use_dt = true;
    break;
  case OP_SHIFT: put(b, "_shift("), X(0), put(b, ", %d, %lld)", n->axis, (long long)n->start); break;
  case OP_SOFTMAX: put(b, "torch.softmax("), X(0), put(b, ", %d)", n->axis); break;
  case OP_LAYERNORM:
    put(b, "F.layer_norm("), X(0), put(b, ", ("), X(0), put(b, ".shape[-1],), "), X(1), put(b, ", "), X(2);
    put(b, ", %s)", fv);
    break;
  case OP_RMSNORM:
    X(1), put(b, " * "), X(0), put(b, " * torch.rsqrt(torch.mean("), X(0), put(b, " * "), X(0);
    put(b, ", -1, keepdim=True) + %s)", fv);
    break;
  case OP_CAUSAL_MASK: put(b, "_causal_mask("), X(0), put(b, ", %s)", fv); break;
  case OP_CAUSAL_CONV: put(b, "_causal_conv("), X(0), put(b, ", "), X(1), put(b, ")"); break;
  case OP_DROPOUT: put(b, "F.dropout("), X(0), put(b, ", %s, self.training)", fv); break;
  case OP_SCAN: put(b, "_scan("), X(0), put(b, ", "), X(1), put(b, ", %d)", n->axis); break;
  case OP_ROUTED_MATMUL: put(b, "_routed_matmul("), X(0), put(b, ", "), X(1), put(b, ", "), X(2), put(b, ")"); break;
  case OP_TOPK: put(b, "torch.topk("), X(0), put(b, ", %lld, dim=-1).indices.to(", (long long)n->len.n), X(0), put(b, ".dtype)"); break;
  case OP_CROSS_ENTROPY: {
    const Shape *ls = &g->nodes[n->in[0]].shape;
    put(b, "F.cross_entropy("), X(0), put(b, ".reshape(-1, "), dim(p, b, ls->d[ls->rank - 1]);
    put(b, "), "), X(1), put(b, ".reshape(-1).long())");
    break;
  }
  default:  // an op the language calls by name: torch.<name>(x) or F.<name>(x)
    if (ir_op_info[n->op].cat != OPC_UNARY || !(ir_op_info[n->op].props & IR_P_CALL)) {
      fail_at(p, n, "no PyTorch form for op");
      break;
    }
    put(b, "%s.%s(", ir_op_info[n->op].props & IR_P_TORCH_F ? "F" : "torch", ir_op_info[n->op].name), X(0), put(b, ")");
  }
#undef X
}

// The child of call c whose subtree holds call k (k under c, k != c).
static int child_toward(const Py *p, int k, int c) {
  while (call_parent(p, k) != c) k = call_parent(p, k);
  return k;
}

// The name under which scope s reaches instance t that it calls but does not own.
static const char *ref_to(Py *p, int s, int t, const char *site) {
  const Graph *g = p->g;
  ScopeInfo *si = &p->scopes[s];
  for (int i = 0; i < si->refs.n; i++)
    if (si->refs.v[i] == t) return si->ref_name[i];
  bool ok = ident(site) && strncmp(site, "ref", 3);
  for (int i = 0; ok && i < si->refs.n; i++) ok = strcmp(si->ref_name[i], site) != 0;
  for (int c = s + 1; ok && c < g->nscopes; c++)  // no child of s by that name
    if (g->scopes[c].parent == s) {
      const char *lc = strrchr(g->scopes[c].path, '.');
      ok = strcmp(lc ? lc + 1 : g->scopes[c].path, site) != 0;
    }
  for (int i = 0; ok && i < p->n; i++)  // nor a parameter of it
    if (g->nodes[i].op == OP_PARAM && g->nodes[i].scope == s) ok = strcmp(param_rel(g, i, s), site) != 0;
  ints_add(&si->refs, t);
  const char **names = realloc(si->ref_name, sizeof *names * (size_t)si->refs.cap);
  char *name = malloc(ok ? strlen(site) + 1 : 24);
  if (!names || si->refs.oom || !name) return free(name), p->failed = true, "ref";
  si->ref_name = names;
  if (ok) strcpy(name, site);
  else snprintf(name, 24, "ref%d", si->refs.n - 1);
  names[si->refs.n - 1] = name;
  // the lowest scope owning both makes the link
  int a = s;
  while (!scope_under(g, t, a)) a = g->scopes[a].parent;
  if (p->nlinks == p->cap_links) {
    int cap = p->cap_links ? 2 * p->cap_links : 16;
    Link *l = realloc(p->links, sizeof *l * (size_t)cap);
    if (!l) return p->failed = true, names[si->refs.n - 1];
    p->links = l, p->cap_links = cap;
  }
  p->links[p->nlinks] = (Link){a, s, t, si->refs.n - 1};
  ints_add(&p->scopes[a].links, p->nlinks++);
  return names[si->refs.n - 1];
}

// The call of child k in c's forward: "v3 = self.ln(v2)".
static void child_call(Py *p, Buf *b, int k, int *nlocal) {
  const Graph *g = p->g;
  CallInfo *ki = &p->calls[k];
  int sk = call_scope(p, k), sc = call_scope(p, p->c);
  Buf callee = {0};
  if (sk == sc) put(&callee, "self");
  else if (scope_under(g, sk, sc)) sub_ref(&callee, g->scopes[sk].path + (*g->scopes[sc].path ? strlen(g->scopes[sc].path) + 1 : 0));
  else put(&callee, "self.%s", ref_to(p, sc, sk, g->calls[k].site));
  put(b, "        ");
  for (int o = 0; o < ki->outs.n; o++) {
    p->nm[ki->outs.v[o]] = (*nlocal)++;
    put(b, o ? ", " : ""), name_of(p, b, ki->outs.v[o]);
  }
  if (ki->method) put(b, " = %s.forward_%d(", callee.oom ? "self" : callee.s, ki->method + 1);
  else put(b, " = %s(", callee.oom ? "self" : callee.s);
  free(callee.s);
  for (int a = 0; a < ki->need.n; a++) put(b, a ? ", " : ""), val(p, b, ki->need.v[a]);
  if (ki->arg_b) put(b, "%sB", ki->need.n ? ", " : ""), p->use_b = true;
  if (ki->arg_t) put(b, "%sT", ki->need.n || ki->arg_b ? ", " : ""), p->use_t = true;
  put(b, ")\n");
}

// Whether an item (own node i, or child call k) reads a value marked late.
static bool reads_late(const Py *p, const bool *late, int i, int k) {
  if (k >= 0) {
    for (int a = 0; a < p->calls[k].need.n; a++)
      if (late[p->calls[k].need.v[a]]) return true;
    return false;
  }
  for (int a = 0; a < p->g->nodes[i].nin; a++)
    if (late[p->g->nodes[i].in[a]]) return true;
  return false;
}

// Call c's items in node order: own nodes and the child calls that return
// something. pass: -1 all; 0 those that read no late input; 1 the others
// (the model's forward with targets).
static void items(Py *p, Buf *b, int pass, bool *late, int *nlocal) {
  const Graph *g = p->g;
  int c = p->c, last = -1;
  for (int i = p->calls[c].first < 0 ? p->n : p->calls[c].first; i < p->n; i++) {
    const Node *x = &g->nodes[i];
    int m = call_of(p, i);
    if (x->op == OP_PARAM || x->op == OP_INPUT) continue;
    if (!call_under(p, m, c)) break;  // past the subtree's nodes, which are contiguous
    if (m == c) {
      bool is_late = late && reads_late(p, late, i, -1);
      if (late) late[i] = is_late;
      if (pass >= 0 && is_late != (pass == 1)) continue;
      Buf e = {0};
      expr(p, &e, x);
      p->nm[i] = (*nlocal)++;
      put(b, "        "), name_of(p, b, i), put(b, " = %s\n", e.oom ? "None" : e.s);
      if (e.oom) p->failed = true;
      free(e.s);
      continue;
    }
    int k = child_toward(p, m, c);
    if (k == last || !p->calls[k].outs.n) continue;
    last = k;
    bool is_late = late && reads_late(p, late, -1, k);
    for (int o = 0; late && o < p->calls[k].outs.n; o++) late[p->calls[k].outs.v[o]] = is_late;
    if (pass < 0 || is_late == (pass == 1)) child_call(p, b, k, nlocal);
  }
}

// "B = x.shape[0]" for the first argument with dimension kind `kind`; false: none has it.
static bool dim_from(Py *p, Buf *b, const Ints *args, DimKind kind, const char *name) {
  for (int a = 0; a < args->n; a++) {
    const Shape *s = &p->g->nodes[args->v[a]].shape;
    for (int d = 0; d < s->rank; d++)
      if (s->d[d].kind == kind) {
        put(b, "        %s = ", name), val(p, b, args->v[a]), put(b, ".shape[%d]", d);
        if (dim_tdiv(s->d[d]) > 1) put(b, " * %lld", (long long)dim_tdiv(s->d[d]));  // T / s
        put(b, "\n");
        return true;
      }
  }
  return false;
}

// The forward of call c as "(self, x):\n<body>" (the method name left out).
static char *forward_text(Py *p, int c) {
  const Graph *g = p->g;
  CallInfo *ci = &p->calls[c];
  p->c = c, p->use_b = p->use_t = p->use_dt = p->use_p = false;
  for (int i = 0; i < p->n; i++) p->nm[i] = INT_MIN;
  Ints args = {0};
  bool *late = NULL;
  if (c == 0) {  // the model: its inputs, the first required, the rest optional
    for (int i = 0; i < p->n; i++)
      if (g->nodes[i].op == OP_INPUT) ints_add(&args, i);
    p->nargs = 0;
    late = calloc((size_t)p->n + 1, sizeof *late);
    if (!late) p->failed = true;
    for (int a = 1; late && a < args.n; a++) late[args.v[a]] = true;
  } else {
    for (int a = 0; a < ci->need.n; a++) ints_add(&args, ci->need.v[a]), p->nm[ci->need.v[a]] = -2 - a;
    p->nargs = ci->need.n;
  }
  Buf body = {0}, head = {0};
  int nlocal = 0;
  bool any_late = c == 0 && args.n > 1;  // the model's optional inputs (targets)
  items(p, &body, any_late ? 0 : -1, any_late ? late : NULL, &nlocal);
  if (c == 0) {
    put(&body, "        out = {}\n");
    for (int o = 0; o < g->noutputs; o++)
      if (!any_late || !late[g->outputs[o].node])
        put(&body, "        out[\"%s\"] = ", g->outputs[o].name), val(p, &body, g->outputs[o].node), put(&body, "\n");
    if (any_late) {
      put(&body, "        if");
      for (int a = 1; a < args.n; a++) put(&body, "%s %s is None", a > 1 ? " or" : "", g->nodes[args.v[a]].name);
      put(&body, ":\n            return out\n");
      items(p, &body, 1, late, &nlocal);
      for (int o = 0; o < g->noutputs; o++)
        if (late[g->outputs[o].node])
          put(&body, "        out[\"%s\"] = ", g->outputs[o].name), val(p, &body, g->outputs[o].node), put(&body, "\n");
    }
    put(&body, "        return out\n");
  } else {
    put(&body, "        return ");
    for (int o = 0; o < ci->outs.n; o++) put(&body, o ? ", " : ""), val(p, &body, ci->outs.v[o]);
    put(&body, ci->outs.n ? "\n" : "None\n");
  }
  // the signature, then what the body reads: P, B and T, dt and dev
  put(&head, "(self");
  for (int a = 0; a < args.n; a++) {
    put(&head, ", ");
    if (c == 0) put(&head, "%s%s", g->nodes[args.v[a]].name, a ? "=None" : "");
    else name_of(p, &head, args.v[a]);
  }
  Buf dims = {0};
  ci->arg_b = p->use_b && !dim_from(p, &dims, &args, DIM_B, "B");
  ci->arg_t = p->use_t && !dim_from(p, &dims, &args, DIM_T, "T");
  put(&head, "%s%s):\n", ci->arg_b ? ", B" : "", ci->arg_t ? ", T" : "");
  if (p->use_p) put(&head, "        P = self.get_parameter\n");
  if (dims.len) put(&head, "%s", dims.s);
  if (p->use_dt) {
    put(&head, "        dt, dev = _dtdev(self");
    for (int a = 0; a < args.n; a++)
      if (g->nodes[args.v[a]].dtype == DT_F32) put(&head, ", "), name_of(p, &head, args.v[a]);
    put(&head, ")\n");
  }
  put(&head, "%s", body.s ? body.s : "");
  bool oom = body.oom || head.oom || dims.oom || args.oom;
  free(body.s), free(dims.s), free(args.v), free(late);
  if (oom) p->failed = true, free(head.s), head.s = NULL;
  return head.s;
}

// ---- classes ------------------------------------------------------------------------

static const char prelude[] =
    "import math\n"
    "\n"
    "import torch\n"
    "import torch.nn as nn\n"
    "import torch.nn.functional as F\n"
    "\n"
    "\n"
    "class XfBlock(nn.Module):\n"
    "    \"\"\"A block instance of the .xf file: its parameters, its sub-blocks. refs: the\n"
    "    instances it calls but does not own (a block passed to it), by name.\"\"\"\n"
    "\n"
    "    def __init__(self, **refs):\n"
    "        super().__init__()\n"
    "        for name, m in refs.items():\n"
    "            object.__setattr__(self, name, m)  # a reference, not a sub-module: no second copy of its parameters\n"
    "\n"
    "    def param(self, name, shape, init, a=0.0, b=0.0):\n"
    "        w = torch.empty(shape)\n"
    "        if init == \"normal\":\n"
    "            nn.init.normal_(w, a, b)\n"
    "        elif init == \"uniform\":\n"
    "            nn.init.uniform_(w, a, b)\n"
    "        elif init == \"ones\":\n"
    "            nn.init.ones_(w)\n"
    "        elif init == \"constant\":\n"
    "            nn.init.constant_(w, a)\n"
    "        elif init == \"trunc_normal\":\n"
    "            nn.init.trunc_normal_(w, a, b, a - 2 * b, a + 2 * b)\n"
    "        else:\n"
    "            nn.init.zeros_(w)\n"
    "        self.register_parameter(name, nn.Parameter(w))\n"
    "\n"
    "    def link(self, user, name, target):\n"
    "        \"\"\"Sub-module `user` reaches sub-module `target` as its attribute `name`.\"\"\"\n"
    "        object.__setattr__(self.get_submodule(user), name, self.get_submodule(target))\n"
    "\n"
    "    def __getitem__(self, i):\n"
    "        \"\"\"Item i of a repeat sequence (self.layers[0]).\"\"\"\n"
    "        return self._modules[str(i)]\n"
    "\n"
    "\n"
    "def _dtdev(module, *xs):\n"
    "    \"\"\"dtype and device of the first tensor argument, else of the module's parameters.\"\"\"\n"
    "    for x in xs:\n"
    "        return x.dtype, x.device\n"
    "    for w in module.parameters():\n"
    "        return w.dtype, w.device\n"
    "    return torch.get_default_dtype(), torch.device(\"cpu\")\n"
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
    "    \"\"\"out_i = sum_{i - L < j <= i} x_j (.) w_{i-j} along axis -2 (seed 001): w [L] a scalar\n"
    "    per lag, [L, d] a vector, [L, d, e] a matrix (x_j W_{i-j}).\"\"\"\n"
    "    T = x.shape[-2]\n"
    "    out = None\n"
    "    for k in range(min(T, w.shape[0])):\n"
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
    "def _routed_matmul(x, w, ids):\n"
    "    \"\"\"Row r of x [..., d] times w[e] [d, f], e = ids_r truncated; 0 where e is not in\n"
    "    [0, E): each expert one product over only its rows.\"\"\"\n"
    "    y = x.new_zeros(x.shape[:-1] + (w.shape[-1],))\n"
    "    for e in range(w.shape[0]):\n"
    "        rows = (ids >= e) & (ids < e + 1)\n"
    "        if bool(rows.any()):\n"
    "            y[rows] = x[rows] @ w[e]\n"
    "    return y\n"
    "\n"
    "\n"
    "def load_xf(model, path):\n"
    "    \"\"\"The parameters of an xf checkpoint (xfrun train --save) or of an xfrun export\n"
    "    file (F32 or BF16) into model, in its dtype; AdamW's moments are left out.\"\"\"\n"
    "    from safetensors.torch import load_file\n"
    "    own = model.state_dict()\n"
    "    state = {k: v.to(own[k].dtype if k in own else v.dtype)\n"
    "             for k, v in load_file(path).items() if not k.startswith(\"optimizer.\")}\n"
    "    model.load_state_dict(state, strict=True)\n"
    "    return model\n";

// The class name of scope s: the block's name, suffixed when another
// instance of the block has a different text.
static const char *class_name(Py *p, int s, char **names, int *nnames) {
  const Graph *g = p->g;
  if (s == 0) return "Model";
  const char *block = g->scopes[s].block;
  static const char *reserved[] = {"Model", "XfBlock", "torch", "nn", "F", "math", "load_xf"};
  char base[200];
  snprintf(base, sizeof base, "%s", !strcmp(block, "repeat") ? "Repeat" : block);
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (!strcmp(block, reserved[i])) snprintf(base, sizeof base, "%.100s_", block);
  int same = 0;
  for (int t = s + 1; t < g->nscopes; t++)  // an instance of the same block with the same text: its class
    if (p->scopes[t].cls && !strcmp(g->scopes[t].block, block)) {
      if (!strcmp(p->scopes[t].text.s ? p->scopes[t].text.s : "", p->scopes[s].text.s ? p->scopes[s].text.s : ""))
        return p->scopes[t].cls;
    }
  for (int i = 0; i < *nnames; i++) {
    size_t l = strlen(base);
    if (!strncmp(names[i], base, l) && (!names[i][l] || (names[i][l] == '_' && digits(names[i] + l + 1, strlen(names[i] + l + 1)))))
      same++;
  }
  char *name = malloc(strlen(base) + 16);
  if (!name) return p->failed = true, "XfBlock";
  if (same) sprintf(name, "%s_%d", base, same + 1);
  else strcpy(name, base);
  names[(*nnames)++] = name;
  return name;
}

// Scope s's class body: docstring, __init__ (parameters, sub-instances, links), forwards.
static void class_text(Py *p, int s) {
  const Graph *g = p->g;
  ScopeInfo *si = &p->scopes[s];
  Buf *b = &si->text;
  if (s == 0) put(b, "    \"\"\"Model %s: forward(tokens, targets=None) -> {output name: tensor}.\"\"\"\n\n    context = %lld\n\n",
                  g->name, (long long)g->t_max);
  else put(b, "    \"\"\"Block %s of the .xf file.\"\"\"\n\n", g->scopes[s].block);
  put(b, "    def __init__(self, **refs):\n        super().__init__(**refs)\n");
  static const char *inits[] = {"zeros", "normal", "uniform", "zeros", "ones", "constant", "trunc_normal"};
  for (int i = 0; i < p->n; i++) {
    const Node *x = &g->nodes[i];
    if (x->op != OP_PARAM || x->scope != s) continue;
    put(b, "        self.param(\"%s\", (", param_rel(g, i, s));
    for (int k = 0; k < x->shape.rank; k++) put(b, k ? ", %lld" : "%lld", (long long)x->shape.d[k].n);
    put(b, "%s), \"%s\", %.17g, %.17g)\n", x->shape.rank == 1 ? "," : "", inits[x->init.kind], x->init.a, x->init.b);
  }
  for (int t = s + 1; t < g->nscopes; t++) {
    if (g->scopes[t].parent != s) continue;
    const char *local = g->scopes[t].path + (*g->scopes[s].path ? strlen(g->scopes[s].path) + 1 : 0);
    if (ident(local)) put(b, "        self.%s = %s()\n", local, p->scopes[t].cls);
    else put(b, "        self.add_module(\"%s\", %s())\n", local, p->scopes[t].cls);
  }
  size_t pre = *g->scopes[s].path ? strlen(g->scopes[s].path) + 1 : 0;
  for (int i = 1; i < si->links.n; i++)  // in the order of the users
    for (int j = i; j > 0 && p->links[si->links.v[j - 1]].user > p->links[si->links.v[j]].user; j--) {
      int t = si->links.v[j];
      si->links.v[j] = si->links.v[j - 1], si->links.v[j - 1] = t;
    }
  for (int i = 0; i < si->links.n; i++) {
    const Link *l = &p->links[si->links.v[i]];
    put(b, "        self.link(\"%s\", \"%s\", \"%s\")\n", g->scopes[l->user].path + pre,
        p->scopes[l->user].ref_name[l->k], g->scopes[l->target].path + pre);
  }
  for (int m = 0; m < si->nmethods; m++) {
    if (m) put(b, "\n    def forward_%d%s", m + 1, si->methods[m]);
    else put(b, "\n    def forward%s", si->methods[m]);
  }
  if (b->oom) p->failed = true;
}

int pytorch_emit(FILE *f, const Graph *g, char *err, size_t errlen) {
  Py p = {.g = g, .n = g->nforward ? g->nforward : g->nnodes, .ncalls = g->ncalls ? g->ncalls : 1, .err = err,
          .errlen = errlen};
  if (!g->nscopes) return snprintf(err, errlen, "error: --emit=pytorch needs the graph's block scopes"), 1;
  p.calls = calloc((size_t)p.ncalls, sizeof *p.calls);
  p.scopes = calloc((size_t)g->nscopes, sizeof *p.scopes);
  p.nm = malloc(sizeof *p.nm * ((size_t)p.n + 1));
  char **names = calloc((size_t)g->nscopes + 1, sizeof *names);
  int nnames = 0;
  if (!p.calls || !p.scopes || !p.nm || !names) p.failed = true;
  for (int c = 0; !p.failed && c < p.ncalls; c++) p.calls[c].first = -1;
  if (!p.failed) flows(&p);
  // forwards, callees first (a call's children come after it); each call's text is its scope's method
  for (int c = p.ncalls - 1; !p.failed && c >= 0; c--) {
    if (c > 0 && (p.calls[c].first < 0 || !p.calls[c].outs.n)) continue;
    char *t = forward_text(&p, c);
    if (!t) break;
    ScopeInfo *si = &p.scopes[call_scope(&p, c)];
    int m = 0;
    while (m < si->nmethods && strcmp(si->methods[m], t)) m++;
    if (m < si->nmethods) {
      free(t);
    } else {
      char **ms = realloc(si->methods, sizeof *ms * (size_t)(si->nmethods + 1));
      if (!ms) {
        free(t), p.failed = true;
        break;
      }
      si->methods = ms, ms[si->nmethods++] = t;
    }
    p.calls[c].method = m;
  }
  // the methods were found last call first: forward is the text of the latest call of an instance
  for (int s = g->nscopes - 1; !p.failed && s >= 0; s--) {
    class_text(&p, s);
    p.scopes[s].cls = class_name(&p, s, names, &nnames);
  }
  if (!p.failed) {
    fprintf(f, "# Generated by xfc --emit=pytorch from model '%s' (context %lld). Parameters are named as\n"
               "# in xf's checkpoints; load_xf(model, 'run.safetensors') loads one, or an xfrun export file.\n",
            g->name, (long long)g->t_max);
    fputs(prelude, f);
    for (int s = g->nscopes - 1; s >= 0; s--) {
      bool first = true;  // a class is printed where its first (deepest-numbered) instance is
      for (int t = s + 1; first && t < g->nscopes; t++) first = p.scopes[t].cls != p.scopes[s].cls;
      if (first) fprintf(f, "\n\nclass %s(XfBlock):\n%s", p.scopes[s].cls, p.scopes[s].text.s);
    }
  } else if (!*err) {
    snprintf(err, errlen, "error: --emit=pytorch: out of memory");
  }
  for (int c = 0; p.calls && c < p.ncalls; c++) free(p.calls[c].need.v), free(p.calls[c].outs.v);
  for (int s = 0; p.scopes && s < g->nscopes; s++) {
    ScopeInfo *si = &p.scopes[s];
    for (int i = 0; i < si->refs.n && si->ref_name; i++) free((char *)si->ref_name[i]);
    for (int m = 0; m < si->nmethods; m++) free(si->methods[m]);
    free(si->text.s), free(si->refs.v), free(si->ref_name), free(si->links.v), free(si->methods);
  }
  for (int i = 0; i < nnames; i++) free(names[i]);
  free(names), free(p.calls), free(p.scopes), free(p.nm), free(p.links);
  return p.failed ? 1 : 0;
}
