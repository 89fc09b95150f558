// test_ir.c: unit tests of the IR shape rules, the verifier and the
// elaborator's instance semantics (sharing, naming, folding).
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../check.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"


static Dim C(int64_t n) { return (Dim){DIM_CONST, n}; }
static const Dim Bd = {DIM_B, 0}, Td = {DIM_T, 0};

static Shape S(int rank, ...) {
  Shape s = {.rank = rank};
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) s.d[i] = va_arg(ap, Dim);
  va_end(ap);
  return s;
}

static char err[512];

static int param(Graph *g, const char *name, Shape s) {
  return ir_add(g, (Node){.op = OP_PARAM, .shape = s, .name = name, .init = {INIT_ZEROS, 0, 0}}, err, sizeof err);
}
static int input(Graph *g, const char *name, Shape s) {
  return ir_add(g, (Node){.op = OP_INPUT, .dtype = DT_I32, .shape = s, .name = name}, err, sizeof err);
}
static int op2(Graph *g, OpKind op, int a, int b) {
  return ir_add(g, (Node){.op = op, .nin = 2, .in = {a, b}}, err, sizeof err);
}
static bool shape_is(Graph *g, int id, Shape want) { return id >= 0 && shape_eq(&g->nodes[id].shape, &want); }

static void test_shapes(void) {
  Arena a = {0};
  Graph *g = ir_graph_new(&a, "t");
  g->t_max = 16;
  int x = param(g, "x", S(3, C(2), C(1), C(8)));
  int y = param(g, "y", S(2, C(5), C(8)));
  CHECK(shape_is(g, op2(g, OP_ADD, x, y), S(3, C(2), C(5), C(8))));  // numpy broadcasting
  int z = param(g, "z", S(2, C(5), C(7)));
  CHECK(op2(g, OP_ADD, y, z) < 0 && strstr(err, "[5, 8] and [5, 7] do not broadcast"));
  int w = param(g, "w", S(2, C(8), C(3)));
  CHECK(shape_is(g, op2(g, OP_MATMUL, x, w), S(3, C(2), C(1), C(3))));
  CHECK(op2(g, OP_MATMUL, w, x) < 0 && strstr(err, "inner dimensions"));
  int tok = input(g, "tok", S(2, Bd, Td));
  int emb = op2(g, OP_EMBED, y, tok);
  CHECK(shape_is(g, emb, S(3, Bd, Td, C(8))));
  CHECK(op2(g, OP_EMBED, tok, y) < 0);
  CHECK(op2(g, OP_ADD, tok, tok) < 0 && strstr(err, "token ids"));  // no arithmetic on ids
  // reshape keeps symbolic axes in order; constant runs must keep their product
  Node r = {.op = OP_RESHAPE, .nin = 1, .in = {emb}, .shape = S(4, Bd, Td, C(2), C(4))};
  int heads = ir_add(g, r, err, sizeof err);
  CHECK(shape_is(g, heads, S(4, Bd, Td, C(2), C(4))));
  r.shape = S(3, Td, Bd, C(8));
  CHECK(ir_add(g, r, err, sizeof err) < 0 && strstr(err, "cannot reshape"));
  r.shape = S(3, Bd, Td, C(9));
  CHECK(ir_add(g, r, err, sizeof err) < 0);
  int tr = ir_add(g, (Node){.op = OP_TRANSPOSE, .nin = 1, .in = {heads}, .axis = 1, .axis2 = 2}, err, sizeof err);
  CHECK(shape_is(g, tr, S(4, Bd, C(2), Td, C(4))));
  int sc = op2(g, OP_MATMUL, tr, ir_add(g, (Node){.op = OP_TRANSPOSE, .nin = 1, .in = {tr}, .axis = -1, .axis2 = -2}, err, sizeof err));
  CHECK(shape_is(g, sc, S(4, Bd, C(2), Td, Td)));
  CHECK(shape_is(g, ir_add(g, (Node){.op = OP_CAUSAL_MASK, .nin = 1, .in = {sc}}, err, sizeof err), S(4, Bd, C(2), Td, Td)));
  CHECK(ir_add(g, (Node){.op = OP_CAUSAL_MASK, .nin = 1, .in = {emb}}, err, sizeof err) < 0);
  // reductions keep the axis with size 1
  CHECK(shape_is(g, ir_add(g, (Node){.op = OP_SUM, .nin = 1, .in = {emb}, .axis = -1}, err, sizeof err), S(3, Bd, Td, C(1))));
  CHECK(ir_add(g, (Node){.op = OP_MEAN, .nin = 1, .in = {emb}, .axis = 3}, err, sizeof err) < 0);
  // causal_conv: the three kernel kinds, and a kernel shorter than the context
  int ks = param(g, "ks", S(1, C(16))), kv = param(g, "kv", S(2, C(16), C(8)));
  int km = param(g, "km", S(3, C(16), C(8), C(4))), kshort = param(g, "kshort", S(1, C(15)));
  int cs = op2(g, OP_CAUSAL_CONV, emb, ks), cv = op2(g, OP_CAUSAL_CONV, emb, kv), cm = op2(g, OP_CAUSAL_CONV, emb, km);
  CHECK(shape_is(g, cs, S(3, Bd, Td, C(8))) && g->nodes[cs].conv == CONV_SCALAR);
  CHECK(shape_is(g, cv, S(3, Bd, Td, C(8))) && g->nodes[cv].conv == CONV_VECTOR);
  CHECK(shape_is(g, cm, S(3, Bd, Td, C(4))) && g->nodes[cm].conv == CONV_MATRIX);
  CHECK(shape_is(g, op2(g, OP_CAUSAL_CONV, emb, kshort), S(3, Bd, Td, C(8))));  // 15 lags over 16 positions
  // slice of the first T rows needs T <= rows
  int pos = param(g, "pos", S(2, C(16), C(8)));
  CHECK(shape_is(g, ir_add(g, (Node){.op = OP_SLICE, .nin = 1, .in = {pos}, .len = Td}, err, sizeof err), S(2, Td, C(8))));
  CHECK(ir_add(g, (Node){.op = OP_SLICE, .nin = 1, .in = {pos}, .start = 1, .len = Td}, err, sizeof err) < 0);
  int logits = param(g, "logits", S(3, C(1), C(1), C(9)));
  CHECK(op2(g, OP_CROSS_ENTROPY, logits, tok) < 0);
  int lg = op2(g, OP_MATMUL, emb, param(g, "wv", S(2, C(8), C(9))));
  CHECK(shape_is(g, op2(g, OP_CROSS_ENTROPY, lg, tok), S(0)));
  CHECK(ir_verify(g, err, sizeof err));
  arena_free(&a);
}

static void test_verifier(void) {
  Arena a = {0};
  Graph *g = ir_graph_new(&a, "t");
  ir_scope_add(g, "", "t", -1, (Loc){0});
  int x = param(g, "x", S(2, C(4), C(4)));
  int y = op2(g, OP_MUL, x, x);
  ir_output_add(g, "loss", ir_add(g, (Node){.op = OP_SUM, .nin = 1, .in = {y}, .axis = 0}, err, sizeof err));
  CHECK(!ir_verify(g, err, sizeof err) && strstr(err, "loss is not a scalar"));
  g->noutputs = 0;
  CHECK(ir_verify(g, err, sizeof err));
  g->nodes[y].shape.d[0].n = 5;  // stored shape disagrees with the rule
  CHECK(!ir_verify(g, err, sizeof err) && strstr(err, "stored as"));
  g->nodes[y].shape.d[0].n = 4;
  g->nodes[y].in[1] = y;  // use before definition
  CHECK(!ir_verify(g, err, sizeof err) && strstr(err, "before it is defined"));
  g->nodes[y].in[1] = x;
  param(g, "x", S(1, C(3)));
  CHECK(!ir_verify(g, err, sizeof err) && strstr(err, "param name x"));
  g->nnodes--;
  g->nodes[x].init.kind = INIT_NONE;
  CHECK(!ir_verify(g, err, sizeof err) && strstr(err, "no initialiser"));
  g->nodes[x].init.kind = INIT_ONES;
  int d1 = ir_add(g, (Node){.op = OP_DROPOUT, .nin = 1, .in = {y}, .fval = 0.1, .seed = 7}, err, sizeof err);
  ir_add(g, (Node){.op = OP_DROPOUT, .nin = 1, .in = {d1}, .fval = 0.1, .seed = 7}, err, sizeof err);
  CHECK(ir_verify(g, err, sizeof err));  // same stream, same p and shape: the same mask, allowed
  ir_add(g, (Node){.op = OP_DROPOUT, .nin = 1, .in = {d1}, .fval = 0.2, .seed = 7}, err, sizeof err);
  CHECK(!ir_verify(g, err, sizeof err) && strstr(err, "mask stream"));
  arena_free(&a);
}

// Elaborates text as a main file; returns the graph or NULL on a user error.
static Graph *elab(Arena *a, const char *text, const Define *defs, int ndefs) {
  static jmp_buf on_error;
  FILE *devnull = fopen("/dev/null", "w");
  Diag d = {.arena = a, .out = devnull, .on_error = &on_error};
  SearchPath sp = {NULL, 0, XF_STDLIB_DIR};
  Graph *g = NULL;
  if (!setjmp(on_error)) {
    Program *p = load_program_text(&d, "unit.xf", text, strlen(text), &sp);
    g = elaborate(&d, p, defs, ndefs);
  }
  fclose(devnull);
  return g;
}

static int count_op(const Graph *g, OpKind op) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) n += g->nodes[i].op == op;
  return n;
}

static const Node *find_param(const Graph *g, const char *name) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == OP_PARAM && !strcmp(g->nodes[i].name, name)) return &g->nodes[i];
  return NULL;
}

static void test_elaboration(void) {
  Arena a = {0};
  // One instance called twice shares its parameters; two instances do not.
  const char *twice =
      "import \"nn\"\n"
      "model m {\n"
      "  config context = 4, d = 3\n"
      "  let f = Linear(d, d)\n"
      "  let g1 = Linear(d, d)\n"
      "  let g2 = Linear(d, d)\n"
      "  forward(tokens [B, T]) {\n"
      "    x = f(f(embed(ones_table(), tokens)))\n"
      "    output loss = mean(mean(mean(g2(g1(x)), 0), 1), 2)\n"
      "  }\n"
      "}\n"
      "fn ones_table() { return 0 }\n";
  CHECK(elab(&a, twice, NULL, 0) == NULL);  // embed of a number: a user error, not a crash
  arena_free(&a);
  const char *shared =
      "import \"nn\"\n"
      "block Twice(f) { forward(x) { return f(f(x)) } }\n"
      "model m {\n"
      "  config context = 4, d = 3, v = 5\n"
      "  param E [v, d] = normal(0, 1)\n"
      "  let s = Twice(Linear(d, d))\n"
      "  let g1 = Linear(d, d)\n"
      "  let g2 = Linear(d, d)\n"
      "  forward(tokens [B, T]) {\n"
      "    x = s(embed(E, tokens))\n"
      "    y = g2(g1(x)) * 1\n"
      "    output loss = reshape(mean(mean(mean(y, 0), 1), 2), [])\n"
      "  }\n"
      "}\n";
  Graph *g = elab(&a, shared, NULL, 0);
  CHECK(g != NULL);
  if (g) {
    CHECK(ir_verify(g, err, sizeof err));
    CHECK(count_op(g, OP_PARAM) == 1 + 3 * 2);  // E, and W, b of three Linear instances
    CHECK(count_op(g, OP_MATMUL) == 4);         // f twice, g1, g2
    CHECK(count_op(g, OP_MUL) == 0);            // * 1 is folded away
    CHECK(find_param(g, "s.f.W") && find_param(g, "g1.W") && find_param(g, "g2.b") && find_param(g, "E"));
    const Node *W = find_param(g, "s.f.W");
    CHECK(W && W->init.kind == INIT_NORMAL && W->init.b == 0.01);
    Cost c[64];
    CHECK(g->nscopes < 64);
    stats_compute(g, g->t_max, false, c);
    CHECK(c[0].params == 5 * 3 + 3 * (9 + 3));
  }
  arena_free(&a);
  // repeat creates independent instances, named by position
  const char *rep =
      "import \"nn\"\n"
      "model m {\n"
      "  config context = 4, d = 2, v = 3, n = 3\n"
      "  param E [v, d] = zeros\n"
      "  let stack = repeat n { Linear(d, d) }\n"
      "  forward(tokens [B, T]) {\n"
      "    output loss = reshape(sum(sum(sum(stack(embed(E, tokens)), 0), 1), 2), [])\n"
      "  }\n"
      "}\n";
  Define defs[] = {{"n", "5"}};
  g = elab(&a, rep, defs, 1);
  CHECK(g && count_op(g, OP_MATMUL) == 5 && find_param(g, "stack.4.W") && !find_param(g, "stack.5.W"));
  arena_free(&a);
  Define bad[] = {{"n", "2.5"}};
  CHECK(elab(&a, rep, bad, 1) == NULL);
  arena_free(&a);
}

int main(void) {
  test_shapes();
  test_verifier();
  test_elaboration();
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
