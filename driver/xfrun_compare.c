// xfrun_compare.c: `xfrun compare A.xf|A.so B.xf|B.so ...`: trains every
// model on the same corpus, tokenizer, batches and budget, over K seeds,
// and writes per run a CSV log and a checkpoint, the curves (as xfrun plot)
// and a table of the results (Markdown and CSV) to one folder.
//
// Fair by construction: every run is `xfrun train` with the same options
// except the model and, per seed index k, the same seed; the windows of a
// step depend only on (corpus, tokenizer, seed, step), so run k of every
// model sees the same batches in the same order. The .xf inputs are compiled
// with the same -D values. The vocabularies must agree (one tokenizer).
//
// Layout of DIR: runs/<label>.so (compiled inputs), runs/<label>-seed<s>.csv
// (the log), .safetensors (checkpoint, saved every ~5 % of the budget),
// .done (the run's results, written when it finished), .seconds (time spent,
// for --seconds); curves.svg, table.md, table.csv. A run with a .done file is
// not redone; one with a checkpoint is resumed. Interrupted (SIGINT,
// SIGTERM), the current run saves and the same command continues.
//
// Table statistic (seed 001 Figs. 10-11): the median training loss over the
// last 10 % of steps (steps > 0.9 * final step); across seeds, each number is
// the mean, with the sample standard deviation after "±".
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "xf.h"
#include "xfrun.h"

enum { MAX_MODELS = 64, MAX_DEFS = 64, MAX_PASS = 64, MAX_SEEDS = 100 };

// every error names the subcommand; formats are literals
#define fail(...) xfrun_fail("compare: " __VA_ARGS__)
#define PROG "xfrun compare"
#define usage_error(...) cli_usage_error(PROG, __VA_ARGS__)

static void usage(FILE *f) {
  fputs("usage: xfrun compare MODEL.xf|MODEL.so ... (--steps N | --tokens N | --seconds S) [options]\n"
        "\n"
        "A model is a .xf file (compiled here), FILE.xf:NAME=VALUE,... (compiled with its own\n"
        "values too, labelled FILE-NAMEVALUE), or a compiled .so.\n"
        "Trains every model on the same corpus, tokenizer, batches (same seeds: the same windows\n"
        "in the same order) and budget, and writes to DIR the logs, checkpoints, curves.svg and\n"
        "table.md / table.csv: parameters, training ops per token, tokens/s, the median training\n"
        "loss over the last 10 % of steps, held-out loss and perplexity; over several seeds, the\n"
        "mean ± the standard deviation. Finished runs are not redone; the same command resumes an\n"
        "interrupted comparison.\n"
        "\n"
        "  -D NAME=VALUE      compile every .xf input with this value (repeatable)\n"
        "  --steps N          training steps per run\n"
        "  --tokens N         training tokens per run (steps = N / (batch x seq), rounded up)\n"
        "  --seq N            the same for every model (default: each model's own context)\n"
        "  --seconds S        training time per run\n"
        "  --seeds K          seeds 1..K per model (default 1)\n"
        "  -o DIR             output folder (default compare-out)\n"
        "  --xfc PATH         the compiler (default: xfc beside xfrun, else on PATH)\n"
        "  --data, --tokenizer, --heldout, --cache, --batch, --lr, --weight-decay,\n"
        "  --threads, --device, --eval-batches, --lr-schedule, --warmup, --min-lr, --cooldown,\n"
        "  --clip, --accum, --eval-every (held-out losses in the logs and curves.svg),\n"
        "  --weight-decay-on: as for xfrun train, the same for every run\n"
        "  -h, --help         this help\n"
        "\n"
        "Options with a value take it as --opt value or --opt=value (-o DIR or -oDIR).\n"
        "Exit status: 0 done, 1 an error while working (a model that does not compile, a run\n"
        "that fails), 2 a usage error, 128 + the signal after SIGINT or SIGTERM.\n",
        f);
}

// Paths: the output folder is at most 3000 bytes and labels 255, so every
// path built here fits (pathf truncates nothing it is given).
typedef char Path[4096];

__attribute__((format(printf, 2, 3))) static void pathf(char *buf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(Path), fmt, ap);
  va_end(ap);
}

enum { MAX_OWN = 8 };

typedef struct {
  const char *input;   // as given
  Path file;           // the file: input up to a ':' that starts NAME=VALUE,...
  char own[MAX_OWN][128];  // this model's own -D values (after the ':'), overriding the common ones
  int nown;
  char label[256];
  Path so;
  bool compiled;       // from .xf
  double ops;          // training ops per token (xfc --stats), NaN if unknown
  int64_t params, vocab, context;
} Model;

typedef struct {
  double train, heldout, tps;  // median train loss of the last 10 %, held-out loss, tokens/s
  int64_t steps;
  char data[32];               // the checkpoint's data key
} Result;

static volatile sig_atomic_t g_signal;
static volatile pid_t g_child;

static void on_signal(int sig) {
  g_signal = sig;
  if (g_child > 0) kill(g_child, sig);
}

// Runs argv (stdout to out_path unless NULL, stderr through unless
// err_path), in its own process group so that a terminal's signal reaches
// it once, through us. Returns the exit status, 128 + signal if killed, -1
// if it could not start.
// (batches: the run's XF_TEST_BATCHES file, or NULL.)
static int run(char *const argv[], const char *out_path, const char *err_path, const char *batches) {
  fflush(stdout), fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
    if (batches) setenv("XF_TEST_BATCHES", batches, 1);
    if (out_path) {
      int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, 1) < 0) _exit(126);
      close(fd);
    }
    if (err_path) {
      int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, 2) < 0) _exit(126);
      close(fd);
    }
    execvp(argv[0], argv);
    fprintf(stderr, "xfrun: error: compare: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  g_child = pid;
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return g_child = 0, -1;
  g_child = 0;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp(const char *path) {
  char err[256];
  size_t len;
  return xf_read_file(path, &len, err, sizeof err);
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

// The directory of this executable.
static void self_dir(char *buf, size_t n) {
  ssize_t k = readlink("/proc/self/exe", buf, n - 1);
  if (k <= 0) {
    snprintf(buf, n, ".");
    return;
  }
  buf[k] = 0;
  char *slash = strrchr(buf, '/');
  if (slash) *slash = 0;
}

// A label from the file name: its basename without .xf / .so, then its own
// values as -NAMEVALUE ("transformer.xf:heads=1": transformer-heads1), made
// unique.
static void make_label(Model *ms, int i) {
  const char *base = strrchr(ms[i].file, '/');
  base = base ? base + 1 : ms[i].file;
  char stem[200];
  snprintf(stem, sizeof stem, "%.80s", base);
  char *dot = strrchr(stem, '.');
  if (dot && (!strcmp(dot, ".xf") || !strcmp(dot, ".so"))) *dot = 0;
  for (int k = 0; k < ms[i].nown; k++) {
    size_t at = strlen(stem);
    if (at + 2 < sizeof stem) stem[at++] = '-', stem[at] = 0;
    for (const char *c = ms[i].own[k]; *c && at + 1 < sizeof stem; c++)
      if (*c != '=') stem[at++] = *c, stem[at] = 0;
  }
  for (char *p = stem; *p; p++)
    if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
          (*p >= 'A' && *p <= 'Z')))
      *p = '_';
  snprintf(ms[i].label, sizeof ms[i].label, "%s", stem);
  for (int n = 2;; n++) {
    bool taken = false;
    for (int j = 0; j < i; j++) taken = taken || !strcmp(ms[j].label, ms[i].label);
    if (!taken) break;
    snprintf(ms[i].label, sizeof ms[i].label, "%s-%d", stem, n);
  }
}

// The first line of a file that says "error", else its first line.
static void first_error(const char *path, char *out, size_t n) {
  char *text = slurp(path);
  out[0] = 0;
  if (!text) return;
  char *line = strstr(text, "error");
  if (line) {
    while (line > text && line[-1] != '\n') line--;
  } else {
    line = text;
  }
  size_t len = strcspn(line, "\n");
  snprintf(out, n, "%.*s", (int)len, line);
  free(text);
}

// The value after `key` in a text, as a double (NaN if absent).
static double find_number(const char *text, const char *key) {
  const char *p = text ? strstr(text, key) : NULL;
  return p ? strtod(p + strlen(key), NULL) : NAN;
}

// A training log: rows (step, loss, tokens/s), later rows of a resumed run
// replacing the rows from their step on (as xfrun plot).
typedef struct {
  int64_t n, cap;
  int64_t *step;
  double *loss, *tps;
} Log;

static bool read_log(const char *path, Log *l) {
  memset(l, 0, sizeof *l);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    long long s;
    double loss, tps;
    if (sscanf(line, "%lld,%lf,%lf", &s, &loss, &tps) != 3) continue;
    while (l->n > 0 && l->step[l->n - 1] >= s) l->n--;
    if (l->n == l->cap) {
      l->cap = l->cap ? 2 * l->cap : 1024;
      l->step = realloc(l->step, sizeof *l->step * (size_t)l->cap);
      l->loss = realloc(l->loss, sizeof *l->loss * (size_t)l->cap);
      l->tps = realloc(l->tps, sizeof *l->tps * (size_t)l->cap);
      if (!l->step || !l->loss || !l->tps) {
        fclose(f);
        return false;
      }
    }
    l->step[l->n] = s, l->loss[l->n] = loss, l->tps[l->n] = tps, l->n++;
  }
  fclose(f);
  return l->n > 0;
}

static void free_log(Log *l) { free(l->step), free(l->loss), free(l->tps); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

// The median loss of the steps after 0.9 * the last step.
static double tail_median(const Log *l) {
  double cut = 0.9 * (double)l->step[l->n - 1], *v = malloc(sizeof *v * (size_t)l->n);
  int64_t k = 0;
  for (int64_t i = 0; v && i < l->n; i++)
    if ((double)l->step[i] > cut) v[k++] = l->loss[i];
  double med = NAN;
  if (k > 0) {
    qsort(v, (size_t)k, sizeof *v, cmp_double);
    med = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
  }
  free(v);
  return med;
}

static void mean_sd(const double *x, int n, double *mean, double *sd) {
  double s = 0, q = 0;
  for (int i = 0; i < n; i++) s += x[i];
  *mean = s / n;
  for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
  *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

static void put_stat(FILE *f, const double *x, int n, const char *fmt) {
  double m, sd;
  mean_sd(x, n, &m, &sd);
  fprintf(f, fmt, m);
  if (n > 1) fprintf(f, " ± "), fprintf(f, fmt, sd);
}

static bool read_result(const char *path, Result *r) {
  char *t = slurp(path);
  if (!t) return false;
  r->train = find_number(t, "train_median_last10=");
  r->heldout = find_number(t, "heldout_loss=");
  r->tps = find_number(t, "tokens_per_s=");
  r->steps = (int64_t)find_number(t, "steps=");
  const char *d = strstr(t, "data=");
  snprintf(r->data, sizeof r->data, "%.16s", d ? d + 5 : "?");
  free(t);
  return isfinite(r->heldout);
}

// The options of xfrun train given to every run, as "--name" "value".
static const char *const passed[] = {"--data",    "--tokenizer",     "--heldout", "--cache",      "--batch",
                                     "--seq",     "--lr",            "--weight-decay", "--threads", "--device",
                                     "--eval-batches", "--lr-schedule", "--warmup", "--min-lr",   "--cooldown",
                                     "--clip",    "--accum",         "--eval-every", "--weight-decay-on"};
// compare's own options; opts[C_OWN + p] is passed[p]
enum { C_D, C_O, C_XFC, C_STEPS, C_TOKENS, C_SEEDS, C_SECONDS, C_H, C_HELP, C_OWN };
enum { NPASSED = sizeof passed / sizeof *passed };

// An integer in [lo, hi], the whole of s.
static bool parse_int(const char *s, long long lo, long long hi, int64_t *v) {
  char *end;
  errno = 0;
  long long n = strtoll(s, &end, 10);
  if (!*s || *end || errno || n < lo || n > hi) return false;
  *v = n;
  return true;
}

// A model argument: FILE, or FILE.xf:NAME=VALUE,... (its own -D values).
static int add_model(Model *m, const char *a) {
  memset(m, 0, sizeof *m);
  m->input = a;
  pathf(m->file, "%s", a);
  char *colon = strrchr(m->file, ':');
  if (!colon || !strchr(colon, '=')) return -1;
  *colon = 0;
  size_t len = strlen(m->file);
  if (!(len > 3 && !strcmp(m->file + len - 3, ".xf")))
    return usage_error("%s: only a .xf input takes its own NAME=VALUE", a);
  for (char *t = strtok(colon + 1, ","); t; t = strtok(NULL, ",")) {
    if (m->nown == MAX_OWN || !strchr(t, '=') || strlen(t) >= sizeof m->own[0])
      return usage_error("%s: expected FILE.xf:NAME=VALUE[,NAME=VALUE...] (at most %d)", a, MAX_OWN);
    snprintf(m->own[m->nown++], sizeof m->own[0], "%s", t);
  }
  return -1;
}

// A comparison: its options, its models and where it writes.
typedef struct {
  Model ms[MAX_MODELS];
  int nm, ndefs, npass;
  const char *defs[MAX_DEFS], *pass[MAX_PASS], *out, *xfc;
  int64_t steps, tokens, seeds, batch, seq, accum;
  double seconds;
  Path dir, self, xfc_buf, runs;
  bool same_ctx;  // every model at one context
} Compare;

#define UNPACK(C)                                                                                                  \
  Model *ms = (C)->ms;                                                                                             \
  int nm = (C)->nm, ndefs = (C)->ndefs, npass = (C)->npass;                                                        \
  const char **defs = (C)->defs, **pass = (C)->pass, *out = (C)->out;                                              \
  int64_t steps = (C)->steps, tokens = (C)->tokens, seeds = (C)->seeds, batch = (C)->batch, seq = (C)->seq,        \
          accum = (C)->accum;                                                                                      \
  double seconds = (C)->seconds;                                                                                   \
  char *runs = (C)->runs;                                                                                          \
  (void)ms, (void)nm, (void)ndefs, (void)npass, (void)defs, (void)pass, (void)out, (void)steps, (void)tokens,      \
      (void)seeds, (void)batch, (void)seq, (void)accum, (void)seconds, (void)runs

// The options and models of argv into C; -1, or the exit status after a message.
static int compare_args(Compare *C, int argc, char **argv) {
  Model *ms = C->ms;
  int nm = 0, ndefs = 0, npass = 0;
  const char *defs[MAX_DEFS], *pass[MAX_PASS], *out = "compare-out", *xfc = NULL;
  int64_t steps = 0, tokens = 0, seeds = 1, batch = 8, seq = 0, accum = 1;
  double seconds = 0;
  CliOption opts[C_OWN + NPASSED] = {
      [C_D] = {"D", true},         [C_O] = {"o", true},         [C_XFC] = {"xfc", true},
      [C_STEPS] = {"steps", true}, [C_TOKENS] = {"tokens", true}, [C_SEEDS] = {"seeds", true},
      [C_SECONDS] = {"seconds", true}, [C_H] = {"h", false},    [C_HELP] = {"help", false},
  };
  for (int p = 0; p < NPASSED; p++) opts[C_OWN + p] = (CliOption){passed[p] + 2, true};
  Cli c = cli_start(PROG, opts, C_OWN + NPASSED, argc, argv, 1);
  for (int k; (k = cli_next(&c)) != CLI_END;) {
    const char *v = c.value, *a = c.arg;
    if (k == CLI_BAD) return XF_EXIT_USAGE;
    if (k == C_H || k == C_HELP) return usage(stdout), XF_EXIT_OK;
    if (k == CLI_ARG) {
      if (nm == MAX_MODELS) return usage_error("more than %d models", MAX_MODELS);
      int st = add_model(&ms[nm++], v);
      if (st >= 0) return st;
    } else if (k == C_D) {
      if (ndefs == MAX_DEFS) return usage_error("more than %d -D values", MAX_DEFS);
      if (!strchr(v, '=') || *v == '=') return usage_error("-D %s: expected NAME=VALUE", v);
      defs[ndefs++] = v;
    } else if (k == C_O) {
      if (strlen(v) > 3000) return usage_error("-o %.40s...: too long a path", v);
      out = v;
    } else if (k == C_XFC) xfc = v;
    else if (k == C_STEPS || k == C_TOKENS || k == C_SEEDS) {
      int64_t *dst = k == C_STEPS ? &steps : k == C_TOKENS ? &tokens : &seeds;
      long long hi = k == C_TOKENS ? (long long)INT32_MAX << 20 : k == C_SEEDS ? MAX_SEEDS : INT32_MAX;
      if (!parse_int(v, 1, hi, dst)) return usage_error("%s %s: expected a whole number from 1 to %lld", a, v, hi);
    } else if (k == C_SECONDS) {
      char *end;
      seconds = strtod(v, &end);
      if (*end || end == v || !(seconds > 0 && seconds < 1e9))
        return usage_error("--seconds %s: expected a number of seconds above 0", v);
    } else {
      const char *name = passed[k - C_OWN];
      if (npass + 2 > MAX_PASS) return usage_error("more than %d options for xfrun train", MAX_PASS / 2);
      pass[npass++] = name, pass[npass++] = v;
      // compare's own arithmetic needs these three: they must be valid here
      bool ok = !strcmp(name, "--batch") ? parse_int(v, 1, INT32_MAX, &batch)
                : !strcmp(name, "--accum") ? parse_int(v, 1, 65536, &accum)
                : !strcmp(name, "--seq")   ? parse_int(v, 1, INT32_MAX, &seq)
                                           : true;
      if (!ok) return usage_error("%s %s: not a valid value", name, v);
    }
  }
  if (nm == 0) return usage_error("no model (usage: xfrun compare MODEL.xf|MODEL.so ... --steps N [options])");
  if ((steps > 0) + (tokens > 0) + (seconds > 0) != 1) {
    char got[64] = "";
    const char *given[3] = {steps ? "--steps" : NULL, tokens ? "--tokens" : NULL, seconds > 0 ? "--seconds" : NULL};
    for (int g = 0; g < 3; g++)
      if (given[g]) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", *got ? " and " : " (got ", given[g]);
    return usage_error("give one budget: --steps N, --tokens N or --seconds S%s%s", got, *got ? ")" : "");
  }
  C->nm = nm, C->ndefs = ndefs, C->npass = npass, C->out = out, C->xfc = xfc;
  memcpy(C->defs, defs, sizeof defs), memcpy(C->pass, pass, sizeof pass);
  C->steps = steps, C->tokens = tokens, C->seeds = seeds, C->batch = batch, C->seq = seq, C->accum = accum;
  C->seconds = seconds;
  return -1;
}

// The runs folder, every model compiled (a .xf) and its descriptor read:
// vocabulary, context, parameters; the checks across models. -1, or the
// exit status after a message.
static int compare_models(Compare *C) {
  UNPACK(C);
  const char *xfc = C->xfc;
  char *dir = C->dir, *self = C->self, *xfc_buf = C->xfc_buf;
  self_dir(dir, sizeof C->dir);
  pathf(self, "%s/xfrun", dir);
  if (!xfc) {
    pathf(xfc_buf, "%s/xfc", dir);
    xfc = access(xfc_buf, X_OK) == 0 ? xfc_buf : "xfc";
  }
  pathf(runs, "%s/runs", out);
  for (char *p = runs + 1; *p; p++) {  // mkdir -p
    if (*p != '/') continue;
    *p = 0;
    bool bad = mkdir(runs, 0755) != 0 && errno != EEXIST;
    *p = '/';
    if (bad) return fail("cannot create %.*s: %s", (int)(p - runs), runs, strerror(errno));
  }
  if (mkdir(runs, 0755) != 0 && errno != EEXIST) return fail("cannot create %s: %s", runs, strerror(errno));

  // compile, and read each model's descriptor: vocabulary, context, parameters
  bool used_def[MAX_DEFS] = {false}, any_xf = false;
  static char notes[MAX_DEFS * 4][300];  // printed once every model compiled and fits
  int nnotes = 0;
  for (int i = 0; i < nm; i++) {
    Model *m = &ms[i];
    make_label(ms, i);
    m->ops = NAN;
    size_t len = strlen(m->file);
    if (!exists(m->file)) return fail("%s: no such file", m->file);
    if (len > 3 && !strcmp(m->file + len - 3, ".xf")) {
      Path errp, statp;
      char msg[1024];
      pathf(m->so, "%s/%s.so", runs, m->label);
      pathf(errp, "%s/%s.xfc.log", runs, m->label);
      pathf(statp, "%s/%s.stats", runs, m->label);
      // every -D the model declares; one it lacks is left out for it (and
      // must be declared by some model)
      bool skip[MAX_DEFS] = {false};
      char *args[2 * MAX_DEFS + 2 * MAX_OWN + 9];
      for (;;) {
        int n = 0;
        args[n++] = (char *)xfc, args[n++] = m->file;
        for (int d = 0; d < ndefs; d++) {
          bool mine = false;  // overridden by the model's own value
          size_t k = strcspn(defs[d], "=");
          for (int o = 0; o < m->nown; o++) mine = mine || (!strncmp(m->own[o], defs[d], k) && m->own[o][k] == '=');
          if (!skip[d] && !mine) args[n++] = "-D", args[n++] = (char *)defs[d];
        }
        for (int o = 0; o < m->nown; o++) args[n++] = "-D", args[n++] = m->own[o];
        args[n++] = "--stats", args[n++] = "-o", args[n++] = m->so, args[n] = NULL;
        int rc = run(args, statp, errp, NULL);  // the model.so, and its statistics on stdout
        if (rc == 0) break;
        first_error(errp, msg, sizeof msg);
        const char *q = strstr(msg, "has no config value '");
        int lacked = -1;
        for (int d = 0; q && d < ndefs; d++) {
          size_t k = strcspn(defs[d], "=");
          if (!skip[d] && !strncmp(q + 21, defs[d], k) && q[21 + k] == '\'') lacked = d;
        }
        if (lacked < 0)
          return fail("%s does not compile: %s", m->input, rc < 0 || rc == 127 ? "cannot run xfc" : msg);
        skip[lacked] = true;
        if (nnotes < MAX_DEFS * 4)
          snprintf(notes[nnotes++], sizeof notes[0], "xfrun compare: %s has no config value '%.*s': compiled without it",
                   m->input, (int)strcspn(defs[lacked], "="), defs[lacked]);
      }
      for (int d = 0; d < ndefs; d++) used_def[d] = used_def[d] || !skip[d];
      char *st = slurp(statp);
      m->ops = find_number(st, "training (forward + backward) ops per token: ");
      free(st);
      m->compiled = true, any_xf = true;
    } else {
      pathf(m->so, "%s", m->file);
    }
    char err[1024];
    XfOptions o = {.batch = 1, .seq = 1, .threads = 1, .device = XF_DEVICE_CPU};
    XfRuntime *rt = xf_load(m->so, &o, err, sizeof err);
    if (!rt) return fail("%s", err);
    m->vocab = xf_vocab(rt), m->context = xf_model(rt)->context;
    for (int p = 0; p < xf_nparams(rt); p++) {
      int64_t dims[6], n = 1;
      int r = xf_param_shape(rt, p, dims);
      for (int d = 0; d < r; d++) n *= dims[d];
      m->params += n;
    }
    xf_close(rt);
  }
  for (int d = 0; any_xf && d < ndefs; d++)
    if (!used_def[d]) return fail("-D %s: no model has a config value of that name", defs[d]);
  for (int i = 1; i < nm; i++)
    if (ms[i].vocab != ms[0].vocab)
      return fail("the models have different vocabularies (%s %lld, %s %lld): one tokenizer serves them all; give "
                  "them the same -D vocab", ms[0].input, (long long)ms[0].vocab, ms[i].input, (long long)ms[i].vocab);
  for (int i = 0; i < nnotes; i++) fprintf(stderr, "%s\n", notes[i]);
  // --seq: the same for every model; else each model at its own context
  for (int i = 0; seq > 0 && i < nm; i++)
    if (seq > ms[i].context)
      return fail("--seq %lld is beyond the context of %s (%lld)", (long long)seq, ms[i].input, (long long)ms[i].context);
  bool same_ctx = true;
  for (int i = 1; i < nm; i++) same_ctx = same_ctx && ms[i].context == ms[0].context;
  C->xfc = xfc, C->same_ctx = same_ctx;
  return -1;
}

// Every run not done before, seed-major (an interrupted comparison has
// every model at the lower seeds), its result in res. 0, or the exit status.
static int compare_runs(Compare *C, Result *res) {
  UNPACK(C);
  char *self = C->self;
  // the runs: seed-major, so that an interrupted comparison has every model at the lower seeds
  int status = 0;
  for (int64_t k = 1; k <= seeds && !status; k++) {
    for (int i = 0; i < nm && !status; i++) {
      Path base, csv, ck, done, secs_path, outp;
      char secbuf[64], stepbuf[32], seedbuf[32], evbuf[32];
      pathf(base, "%s/%s-seed%lld", runs, ms[i].label, (long long)k);
      pathf(csv, "%s.csv", base), pathf(ck, "%s.safetensors", base);
      pathf(done, "%s.done", base), pathf(secs_path, "%s.seconds", base);
      pathf(outp, "%s.out", base);
      Result *r = &res[(k - 1) * nm + i];
      if (read_result(done, r)) {
        fprintf(stderr, "xfrun compare: %s seed %lld: done before\n", ms[i].label, (long long)k);
        continue;
      }
      double used = 0;
      char *u = slurp(secs_path);
      if (u) used = strtod(u, NULL), free(u);
      char *args[MAX_PASS + 32];
      int n = 0;
      args[n++] = self, args[n++] = "train", args[n++] = ms[i].so;
      for (int p = 0; p < npass; p++) args[n++] = (char *)pass[p];
      int64_t mseq = seq ? seq : ms[i].context, msteps = tokens ? (tokens + batch * accum * mseq - 1) / (batch * accum * mseq) : steps;
      int64_t run_steps = seconds > 0 ? INT32_MAX : msteps, save_every = seconds > 0 ? 200 : msteps > 20 ? msteps / 20 : 1;
      snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)run_steps);
      snprintf(seedbuf, sizeof seedbuf, "%lld", (long long)k);
      snprintf(evbuf, sizeof evbuf, "%lld", (long long)save_every);
      args[n++] = "--steps", args[n++] = stepbuf, args[n++] = "--seed", args[n++] = seedbuf;
      args[n++] = "--log", args[n++] = csv, args[n++] = "--save", args[n++] = ck, args[n++] = "--save-every",
      args[n++] = evbuf;
      if (exists(ck)) args[n++] = "--resume", args[n++] = ck;
      if (seconds > 0) {
        snprintf(secbuf, sizeof secbuf, "%.3f", seconds - used > 0.001 ? seconds - used : 0.001);
        args[n++] = "--time-limit", args[n++] = secbuf;
      }
      args[n] = NULL;
      fprintf(stderr, "xfrun compare: %s seed %lld (%d of %lld runs)%s\n", ms[i].label, (long long)k,
              (int)((k - 1) * nm + i + 1), (long long)(nm * seeds), exists(ck) ? ": resuming" : "");
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      // test hook: with XF_TEST_BATCHES set, each run records its batches in <run>.batches
      Path bpath;
      pathf(bpath, "%s.batches", base);
      int rc = run(args, outp, NULL, getenv("XF_TEST_BATCHES") ? bpath : NULL);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      used += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
      char num[64];
      snprintf(num, sizeof num, "%.3f\n", used);
      XfSpan sp = {num, strlen(num)};
      char err[512];
      if (seconds > 0 && !xf_write_atomic(secs_path, &sp, 1, err, sizeof err)) return fail("%s", err);
      if (rc == 130 || rc == 143 || g_signal) {
        fprintf(stderr, "xfrun compare: interrupted; run the same command again to continue (finished runs are kept)\n");
        status = rc ? rc : 128 + g_signal;
        break;
      }
      if (rc != 0) {
        status = fail("training %s (seed %lld) failed with exit status %d; its log is %s", ms[i].label, (long long)k,
                      rc, csv);
        break;
      }
      // the results: held-out loss from xfrun's last line, the rest from the log
      char *text = slurp(outp);
      Log l;
      bool ok = text && read_log(csv, &l);
      if (!ok) {
        free(text);
        status = fail("run %s seed %lld left no log or result", ms[i].label, (long long)k);
        break;
      }
      r->heldout = find_number(text, "held-out loss ");
      r->train = tail_median(&l);
      r->tps = l.tps[l.n - 1];
      r->steps = l.step[l.n - 1];
      free(text);
      free_log(&l);
      XfCheckpoint *c = xf_checkpoint_open(ck, err, sizeof err);
      const char *key = c ? xf_checkpoint_meta(c, "data") : NULL;
      snprintf(r->data, sizeof r->data, "%s", key ? key : "?");
      xf_checkpoint_close(c);
      char line[512];
      snprintf(line, sizeof line, "steps=%lld\ntrain_median_last10=%.9g\nheldout_loss=%.9g\ntokens_per_s=%.3f\ndata=%s\n",
               (long long)r->steps, r->train, r->heldout, r->tps, r->data);
      XfSpan dsp = {line, strlen(line)};
      if (!xf_write_atomic(done, &dsp, 1, err, sizeof err)) {
        status = fail("%s", err);
        break;
      }
      fprintf(stderr, "xfrun compare: %s seed %lld: %lld steps, median training loss (last 10 %%) %.4f, held-out %.4f\n",
              ms[i].label, (long long)k, (long long)r->steps, r->train, r->heldout);
    }
  }
  if (status) return status;
  for (int i = 1; i < nm * seeds; i++)
    if (strcmp(res[i].data, res[0].data))
      fprintf(stderr, "xfrun: warning: compare: runs saw different data (keys %s and %s)\n", res[0].data, res[i].data);
  return 0;
}

// The curves (curves.svg) and the table (table.md, table.csv) of the runs'
// results. 0, or the exit status after a message.
static int compare_report(Compare *C, const Result *res) {
  UNPACK(C);
  bool same_ctx = C->same_ctx;
  // the curves: every run's log
  {
    char **pargs = calloc((size_t)(nm * seeds) + 5, sizeof *pargs);
    Path *paths = calloc((size_t)(nm * seeds), sizeof *paths), svg;
    if (!pargs || !paths) return free(pargs), free(paths), fail("out of memory");
    pathf(svg, "%s/curves.svg", out);
    int n = 0, np = 0;
    pargs[n++] = "plot", pargs[n++] = "-o", pargs[n++] = svg, pargs[n++] = "--";  // the logs may start with '-'
    for (int64_t k = 1; k <= seeds; k++)
      for (int i = 0; i < nm; i++, np++) {
        pathf(paths[np], "%s/%s-seed%lld.csv", runs, ms[i].label, (long long)k);
        pargs[n++] = paths[np];
      }
    int rc = xfrun_plot(n, pargs);
    free(pargs), free(paths);
    if (rc) return fail("cannot draw %s", svg);
  }

  // the table
  char *md = NULL, *csvt = NULL;
  size_t mdlen = 0, csvlen = 0;
  FILE *fm = open_memstream(&md, &mdlen), *fc = open_memstream(&csvt, &csvlen);
  if (!fm || !fc) return fail("out of memory");
  char budget[96];
  if (seconds > 0) snprintf(budget, sizeof budget, "%g s of training", seconds);
  else if (tokens > 0) snprintf(budget, sizeof budget, "%lld training tokens", (long long)tokens);
  else snprintf(budget, sizeof budget, "%lld steps", (long long)steps);
  char seqs[64];
  if (seq || same_ctx) snprintf(seqs, sizeof seqs, "seq %lld", (long long)(seq ? seq : ms[0].context));
  else snprintf(seqs, sizeof seqs, "seq: each model's context");
  fprintf(fm, "| model | parameters | training ops/token | tokens/s | median training loss (last 10 %%) | held-out loss | perplexity |\n");
  fprintf(fm, "|---|---:|---:|---:|---:|---:|---:|\n");
  fprintf(fc, "model,parameters,train_ops_per_token,seeds,steps,tokens_per_s,train_loss_median_last10,train_loss_sd,"
              "heldout_loss,heldout_loss_sd,perplexity\n");
  for (int i = 0; i < nm; i++) {
    double tr[MAX_SEEDS], he[MAX_SEEDS], tp[MAX_SEEDS], pp[MAX_SEEDS], st[MAX_SEEDS];
    for (int64_t k = 0; k < seeds; k++) {
      const Result *r = &res[k * nm + i];
      tr[k] = r->train, he[k] = r->heldout, tp[k] = r->tps, pp[k] = exp(r->heldout), st[k] = (double)r->steps;
    }
    int K = (int)seeds;
    fprintf(fm, "| %s | %lld | ", ms[i].label, (long long)ms[i].params);
    if (isfinite(ms[i].ops)) fprintf(fm, "%.3g", ms[i].ops);
    else fprintf(fm, "n/a");
    fprintf(fm, " | ");
    put_stat(fm, tp, K, "%.0f");
    fprintf(fm, " | ");
    put_stat(fm, tr, K, "%.4f");
    fprintf(fm, " | ");
    put_stat(fm, he, K, "%.4f");
    fprintf(fm, " | ");
    put_stat(fm, pp, K, "%.2f");
    fprintf(fm, " |\n");
    double mt, sdt, mh, sdh, ms_, sds, mtp, sdtp, mpp, sdpp;
    mean_sd(tr, K, &mt, &sdt), mean_sd(he, K, &mh, &sdh), mean_sd(st, K, &ms_, &sds), mean_sd(tp, K, &mtp, &sdtp);
    mean_sd(pp, K, &mpp, &sdpp);
    fprintf(fc, "%s,%lld,%.6g,%d,%.0f,%.1f,%.6f,%.6f,%.6f,%.6f,%.4f\n", ms[i].label, (long long)ms[i].params, ms[i].ops, K,
            ms_, mtp, mt, sdt, mh, sdh, mpp);
  }
  fprintf(fm, "\n%s per run, seed%s 1%s%.0lld, batch %lld, %s; data key %s.%s Curves: curves.svg.\n",
          budget, seeds == 1 ? "" : "s", seeds == 1 ? "" : "..", seeds == 1 ? 0 : (long long)seeds, (long long)batch,
          seqs, res[0].data, seeds == 1 ? "" : " Mean ± standard deviation over the seeds.");
  fclose(fm), fclose(fc);
  Path path;
  char err[512];
  XfSpan a = {md, mdlen}, b = {csvt, csvlen};
  pathf(path, "%s/table.md", out);
  bool ok = xf_write_atomic(path, &a, 1, err, sizeof err);
  pathf(path, "%s/table.csv", out);
  ok = ok && xf_write_atomic(path, &b, 1, err, sizeof err);
  if (ok) fwrite(md, 1, mdlen, stdout);
  free(md), free(csvt);
  if (!ok) return fail("%s", err);
  fprintf(stderr, "xfrun compare: wrote %s/table.md, table.csv, curves.svg and runs/\n", out);
  return 0;
}

int xfrun_compare(int argc, char **argv) {
  Compare *C = calloc(1, sizeof *C);
  if (!C) return fail("out of memory");
  int status = compare_args(C, argc, argv);
  if (status < 0) status = compare_models(C);
  Result *res = NULL;
  if (status < 0) {
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL), sigaction(SIGTERM, &sa, NULL);
    res = calloc((size_t)(C->nm * C->seeds), sizeof *res);
    status = !res ? fail("out of memory") : compare_runs(C, res);
    if (!status) status = compare_report(C, res);
  }
  free(res), free(C);
  return status;
}
