// cli.h: the command-line conventions of xfc and every xfrun subcommand.
//
//   --name value and --name=value are the same; a flag (no value) refuses
//   --name=value; -x value and -xvalue for one-letter options; "--" ends the
//   options; the rest are positional arguments, in any order among options.
//   An unknown option or subcommand names the closest valid one.
//   Exit status: 0 done, 1 an error while working (a file, a model, a
//   device), 2 a usage error (an unknown or malformed option, a missing
//   argument): XF_EXIT_*.
#ifndef XF_CLI_H
#define XF_CLI_H

#include <stdbool.h>
#include <stdio.h>

enum { XF_EXIT_OK = 0, XF_EXIT_ERROR = 1, XF_EXIT_USAGE = 2 };

typedef struct {
  const char *name;  // without dashes: "steps" is --steps, "o" is -o
  bool value;        // takes a value
} CliOption;

typedef struct {
  const char *prog;  // for messages: "xfrun train"
  const CliOption *opts;
  int nopts;
  int argc;
  char **argv;
  int i;              // the next argv index to read
  bool positional;    // after "--": everything is positional
  const char *value;  // after cli_next: the option's value, or the positional argument
  const char *arg;    // after cli_next: the option as written ("--steps", "-o")
  char arg_buf[96];
} Cli;

enum { CLI_END = -1, CLI_ARG = -2, CLI_BAD = -3 };

// Starts reading argv[first, argc).
Cli cli_start(const char *prog, const CliOption *opts, int nopts, int argc, char **argv, int first);

// The next option: its index in opts (c->value its value or NULL), CLI_ARG
// (c->value the positional argument), CLI_END, or CLI_BAD after the usage
// error is printed (exit XF_EXIT_USAGE).
int cli_next(Cli *c);

// Prints "PROG: error: MESSAGE" and "(see PROG --help)" on stderr; returns
// XF_EXIT_USAGE.
__attribute__((format(printf, 2, 3))) int cli_usage_error(const char *prog, const char *fmt, ...);

// The closest of names[0, n) to word ("did you mean"), or NULL.
const char *cli_nearest(const char *word, const char *const *names, int n);

// The --version text of PROG: version, commit, build type, and the lines
// the caller adds (GEMM providers, CUDA).
void cli_version(FILE *f, const char *prog);

#endif
