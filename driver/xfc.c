// xfc: the xf compiler driver. The pipeline is a flat list of stages; with
// --emit=STAGE the IR (or AST) after that stage is printed and xfc stops.
// The IR verifier runs after every stage that produces IR.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../frontend/frontend.h"
#include "../interp/interp.h"
#include "../passes/passes.h"

#ifndef XF_STDLIB_DIR
#define XF_STDLIB_DIR "stdlib"
#endif
#define XF_VERSION "0.1.0"

static void usage(FILE *f) {
  fputs("usage: xfc [options] model.xf\n"
        "\n"
        "Compiles an xf model description. Without an action it parses, elaborates\n"
        "and shape-checks the model and prints nothing on success.\n"
        "\n"
        "options:\n"
        "  -D name=value   override a config value of the model (repeatable)\n"
        "  -I dir          also look for imports in dir (repeatable)\n"
        "  --stdlib=dir    the standard library (default: $XF_STDLIB, else the built-in path)\n"
        "  --emit=ast      print the syntax tree of the model file and stop\n"
        "  --emit=ir       print the graph IR after elaboration and stop\n"
        "  --emit=grad     print the graph IR with its backward pass (autodiff) and stop\n"
        "  --stats         print parameters and forward operation counts per block instance,\n"
        "                  and backward and training operations per token\n"
        "  --check-grad    compare every gradient with finite differences (float64, reference\n"
        "                  interpreter, dropout off) and print the relative error per parameter;\n"
        "                  exit status 1 if any is 1e-6 or more. Use small sizes (-D ...)\n"
        "  --check-batch=N batch size of the check (default 2)\n"
        "  --check-seq=N   sequence length of the check (default: the context)\n"
        "  --check-dropout keep dropout on during the check, with fixed masks\n"
        "  --seed=N        seed of the check's parameters and tokens (default 1)\n"
        "  -h, --help      print this help\n"
        "  --version       print the version\n",
        f);
}

static int die_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "xfc: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(run 'xfc --help' for usage)\n");
  return 1;
}

static void check_ir(const Graph *g, const char *stage) {
  char msg[512];
  if (!ir_verify(g, msg, sizeof msg)) {
    fprintf(stderr, "xfc: internal error: IR verifier failed after %s: %s\n", stage, msg);
    exit(3);
  }
}

// The pipeline. Returns the exit status: 0, or 1 after a user error.
typedef struct {
  bool enabled, dropout;
  int64_t batch, seq;
  uint64_t seed;
} CheckOptions;

static bool parse_count(const char *s, int64_t *v) {
  char *end;
  long long n = strtoll(s, &end, 10);
  if (*s == 0 || *end || n < 0) return false;
  *v = n;
  return true;
}

static int check_grad(Graph *g, const CheckOptions *co) {
  GradCheckConfig c = {.B = co->batch, .T = co->seq > 0 ? co->seq : g->t_max, .seed = co->seed,
                       .dropout = co->dropout, .max_elems = 0, .tol = 1e-6};
  double worst;
  return gradcheck(g, &c, stdout, &worst) ? 0 : 1;
}

static int compile(const char *input, const char *emit, bool stats, const CheckOptions *check, const Define *defs,
                   int ndefs, const char **incs, int ninc, const char *stdlib_dir) {
  Arena arena = {0};
  jmp_buf on_error;
  Diag diag = {.arena = &arena, .out = stderr, .on_error = &on_error};
  if (setjmp(on_error)) {
    arena_free(&arena);
    return 1;
  }
  SearchPath sp = {incs, ninc, stdlib_dir};
  Program *prog = load_program(&diag, input, &sp);
  if (emit && !strcmp(emit, "ast")) {
    ast_dump(stdout, prog->modules[0]);
  } else {
    Graph *g = elaborate(&diag, prog, defs, ndefs);
    check_ir(g, "elaboration");
    if (emit && !strcmp(emit, "ir")) {
      ir_print(stdout, g);
    } else if ((emit && !strcmp(emit, "grad")) || stats || check->enabled) {
      char msg[512];
      if (!autodiff(g, msg, sizeof msg)) {
        fprintf(stderr, "xfc: %s\n", msg);
        exit(3);
      }
      check_ir(g, "autodiff");
      if (stats) stats_print(stdout, g);
      if (emit) ir_print(stdout, g);
      if (check->enabled) {
        int status = check_grad(g, check);
        arena_free(&arena);
        return status;
      }
    }
  }
  arena_free(&arena);
  return 0;
}

int main(int argc, char **argv) {
  const char *input = NULL, *emit = NULL;
  bool stats = false;
  CheckOptions check = {.batch = 2, .seed = 1};
  Define *defs = calloc((size_t)argc, sizeof *defs);
  const char **incs = calloc((size_t)argc, sizeof *incs);
  if (!defs || !incs) return fprintf(stderr, "xfc: out of memory\n"), 1;
  int ndefs = 0, ninc = 0;
  const char *stdlib_dir = getenv("XF_STDLIB");
  if (!stdlib_dir || !*stdlib_dir) stdlib_dir = XF_STDLIB_DIR;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout), 0;
    if (!strcmp(a, "--version")) return printf("xfc %s\n", XF_VERSION), 0;
    if (!strncmp(a, "-D", 2) || !strncmp(a, "-I", 2)) {
      const char *v = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v) return die_usage("%s needs a value", a);
      if (a[1] == 'I') {
        incs[ninc++] = v;
        continue;
      }
      const char *eq = strchr(v, '=');
      if (!eq || eq == v) return die_usage("-D %s: expected name=value", v);
      char *name = strndup(v, (size_t)(eq - v));
      if (!name) return fprintf(stderr, "xfc: out of memory\n"), 1;
      defs[ndefs++] = (Define){name, eq + 1};
    } else if (!strncmp(a, "--emit=", 7)) {
      emit = a + 7;
      if (strcmp(emit, "ast") && strcmp(emit, "ir") && strcmp(emit, "grad"))
        return die_usage("--emit=%s: expected ast, ir or grad", emit);
    } else if (!strncmp(a, "--stdlib=", 9)) {
      stdlib_dir = a + 9;
    } else if (!strcmp(a, "--stats")) {
      stats = true;
    } else if (!strcmp(a, "--check-grad")) {
      check.enabled = true;
    } else if (!strcmp(a, "--check-dropout")) {
      check.dropout = true;
    } else if (!strncmp(a, "--check-batch=", 14)) {
      if (!parse_count(a + 14, &check.batch) || check.batch < 1) return die_usage("%s: expected a count >= 1", a);
    } else if (!strncmp(a, "--check-seq=", 12)) {
      if (!parse_count(a + 12, &check.seq) || check.seq < 1) return die_usage("%s: expected a count >= 1", a);
    } else if (!strncmp(a, "--seed=", 7)) {
      int64_t v;
      if (!parse_count(a + 7, &v)) return die_usage("%s: expected a non-negative integer", a);
      check.seed = (uint64_t)v;
    } else if (a[0] == '-' && a[1]) {
      return die_usage("unknown option %s", a);
    } else if (input) {
      return die_usage("more than one input file (%s)", a);
    } else {
      input = a;
    }
  }
  if (!input) return die_usage("%s", "no input file");

  int status = compile(input, emit, stats, &check, defs, ndefs, incs, ninc, stdlib_dir);
  for (int i = 0; i < ndefs; i++) free((char *)defs[i].name);
  free(defs);
  free(incs);
  if (fflush(stdout) != 0) {
    perror("xfc: error writing output");
    status = 1;
  }
  return status;
}
