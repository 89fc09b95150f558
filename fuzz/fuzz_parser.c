// fuzz_parser.c: libFuzzer target for the whole front end.
//
// Each input is the text of a main file "fuzz.xf" (imports resolve against
// the standard library). It is loaded and parsed, its syntax tree is dumped
// (to /dev/null, as `xfc --emit=ast` would print it), it is elaborated with
// no -D overrides, and the resulting graph goes through what `xfc --stats`
// does with it: ir_verify, autodiff, ir_verify again, and the forward and
// backward statistics (stats_compute).
//
// What counts as a bug:
//   - any crash, sanitizer report (ASan, UBSan) or leak (LeakSanitizer): user
//     input must end in a graph or in a diagnostic, never anything else;
//   - a graph the elaborator returned that fails ir_verify, or on which
//     autodiff fails or produces a graph that fails ir_verify: abort();
//   - a run that exceeds the fuzzer's -timeout or -rss_limit_mb: inputs of a
//     few kilobytes must be rejected with an error before they get that big.
// A user error (diag_error / longjmp) is a normal outcome.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../frontend/frontend.h"
#include "../passes/passes.h"

#ifndef XF_STDLIB_DIR
#define XF_STDLIB_DIR "stdlib"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;  // diagnostics are discarded; opened once
  if (!devnull && !(devnull = fopen("/dev/null", "w"))) {
    perror("fuzz_parser: /dev/null");
    abort();
  }
  Arena arena = {0};
  jmp_buf on_error;
  Diag diag = {.arena = &arena, .out = devnull, .on_error = &on_error};
  // Everything below that must survive the longjmp lives in the arena or is
  // freed before the next possible error.
  if (setjmp(on_error) == 0) {
    SearchPath sp = {NULL, 0, XF_STDLIB_DIR};
    Program *prog = load_program_text(&diag, "fuzz.xf", (const char *)data, size, &sp);
    ast_dump(devnull, prog->modules[0]);
    Graph *g = elaborate(&diag, prog, NULL, 0);
    char msg[512];
    if (!ir_verify(g, msg, sizeof msg)) {
      fprintf(stderr, "fuzz_parser: IR verifier failed after elaboration: %s\n", msg);
      abort();
    }
    if (!autodiff(g, msg, sizeof msg)) {
      fprintf(stderr, "fuzz_parser: autodiff failed: %s\n", msg);
      abort();
    }
    if (!ir_verify(g, msg, sizeof msg)) {
      fprintf(stderr, "fuzz_parser: IR verifier failed after autodiff: %s\n", msg);
      abort();
    }
    Cost *incl = calloc((size_t)g->nscopes + 1, sizeof *incl);
    if (!incl) abort();
    stats_compute(g, g->t_max, false, incl);
    stats_compute(g, g->t_max, true, incl);
    free(incl);
  }
  arena_free(&arena);
  return 0;
}
