// ast.c: AST constructors and the AST dump (xfc --emit=ast), printed as
// indented S-expressions with the line:col of every node.
#include "frontend.h"

#include <stdlib.h>

void vec_push(Arena *a, Vec *v, void *item) {
  if (v->n == v->cap) {
    int nc = v->cap ? 2 * v->cap : 4;
    v->items = arena_realloc(a, v->items, sizeof *v->items * (size_t)v->cap,
                             sizeof *v->items * (size_t)nc);
    v->cap = nc;
  }
  v->items[v->n++] = item;
}

Expr *ast_expr(Arena *a, ExprKind kind, Loc loc) {
  Expr *e = arena_alloc(a, sizeof *e);
  e->kind = kind;
  e->loc = loc;
  return e;
}

static void indent(FILE *f, int depth) {
  for (int i = 0; i < depth; i++) fputs("  ", f);
}

const char *binop_text(char op) {
  switch (op) {
  case '+': return "+";
  case '-': return "-";
  case '*': return "*";
  case '/': return "/";
  case '%': return "%";
  case 'F': return "//";
  case '@': return "@";
  case '<': return "<";
  case '>': return ">";
  case 'L': return "<=";
  case 'G': return ">=";
  case 'E': return "==";
  case 'N': return "!=";
  default: return "?";
  }
}

static void dump_expr(FILE *f, const Expr *e) {
  switch (e->kind) {
  case EX_INT: fprintf(f, "%.0f", e->num); break;
  case EX_FLOAT: fprintf(f, "%.17g", e->num); break;
  case EX_NAME: fprintf(f, "%s", e->name); break;
  case EX_BINARY: {
    // A flat chain a + b + c + ... is a left spine as long as the chain:
    // walked with a loop, as the elaborator does, so it costs no stack.
    int n = 0;
    for (const Expr *x = e; x->kind == EX_BINARY; x = x->lhs) n++;
    const Expr **spine = malloc(sizeof *spine * (size_t)n);
    if (!spine) {
      fprintf(stderr, "xfc: out of memory\n");
      exit(1);
    }
    n = 0;
    for (const Expr *x = e; x->kind == EX_BINARY; x = x->lhs) spine[n++] = x, fprintf(f, "(%s ", binop_text(x->op));
    dump_expr(f, spine[n - 1]->lhs);
    for (int i = n - 1; i >= 0; i--) fputc(' ', f), dump_expr(f, spine[i]->rhs), fputc(')', f);
    free(spine);
    break;
  }
  case EX_NEG:
    fputs("(neg ", f);
    dump_expr(f, e->lhs);
    fputc(')', f);
    break;
  case EX_CALL:
    fputs("(call ", f);
    dump_expr(f, e->lhs);
    for (int i = 0; i < e->args.n; i++) fputc(' ', f), dump_expr(f, e->args.items[i]);
    fputc(')', f);
    break;
  case EX_LIST:
    fputc('[', f);
    for (int i = 0; i < e->args.n; i++) {
      if (i) fputc(' ', f);
      dump_expr(f, e->args.items[i]);
    }
    fputc(']', f);
    break;
  case EX_IF:
    fputs("(if ", f);
    dump_expr(f, e->lhs);
    fputc(' ', f);
    dump_expr(f, e->rhs);
    fputc(' ', f);
    dump_expr(f, e->args.items[0]);
    fputc(')', f);
    break;
  case EX_STRING: fprintf(f, "\"%s\"", e->name); break;
  case EX_KEYWORD:
    fprintf(f, "(%s = ", e->name);
    dump_expr(f, e->lhs);
    fputc(')', f);
    break;
  case EX_REPEAT:
    fputs("(repeat ", f);
    dump_expr(f, e->lhs);
    if (e->name) fprintf(f, " as %s", e->name);
    fputc(' ', f);
    dump_expr(f, e->rhs);
    fputc(')', f);
    break;
  }
}

static void dump_args(FILE *f, const Vec *args) {
  fputc('(', f);
  for (int i = 0; i < args->n; i++) {
    const Arg *a = args->items[i];
    fprintf(f, "%s%s", i ? " " : "", a->name);
    if (a->shape) fputc(':', f), dump_expr(f, a->shape);
    if (a->dflt) fputc('=', f), dump_expr(f, a->dflt);
  }
  fputc(')', f);
}

static void dump_body(FILE *f, const Vec *body, int depth) {
  static const char *kinds[] = {[ST_ASSIGN] = "assign", [ST_RETURN] = "return", [ST_OUTPUT] = "output", [ST_ASSERT] = "assert"};
  _Static_assert(sizeof kinds / sizeof *kinds == ST_ASSERT + 1, "a name for every statement kind");
  for (int i = 0; i < body->n; i++) {
    const Stmt *s = body->items[i];
    indent(f, depth);
    fprintf(f, "(%s", kinds[s->kind]);
    if (s->name) fprintf(f, s->kind == ST_ASSERT ? " \"%s\"" : " %s", s->name);
    if (s->value) fputc(' ', f), dump_expr(f, s->value);
    for (int k = 0; k < s->sides.n; k++) {  // return y, name: value
      const Stmt *sd = s->sides.items[k];
      fprintf(f, " (%s: ", sd->name);
      dump_expr(f, sd->value);
      fputc(')', f);
    }
    fprintf(f, ")  ; %d:%d\n", s->loc.line, s->loc.col);
  }
}

static void dump_members(FILE *f, const Vec *members, int depth) {
  static const char *memkinds[] = {[MEM_CONFIG] = "config", [MEM_PARAM] = "param", [MEM_LET] = "let",
                                   [MEM_FORWARD] = "forward", [MEM_ASSERT] = "assert", [MEM_IF] = "if"};
  _Static_assert(sizeof memkinds / sizeof *memkinds == MEM_IF + 1, "a name for every member kind");
  for (int j = 0; j < members->n; j++) {
    const Member *mb = members->items[j];
    indent(f, depth);
    if (mb->kind == MEM_IF) fputs("(if", f);
    else fprintf(f, mb->kind == MEM_ASSERT ? "(%s \"%s\"" : "(%s %s", memkinds[mb->kind], mb->name);
    if (mb->shape) fputc(' ', f), dump_expr(f, mb->shape);
    if (mb->value) fputc(' ', f), dump_expr(f, mb->value);
    if (mb->kind == MEM_FORWARD) {
      fputc(' ', f);
      dump_args(f, &mb->args);
      fprintf(f, "  ; %d:%d\n", mb->loc.line, mb->loc.col);
      dump_body(f, &mb->body, depth + 1);
      indent(f, depth);
      fputs(")\n", f);
    } else if (mb->kind == MEM_IF) {
      fprintf(f, "  ; %d:%d\n", mb->loc.line, mb->loc.col);
      dump_members(f, &mb->then, depth + 1);
      if (mb->other.n) {
        indent(f, depth);
        fputs(" else\n", f);
        dump_members(f, &mb->other, depth + 1);
      }
      indent(f, depth);
      fputs(")\n", f);
    } else {
      fprintf(f, ")  ; %d:%d\n", mb->loc.line, mb->loc.col);
    }
  }
}

void ast_dump(FILE *f, const Module *m) {
  static const char *defkinds[] = {"block", "fn", "model"};
  fprintf(f, "(module %s\n", m->src->name);
  for (int i = 0; i < m->imports.n; i++) {
    const Import *im = m->imports.items[i];
    fprintf(f, "  (import \"%s\"", im->path);
    if (im->alias) fprintf(f, " as %s", im->alias);
    fprintf(f, ")  ; %d:%d\n", im->loc.line, im->loc.col);
  }
  for (int i = 0; i < m->defs.n; i++) {
    const Def *d = m->defs.items[i];
    fprintf(f, "  (%s%s %s ", d->noncausal ? "noncausal " : "", defkinds[d->kind], d->name);
    dump_args(f, &d->params);
    fprintf(f, "  ; %d:%d\n", d->loc.line, d->loc.col);
    dump_members(f, &d->members, 2);
    dump_body(f, &d->body, 2);
    fputs("  )\n", f);
  }
  fputs(")\n", f);
}
