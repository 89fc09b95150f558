// xfrun.h: the xfrun subcommands. Each takes the arguments after "xfrun"
// (argv[0] is the subcommand's name) and returns the exit status.
#ifndef XFRUN_H
#define XFRUN_H

int xfrun_tokenize(int argc, char **argv);  // xfrun_tokenize.c
int xfrun_plot(int argc, char **argv);      // xfrun_plot.c
int xfrun_compare(int argc, char **argv);   // xfrun_compare.c
int xfrun_export(int argc, char **argv);    // xfrun_export.c

// "xfrun: error: " + the message + newline on stderr; returns 1 (the exit
// status). The subcommands' errors (xfrun_plot.c).
int xfrun_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
