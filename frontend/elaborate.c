// elaborate.c: AST -> graph IR.
//
// Requires: a parsed Program whose main module defines one model.
// Guarantees: a Graph that passes ir_verify, in which every node has the
// location of the expression that made it and the scope of the block
// instance it belongs to; every parameter is named by its instance path.
//
// Elaboration has two phases, as the language has two times:
//   construction: the model's config values, `let` and `param` members are
//     evaluated; calling a block creates an instance (its own parameters),
//     `repeat n { e }` evaluates e n times. Values: integers, numbers,
//     shapes, instances.
//   forward: starting from the model's forward, calls of instances run
//     their forward bodies, building graph nodes; shapes are checked as each
//     node is made (ir_add), so a mismatch points at the operator.
// Instances are named after construction: an instance belongs to the first
// instance that binds it (a `let`, a block argument, a repeat position),
// and its path is the chain of those names: lm.layers.3.mixer.W_ext.
// Calling one instance twice reuses its parameters (shared weights).
#include "elab_impl.h"
#include "../ir/nearest.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

// ---- errors ------------------------------------------------------------------

_Noreturn void el_err(Elab *E, Loc loc, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_print(E->d, "error", loc, "%s", msg);
  int shown = 0;
  for (int i = E->nframes - 1; i >= 0 && shown < 8; i--, shown++)
    diag_print(E->d, "note", E->frames[i].loc, "%s", E->frames[i].what);
  diag_fail(E->d);
}

static void push_frame(Elab *E, Loc loc, const char *what) {
  if (E->nframes == MAX_FRAMES) el_err(E, loc, "calls are nested more than %d deep", MAX_FRAMES);
  if (++E->ncalls > MAX_CALLS)
    el_err(E, loc, "the model is too large: more than %d calls of functions and blocks", MAX_CALLS);
  E->frames[E->nframes++] = (Frame){loc, what};
}

static void enter_def(Elab *E, const Def *def, Loc loc) {
  for (int i = 0; i < E->nstack; i++)
    if (E->stack[i] == def) {
      char chain[512] = "";
      size_t k = 0;
      for (int j = i; j < E->nstack && k < sizeof chain; j++)
        k += (size_t)snprintf(chain + k, sizeof chain - k, "%s -> ", E->stack[j]->name);
      if (k < sizeof chain) snprintf(chain + k, sizeof chain - k, "%s", def->name);
      el_err(E, loc, "%s '%s' is recursive (%s); blocks and functions cannot call themselves",
          def->kind == DEF_FN ? "function" : "block", def->name, chain);
    }
  if (E->nstack == MAX_FRAMES) el_err(E, loc, "definitions are nested more than %d deep", MAX_FRAMES);
  E->stack[E->nstack++] = def;
}

const char *el_kind_name(VKind k) {
  switch (k) {
  case V_NONE: return "nothing";
  case V_INT: return "an integer";
  case V_FLOAT: return "a number";
  case V_DIM: return "a symbolic size";
  case V_SHAPE: return "a shape";
  case V_TENSOR: return "a tensor";
  case V_PARAM: return "a parameter";
  case V_INST: return "a block instance";
  case V_DEF: return "a definition";
  case V_BUILTIN: return "a built-in function";
  }
  return "?";
}

// ---- environments ----------------------------------------------------------

static Env *env_new(Elab *E, Env *parent) {
  Env *e = arena_alloc(E->a, sizeof *e);
  e->parent = parent;
  return e;
}

static Binding *env_find_local(Env *env, const char *name) {
  for (Binding *b = env->head; b; b = b->next)
    if (!strcmp(b->name, name)) return b;
  return NULL;
}

static void env_define(Elab *E, Env *env, const char *name, Value v, Loc loc) {
  Binding *old = env_find_local(env, name);
  if (old) el_err(E, loc, "'%s' is already defined in this block (at line %d)", name, old->loc.line);
  Binding *b = arena_alloc(E->a, sizeof *b);
  *b = (Binding){name, v, loc, env->head};
  env->head = b;
}

// Assignment inside a body: rebinding a local is allowed.
static void env_set(Elab *E, Env *env, const char *name, Value v, Loc loc) {
  Binding *old = env_find_local(env, name);
  if (old) {
    old->v = v;
    return;
  }
  env_define(E, env, name, v, loc);
}

// The definition `name` as module m sees it: m's own, then those of the
// files m imports without an alias, depth first in import order, the first
// found; `alias.Name`: Name as the file m imports `as alias` sees it.
static const Def *find_in(Elab *E, int m, const char *name) {
  const Module *mod = E->prog->modules[m];
  const char *dot = strchr(name, '.');
  if (dot) {
    for (int i = 0; i < mod->imports.n; i++) {
      const Import *im = mod->imports.items[i];
      if (im->alias && strlen(im->alias) == (size_t)(dot - name) && !strncmp(im->alias, name, (size_t)(dot - name))) {
        memset(E->seen, 0, (size_t)E->prog->nmodules);
        return find_in(E, im->module, dot + 1);
      }
    }
    return NULL;
  }
  if (E->seen[m]) return NULL;
  E->seen[m] = 1;
  for (int i = 0; i < mod->defs.n; i++)
    if (!strcmp(((const Def *)mod->defs.items[i])->name, name)) return mod->defs.items[i];
  for (int i = 0; i < mod->imports.n; i++) {
    const Import *im = mod->imports.items[i];
    const Def *d = im->alias ? NULL : find_in(E, im->module, name);
    if (d) return d;
  }
  return NULL;
}

// `name` as the running module sees it; a name no import makes visible
// there, from any loaded file (the imported ones first), as before files
// had scopes: a library file may use what another library file defines.
static const Def *find_def(Elab *E, const char *name) {
  memset(E->seen, 0, (size_t)E->prog->nmodules);
  const Def *d = find_in(E, E->cur, name);
  if (d || strchr(name, '.')) return d;
  for (int m = 1; m <= E->prog->nmodules; m++) {
    const Module *mod = E->prog->modules[m % E->prog->nmodules];
    for (int i = 0; i < mod->defs.n; i++)
      if (!strcmp(((const Def *)mod->defs.items[i])->name, name)) return mod->defs.items[i];
  }
  return NULL;
}

// The module that defines d.
static int module_of(Elab *E, const Def *d) {
  for (int m = 0; m < E->prog->nmodules; m++)
    if (E->prog->modules[m]->src == d->src) return m;
  return 0;
}

// ---- values ----------------------------------------------------------------------

static void check_elements(Elab *E, const Shape *s, Loc loc);

int el_add_node(Elab *E, Node n, Loc loc) {
  if (E->g->nnodes >= MAX_NODES) el_err(E, loc, "the model is too large: more than %d graph nodes", MAX_NODES);
  n.loc = loc;
  n.scope = E->scope;
  n.call = E->call;
  char msg[512];
  int id = ir_add(E->g, n, msg, sizeof msg);
  if (id < 0) el_err(E, loc, "%s", msg);
  // Broadcasting and concatenation make shapes bigger than any written one;
  // every node obeys the same bound, so shape arithmetic cannot overflow.
  check_elements(E, &E->g->nodes[id].shape, loc);
  return id;
}

static int const_node(Elab *E, double v, Loc loc) {
  return el_add_node(E, (Node){.op = OP_CONST, .fval = v}, loc);
}

int el_want_tensor(Elab *E, Value v, Loc loc, const char *what) {
  if (v.kind == V_TENSOR) return v.node;
  if (is_number(v)) return const_node(E, num(v), loc);
  el_err(E, loc, "%s must be a tensor, not %s", what, el_kind_name(v.kind));
}

int el_want_tensor_strict(Elab *E, Value v, Loc loc, const char *what) {
  if (v.kind != V_TENSOR) el_err(E, loc, "%s must be a tensor, not %s", what, el_kind_name(v.kind));
  return v.node;
}

int64_t el_want_int(Elab *E, Value v, Loc loc, const char *what) {
  if (v.kind != V_INT) el_err(E, loc, "%s must be an integer, not %s", what, el_kind_name(v.kind));
  return v.i;
}

double el_want_number(Elab *E, Value v, Loc loc, const char *what) {
  if (!is_number(v)) el_err(E, loc, "%s must be a number, not %s", what, el_kind_name(v.kind));
  return num(v);
}

// An axis argument: an integer in [-IR_MAX_RANK, IR_MAX_RANK).
int el_want_axis(Elab *E, Value v, Loc loc) {
  int64_t a = el_want_int(E, v, loc, "an axis");
  if (a < -IR_MAX_RANK || a >= IR_MAX_RANK) el_err(E, loc, "axis %lld is out of range", (long long)a);
  return (int)a;
}

Dim el_want_size(Elab *E, Value v, Loc loc, const char *what) {
  if (v.kind == V_DIM) return v.dim;
  if (v.kind == V_INT && v.i >= 1) return (Dim){DIM_CONST, v.i};
  if (v.kind == V_INT)
    el_err(E, loc, "%s must be at least 1, got %lld", what, (long long)v.i);
  if (v.kind == V_FLOAT) el_err(E, loc, "%s must be a positive integer, B or T, not %g", what, v.f);
  el_err(E, loc, "%s must be a positive integer, B or T, not %s", what, el_kind_name(v.kind));
}

static void check_elements(Elab *E, const Shape *s, Loc loc) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    int64_t d = s->d[i].kind == DIM_CONST ? s->d[i].n : 1;
    if (d > MAX_ELEMENTS || n > MAX_ELEMENTS / d)
      el_err(E, loc, "tensor shape is too large (more than 2^46 elements)");
    n *= d;
  }
}

// ---- construction ------------------------------------------------------------

static Value eval(Elab *E, Env *env, const Expr *e, Ctx ctx);
static Value call_inst(Elab *E, Inst *in, Value *args, const Expr **argx, int nargs, Loc loc, const char *site);
static Value call_fn(Elab *E, const Def *def, Value *args, const Expr **argx, int nargs, Loc loc, Ctx ctx);

static void adopt(Elab *E, Inst *owner, Inst *child, const char *name) {
  if (child->owner || child == owner || child == E->root) return;
  child->owner = owner;
  child->local = name;
  vec_push(E->a, &owner->children, child);
}

static Inst *new_inst(Elab *E, const Def *def, Loc loc) {
  if (E->insts.n >= MAX_INSTANCES)
    el_err(E, loc, "the model is too large: more than %d block instances", MAX_INSTANCES);
  Inst *in = arena_alloc(E->a, sizeof *in);
  in->def = def;
  in->env = env_new(E, NULL);
  in->loc = loc;
  in->scope = -1;
  vec_push(E->a, &E->insts, in);
  return in;
}

static Init eval_init(Elab *E, Env *env, const Expr *e) {
  const Expr *callee = e->kind == EX_CALL ? e->lhs : e;
  int b = callee->kind == EX_NAME ? el_find_builtin(callee->name) : -1;
  if (b < 0 || el_builtins[b].kind != BI_INIT || (callee->kind == EX_NAME && env_find_local(env, callee->name)))
    el_err(E, e->loc, "expected an initialiser: normal(mean, std), trunc_normal(mean, std), uniform(low, high), constant(value), zeros or ones");
  const Builtin *bi = &el_builtins[b];
  int nargs = e->kind == EX_CALL ? e->args.n : 0;
  if (bi->nargs == 0 && e->kind == EX_CALL)
    el_err(E, e->loc, "'%s' takes no arguments; write it without parentheses", bi->name);
  if (nargs != bi->nargs)
    el_err(E, e->loc, "'%s' takes %d arguments: %s", bi->name, bi->nargs, bi->usage);
  Init in = {0};
  if (!strcmp(bi->name, "zeros")) in.kind = INIT_ZEROS;
  else if (!strcmp(bi->name, "ones")) in.kind = INIT_ONES;
  else if (!strcmp(bi->name, "constant")) {
    const Expr *ax = e->args.items[0];
    in.kind = INIT_CONSTANT;
    in.a = el_want_number(E, eval(E, env, ax, CTX_BUILD), ax->loc, "initialiser argument");
  } else {
    const Expr *ax = e->args.items[0], *bx = e->args.items[1];
    in.a = el_want_number(E, eval(E, env, ax, CTX_BUILD), ax->loc, "initialiser argument");
    in.b = el_want_number(E, eval(E, env, bx, CTX_BUILD), bx->loc, "initialiser argument");
    if (!strcmp(bi->name, "normal") || !strcmp(bi->name, "trunc_normal")) {
      in.kind = bi->name[0] == 'n' ? INIT_NORMAL : INIT_TRUNC_NORMAL;
      if (!(in.b >= 0)) el_err(E, bx->loc, "%s(mean, std) needs std >= 0, got %g", bi->name, in.b);
    } else {
      in.kind = INIT_UNIFORM;
      if (!(in.a < in.b)) el_err(E, e->loc, "uniform(low, high) needs low < high, got %g and %g", in.a, in.b);
    }
  }
  return in;
}

static Shape eval_shape(Elab *E, Env *env, const Expr *e, Ctx ctx, bool fixed) {
  if (e->kind != EX_LIST) el_err(E, e->loc, "expected a shape such as [d, c]");
  if (e->args.n > IR_MAX_RANK) el_err(E, e->loc, "a shape has at most %d sizes", IR_MAX_RANK);
  Shape s = {.rank = e->args.n};
  for (int i = 0; i < e->args.n; i++) {
    const Expr *x = e->args.items[i];
    Value v = eval(E, env, x, ctx);
    s.d[i] = el_want_size(E, v, x->loc, "a size");
    if (fixed && s.d[i].kind != DIM_CONST)
      el_err(E, x->loc, "parameter shapes must be fixed sizes; %s is symbolic", s.d[i].kind == DIM_B ? "B" : "T");
  }
  check_elements(E, &s, e->loc);
  return s;
}

// A failed assert(cond, "message"): the error at the call site of the block
// or function it is in (the innermost frame), then where the assertion is
// and the calls around it.
static _Noreturn void assert_failed(Elab *E, Loc at, const char *msg) {
  diag_print(E->d, "error", E->nframes ? E->frames[E->nframes - 1].loc : at, "%s", msg);
  diag_print(E->d, "note", at, "the assertion that failed");
  for (int i = E->nframes - 2, shown = 0; i >= 0 && shown < 8; i--, shown++)
    diag_print(E->d, "note", E->frames[i].loc, "%s", E->frames[i].what);
  diag_fail(E->d);
}

// The value of a construction-time condition (if, assert): a number, true when not 0.
static bool condition(Elab *E, Env *env, const Expr *c, const char *what, Ctx ctx) {
  Value v = eval(E, env, c, ctx);
  if (!is_number(v))
    el_err(E, c->loc, "the condition of %s is decided at construction: it must be a number, not %s%s", what, el_kind_name(v.kind),
        v.kind == V_TENSOR ? " (for tensors: where(c, a, b))" : "");
  return num(v) != 0;
}

static void construct_list(Elab *E, Inst *in, const Def *def, const Vec *members, bool nested);

static void construct_members(Elab *E, Inst *in, const Def *def) { construct_list(E, in, def, &def->members, false); }

static void construct_list(Elab *E, Inst *in, const Def *def, const Vec *members, bool nested) {
  for (int i = 0; i < members->n; i++) {
    const Member *m = members->items[i];
    switch (m->kind) {
    case MEM_CONFIG:
      if (def->kind != DEF_MODEL) el_err(E, m->loc, "config values belong to a model, not to block '%s'", def->name);
      if (nested) el_err(E, m->loc, "config values are the model's settings; they cannot depend on an `if`");
      break;  // evaluated by elaborate() before construction
    case MEM_ASSERT:
      if (!condition(E, in->env, m->value, "assert", CTX_BUILD)) assert_failed(E, m->loc, m->name);
      break;
    case MEM_IF: {
      bool c = condition(E, in->env, m->value, "if", CTX_BUILD);
      construct_list(E, in, def, c ? &m->then : &m->other, true);
      break;
    }
    case MEM_PARAM: {
      Shape s = eval_shape(E, in->env, m->shape, CTX_BUILD, true);
      Init init = eval_init(E, in->env, m->value);
      if (in->nparams == in->cap_params) {
        int nc = in->cap_params ? 2 * in->cap_params : 4;
        in->params = arena_realloc(E->a, in->params, sizeof *in->params * (size_t)in->cap_params,
                                   sizeof *in->params * (size_t)nc);
        in->cap_params = nc;
      }
      in->params[in->nparams] = (PendingParam){m->name, s, init, m->loc, -1};
      env_define(E, in->env, m->name, (Value){.kind = V_PARAM, .inst = in, .i = in->nparams}, m->loc);
      in->nparams++;
      break;
    }
    case MEM_LET: {
      Value v = eval(E, in->env, m->value, CTX_BUILD);
      if (v.kind == V_INST) adopt(E, in, v.inst, m->name);
      env_define(E, in->env, m->name, v, m->loc);
      break;
    }
    case MEM_FORWARD:
      if (in->forward) el_err(E, m->loc, "'%s' has a second forward (the first is at line %d)", def->name, in->forward->loc.line);
      in->forward = m;
      break;
    }
  }
}

// "a, b, c": the names of params, as much as fits in buf.
static void param_names(const Vec *params, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < params->n && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", ((const Arg *)params->items[i])->name);
}

static Inst *instantiate(Elab *E, const Def *def, Value *args, const Expr **argx, int nargs, Loc loc) {
  enter_def(E, def, loc);
  push_frame(E, loc, arena_printf(E->a, "in block '%s' instantiated here", def->name));
  if (nargs != def->params.n) {
    char names[256];
    param_names(&def->params, names, sizeof names);
    E->nframes--;
    el_err(E, loc, "block '%s' takes %d argument%s (%s), got %d", def->name, def->params.n,
        def->params.n == 1 ? "" : "s", names, nargs);
  }
  Inst *in = new_inst(E, def, loc);
  int cur = E->cur;
  E->cur = module_of(E, def);  // its members see names as its file does
  for (int i = 0; i < nargs; i++) {
    const Arg *a = def->params.items[i];
    if (a->shape) el_err(E, a->shape->loc, "block arguments take no shape; shapes belong to forward arguments");
    if (args[i].kind == V_TENSOR) el_err(E, argx[i]->loc, "a block argument cannot be a tensor");
    if (args[i].kind == V_INST) adopt(E, in, args[i].inst, a->name);
    env_define(E, in->env, a->name, args[i], a->loc);
  }
  construct_members(E, in, def);
  E->cur = cur;
  E->nframes--;
  E->nstack--;
  return in;
}

static Value repeat(Elab *E, Env *env, const Expr *e) {
  int64_t n = el_want_int(E, eval(E, env, e->lhs, CTX_BUILD), e->lhs->loc, "the repeat count");
  if (n < 1 || n > MAX_REPEAT)
    el_err(E, e->lhs->loc, "the repeat count must be between 1 and %d, got %lld", MAX_REPEAT, (long long)n);
  Inst *seq = new_inst(E, NULL, e->loc);
  seq->items = arena_alloc(E->a, sizeof *seq->items * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    Env *item = env;
    if (e->name) {  // `repeat n as i`: the item's index, 0 .. n - 1, bound in its expression
      item = env_new(E, env);
      env_define(E, item, e->name, vint(i), e->loc);
    }
    Value v = eval(E, item, e->rhs, CTX_BUILD);
    if (v.kind != V_INST) el_err(E, e->rhs->loc, "repeat needs a block instance in braces, not %s", el_kind_name(v.kind));
    if (v.inst->owner || v.inst == seq)
      el_err(E, e->rhs->loc, "repeat must create a new instance each time; this one already belongs to '%s'",
          v.inst->local ? v.inst->local : "?");
    adopt(E, seq, v.inst, arena_printf(E->a, "%lld", (long long)i));
    seq->items[seq->nitems++] = v.inst;
  }
  return (Value){.kind = V_INST, .inst = seq};
}

// ---- expressions -----------------------------------------------------------

// The defined name closest to a misspelt one (ir/nearest.h): the bindings
// in scope, the blocks and functions, the built-ins; NULL when none is close.
static const char *nearest_name(Elab *E, Env *env, const char *name) {
  enum { MAX_NAMES = 1024 };
  const char *names[MAX_NAMES];
  int n = 0;
  for (Env *s = env; s; s = s->parent)
    for (Binding *b = s->head; b && n < MAX_NAMES; b = b->next) names[n++] = b->name;
  for (int i = 0; i < E->ndefs && n < MAX_NAMES; i++) names[n++] = E->defs[i]->name;
  for (int i = 0; i < el_nbuiltins && n < MAX_NAMES; i++)
    if (el_callable(&el_builtins[i])) names[n++] = el_builtins[i].name;
  return xf_nearest(name, names, n);
}

static Value lookup(Elab *E, Env *env, const Expr *e, Ctx ctx) {
  for (Env *s = env; s; s = s->parent) {
    Binding *b = env_find_local(s, e->name);
    if (!b) continue;
    if (b->v.kind == V_PARAM && ctx == CTX_RUN) return vtensor(b->v.inst->params[b->v.i].node);
    return b->v;
  }
  const Def *def = find_def(E, e->name);
  if (def) {
    if (def->kind == DEF_MODEL) el_err(E, e->loc, "'%s' is a model; models cannot be used inside other definitions", e->name);
    return (Value){.kind = V_DEF, .def = def};
  }
  int b = el_find_builtin(e->name);
  if (b >= 0) {
    if (el_builtins[b].kind == BI_SIZE)
      return (Value){.kind = V_DIM, .dim = {e->name[0] == 'B' ? DIM_B : DIM_T, e->name[0] == 'T' && E->tdiv > 1 ? E->tdiv : 0}};
    if (el_builtins[b].kind == BI_INIT)
      el_err(E, e->loc, "'%s' is an initialiser; initialisers appear only after `param name [shape] =`", e->name);
    return (Value){.kind = V_BUILTIN, .i = b};
  }
  const char *near = nearest_name(E, env, e->name);
  if (near) el_err(E, e->loc, "unknown name '%s' (did you mean '%s'?)", e->name, near);
  el_err(E, e->loc, "unknown name '%s'", e->name);
}

// A comparison's value: 1 or 0.
static bool compare(char op, double x, double y, bool *r) {
  switch (op) {
  case '<': *r = x < y; return true;
  case '>': *r = x > y; return true;
  case 'L': *r = x <= y; return true;
  case 'G': *r = x >= y; return true;
  case 'E': *r = x == y; return true;
  case 'N': *r = x != y; return true;
  default: return false;
  }
}

static Value fold(Elab *E, char op, Value a, Value b, Loc loc) {
  bool c;
  if (compare(op, num(a), num(b), &c)) return a.kind == V_INT && b.kind == V_INT ? vint(c) : vfloat(c);
  const char *t = binop_text(op);
  if (a.kind == V_INT && b.kind == V_INT) {
    int64_t r;
    bool ovf = false;
    switch (op) {
    case '+': ovf = __builtin_add_overflow(a.i, b.i, &r); break;
    case '-': ovf = __builtin_sub_overflow(a.i, b.i, &r); break;
    case '*': ovf = __builtin_mul_overflow(a.i, b.i, &r); break;
    case '/':
      if (b.i == 0) el_err(E, loc, "division by zero");
      if (!(a.i == INT64_MIN && b.i == -1) && a.i % b.i == 0) return vint(a.i / b.i);
      return vfloat((double)a.i / (double)b.i);
    case '%': case 'F': {  // Python's: the quotient floored, the remainder of the divisor's sign
      if (b.i == 0) el_err(E, loc, "division by zero");
      if (a.i == INT64_MIN && b.i == -1) return op == '%' ? vint(0) : (el_err(E, loc, "integer overflow in '%s'", t), vint(0));
      int64_t q = a.i / b.i, m = a.i % b.i;
      if (m != 0 && (m < 0) != (b.i < 0)) q--, m += b.i;
      return vint(op == '%' ? m : q);
    }
    default: el_err(E, loc, "'%s' needs tensors, not integers", t);
    }
    if (ovf) el_err(E, loc, "integer overflow in '%s'", t);
    return vint(r);
  }
  double x = num(a), y = num(b), r;
  switch (op) {
  case '+': r = x + y; break;
  case '-': r = x - y; break;
  case '*': r = x * y; break;
  case '/':
    if (y == 0) el_err(E, loc, "division by zero");
    r = x / y;
    break;
  case '%': case 'F':  // x - y floor(x / y), floor(x / y)
    if (y == 0) el_err(E, loc, "division by zero");
    r = op == '%' ? x - y * floor(x / y) : floor(x / y);
    break;
  default: el_err(E, loc, "'%s' needs tensors, not numbers", t);
  }
  if (!isfinite(r)) el_err(E, loc, "%g %s %g is not a finite number", x, t, y);
  return vfloat(r);
}

// a op b, where e is the operator and a, b are its operands' values. A
// comparison is a mask of 1 and 0 (lt, le, eq; a > b is b < a, a >= b is
// b <= a, a != b is 1 - (a == b)), whose gradient is 0. a // b is
// floor(a / b) and a % b is a - b floor(a / b), as Python's and PyTorch's
// (torch.remainder): the remainder has the divisor's sign.
// T / s (and T // s) for a whole s >= 1: the time axis shortened by
// grouping s positions (ir.h Dim), the context a multiple of s; (T / s) * c
// for c dividing s. Nothing else combines a symbolic size.
static Value dim_arith(Elab *E, const Expr *e, Value a, Value b) {
  const char *t = binop_text(e->op);
  if (a.kind != V_DIM || a.dim.kind != DIM_T || b.kind != V_INT)
    el_err(E, e->loc, "'%s' cannot combine %s and %s: a symbolic size divides only as T / s (a whole s) or multiplies "
                   "back as (T / s) * c", t, el_kind_name(a.kind), el_kind_name(b.kind));
  int64_t s = dim_tdiv(a.dim), c = b.i;
  if ((e->op == '/' || e->op == 'F') && c >= 1) {
    if (s > INT64_MAX / c) el_err(E, e->loc, "integer overflow in '%s'", t);
    s *= c;
    if (E->g->t_max > 0 && E->g->t_max % s)
      el_err(E, e->loc, "T / %lld needs a context that is a multiple of %lld, not %lld", (long long)s, (long long)s,
          (long long)E->g->t_max);
    return (Value){.kind = V_DIM, .dim = {DIM_T, s > 1 ? s : 0}};
  }
  if (e->op == '*' && c >= 1 && s % c == 0) return (Value){.kind = V_DIM, .dim = {DIM_T, s / c > 1 ? s / c : 0}};
  el_err(E, e->loc, "'%s' cannot combine %s and %lld: a symbolic size divides only as T / s (a whole s >= 1) or "
                 "multiplies back as (T / s) * c (c dividing s)", t, el_kind_name(a.kind), (long long)c);
  return a;
}

static Value apply_binary(Elab *E, const Expr *e, Value a, Value b) {
  if (a.kind == V_DIM || b.kind == V_DIM) return dim_arith(E, e, a, b);
  if (is_number(a) && is_number(b)) return fold(E, e->op, a, b, e->loc);
  if ((a.kind == V_TENSOR || is_number(a)) && (b.kind == V_TENSOR || is_number(b))) {
    if (e->op == '@' && (a.kind != V_TENSOR || b.kind != V_TENSOR))
      el_err(E, e->loc, "'@' multiplies two tensors; use '*' to scale by a number");
    // Multiplying or dividing by exactly 1 is the identity: no node (a full
    // residual step h = 1 then costs nothing).
    if ((e->op == '*' || e->op == '/') && is_number(b) && num(b) == 1) return a;
    if (e->op == '*' && is_number(a) && num(a) == 1) return b;
    static const struct {
      char c;
      OpKind op;
      bool swap;
    } ops[] = {{'+', OP_ADD, false}, {'-', OP_SUB, false}, {'*', OP_MUL, false}, {'/', OP_DIV, false}, {'@', OP_MATMUL, false},
               {'<', OP_LT, false},  {'>', OP_LT, true},   {'L', OP_LE, false},  {'G', OP_LE, true},   {'E', OP_EQ, false},
               {'N', OP_EQ, false}};
    OpKind op = OP_ADD;
    bool swap = false;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
      if (ops[i].c == e->op) op = ops[i].op, swap = ops[i].swap;
    int x = el_want_tensor(E, a, e->lhs->loc, "operand");
    int y = el_want_tensor(E, b, e->rhs->loc, "operand");
    if (e->op == '%' || e->op == 'F') {  // floor(x / y), and x - y floor(x / y): the gradients of floor and the rest
      int q = el_add_node(E, (Node){.op = OP_FLOOR, .nin = 1, .in = {el_add_node(E, (Node){.op = OP_DIV, .nin = 2, .in = {x, y}}, e->loc)}}, e->loc);
      if (e->op == 'F') return vtensor(q);
      return vtensor(el_add_node(E, (Node){.op = OP_SUB, .nin = 2, .in = {x, el_add_node(E, (Node){.op = OP_MUL, .nin = 2, .in = {y, q}}, e->loc)}}, e->loc));
    }
    int n = el_add_node(E, (Node){.op = op, .nin = 2, .in = {swap ? y : x, swap ? x : y}}, e->loc);
    if (e->op == 'N') n = el_add_node(E, (Node){.op = OP_SUB, .nin = 2, .in = {el_want_tensor(E, vfloat(1), e->loc, "operand"), n}}, e->loc);
    return vtensor(n);
  }
  const Value *bad = is_number(a) || a.kind == V_TENSOR ? &b : &a;
  if (bad->kind == V_PARAM)
    el_err(E, e->loc, "parameters can only be used inside forward");
  el_err(E, e->loc, "'%s' cannot be applied to %s and %s", binop_text(e->op), el_kind_name(a.kind), el_kind_name(b.kind));
}

// a + b + c parses as (a + b) + c, so a long flat chain is a deep left spine.
// It is walked with a loop, not recursion: a chain costs no stack, only real
// nesting does (and that is bounded by MAX_DEPTH). Operands are evaluated
// left to right, as by the recursion.
static Value binary(Elab *E, Env *env, const Expr *e, Ctx ctx) {
  int n = 0;
  for (const Expr *x = e; x->kind == EX_BINARY; x = x->lhs) n++;
  const Expr *few[8];
  const Expr **spine = n <= 8 ? few : arena_alloc(E->a, sizeof *spine * (size_t)n);
  int k = n;
  for (const Expr *x = e; x->kind == EX_BINARY; x = x->lhs) spine[--k] = x;  // [0] is innermost
  Value v = eval(E, env, spine[0]->lhs, ctx);
  for (int i = 0; i < n; i++) v = apply_binary(E, spine[i], v, eval(E, env, spine[i]->rhs, ctx));
  return v;
}

enum { MAX_ARGS = 32 };

// The arguments of a call of something with parameters `params` (a block,
// a function, an instance's forward) in the order of the parameters:
// positional ones first, then keywords by name, then each missing one's
// default, evaluated at construction with the parameters before it bound.
// *args and *argx are replaced when they change; returns their count.
static int order_args(Elab *E, const Vec *params, const Def *home, const char *what, const char *name, Value **args,
                      const Expr ***argx, int n, Loc loc) {
  int npos = 0, nkw = 0;
  for (int i = 0; i < n; i++) {
    if ((*argx)[i]->kind == EX_KEYWORD) nkw++;
    else if (nkw) el_err(E, (*argx)[i]->loc, "a positional argument follows a keyword argument");
    else npos++;
  }
  bool defaults = false;
  for (int k = npos; k < params->n; k++) defaults = defaults || ((const Arg *)params->items[k])->dflt;
  if (!nkw && !defaults) return n;  // as written: the arity check says the rest
  if (npos > params->n) return n;
  const char *who = arena_printf(E->a, "%s '%s'", what, name);
  Value *out = arena_alloc(E->a, sizeof *out * (size_t)(params->n + 1));
  const Expr **outx = arena_alloc(E->a, sizeof *outx * (size_t)(params->n + 1));
  for (int i = 0; i < npos; i++) out[i] = (*args)[i], outx[i] = (*argx)[i];
  for (int k = npos; k < params->n; k++) outx[k] = NULL;
  for (int i = npos; i < n; i++) {
    const Expr *kx = (*argx)[i];
    int k = 0;
    while (k < params->n && strcmp(((const Arg *)params->items[k])->name, kx->name)) k++;
    if (k == params->n) {
      char names[256];
      param_names(params, names, sizeof names);
      el_err(E, kx->loc, "%s has no parameter '%s' (it has: %s)", who, kx->name, params->n ? names : "none");
    }
    if (outx[k] || k < npos) el_err(E, kx->loc, "argument '%s' of %s is given twice", kx->name, who);
    out[k] = (*args)[i], outx[k] = kx;
  }
  Env *denv = env_new(E, NULL);
  int cur = E->cur;
  if (home) E->cur = module_of(E, home);  // defaults are the definition's code
  for (int k = 0; k < params->n; k++) {
    const Arg *a = params->items[k];
    if (!outx[k]) {
      if (!a->dflt) el_err(E, loc, "%s needs argument '%s' (it has no default)", who, a->name);
      out[k] = eval(E, denv, a->dflt, CTX_BUILD), outx[k] = a->dflt;
    }
    env_define(E, denv, a->name, out[k], a->loc);
  }
  E->cur = cur;
  *args = out, *argx = outx;
  return params->n;
}

static Value call(Elab *E, Env *env, const Expr *e, Ctx ctx) {
  Value f = eval(E, env, e->lhs, ctx);
  int n = e->args.n;
  if (n > MAX_ARGS) el_err(E, e->loc, "too many arguments (%d; at most %d)", n, MAX_ARGS);
  // call() is on every level of a nesting, so its frame stays small: the
  // arguments are on the stack when there are a few, else in the arena.
  Value few[4];
  const Expr *fewx[4];
  Value *args = n <= 4 ? few : arena_alloc(E->a, sizeof *args * (size_t)n);
  const Expr **argx = n <= 4 ? fewx : arena_alloc(E->a, sizeof *argx * (size_t)n);
  bool kw = false;
  for (int i = 0; i < n; i++) {
    argx[i] = e->args.items[i];
    kw = kw || argx[i]->kind == EX_KEYWORD;
    if (argx[i]->kind == EX_STRING && f.kind == V_BUILTIN && el_builtins[f.i].kind == BI_SIDE) args[i] = (Value){0};  // the name
    else args[i] = eval(E, env, argx[i]->kind == EX_KEYWORD ? argx[i]->lhs : argx[i], ctx);
  }
  if (f.kind == V_DEF)
    n = order_args(E, &f.def->params, f.def, f.def->kind == DEF_FN ? "function" : "block", f.def->name, &args, &argx, n, e->loc);
  else if (f.kind == V_INST && f.inst->def && f.inst->forward)
    n = order_args(E, &f.inst->forward->args, f.inst->def, "the forward of block", f.inst->def->name, &args, &argx, n, e->loc);
  else if (kw)
    el_err(E, e->loc, "keyword arguments name the parameters of a block or function; %s takes none", el_kind_name(f.kind));
  switch (f.kind) {
  case V_BUILTIN: return el_call_builtin(E, &el_builtins[f.i], args, argx, n, e->loc, ctx);
  case V_DEF:
    if (f.def->kind == DEF_FN) return call_fn(E, f.def, args, argx, n, e->loc, ctx);
    if (ctx == CTX_RUN)
      el_err(E, e->loc, "block '%s' cannot be instantiated inside forward; create it with `let` in the block and call the instance",
          f.def->name);
    return (Value){.kind = V_INST, .inst = instantiate(E, f.def, args, argx, n, e->loc)};
  case V_INST:
    if (ctx == CTX_BUILD)
      el_err(E, e->loc, "an instance can only be called inside forward");
    return call_inst(E, f.inst, args, argx, n, e->loc, e->lhs->kind == EX_NAME ? e->lhs->name : NULL);
  default: {  // a value named as a built-in (a config value `dropout`) leaves the built-in callable
    int b = e->lhs->kind == EX_NAME ? el_find_builtin(e->lhs->name) : -1;
    if (b >= 0) return el_call_builtin(E, &el_builtins[b], args, argx, n, e->loc, ctx);
    el_err(E, e->loc, "%s is not callable", el_kind_name(f.kind));
  }
  }
}

static Value eval_expr(Elab *E, Env *env, const Expr *e, Ctx ctx) {
  switch (e->kind) {
  case EX_INT: return vint((int64_t)e->num);
  case EX_FLOAT: return vfloat(e->num);
  case EX_NAME: return lookup(E, env, e, ctx);
  case EX_BINARY: return binary(E, env, e, ctx);
  case EX_NEG: {
    Value v = eval(E, env, e->lhs, ctx);
    if (v.kind == V_INT) {
      if (v.i == INT64_MIN) el_err(E, e->loc, "integer overflow in '-'");
      return vint(-v.i);
    }
    if (v.kind == V_FLOAT) return vfloat(-v.f);
    if (v.kind == V_TENSOR) return vtensor(el_add_node(E, (Node){.op = OP_NEG, .nin = 1, .in = {v.node}}, e->loc));
    el_err(E, e->loc, "'-' cannot be applied to %s", el_kind_name(v.kind));
  }
  case EX_CALL: return call(E, env, e, ctx);
  case EX_LIST: {
    Value v = {.kind = V_SHAPE};
    v.shape = eval_shape(E, env, e, ctx, false);
    return v;
  }
  case EX_REPEAT:
    if (ctx == CTX_RUN) el_err(E, e->loc, "repeat creates instances, so it belongs in a `let`, not in forward");
    return repeat(E, env, e);
  case EX_IF: return eval(E, env, condition(E, env, e->lhs, "if", ctx) ? e->rhs : e->args.items[0], ctx);
  case EX_STRING: el_err(E, e->loc, "a string names a side output, only in side(\"%s\")", e->name);
  case EX_KEYWORD: el_err(E, e->loc, "'%s = ...' names an argument; it belongs inside a call's parentheses", e->name);
  }
  el_err(E, e->loc, "bad expression");
}

// Every recursion of elaboration (nested expressions, calls, instantiation,
// shapes) passes through eval, so E->depth <= MAX_DEPTH bounds the C stack.
static Value eval(Elab *E, Env *env, const Expr *e, Ctx ctx) {
  if (E->depth == MAX_DEPTH)
    el_err(E, e->loc, "expressions and calls are nested more than %d deep", MAX_DEPTH);
  E->depth++;
  Value v = eval_expr(E, env, e, ctx);
  E->depth--;
  return v;
}

// ---- bodies ----------------------------------------------------------------------

typedef enum { BODY_FN, BODY_FORWARD, BODY_MODEL } BodyKind;

static Value exec_body(Elab *E, Env *env, const Vec *body, Ctx ctx, BodyKind kind, const char *who, Loc loc) {
  for (int i = 0; i < body->n; i++) {
    const Stmt *s = body->items[i];
    switch (s->kind) {
    case ST_ASSIGN: {
      Value v = eval(E, env, s->value, ctx);
      if (v.kind == V_INST || v.kind == V_DEF || v.kind == V_BUILTIN)
        el_err(E, s->value->loc, "a local variable holds a tensor or a number, not %s", el_kind_name(v.kind));
      env_set(E, env, s->name, v, s->loc);
      break;
    }
    case ST_ASSERT:
      if (!condition(E, env, s->value, "assert", ctx)) assert_failed(E, s->loc, s->name);
      break;
    case ST_RETURN: {
      if (kind == BODY_MODEL)
        el_err(E, s->loc, "a model's forward has outputs, not a return value: write `output loss = ...`");
      if (i + 1 < body->n)
        el_err(E, ((Stmt *)body->items[i + 1])->loc, "statement after return is never run");
      Value v = eval(E, env, s->value, ctx);
      if (v.kind != V_TENSOR && !is_number(v) && v.kind != V_DIM && v.kind != V_SHAPE)
        el_err(E, s->value->loc, "%s must return a tensor or a number, not %s", who, el_kind_name(v.kind));
      for (int k = 0; k < s->sides.n; k++) {  // side outputs: collected for side("name") in the model's forward
        const Stmt *sd = s->sides.items[k];
        if (ctx != CTX_RUN) el_err(E, sd->loc, "side outputs are tensors of a forward; %s runs at construction here", who);
        Side *o = arena_alloc(E->a, sizeof *o);
        *o = (Side){sd->name, el_want_tensor_strict(E, eval(E, env, sd->value, ctx), sd->value->loc, "a side output")};
        vec_push(E->a, &E->sides, o);
      }
      return v;
    }
    case ST_OUTPUT: {
      if (kind != BODY_MODEL) el_err(E, s->loc, "`output` is only allowed in a model's forward");
      Value v;
      if (s->value) v = eval(E, env, s->value, ctx);
      else {
        Expr name = {.kind = EX_NAME, .loc = s->loc, .name = s->name};
        v = eval(E, env, &name, ctx);
      }
      Loc vloc = s->value ? s->value->loc : s->loc;
      int node = el_want_tensor_strict(E, v, vloc, "an output");
      if (!strcmp(s->name, "loss")) {
        const Node *ln = &E->g->nodes[node];
        char sh[128];
        shape_fmt(sh, sizeof sh, &ln->shape);
        if (ln->shape.rank != 0) el_err(E, vloc, "output loss must be a scalar, but has shape %s", sh);
        if (ln->dtype != DT_F32) el_err(E, vloc, "output loss must be a number, not token ids");
      }
      for (int o = 0; o < E->g->noutputs; o++)
        if (!strcmp(E->g->outputs[o].name, s->name)) el_err(E, s->loc, "output '%s' is defined twice", s->name);
      ir_output_add(E->g, s->name, node);
      if (s->value) env_set(E, env, s->name, v, s->loc);
      break;
    }
    }
  }
  if (kind != BODY_MODEL) el_err(E, loc, "%s ends without `return`", who);
  return (Value){0};
}

static void bind_args(Elab *E, Env *env, const Vec *params, Value *args, const Expr **argx, int nargs,
                      Loc loc, const char *who, Env *shape_env) {
  if (nargs != params->n)
    el_err(E, loc, "%s takes %d argument%s, got %d", who, params->n, params->n == 1 ? "" : "s", nargs);
  for (int i = 0; i < nargs; i++) {
    const Arg *a = params->items[i];
    if (a->shape) {
      if (args[i].kind != V_TENSOR)
        el_err(E, argx[i]->loc, "argument '%s' of %s is declared as a tensor; got %s", a->name, who, el_kind_name(args[i].kind));
      Shape want = eval_shape(E, shape_env, a->shape, CTX_BUILD, false);
      const Shape *got = &E->g->nodes[args[i].node].shape;
      int64_t td = -1;  // the divisor of got's time axis, where want has one too
      for (int k = 0; k < got->rank && k < want.rank; k++)
        if (got->d[k].kind == DIM_T && want.d[k].kind == DIM_T) td = dim_tdiv(got->d[k]);
      if (!shape_eq(&want, got) && i == 0 && td > 0 && td != (E->tdiv > 1 ? E->tdiv : 1)) {
        int64_t saved = E->tdiv;  // the first tensor argument binds T (the callers restore it)
        E->tdiv = td;
        want = eval_shape(E, shape_env, a->shape, CTX_BUILD, false);
        if (!shape_eq(&want, got)) E->tdiv = saved, want = eval_shape(E, shape_env, a->shape, CTX_BUILD, false);
      }
      if (!shape_eq(&want, got)) {
        char w[128], g[128];
        shape_fmt(w, sizeof w, &want);
        shape_fmt(g, sizeof g, got);
        el_err(E, argx[i]->loc, "argument '%s' of %s has shape %s, but %s declares %s (line %d)", a->name, who, g,
            who, w, a->loc.line);
      }
    }
    env_define(E, env, a->name, args[i], a->loc);
  }
}

static Value call_fn(Elab *E, const Def *def, Value *args, const Expr **argx, int nargs, Loc loc, Ctx ctx) {
  enter_def(E, def, loc);
  const char *who = arena_printf(E->a, "function '%s'", def->name);
  Env *env = env_new(E, NULL);
  int64_t tdiv = E->tdiv;
  bind_args(E, env, &def->params, args, argx, nargs, loc, who, env);
  push_frame(E, loc, arena_printf(E->a, "in %s called here", who));
  int cur = E->cur;
  E->cur = module_of(E, def);
  Value v = exec_body(E, env, &def->body, ctx, BODY_FN, who, def->loc);
  E->cur = cur, E->tdiv = tdiv;
  E->nframes--;
  E->nstack--;
  return v;
}

static const char *inst_path(Elab *E, const Inst *in) {
  return *E->g->scopes[in->scope].path ? E->g->scopes[in->scope].path : "<model>";
}

static Value call_inst(Elab *E, Inst *in, Value *args, const Expr **argx, int nargs, Loc loc, const char *site) {
  int caller = E->call;
  if (!in->def) {  // repeat sequence: x -> items[n-1](... items[0](x))
    if (nargs != 1) el_err(E, loc, "a repeat sequence takes 1 argument, got %d", nargs);
    Value v = args[0];
    E->call = ir_call_add(E->g, in->scope, caller, site);
    for (int i = 0; i < in->nitems; i++) {
      const Expr *ax[1] = {argx[0]};
      v = call_inst(E, in->items[i], &v, ax, 1, loc, NULL);
    }
    E->call = caller;
    return v;
  }
  if (!in->forward) el_err(E, loc, "block '%s' has no forward, so it cannot be called", in->def->name);
  const char *who = arena_printf(E->a, "'%s' (block %s)", inst_path(E, in), in->def->name);
  Env *env = env_new(E, in->env);
  int64_t tdiv = E->tdiv;
  bind_args(E, env, &in->forward->args, args, argx, nargs, loc, who, in->env);
  push_frame(E, loc, arena_printf(E->a, "in forward of %s called here", who));
  int saved = E->scope, cur = E->cur;
  E->scope = in->scope, E->cur = module_of(E, in->def);
  E->call = ir_call_add(E->g, in->scope, caller, site);
  Value v = exec_body(E, env, &in->forward->body, CTX_RUN, BODY_FORWARD, who, in->forward->loc);
  E->scope = saved, E->cur = cur, E->tdiv = tdiv;
  E->call = caller;
  E->nframes--;
  return v;
}

// ---- naming: scopes and parameter nodes, top-down ------------------------------

static void assign_scopes(Elab *E, Inst *in, const char *path, int parent) {
  const char *block = in->def ? in->def->name : "repeat";
  in->scope = ir_scope_add(E->g, path, block, parent, in->loc);
  int saved = E->scope;
  E->scope = in->scope;
  for (int i = 0; i < in->nparams; i++) {
    PendingParam *p = &in->params[i];
    Node n = {.op = OP_PARAM, .shape = p->shape, .init = p->init};
    n.name = *path ? arena_printf(E->a, "%s.%s", path, p->name) : p->name;
    p->node = el_add_node(E, n, p->loc);
  }
  E->scope = saved;
  for (int i = 0; i < in->children.n; i++) {
    Inst *c = in->children.items[i];
    assign_scopes(E, c, *path ? arena_printf(E->a, "%s.%s", path, c->local) : c->local, in->scope);
  }
}

// ---- the model -------------------------------------------------------------------

static void collect_defs(Elab *E, Program *p) {
  E->prog = p, E->cur = 0;
  E->seen = arena_alloc(E->a, (size_t)p->nmodules + 1);
  int total = 0;
  for (int m = 0; m < p->nmodules; m++) total += p->modules[m]->defs.n;
  E->defs = arena_alloc(E->a, sizeof *E->defs * (size_t)(total + 1));
  for (int m = 0; m < p->nmodules; m++) {
    const Module *mod = p->modules[m];
    for (int i = 0; i < mod->defs.n; i++) {
      Def *d = mod->defs.items[i];
      if (d->kind == DEF_MODEL && m > 0)
        el_err(E, d->loc, "model '%s' is in an imported file; only the compiled file may define a model", d->name);
      if (el_find_builtin(d->name) >= 0) el_err(E, d->loc, "'%s' is a built-in name and cannot be redefined", d->name);
      const Def *old = NULL;  // one definition per name in a file; files may share names (the importer's wins)
      for (int j = 0; j < i && !old; j++)
        if (!strcmp(((const Def *)mod->defs.items[j])->name, d->name)) old = mod->defs.items[j];
      if (old) {
        diag_print(E->d, "error", d->loc, "'%s' is defined twice", d->name);
        diag_print(E->d, "note", old->loc, "first defined here");
        diag_fail(E->d);
      }
      E->defs[E->ndefs++] = d;
    }
  }
}

static Value parse_define(Elab *E, const Define *df, bool want_float) {
  Loc cl = {"<command line>", 0, 0};
  const char *s = df->value;
  char *end;
  if (!*s) el_err(E, cl, "-D %s= has no value", df->name);
  errno = 0;
  long long iv = strtoll(s, &end, 10);
  if (!*end && errno == ERANGE) el_err(E, cl, "-D %s=%s: the value is too large", df->name, s);
  if (!*end) {
    if (want_float) return vfloat((double)iv);
    return vint(iv);
  }
  double fv = strtod(s, &end);
  if (*end || !isfinite(fv)) el_err(E, cl, "-D %s=%s: '%s' is not a number", df->name, s, s);
  if (!want_float) el_err(E, cl, "-D %s=%s: '%s' is an integer setting", df->name, s, df->name);
  return vfloat(fv);
}

static void configure(Elab *E, const Def *model, const Define *defs, int ndefs) {
  Env *env = E->root->env;
  for (int k = 0; k < ndefs; k++) {
    bool found = false;
    for (int i = 0; i < model->members.n && !found; i++) {
      const Member *m = model->members.items[i];
      found = m->kind == MEM_CONFIG && !strcmp(m->name, defs[k].name);
    }
    if (!found) {
      char names[512] = "";
      size_t len = 0;
      for (int i = 0; i < model->members.n && len < sizeof names; i++) {
        const Member *m = model->members.items[i];
        if (m->kind == MEM_CONFIG)
          len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", m->name);
      }
      el_err(E, (Loc){"<command line>", 0, 0}, "-D %s: model '%s' has no config value '%s' (it has: %s)",
          defs[k].name, model->name, defs[k].name, *names ? names : "none");
    }
  }
  for (int i = 0; i < model->members.n; i++) {
    const Member *m = model->members.items[i];
    if (m->kind != MEM_CONFIG) continue;
    Value v = eval(E, env, m->value, CTX_BUILD);
    if (!is_number(v)) el_err(E, m->value->loc, "config value '%s' must be a number, not %s", m->name, el_kind_name(v.kind));
    for (int k = ndefs - 1; k >= 0; k--)
      if (!strcmp(defs[k].name, m->name)) {
        v = parse_define(E, &defs[k], v.kind == V_FLOAT);
        break;
      }
    env_define(E, env, m->name, v, m->loc);
    ir_config_add(E->g, m->name, v.kind == V_FLOAT, num(v));
  }
  Binding *ctx = env_find_local(env, "context");
  if (!ctx || ctx->v.kind != V_INT)
    el_err(E, ctx ? ctx->loc : model->loc, "model '%s' needs an integer `config context = ...` (the longest sequence, which bounds T)",
        model->name);
  if (ctx->v.i < 1 || ctx->v.i > (1 << 24))
    el_err(E, ctx->loc, "context must be between 1 and %d, got %lld", 1 << 24, (long long)ctx->v.i);
  E->g->t_max = ctx->v.i;
}

// The name of unbound instance number i among the model's children: "_anonI",
// unless the model binds that name itself (instance paths, and so parameter
// names, must be unique).
static const char *anon_name(Elab *E, int i) {
  const char *name = arena_printf(E->a, "_anon%d", i);
  for (int k = 1; env_find_local(E->root->env, name); k++) name = arena_printf(E->a, "_anon%d_%d", i, k);
  return name;
}

Graph *elaborate(Diag *d, Program *p, const Define *defs, int ndefs) {
  Elab E = {.d = d, .a = d->arena};
  collect_defs(&E, p);
  const Module *main = p->modules[0];
  const Def *model = NULL;
  for (int i = 0; i < main->defs.n; i++) {
    const Def *df = main->defs.items[i];
    if (df->kind != DEF_MODEL) continue;
    if (model) {
      diag_print(d, "error", df->loc, "a file defines one model; '%s' is a second one", df->name);
      diag_print(d, "note", model->loc, "the first is '%s'", model->name);
      diag_fail(d);
    }
    model = df;
  }
  if (!model)
    el_err(&E, (Loc){main->src->name, 1, 1},
        "no model in %s: a compiled file defines one `model name { ... }`", main->src->name);
  E.g = ir_graph_new(E.a, model->name);
  E.g->noncausal = model->noncausal;
  E.root = new_inst(&E, model, model->loc);
  configure(&E, model, defs, ndefs);
  construct_members(&E, E.root, model);
  for (int i = 0; i < E.insts.n; i++) {  // instances nobody bound belong to the model
    Inst *in = E.insts.items[i];
    if (in != E.root && !in->owner) adopt(&E, E.root, in, anon_name(&E, i));
  }
  assign_scopes(&E, E.root, "", -1);
  E.call = ir_call_add(E.g, E.root->scope, -1, NULL);  // call 0: the model's forward
  const Member *fwd = E.root->forward;
  if (!fwd) el_err(&E, model->loc, "model '%s' has no forward", model->name);
  Env *env = env_new(&E, E.root->env);
  for (int i = 0; i < fwd->args.n; i++) {
    const Arg *a = fwd->args.items[i];
    if (!a->shape) el_err(&E, a->loc, "model input '%s' needs a shape, such as %s [B, T]", a->name, a->name);
    Shape s = eval_shape(&E, E.root->env, a->shape, CTX_BUILD, false);
    Node n = {.op = OP_INPUT, .dtype = DT_I32, .shape = s, .name = a->name};
    env_define(&E, env, a->name, vtensor(el_add_node(&E, n, a->loc)), a->loc);
  }
  exec_body(&E, env, &fwd->body, CTX_RUN, BODY_MODEL, "the model", fwd->loc);
  int loss = -1;
  for (int o = 0; o < E.g->noutputs; o++)
    if (!strcmp(E.g->outputs[o].name, "loss")) loss = E.g->outputs[o].node;
  if (loss < 0) el_err(&E, fwd->loc, "model '%s' has no `output loss = ...`", model->name);
  return E.g;  // the output statement checked that the loss is a float scalar
}
