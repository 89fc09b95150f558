// cli.c: the command-line conventions of cli.h.
#include "cli.h"

#include <stdarg.h>
#include <string.h>

#include "../ir/nearest.h"
#include "xf_version.h"

#ifndef XF_VERSION
#define XF_VERSION "0.1.0"
#endif
#ifndef XF_BUILD_TYPE
#define XF_BUILD_TYPE "unknown"
#endif

Cli cli_start(const char *prog, const CliOption *opts, int nopts, int argc, char **argv, int first) {
  return (Cli){.prog = prog, .opts = opts, .nopts = nopts, .argc = argc, .argv = argv, .i = first};
}

int cli_usage_error(const char *prog, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: error: ", prog);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(see %s --help)\n", prog);
  va_end(ap);
  return XF_EXIT_USAGE;
}

const char *cli_nearest(const char *word, const char *const *names, int n) { return xf_nearest(word, names, n); }

// "unknown option --stpes (did you mean --steps?)": the closest option
// name, compared without dashes.
static int unknown(Cli *c, const char *arg) {
  const char *names[256];
  int n = c->nopts < 256 ? c->nopts : 256;
  for (int k = 0; k < n; k++) names[k] = c->opts[k].name;
  char word[96];
  const char *w = arg + (arg[1] == '-' ? 2 : 1), *eq = strchr(w, '=');
  snprintf(word, sizeof word, "%.*s", eq ? (int)(eq - w) : (int)strlen(w), w);
  const char *near = xf_nearest(word, names, n);
  if (near)
    cli_usage_error(c->prog, "unknown option %s (did you mean %s%s?)", arg, near[1] ? "--" : "-", near);
  else cli_usage_error(c->prog, "unknown option %s", arg);
  return CLI_BAD;
}

int cli_next(Cli *c) {
  c->value = c->arg = NULL;
  if (c->i >= c->argc) return CLI_END;
  char *a = c->argv[c->i++];
  if (c->positional || a[0] != '-' || !a[1]) return c->value = a, CLI_ARG;
  if (!strcmp(a, "--")) {
    c->positional = true;
    return cli_next(c);
  }
  bool lng = a[1] == '-';
  const char *name = a + (lng ? 2 : 1), *eq = lng ? strchr(name, '=') : NULL;
  size_t len = eq ? (size_t)(eq - name) : strlen(name);
  for (int k = 0; k < c->nopts; k++) {
    const CliOption *o = &c->opts[k];
    size_t olen = strlen(o->name);
    bool one = olen == 1;
    if (lng == one) continue;  // --x and -name are not options
    if (lng ? (len != olen || strncmp(name, o->name, len)) : name[0] != o->name[0]) continue;
    snprintf(c->arg_buf, sizeof c->arg_buf, "%s%s", lng ? "--" : "-", o->name);
    c->arg = c->arg_buf;
    if (!o->value) {
      if (eq) return cli_usage_error(c->prog, "%s takes no value (got %s)", c->arg, a), CLI_BAD;
      if (!lng && name[1]) return unknown(c, a);
      return k;
    }
    if (eq) c->value = eq + 1;
    else if (!lng && name[1]) c->value = name + 1;
    else if (c->i < c->argc) c->value = c->argv[c->i++];
    else return cli_usage_error(c->prog, "%s needs a value", c->arg), CLI_BAD;
    return k;
  }
  return unknown(c, a);
}

void cli_version(FILE *f, const char *prog) {
  fprintf(f, "%s %s (commit %s, %s build)\n", prog, XF_VERSION, XF_COMMIT, XF_BUILD_TYPE);
}
