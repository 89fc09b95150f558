// test_interp.c: the reference interpreter on hand-computed cases, the
// counter-based RNG, and properties of the autodiff pass: one rule per
// differentiable op, shared instances accumulate, the checker can fail.
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include "../check.h"
#include "frontend.h"
#include "interp.h"
#include "passes.h"
#include "rng.h"

#define NEAR(a, b) (fabs((a) - (b)) <= 1e-12 * (1 + fabs(b)))

static char err[512];
static Dim C(int64_t n) { return (Dim){DIM_CONST, n}; }

static int param(Graph *g, const char *name, Shape s) {
  return ir_add(g, (Node){.op = OP_PARAM, .shape = s, .name = name, .init = {INIT_ZEROS, 0, 0}}, err, sizeof err);
}

static Interp *run(Graph *g, InterpConfig cfg) {
  Interp *in = interp_new(g, cfg, err, sizeof err);
  return in;
}

static void set(Interp *in, int node, const double *v, int n) {
  double *p = interp_param(in, node);
  for (int i = 0; i < n; i++) p[i] = v[i];
}

static bool all_near(const double *got, const double *want, int n) {
  for (int i = 0; i < n; i++)
    if (!NEAR(got[i], want[i])) {
      fprintf(stderr, "  element %d: got %.17g, want %.17g\n", i, got[i], want[i]);
      return false;
    }
  return true;
}

static void test_hand_computed(void) {
  Arena a = {0};
  Graph *g = ir_graph_new(&a, "t");
  g->t_max = 3;
  ir_scope_add(g, "", "t", -1, (Loc){0});
  // layer norm of [1, 2, 3, 4] with gain [1, 2, 1, 1], bias [0, 0, 1, 0], eps 1e-5:
  // mean 2.5, variance 1.25, sigma = sqrt(1.25001)
  int x = param(g, "x", (Shape){1, {C(4)}}), gn = param(g, "g", (Shape){1, {C(4)}}), bn = param(g, "b", (Shape){1, {C(4)}});
  int ln = ir_add(g, (Node){.op = OP_LAYERNORM, .nin = 3, .in = {x, gn, bn}, .fval = 1e-5}, err, sizeof err);
  // rms norm of the same: mean of squares 7.5, sigma = sqrt(7.50001) (PyTorch's RMSNorm)
  int rn = ir_add(g, (Node){.op = OP_RMSNORM, .nin = 2, .in = {x, gn}, .fval = 1e-5}, err, sizeof err);
  // causal softmax of three rows [1, 2, 3]
  int z = param(g, "z", (Shape){3, {C(1), C(3), C(3)}});
  int zm = ir_add(g, (Node){.op = OP_CAUSAL_MASK, .nin = 1, .in = {z}, .fval = -INFINITY}, err, sizeof err);
  int sm = ir_add(g, (Node){.op = OP_SOFTMAX, .nin = 1, .in = {zm}, .axis = 2}, err, sizeof err);
  // causal convolutions of x_0 = [1, 2], x_1 = [3, 4], x_2 = [5, 6] with lags 0, 1, 2
  int u = param(g, "u", (Shape){3, {C(1), C(3), C(2)}});
  int ws = param(g, "ws", (Shape){1, {C(3)}}), wv = param(g, "wv", (Shape){2, {C(3), C(2)}});
  int wm = param(g, "wm", (Shape){3, {C(3), C(2), C(1)}});
  int cs = ir_add(g, (Node){.op = OP_CAUSAL_CONV, .nin = 2, .in = {u, ws}}, err, sizeof err);
  int cv = ir_add(g, (Node){.op = OP_CAUSAL_CONV, .nin = 2, .in = {u, wv}}, err, sizeof err);
  int cm = ir_add(g, (Node){.op = OP_CAUSAL_CONV, .nin = 2, .in = {u, wm}}, err, sizeof err);
  CHECK(ln >= 0 && rn >= 0 && sm >= 0 && cs >= 0 && cv >= 0 && cm >= 0 && ir_verify(g, err, sizeof err));
  Interp *in = run(g, (InterpConfig){.B = 1, .T = 3});
  CHECK(in != NULL);
  if (!in) return;
  set(in, x, (double[]){1, 2, 3, 4}, 4);
  set(in, gn, (double[]){1, 2, 1, 1}, 4);
  set(in, bn, (double[]){0, 0, 1, 0}, 4);
  set(in, z, (double[]){1, 2, 3, 1, 2, 3, 1, 2, 3}, 9);
  set(in, u, (double[]){1, 2, 3, 4, 5, 6}, 6);
  set(in, ws, (double[]){1, 10, 100}, 3);
  set(in, wv, (double[]){1, 2, 10, 20, 100, 200}, 6);
  set(in, wm, (double[]){1, 2, 10, 20, 100, 200}, 6);
  CHECK(interp_run(in, 0, err, sizeof err));
  CHECK(all_near(interp_value(in, ln),
                 (double[]){-1.3416354199689269, -0.894423613312618, 1.447211806656309, 1.3416354199689269}, 4));
  CHECK(all_near(interp_value(in, rn),
                 (double[]){0.3651481282381064, 1.4605925129524255, 1.0954443847143192, 1.4605925129524255}, 4));
  CHECK(all_near(interp_value(in, sm),
                 (double[]){1, 0, 0, 0.2689414213699951, 0.7310585786300049, 0, 0.09003057317038046,
                            0.24472847105479767, 0.6652409557748219},
                 9));
  // scalar:  out_0 = x_0, out_1 = x_1 + 10 x_0, out_2 = x_2 + 10 x_1 + 100 x_0
  CHECK(all_near(interp_value(in, cs), (double[]){1, 2, 13, 24, 135, 246}, 6));
  // vector:  elementwise weights [1, 2], [10, 20], [100, 200]
  CHECK(all_near(interp_value(in, cv), (double[]){1, 4, 13, 48, 135, 492}, 6));
  // matrix:  W_k = [w_k0; w_k1] (2 x 1): out_i = sum_j x_j . W_{i-j}
  CHECK(all_near(interp_value(in, cm), (double[]){5, 61, 627}, 3));
  interp_free(in);
  // float32 mode rounds every result
  in = run(g, (InterpConfig){.B = 1, .T = 3, .f32 = true});
  set(in, x, (double[]){1, 2, 3, 4}, 4);
  set(in, gn, (double[]){1, 2, 1, 1}, 4);
  CHECK(interp_run(in, 0, err, sizeof err));
  const double *v = interp_value(in, ln);
  CHECK(v[0] == (double)(float)v[0] && fabs(v[0] + 1.3416354199689269) < 1e-6);
  interp_free(in);
  arena_free(&a);
}

static void test_rng(void) {
  // Known-answer vectors of Philox4x32-10 (Salmon et al., Random123)
  XfPhilox r = xf_philox4x32((uint32_t[]){0, 0, 0, 0}, (uint32_t[]){0, 0});
  CHECK(r.v[0] == 0x6627e8d5u && r.v[1] == 0xe169c58du && r.v[2] == 0xbc57ac4cu && r.v[3] == 0x9b00dbd8u);
  r = xf_philox4x32((uint32_t[]){~0u, ~0u, ~0u, ~0u}, (uint32_t[]){~0u, ~0u});
  CHECK(r.v[0] == 0x408f276du && r.v[1] == 0x41c83b0eu && r.v[2] == 0xa20bc7c6u && r.v[3] == 0x6d5451fdu);
  double m = 0, s2 = 0;
  for (int i = 0; i < 100000; i++) {
    double z = xf_rand_normal(7, 3, (uint64_t)i, 0);
    m += z, s2 += z * z;
  }
  m /= 100000, s2 = s2 / 100000 - m * m;
  CHECK(fabs(m) < 0.02 && fabs(s2 - 1) < 0.02);
  CHECK(xf_rand_uniform(1, 2, 3, 4) == xf_rand_uniform(1, 2, 3, 4));
  CHECK(xf_rand_uniform(1, 2, 3, 4) != xf_rand_uniform(1, 2, 3, 5));
}

static Graph *elab(Arena *a, const char *text) {
  static jmp_buf on_error;
  Diag d = {.arena = a, .out = stderr, .on_error = &on_error};
  SearchPath sp = {NULL, 0, XF_STDLIB_DIR};
  if (setjmp(on_error)) return NULL;
  Graph *g = elaborate(&d, load_program_text(&d, "unit.xf", text, strlen(text), &sp), NULL, 0);
  return autodiff(g, err, sizeof err) ? g : NULL;
}

static int find(const Graph *g, OpKind op, const char *name) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == op && !strcmp(g->nodes[i].name ? g->nodes[i].name : "", name)) return i;
  return -1;
}

static void copy_param(Interp *dst, const Graph *gd, const char *dn, Interp *src, const Graph *gs, const char *sn) {
  int a = find(gd, OP_PARAM, dn), b = find(gs, OP_PARAM, sn);
  memcpy(interp_param(dst, a), interp_value(src, b), sizeof(double) * (size_t)interp_numel(src, b));
}

// The gradient of one instance called twice is the sum of the gradients of
// two instances holding the same values, one per call.
static void test_shared_instance(void) {
  const char *head =
      "import \"nn\"\n"
      "model m {\n"
      "  config context = 4, d = 3, v = 5\n"
      "  param E [v, d] = normal(0, 1)\n"
      "  param R [d] = normal(0, 1)\n";
  const char *tail =
      "  forward(tokens [B, T]) {\n"
      "    output loss = reshape(sum(sum(sum(tanh(%s) * R, 0), 1), 2), [])\n"
      "  }\n"
      "}\n";
  char shared[2048], separate[2048], fmt[1024];
  snprintf(fmt, sizeof fmt, "%s  let f = Linear(d, d)\n%s", head, tail);
  snprintf(shared, sizeof shared, fmt, "f(f(embed(E, tokens)))");
  snprintf(fmt, sizeof fmt, "%s  let f1 = Linear(d, d)\n  let f2 = Linear(d, d)\n%s", head, tail);
  snprintf(separate, sizeof separate, fmt, "f2(f1(embed(E, tokens)))");
  Arena a1 = {0}, a2 = {0};
  Graph *gs = elab(&a1, shared), *gp = elab(&a2, separate);
  CHECK(gs && gp);
  if (!gs || !gp) return;
  InterpConfig cfg = {.B = 2, .T = 4};
  Interp *is = interp_new(gs, cfg, err, sizeof err), *ip = interp_new(gp, cfg, err, sizeof err);
  interp_init_params(is, 11);
  for (int i = 0; i < gs->nnodes; i++)  // make the weights large enough to matter
    if (gs->nodes[i].op == OP_PARAM)
      for (int64_t k = 0; k < interp_numel(is, i); k++) interp_param(is, i)[k] = xf_rand_normal(5, (uint32_t)i, (uint64_t)k, 0);
  copy_param(ip, gp, "E", is, gs, "E");
  copy_param(ip, gp, "R", is, gs, "R");
  const char *pn[] = {"W", "b"};
  for (int k = 0; k < 2; k++) {
    char s[16], d1[16], d2[16];
    snprintf(s, sizeof s, "f.%s", pn[k]), snprintf(d1, sizeof d1, "f1.%s", pn[k]), snprintf(d2, sizeof d2, "f2.%s", pn[k]);
    copy_param(ip, gp, d1, is, gs, s);
    copy_param(ip, gp, d2, is, gs, s);
  }
  int32_t ids[8] = {0, 1, 2, 3, 4, 3, 2, 1};
  CHECK(interp_set_input(is, "tokens", ids, err, sizeof err) && interp_set_input(ip, "tokens", ids, err, sizeof err));
  CHECK(interp_run(is, 0, err, sizeof err) && interp_run(ip, 0, err, sizeof err));
  CHECK(NEAR(interp_output_scalar(is, "loss"), interp_output_scalar(ip, "loss")));
  for (int k = 0; k < 2; k++) {
    char s[16], d1[16], d2[16];
    snprintf(s, sizeof s, "grad.f.%s", pn[k]), snprintf(d1, sizeof d1, "grad.f1.%s", pn[k]);
    snprintf(d2, sizeof d2, "grad.f2.%s", pn[k]);
    const double *g0 = interp_value(is, interp_output_node(gs, s));
    const double *g1 = interp_value(ip, interp_output_node(gp, d1)), *g2 = interp_value(ip, interp_output_node(gp, d2));
    int64_t n = interp_numel(is, interp_output_node(gs, s));
    bool ok = n > 0, nonzero = false;
    for (int64_t i = 0; i < n; i++) {
      ok &= fabs(g0[i] - (g1[i] + g2[i])) <= 1e-12 * (1 + fabs(g0[i]));
      nonzero |= fabs(g1[i] - g2[i]) > 1e-6;  // the two uses differ, so the sum is a real test
    }
    CHECK(ok && nonzero);
  }
  // the checker rejects a wrong gradient: point grad.R at R itself
  int o = -1, r = find(gs, OP_PARAM, "R");
  for (int i = 0; i < gs->noutputs; i++)
    if (!strcmp(gs->outputs[i].name, "grad.R")) o = i;
  GradCheckConfig gc = {.B = 2, .T = 4, .seed = 3, .tol = 1e-6};
  double worst;
  FILE *null = fopen("/dev/null", "w");
  CHECK(gradcheck(gs, &gc, null, &worst) && worst < 1e-6);
  gs->outputs[o].node = r;
  CHECK(!gradcheck(gs, &gc, null, &worst) && worst > 1e-3);
  fclose(null);
  interp_free(is), interp_free(ip);
  arena_free(&a1), arena_free(&a2);
}

static void test_rules_and_errors(void) {
  for (int op = 0; op < OP_COUNT; op++)
    if (ir_op_info[op].differentiable && !autodiff_has_rule((OpKind)op)) {
      fprintf(stderr, "op %s is differentiable but has no gradient rule\n", ir_op_info[op].name);
      failed++;
    } else {
      passed++;
    }
  Arena a = {0};
  Graph *g = elab(&a,
                  "model m {\n  config context = 4\n  param E [5, 2] = zeros\n"
                  "  forward(tokens [B, T], targets [B, T]) { output loss = cross_entropy(embed(E, tokens) @ "
                  "transpose(E, 0, 1), targets) }\n}\n");
  CHECK(g != NULL);
  Interp *in = interp_new(g, (InterpConfig){.B = 1, .T = 2}, err, sizeof err);
  CHECK(interp_new(g, (InterpConfig){.B = 1, .T = 5}, err, sizeof err) == NULL && strstr(err, "T = 5"));
  CHECK(interp_input_limit(g, find(g, OP_INPUT, "tokens")) == 5);
  CHECK(interp_set_input(in, "tokens", (int32_t[]){1, 5}, err, sizeof err));
  CHECK(interp_set_input(in, "targets", (int32_t[]){1, 2}, err, sizeof err));
  CHECK(!interp_run(in, 0, err, sizeof err) && strstr(err, "token id 5"));
  CHECK(interp_set_input(in, "tokens", (int32_t[]){1, 4}, err, sizeof err) && interp_run(in, 0, err, sizeof err));
  CHECK(NEAR(interp_output_scalar(in, "loss"), log(5.0)));  // all-zero table: uniform over 5 classes
  interp_free(in);
  arena_free(&a);
}

int main(void) {
  test_hand_computed();
  test_rng();
  test_shared_instance();
  test_rules_and_errors();
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
