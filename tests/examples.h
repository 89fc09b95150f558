// examples.h: the examples the C tests of generated code run (test_codegen,
// cuda/test_backend) and their small config values.
#ifndef XF_TEST_EXAMPLES_H
#define XF_TEST_EXAMPLES_H

#include <string.h>

#include "frontend.h"

static const char *const test_examples[] = {"transformer", "she", "he", "we", "me", "macaron", "macaron_she", "postnorm",
                                            "rk4", "linear_attention", "gla", "retnet", "ssm", "moe", "mamba"};
enum { NTEST_EXAMPLES = sizeof test_examples / sizeof *test_examples };

// The n values of small for example `name` into defs (n at most): all of
// them but "heads" for the models without attention heads. Returns the count.
static int example_defs(const char *name, const Define *small, int n, Define *defs) {
  static const char *const headless[] = {"she", "he", "we", "me", "macaron_she", "ssm", "mamba"};
  bool heads = true;
  for (size_t i = 0; i < sizeof headless / sizeof *headless; i++) heads &= strcmp(name, headless[i]) != 0;
  int m = 0;
  for (int k = 0; k < n; k++)
    if (heads || strcmp(small[k].name, "heads")) defs[m++] = small[k];
  return m;
}

#endif
