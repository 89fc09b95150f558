// xfrun: trains, evaluates and samples a compiled model.so with the xf
// runtime; its options are xfrun_args.c's, the other subcommands are in their own files.
//
//   xfrun train  model.so [--data FILES...] [--steps N] [--save FILE] [--resume FILE] ...
//   xfrun eval   model.so [--checkpoint FILE] [--data FILES...] ...
//   xfrun sample model.so --checkpoint FILE [--prompt TEXT] [--max-tokens N] ...
//
// Text becomes tokens through a byte-level BPE tokenizer: --tokenizer FILE
// (Hugging Face tokenizer.json), --tokenizer bytes (one byte, one token), the
// one a checkpoint carries, or by default one with the model's vocabulary
// trained on the corpus and cached. The default corpus is the bundled
// children's books.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gemm.h"
#include "rng.h"
#include "sample.h"
#include "xfrun_dist.h"
#include "tokenizer.h"
#include "xf.h"
#include "xfrun.h"
#include "xfrun_args.h"
#include "cli.h"


// The processes of a data-parallel run (size 1: this one alone). Rank 0
// alone writes the log, the progress, checkpoints and messages: the others
// meet the same errors.
static Dist g_dist = {.rank = 0, .size = 1};

// SIGINT / SIGTERM: the first one asks the run to stop after the current
// step (train saves its checkpoint first, sample ends its line); a second
// one ends the process at once, leaving the files as they were.
//
// No thread that computes ever runs a signal handler: the signals are
// blocked in the main thread before any other thread exists (the pool's
// workers and the GEMM library's inherit the mask), and one thread of their
// own takes them with sigwait. A handler interrupting oneDNN's JIT GEMM
// kernels corrupts the heap (oneDNN 2.6: "corrupted size vs. prev_size",
// reproduced with dnnl_sgemm alone).
static _Atomic int g_stop;  // the signal number, 0: none

// The first stop signal sets g_stop; the second ends the process with the
// signal's default action. Called by the signal thread (sigwait) and, as the
// signals' handler, on any thread that has them unblocked (one a library
// started before they were blocked): async-signal-safe.
static void on_stop(int sig) {
  int none = 0;
  if (atomic_compare_exchange_strong(&g_stop, &none, sig)) return;
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  signal(sig, SIG_DFL);
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  raise(sig);
  _exit(128 + sig);
}

static void *signal_thread(void *arg) {
  const sigset_t *set = arg;
  for (;;) {
    int sig;
    if (sigwait(set, &sig) == 0) on_stop(sig);
  }
  return NULL;
}

static sigset_t g_stop_set;             // SIGINT, SIGTERM
static struct sigaction g_stop_prior[2];  // their actions before block_stop_signals

// Blocks the stop signals in this thread, before any other starts (MPI's
// and the libraries' threads inherit the mask), and makes on_stop their
// handler: a signal ignored when the process started (a background job of a
// shell) would not reach sigwait.
static void block_stop_signals(void) {
  sigemptyset(&g_stop_set);
  sigaddset(&g_stop_set, SIGINT);
  sigaddset(&g_stop_set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &g_stop_set, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_stop_prior[0]);
  sigaction(SIGTERM, &sa, &g_stop_prior[1]);
}

// The thread that takes them. With `take` false (under an MPI launcher,
// which handles the signals) they get back the actions they had and are
// unblocked; if the thread cannot start, on_stop stays their handler.
static void catch_stop_signals(bool take) {
  pthread_t t;
  if (!take) sigaction(SIGINT, &g_stop_prior[0], NULL), sigaction(SIGTERM, &g_stop_prior[1], NULL);
  if (!take || pthread_create(&t, NULL, signal_thread, &g_stop_set) != 0) {
    pthread_sigmask(SIG_UNBLOCK, &g_stop_set, NULL);
    return;
  }
  pthread_detach(t);
}

__attribute__((format(printf, 1, 2))) static int die(const char *fmt, ...) {
  if (g_dist.rank != 0) return 1;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "xfrun: error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 1;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The learning rate of step s (1-based) of the schedule of --help.
static double lr_at(const Args *a, int64_t s) {
  if (a->warmup > 0 && s <= a->warmup) return a->lr * (double)s / (double)a->warmup;
  double span = (double)(a->steps - a->warmup), p = span > 0 ? (double)(s - a->warmup) / span : 1;
  p = p < 0 ? 0 : p > 1 ? 1 : p;
  switch (a->schedule) {
  case LR_COSINE: return a->min_lr + (a->lr - a->min_lr) * 0.5 * (1 + cos(3.14159265358979323846 * p));
  case LR_LINEAR: return a->lr + (a->min_lr - a->lr) * p;
  case LR_WSD: {
    int64_t cool = a->cooldown > 0 ? a->cooldown : a->steps / 5, from = a->steps - cool;  // decay over (from, steps]
    if (s <= from || cool <= 0) return a->lr;
    double q = (double)(s - from) / (double)cool;
    return a->lr + (a->min_lr - a->lr) * (q > 1 ? 1 : q);
  }
  default: return a->lr;
  }
}

// The GPU of this process: --gpu, else its rank among the processes of its
// machine as the launcher says it (Open MPI, MPICH and Intel MPI, Slurm,
// PMI), one GPU each; else 0.
static int gpu_index(int64_t flag) {
  if (flag >= 0) return (int)flag;
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    int64_t r;
    if (v && *v && xfrun_parse_int(v, 0, 1023, &r)) return (int)r;
  }
  return 0;
}

// ---- the tokenizer -------------------------------------------------------------------

typedef struct {
  XfTokenizer *tok;
  char *json;        // its tokenizer.json text, or NULL for the byte tokenizer
  const char *name;  // for messages
} Tok;

static bool tok_from_text(Tok *t, char *text, size_t len, const char *name, char *err, size_t errlen) {
  t->tok = xf_tok_parse(text, len, name, err, errlen);
  if (!t->tok) return free(text), false;
  t->json = text, t->name = name;
  return true;
}

// By precedence: --tokenizer; the checkpoint's; a cached BPE of `vocab`
// trained on the corpus (trained now if not cached).
static bool get_tokenizer(const Args *a, const XfCheckpoint *ck, const XfCorpus *corpus, int64_t vocab,
                          const char *cache, Tok *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  size_t len;
  if (a->tokenizer && !strcmp(a->tokenizer, "bytes")) {
    t->tok = xf_tok_bytes(), t->name = "bytes";
    return t->tok || xf_errorf(err, errlen, "out of memory");
  }
  if (a->tokenizer) {
    char *text = xf_read_file(a->tokenizer, &len, err, errlen);
    return text && tok_from_text(t, text, len, a->tokenizer, err, errlen);
  }
  if (ck) {
    const char *kind = xf_checkpoint_meta(ck, "tokenizer"), *text = xf_checkpoint_meta(ck, "tokenizer.json");
    if (kind && !strcmp(kind, "bytes")) {
      t->tok = xf_tok_bytes(), t->name = "bytes";
      return t->tok || xf_errorf(err, errlen, "out of memory");
    }
    if (!text) return xf_errorf(err, errlen, "the checkpoint carries no tokenizer: give --tokenizer FILE");
    char *copy = strdup(text);
    return copy ? tok_from_text(t, copy, strlen(copy), "the checkpoint's tokenizer", err, errlen)
                : xf_errorf(err, errlen, "out of memory");
  }
  if (!corpus) return xf_errorf(err, errlen, "no tokenizer: give --tokenizer FILE or --checkpoint FILE");
  static char path[4200];
  snprintf(path, sizeof path, "%s/tokenizer-%016llx-%lld.json", cache, (unsigned long long)corpus->hash,
           (long long)vocab);
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "xfrun: training a byte-level BPE tokenizer of %lld tokens on %d file%s (%.1f MB) -> %s\n",
            (long long)vocab, corpus->n, corpus->n == 1 ? "" : "s", (double)corpus->bytes / 1e6, path);
    double t0 = now();
    XfTokenizer *tok = xf_tok_train((const char *const *)corpus->texts, corpus->lens, corpus->n, vocab, err, errlen);
    if (!tok) return false;
    bool ok = xf_tok_save(tok, path, err, errlen);
    xf_tok_free(tok);
    if (!ok) return false;
    fprintf(stderr, "xfrun: tokenizer trained in %.1f s\n", now() - t0);
  }
  char *text = xf_read_file(path, &len, err, errlen);
  return text && tok_from_text(t, text, len, path, err, errlen);
}

static void tok_free(Tok *t) {
  xf_tok_free(t->tok);
  free(t->json);
}

// A path the run will write (atomically: a temporary beside it, then a
// rename) must be in a folder this process can write, and not be a folder.
static bool writable(const char *path, const char *what, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return xf_errorf(err, errlen, "%s %s is a folder", what, path);
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (access(dir, W_OK | X_OK) != 0)
    return xf_errorf(err, errlen, "cannot write %s %s: folder %s: %s", what, path, dir, strerror(errno));
  return true;
}

static bool same_vocab(const Tok *t, const char *model, int64_t vocab, char *err, size_t errlen) {
  int64_t v = xf_tok_vocab(t->tok);
  if (v == vocab) return true;
  return xf_errorf(err, errlen, "tokenizer %s has a vocabulary of %lld, model %s has %lld: compile the model with -D "
                   "vocab=%lld or use a tokenizer of %lld", t->name, (long long)v, model, (long long)vocab, (long long)v,
                   (long long)vocab);
}

// Before encoding: a byte-level tokenizer gives at most one token per byte,
// so the training part of file i has at most its bytes and the held-out part
// at most floor(bytes * heldout) tokens; when either bound is <= seq the
// encoded corpus cannot fit.
static bool corpus_fits(const XfCorpus *c, double heldout, int64_t seq, char *err, size_t errlen) {
  int64_t train = 0, held = 0;
  for (int i = 0; i < c->n; i++) train += (int64_t)c->lens[i], held += (int64_t)((double)c->lens[i] * heldout);
  if (train > seq && held > seq) return true;
  return xf_errorf(err, errlen, "the corpus has %lld bytes (at most %lld tokens held out with --heldout %g): too few for "
                   "--seq %lld (need more than %lld tokens in the training part and in the held-out part)",
                   (long long)c->bytes, (long long)held, heldout, (long long)seq, (long long)seq);
}

// ---- commands ------------------------------------------------------------------------

// Mean loss over n batches of windows of the held-out part, drawn with a fixed seed.
static double heldout_loss(XfRuntime *rt, const XfData *d, int64_t n) {
  const XfOptions *o = xf_options(rt);
  double total = 0;
  for (int64_t b = 0; b < n; b++) {
    xf_data_batch_rows(d, d->split, d->n, g_dist.rank * o->batch, o->batch, o->seq, o->seed ^ 0xe7a1u, (uint32_t)b,
                       xf_tokens(rt), xf_targets(rt));
    total += dist_mean(&g_dist, xf_eval_step(rt));
  }
  return total / (double)n;
}

// A checkpoint of rt, with the data's key, the tokenizer, and the recipe a
// resumed run continues with (the schedule, its horizon, clipping, ...).
static int save(XfRuntime *rt, const char *path, const Tok *t, uint64_t data_key, const Args *a, char *err, size_t errlen) {
  char key[32], steps[24], warm[24], cool[24], minlr[32], clip[32], accum[24];
  snprintf(key, sizeof key, "%016llx", (unsigned long long)data_key);
  snprintf(steps, sizeof steps, "%lld", (long long)a->steps);
  snprintf(warm, sizeof warm, "%lld", (long long)a->warmup);
  snprintf(cool, sizeof cool, "%lld", (long long)a->cooldown);
  snprintf(minlr, sizeof minlr, "%.17g", a->min_lr);
  snprintf(clip, sizeof clip, "%.17g", a->clip);
  snprintf(accum, sizeof accum, "%lld", (long long)a->accum);
  XfMeta meta[16 + XFRUN_RUN_KEYS] = {{"data", key}, {"tokenizer", t->json ? "bpe" : "bytes"}, {"lr_schedule", lr_names[a->schedule]},
                   {"lr_steps", steps}, {"warmup", warm}, {"cooldown", cool}, {"min_lr", minlr}, {"clip", clip},
                   {"accum", accum}, {"weight_decay_on", a->decay_matrices ? "matrices" : "all"}};
  char *paths;
  int n = xfrun_run_meta(a, meta + 10, &paths);
  if (n < 0) return die("out of memory");
  n += 10;
  if (t->json) meta[n++] = (XfMeta){"tokenizer.json", t->json};
  bool ok = xf_checkpoint_save(rt, path, meta, n, err, errlen);
  free(paths);
  return ok ? 0 : die("%s", err);
}

// The log of a->log (rank 0): a new file with its header, or on --resume
// the same file appended to under the same header. NULL without --log;
// *status 1 after the message when it cannot be written. The columns: the
// fixed ones, then the model's other scalar outputs by name (side outputs
// such as a load-balancing loss: xf_scalar_outputs).
static FILE *open_log(const Args *a, XfRuntime *rt, int *status) {
  char header[2048] = "step,loss,tokens_per_s,elapsed_s,lr,grad_norm,eval_loss,model_gflops,mfu";
  for (int i = 0; i < xf_scalar_outputs(rt); i++) {
    size_t len = strlen(header);
    snprintf(header + len, sizeof header - len, ",%s", xf_scalar_output_name(rt, i));
  }
  size_t hl = strlen(header);
  if (hl + 1 < sizeof header) header[hl] = '\n', header[hl + 1] = 0;
  *status = 0;
  if (!a->log || g_dist.rank != 0) return NULL;
  struct stat st;
  bool append = a->resume && stat(a->log, &st) == 0 && st.st_size > 0;
  if (append) {  // rows go under the same columns
    char first[2048] = "";
    FILE *f = fopen(a->log, "r");
    if (!f || !fgets(first, sizeof first, f) || strcmp(first, header)) {
      if (f) fclose(f);
      *status = die("%s: its header is not %.*s (an older xfrun's log?): give another --log", a->log,
                    (int)strlen(header) - 1, header);
      return NULL;
    }
    fclose(f);
  }
  FILE *lf = fopen(a->log, append ? "a" : "w");
  if (!lf) {
    *status = die("cannot write log %s: %s", a->log, strerror(errno));
    return NULL;
  }
  if (!append) fputs(header, lf);
  fprintf(stderr, "xfrun: log %s: a row per step%s\n", a->log, append ? ", appended" : "");
  return lf;
}

// What a training run will do (rank 0): steps, tokens, the schedule, memory.
static void train_banner(const Args *a, XfRuntime *rt, uint32_t first) {
  const XfModel *m = xf_model(rt);
  const XfOptions *o = xf_options(rt);
  XfMemory mem = xf_memory(rt);
  const double MiB = 1 << 20;
  char micro[64] = "";
  if (a->accum > 1) snprintf(micro, sizeof micro, " in %lld micro-batches", (long long)a->accum);
  fprintf(stderr, "xfrun: training %s: steps %u..%lld of %lld x %lld tokens%s%s, %d parameter tensors, %.1f MiB planned\n",
          m->name, first, (long long)a->steps, (long long)(a->accum * o->batch * g_dist.size), (long long)o->seq, micro,
          g_dist.size > 1 ? " over several processes" : "", xf_nparams(rt), (double)mem.total / MiB);
  if (a->schedule != LR_CONSTANT || a->warmup)
    fprintf(stderr, "xfrun: learning rate: %s from %g to %g over %lld steps, %lld of warm-up%s\n", lr_names[a->schedule],
            a->lr, a->schedule == LR_CONSTANT ? a->lr : a->min_lr, (long long)a->steps, (long long)a->warmup,
            a->schedule == LR_WSD ? ", the decay in the last --cooldown steps" : "");
  char acc[128] = "";
  if (mem.accum) snprintf(acc, sizeof acc, ", gradient sums %.1f MiB", (double)mem.accum / MiB);
  if (mem.gemm)
    snprintf(acc + strlen(acc), sizeof acc - strlen(acc), ", bf16 GEMM operands %.1f MiB", (double)mem.gemm / MiB);
  fprintf(stderr, "xfrun: memory: activations and outputs %.1f MiB, parameters, gradients, inputs %.1f MiB, "
          "AdamW moments %.1f MiB%s, total %.1f MiB\n", (double)mem.planned / MiB, (double)mem.persistent / MiB,
          (double)mem.moments / MiB, acc, (double)mem.total / MiB);
}

// --profile: the kernels' share of `steps` training steps of `step_s`
// seconds, by label (XfModel.kernel_labels: a class at one source line, all
// layers together), largest first.
static int print_profile(const XfRuntime *rt, int64_t steps, double step_s) {
  const XfModel *m = xf_model(rt);
  int n = m->nkernels, ng = 0;
  int *of = malloc(sizeof(int) * ((size_t)n + 1)), *order = malloc(sizeof(int) * ((size_t)n + 1));
  double *sec = calloc((size_t)n + 1, sizeof(double));
  int64_t *runs = calloc((size_t)n + 1, sizeof(int64_t));
  if (!of || !order || !sec || !runs) {
    free(of), free(order), free(sec), free(runs);
    return die("out of memory for the profile");
  }
  double total = 0;
  for (int k = 0; k < n; k++) {  // of[g]: the first kernel of group g
    double s;
    int64_t r;
    xf_profile_read(rt, k, &s, &r);
    int g = 0;
    while (g < ng && strcmp(m->kernel_labels[of[g]], m->kernel_labels[k])) g++;
    if (g == ng) of[ng++] = k;
    sec[g] += s, runs[g] += r, total += s;
  }
  double opt_s;  // the optimizer's launches (a CUDA device), a group of their own
  int64_t opt_runs;
  xf_profile_read(rt, n, &opt_s, &opt_runs);
  if (opt_runs > 0) of[ng] = -1, sec[ng] = opt_s, runs[ng] = opt_runs, total += opt_s, ng++;
  for (int g = 0; g < ng; g++) order[g] = g;
  for (int i = 1; i < ng; i++)
    for (int j = i; j > 0 && sec[order[j - 1]] < sec[order[j]]; j--) {
      int x = order[j];
      order[j] = order[j - 1], order[j - 1] = x;
    }
  printf("profile of %lld training step%s: %.3f ms per step, %.3f ms in kernels (%.1f%%; %s the rest)\n",
         (long long)steps, steps == 1 ? "" : "s", 1e3 * step_s / (double)steps, 1e3 * total / (double)steps,
         step_s > 0 ? 100 * total / step_s : 0,
         opt_runs > 0 ? "the device's time, without the step's graph; the host's waits" : "AdamW and the host");
  printf("%8s %11s %9s  %s\n", "share", "ms / step", "runs", "kernel (class, op, source; every layer)");
  double rest = 0;
  int shown = 0;
  for (int i = 0; i < ng; i++) {
    int g = order[i];
    if (runs[g] == 0) continue;
    if (shown == 30) {
      rest += sec[g];
      continue;
    }
    printf("%7.1f%% %11.3f %9lld  %s\n", total > 0 ? 100 * sec[g] / total : 0, 1e3 * sec[g] / (double)steps,
           (long long)(runs[g] / steps), of[g] < 0 ? "optimizer: the gradient norm and AdamW" : m->kernel_labels[of[g]]);
    shown++;
  }
  if (rest > 0) printf("%7.1f%% %11.3f %9s  the other kernels\n", 100 * rest / total, 1e3 * rest / (double)steps, "");
  free(of), free(order), free(sec), free(runs);
  return 0;
}

static int train(const Args *a, XfRuntime *rt, const XfData *d, const Tok *t, uint64_t data_key) {
  char err[1024];
  const XfModel *m = xf_model(rt);
  const XfOptions *o = xf_options(rt);
  bool root = g_dist.rank == 0;
  // test hook: XF_TEST_KILL_RANK=r:s kills rank r with SIGKILL at step s
  const char *kill_at = getenv("XF_TEST_KILL_RANK");
  int kill_rank = -1, kill_step = -1;
  if (kill_at) sscanf(kill_at, "%d:%d", &kill_rank, &kill_step);
  int status;
  uint32_t first = xf_step_count(rt) + 1;
  // --profile: the steps after the first (its one-time work: JIT, first
  // touches of memory), or the only one
  int64_t prof_from = !a->profile ? -1 : a->steps > (int64_t)first ? (int64_t)first + 1 : (int64_t)first;
  double prof_s = 0;
  if (a->profile && !xf_profile_start(rt, err, sizeof err)) return die("--profile: %s", err);
  FILE *lf = open_log(a, rt, &status);
  if (status) return status;
  int nscalar = xf_scalar_outputs(rt);  // the log's columns after the fixed ones
  if (root) train_banner(a, rt, first);
  // model FLOP/s: the training operations per token of xfc --stats times
  // tokens/s, over the GEMM rate measured here (every process at once, as
  // they will train), on the CPU
  double ops = m->train_ops, peak = xf_gemm_rate(rt) * g_dist.size;
  if (root && ops > 0 && peak > 0)
    fprintf(stderr, "xfrun: %.4g training operations per token (xfc --stats); GEMM rate %.1f GFLOP/s on %d thread%s%s\n",
            ops, peak, o->threads * g_dist.size, o->threads * g_dist.size == 1 ? "" : "s",
            g_dist.size > 1 ? " over the processes" : "");
  // test hook: XF_TEST_BATCHES=FILE appends "step hash" of every batch's
  // tokens (rank 0), so tests can prove that runs saw the same batches
  FILE *bf = NULL;
  const char *bpath = getenv("XF_TEST_BATCHES");
  if (bpath && *bpath && root && !(bf = fopen(bpath, "a"))) return die("cannot write %s: %s", bpath, strerror(errno));
  bool tty = isatty(2) && root;
  double t0 = now(), loss = NAN;
  double eval_s = 0;  // seconds spent on --eval-every, left out of tokens/s
  double ev_last = NAN;  // the held-out loss of --eval-every at step ev_step
  int64_t ev_step = -1;
  for (int64_t s = first; s <= a->steps; s++) {
    if (s == kill_step && g_dist.rank == kill_rank) raise(SIGKILL);
    double lr = lr_at(a, s);
    xf_set_lr(rt, lr);
    // micro-batch k of the step's a->accum: global rows [k batch, (k + 1) batch),
    // this process's share of them from k batch + rank (batch / processes)
    if (s == prof_from && !xf_profile_start(rt, err, sizeof err)) return die("--profile: %s", err);
    double step0 = now();
    for (int64_t k = 0; k < a->accum; k++) {
      int64_t row0 = k * o->batch * g_dist.size + g_dist.rank * o->batch;
      xf_data_batch_rows(d, 0, d->split, row0, o->batch, o->seq, o->seed, (uint32_t)s, xf_tokens(rt), xf_targets(rt));
      if (a->accum > 1) xf_set_row0(rt, row0);
      if (bf)
        fprintf(bf, "%lld %016llx\n", (long long)s,
                (unsigned long long)xf_fnv1a(XF_FNV1A_BASIS, xf_tokens(rt), sizeof(int32_t) * (size_t)(o->batch * o->seq)));
      loss = xf_train_step(rt);
    }
    if (prof_from >= 0 && s >= prof_from) prof_s += now() - step0;
    double el = now() - t0, tps = (double)((s - first + 1) * a->accum * o->batch * g_dist.size * o->seq) / (el - eval_s);
    double ev = NAN;
    if (a->eval_every && (s % a->eval_every == 0 || s == a->steps)) {
      double e0 = now();
      ev_last = ev = heldout_loss(rt, d, a->eval_batches), ev_step = s;
      eval_s += now() - e0;
    }
    double gflops = ops * tps * 1e-9, mfu = peak > 0 ? gflops / peak : NAN;
    if (lf) {
      fprintf(lf, "%lld,%.9g,%.1f,%.3f,%.9g,%.9g,", (long long)s, loss, tps, el, lr, xf_grad_norm(rt));
      if (!isnan(ev)) fprintf(lf, "%.9g", ev);
      fprintf(lf, ",%.4g,", gflops);
      if (!isnan(mfu)) fprintf(lf, "%.4g", mfu);
      for (int i = 0; i < nscalar; i++) fprintf(lf, ",%.9g", xf_scalar_output(rt, i));
      fputc('\n', lf);
      fflush(lf);  // a row per finished step, whatever ends the process later
    }
    if (!isfinite(loss)) {
      fprintf(stderr, "%sxfrun: error: the loss is %g at step %lld; lower --lr\n", tty ? "\n" : "", loss, (long long)s);
      status = 1;
      break;
    }
    if (root && (tty || s == a->steps || s % 10 == 0)) {
      double eta = el / (double)(s - first + 1) * (double)(a->steps - s);
      char extra[96] = "", util[64] = "";
      if (!isnan(ev)) snprintf(extra, sizeof extra, "  held-out %.4f", ev);
      if (!isnan(mfu)) snprintf(util, sizeof util, "  %.1f GFLOP/s (%.0f%% of GEMM)", gflops, 100 * mfu);
      fprintf(stderr, "%sstep %lld/%lld  loss %.4f%s  lr %.3g  %.0f tok/s%s  ETA %d:%02d%s", tty ? "\r" : "", (long long)s,
              (long long)a->steps, loss, extra, lr, tps, util, (int)eta / 60, (int)eta % 60, tty ? "   " : "\n");
    }
    if (root && a->save_every && s % a->save_every == 0 && s != a->steps &&
        (status = save(rt, a->save, t, data_key, a, err, sizeof err)))
      break;
    if (a->time_limit > 0 && el >= a->time_limit && s != a->steps && !g_stop) {
      if (tty) fputc('\n', stderr);
      if (root) fprintf(stderr, "xfrun: time limit of %g s reached after step %lld\n", a->time_limit, (long long)s);
      tty = false;
      break;
    }
    if (g_stop && s != a->steps) {  // interrupted: save what the step reached, say how to go on
      if (tty) fputc('\n', stderr);
      if (lf) fflush(lf);
      if (a->save && (status = save(rt, a->save, t, data_key, a, err, sizeof err))) break;
      if (a->save) {  // the checkpoint records the run's settings: the model and it continue the run
        char line[8192] = "";
        xfrun_put_word(line, sizeof line, a->argv0), xfrun_put_word(line, sizeof line, "train"), xfrun_put_word(line, sizeof line, a->model);
        xfrun_put_word(line, sizeof line, "--resume"), xfrun_put_word(line, sizeof line, a->save);
        fprintf(stderr, "xfrun: interrupted after step %lld; saved %s; continue with:%s\n", (long long)s, a->save, line);
      } else fprintf(stderr, "xfrun: interrupted after step %lld; nothing saved (no --save)\n", (long long)s);
      if (lf) fclose(lf);
      if (bf) fclose(bf);
      return 128 + g_stop;
    }
  }
  if (tty && first <= a->steps) fputc('\n', stderr);
  if (bf) fclose(bf);
  int64_t profiled = prof_from < 0 ? 0 : (int64_t)xf_step_count(rt) - prof_from + 1;
  if (root && profiled > 0 && (status = print_profile(rt, profiled, prof_s))) return status;
  if (lf && fclose(lf) != 0 && !status) status = die("cannot write log %s", a->log);
  if (status) return status;
  if (a->save && root) {
    if ((status = save(rt, a->save, t, data_key, a, err, sizeof err))) return status;
    fprintf(stderr, "xfrun: saved %s (step %u)\n", a->save, xf_step_count(rt));
  }
  // the last step's --eval-every loss is the final one: the same parameters and batches
  double mean = ev_step == (int64_t)xf_step_count(rt) ? ev_last : heldout_loss(rt, d, a->eval_batches);
  if (!root) return 0;
  if (isnan(loss)) printf("%s: at step %u, held-out loss %.4f, perplexity %.2f\n", m->name, xf_step_count(rt), mean,
                          exp(mean));
  else printf("%s: final training loss %.4f, held-out loss %.4f, perplexity %.2f\n", m->name, loss, mean, exp(mean));
  return 0;
}

// N continuations of each prompt in one batch through a sampler
// (incremental unless --no-incremental); stream i = p N + j (prompt p,
// sample j) draws from the stream of (seed, i). One stream streams its
// tokens; several are printed when done.
// ptok[p]: the plen[p] >= 1 tokens of prompt p (encoded and checked in main).
static int sample(const Args *a, XfRuntime *rt, const Tok *t, int32_t *const *ptok, const int64_t *plen) {
  char err[1024];
  XfSampling s = {.temperature = a->temperature, .top_k = a->top_k, .top_p = a->top_p};  // checked in main
  int64_t V = xf_vocab(rt), N = a->num_samples, P = a->nprompts, S = P * N, total = 0;
  XfSampler *sm = xf_sampler_open(rt, S, !a->no_incremental, err, sizeof err);
  if (!sm) return die("%s", err);
  if (!a->no_incremental && !xf_sampler_incremental(sm))
    fprintf(stderr, "xfrun: recomputing the whole context for every token: %s\n",
            xf_model(rt)->step_note ? xf_model(rt)->step_note : "the step program runs on the CPU only");
  size_t cache, work;
  xf_sampler_memory(sm, &cache, &work);
  if (cache)
    fprintf(stderr, "xfrun: caches %.1f KiB per sequence (what later positions read), workspace %.1f KiB for %lld\n",
            (double)cache / 1024 / (double)S, (double)work / 1024, (long long)S);
  for (int64_t p = 0; p < P; p++) total += N * plen[p];
  int32_t *feed = malloc(sizeof(int32_t) * (size_t)(total > S ? total : S)), *order = malloc(sizeof(int32_t) * 2 * (size_t)V);
  int32_t *out = malloc(sizeof(int32_t) * (size_t)(S * (a->max_tokens + 1)));
  int64_t *count = malloc(sizeof(int64_t) * (size_t)S);
  float *probs = malloc(sizeof(float) * (size_t)V);
  if (!feed || !order || !probs || !out || !count) {
    free(feed), free(order), free(probs), free(out), free(count), xf_sampler_close(sm);
    return die("out of memory");
  }
  for (int64_t i = 0, at = 0; i < S; at += plen[i / N], i++) {
    memcpy(feed + at, ptok[i / N], sizeof(int32_t) * (size_t)plen[i / N]);
    count[i] = plen[i / N];
  }
  if (S == 1) fputs(a->prompts[0], stdout), fflush(stdout);
  double t0 = now();
  const float *logits = xf_sampler_feed_each(sm, feed, count);
  double t1 = now();
  int64_t made = 0;  // tokens drawn per sequence
  for (int64_t k = 0; k < a->max_tokens && logits && !g_stop; k++, made++) {
    for (int64_t i = 0; i < S; i++) {
      xf_sample_filter(logits + i * V, V, &s, probs, order);
      uint64_t index = ((uint64_t)i << 32) | (uint64_t)k;
      int32_t id = xf_sample_draw(probs, V, xf_rand_uniform((uint64_t)a->seed, XF_STREAM_SAMPLE, index, 0));
      out[i * a->max_tokens + k] = feed[i] = id;
      if (S == 1) {
        size_t len;
        const char *bytes = xf_tok_token_bytes(t->tok, id, &len);
        if (bytes) fwrite(bytes, 1, len, stdout);
        fflush(stdout);
      }
    }
    if (k + 1 < a->max_tokens) logits = xf_sampler_feed(sm, feed, 1);
  }
  double t2 = now();
  int status = 0;
  if (!logits) status = die("model %s has no 'logits' output to sample from", xf_model(rt)->name);
  for (int64_t i = 0; S > 1 && !status && i < S; i++) {
    if (P == 1) printf("--- sample %lld\n%s", (long long)(i + 1), a->prompts[0]);
    else printf("--- prompt %lld, sample %lld\n%s", (long long)(i / N + 1), (long long)(i % N + 1), a->prompts[i / N]);
    for (int64_t k = 0; k < made; k++) {
      size_t len;
      const char *bytes = xf_tok_token_bytes(t->tok, out[i * a->max_tokens + k], &len);
      if (bytes) fwrite(bytes, 1, len, stdout);
    }
    fputc('\n', stdout);
  }
  if (S == 1) fputc('\n', stdout);
  if (!status && made > 0)  // the prompts' pass, then every token drawn and fed back (filter, draw, step)
    fprintf(stderr, "xfrun: prompt of %lld tokens in %.1f ms; %lld x %lld tokens in %.3f s: %.1f tokens/s, %.3f ms a step\n",
            (long long)(total / S), (t1 - t0) * 1e3, (long long)S, (long long)made, t2 - t1, (double)(S * made) / (t2 - t1),
            (t2 - t1) * 1e3 / (double)made);
  free(feed), free(order), free(probs), free(out), free(count);
  xf_sampler_close(sm);
  return g_stop && !status ? 128 + g_stop : status;
}

// a->prompts: --prompt, or the non-empty lines of --prompts (a trailing '\r'
// dropped). False with a message when the file cannot be read or holds none.
static bool read_prompts(Args *a, char *err, size_t errlen) {
  if (!a->prompts_file) {
    a->prompts = malloc(sizeof *a->prompts);
    if (!a->prompts) return xf_errorf(err, errlen, "out of memory");
    a->prompts[0] = a->prompt, a->nprompts = 1;
    return true;
  }
  if (a->given[A_PROMPT]) return xf_errorf(err, errlen, "--prompt and --prompts: give one of them");
  size_t len;
  if (!(a->prompts_buf = xf_read_file(a->prompts_file, &len, err, errlen))) return false;
  int64_t lines = 1;
  for (size_t i = 0; i < len; i++) lines += a->prompts_buf[i] == '\n';
  if (!(a->prompts = malloc(sizeof *a->prompts * (size_t)lines))) return xf_errorf(err, errlen, "out of memory");
  a->nprompts = 0;
  for (char *p = a->prompts_buf, *end = a->prompts_buf + len; p < end;) {
    char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
    if (e > p && e[-1] == '\r') e--;
    *e = 0;
    if (e > p) a->prompts[a->nprompts++] = p;
    p = nl ? nl + 1 : end;
  }
  if (a->nprompts == 0) return xf_errorf(err, errlen, "--prompts %s: no prompt in it (one per line)", a->prompts_file);
  if (a->nprompts * a->num_samples > 4096)
    return xf_errorf(err, errlen, "--prompts %s: %lld prompts x --num-samples %lld: more than 4096 sequences", a->prompts_file,
                     (long long)a->nprompts, (long long)a->num_samples);
  return true;
}

// The GEMM in use, in one line, and a second one when its kernel is generic
// on a CPU with AVX2 or AVX-512.
static void gemm_line(FILE *f, int threads) {
  char line[300], remedy[400];
  xf_gemm_describe(xf_gemm_info(), threads, line, sizeof line, remedy, sizeof remedy);
  fprintf(f, "xfrun: %s\n", line);
  if (*remedy) fprintf(f, "xfrun: %s\n", remedy);
}

// The CUDA code of a model.so, one line: PTX, SASS, kernels, launches.
static void model_info(const char *path, XfRuntime *rt) {
  const XfCuda *c = xf_model(rt)->cuda;
  if (!c) {
    printf("%s: CPU code only (compile with xfc --target=cuda for CUDA)\n", path);
  } else {
    printf("%s: CUDA code: PTX for %s (%zu KiB)", path, c->arch, strlen(c->ptx) >> 10);
    for (int i = 0; i < 2; i++)
      if (c->sass_size[i]) printf(", SASS for sm_%d (%lld KiB)", c->sass_sm[i], (long long)(c->sass_size[i] >> 10));
    int kernels = 0, gemms = 0;
    for (int j = 0; j < c->nlaunch[XF_PROG_TRAIN]; j++) c->launch[XF_PROG_TRAIN][j].kind == XF_LAUNCH_GEMM ? gemms++ : kernels++;
    int half = 0, twins = 0;
    for (int b = 0; b < xf_model(rt)->nbuffers; b++) {
      const XfBuffer *x = &xf_model(rt)->buffers[b];
      half += x->bf16 != 0 && x->role == XF_BUF_ACT, twins += x->role == XF_BUF_TWIN;
    }
    printf("; %d functions; a training step: %d kernel launches, %d GEMMs in %s, 3 optimizer launches", c->nnames, kernels,
           gemms, xf_precision_name(c->precision));
    if (half) printf("; %d activations stored in bf16", half);
    if (twins) printf("; %d weights read as bf16 twins (AdamW rewrites them)", twins);
    printf("\n");
  }
}

// xfrun info: the CPU, the GEMM provider that would run and its kernel; with
// a model.so, its CUDA code.
static int info(int argc, char **argv) {
  XfGemmKind kind = XF_GEMM_AUTO;
  int64_t threads = 0;
  const char *model = NULL;
  enum { I_GEMM, I_THREADS, I_H, I_HELP, I_COUNT };
  static const CliOption opts[I_COUNT] = {{"gemm", true}, {"threads", true}, {"h", false}, {"help", false}};
  Cli c = cli_start("xfrun info", opts, I_COUNT, argc, argv, 1);
  for (int k; (k = cli_next(&c)) != CLI_END;) {
    const char *v = c.value;
    if (k == CLI_BAD) return XF_EXIT_USAGE;
    if (k == I_H || k == I_HELP) {
      printf("usage: xfrun info [model.so] [--gemm auto|onednn|openblas] [--threads N]\n"
             "Prints the CPU, the GEMM provider xfrun would use with these options, its kernel,\n"
             "and the providers in this build; with a model.so, its CUDA code (PTX, SASS, launches\n"
             "per training step). Options take --opt value or --opt=value. Exit status 0; 1 on a\n"
             "model that does not load; 2 on a usage error.\n");
      return 0;
    }
    if (k == CLI_ARG && model) return cli_usage_error("xfrun info", "one model.so (got %s and %s)", model, v);
    if (k == CLI_ARG) model = v;
    else if (k == I_GEMM && !xf_gemm_parse(v, &kind))
      return cli_usage_error("xfrun info", "--gemm %s: expected auto, onednn or openblas", v);
    else if (k == I_THREADS && !xfrun_parse_int(v, 0, 1024, &threads))
      return cli_usage_error("xfrun info", "--threads %s: not a valid value", v);
  }
  if (threads == 0) threads = sysconf(_SC_NPROCESSORS_ONLN);
  char err[1024];
  if (!xf_gemm_select(kind, NULL, err, sizeof err)) return die("%s", err);
  XfRuntime *rt = NULL;
  XfOptions opt = {.batch = 1, .device = XF_DEVICE_CPU};
  if (model && !(rt = xf_load(model, &opt, err, sizeof err))) return die("%s", err);
  gemm_line(stdout, (int)threads);
  printf("providers in this build: %s\n", xf_gemm_available());
  if (rt) model_info(model, rt);
  xf_close(rt);
  return 0;
}


// xfrun --version: the version, commit and build type, the GEMM providers
// of this build, and whether it has CUDA.
static void version(void) {
  cli_version(stdout, "xfrun");
  printf("GEMM providers: %s\n", xf_gemm_available());
#ifdef XF_HAVE_CUDA
  printf("CUDA: yes (--device cuda with an NVIDIA GPU and driver; XF_CUDA_EMULATE=1 runs the emulation)\n");
#else
  printf("CUDA: no (built without the CUDA toolkit)\n");
#endif
}

// What xfrun train, eval and sample hold from the checks to the end.
typedef struct {
  XfCheckpoint *ck;  // --resume or --checkpoint
  XfRuntime *rt;
  XfCorpus corpus;
  XfData d;
  Tok t;
  int32_t **ptok;    // xfrun sample: the tokens of each prompt
  int64_t *plen;
  XfOptions opt;
  char cache_buf[4096];
} Run;

static void run_close(Args *a, Run *r) {
  for (int64_t p = 0; r->ptok && p < a->nprompts; p++) free(r->ptok[p]);
  free(r->ptok), free(r->plen), free(a->prompts_buf), free(a->prompts), free(a->run_data);
  tok_free(&r->t);
  xf_data_free(&r->d);
  xf_corpus_free(&r->corpus);
  xf_close(r->rt);
  xf_checkpoint_close(r->ck);
}

// The checkpoint and the settings it records (--resume), the sampling
// options. -1, or the exit status after a message.
static int run_open(Args *a, Run *r) {
  char err[1024];
  const char *ckpath = a->resume ? a->resume : a->checkpoint;
  if (ckpath && !(r->ck = xf_checkpoint_open(ckpath, err, sizeof err))) return die("%s", err);
  int status;
  if (a->resume && (status = xfrun_resume_settings(a, r->ck, g_dist.rank == 0)) >= 0) return status;
  if (a->schedule != LR_CONSTANT && a->warmup >= a->steps && a->steps > 0 && g_dist.rank == 0)
    fprintf(stderr, "xfrun: warning: --warmup %lld is not below the %lld steps of the schedule: it never decays\n",
            (long long)a->warmup, (long long)a->steps);
  if (g_dist.size > 1 && a->batch % g_dist.size)
    return die("--batch %lld does not divide over %d processes: give a multiple of %d", (long long)a->batch, g_dist.size,
               g_dist.size);
  if (!strcmp(a->cmd, "sample")) {
    XfSampling sp = {.temperature = a->temperature, .top_k = a->top_k, .top_p = a->top_p};
    if (!xf_sampling_check(&sp, err, sizeof err) || !read_prompts(a, err, sizeof err)) return die("%s", err);
  }
  return -1;
}

// The prompts' tokens (xfrun sample): at least one each; a prompt longer
// than the context is said to keep its last tokens.
static int run_prompts(Args *a, Run *r) {
  int status = 0;
  r->ptok = calloc((size_t)a->nprompts, sizeof *r->ptok), r->plen = calloc((size_t)a->nprompts, sizeof *r->plen);
  for (int64_t p = 0; r->ptok && r->plen && p < a->nprompts && !status; p++) {
    if (!(r->ptok[p] = xf_tok_encode(r->t.tok, a->prompts[p], strlen(a->prompts[p]), &r->plen[p]))) status = die("out of memory");
    else if (r->plen[p] == 0 && a->prompts_file)
      status = die("%s: prompt %lld gives no token: give at least one token of text", a->prompts_file, (long long)(p + 1));
  }
  if (!status && (!r->ptok || !r->plen)) status = die("out of memory");
  if (status) return status;
  if (r->plen[0] == 0) return die("--prompt is empty: give at least one token of text");
  int64_t ctx = xf_model(r->rt)->context;
  for (int64_t p = 0; p < a->nprompts; p++)
    if (r->plen[p] > ctx) {
      char which[48] = "the prompt";
      if (a->prompts_file) snprintf(which, sizeof which, "prompt %lld of %s", (long long)(p + 1), a->prompts_file);
      fprintf(stderr, "xfrun: %s has %lld tokens, more than the model's context of %lld: it keeps the last %lld\n", which,
              (long long)r->plen[p], (long long)ctx, (long long)ctx);
    }
  return -1;
}

// Every check that can refuse the run comes before memory is allocated
// (xf_allocate) and before the corpus is encoded: the model and options
// (xf_load), output paths, the checkpoint against the model, the
// tokenizer's vocabulary, the corpus size against --seq. -1, or the exit
// status after a message.
static int run_check(Args *a, Run *r) {
  char err[1024];
  bool is_train = !strcmp(a->cmd, "train"), is_sample = !strcmp(a->cmd, "sample");
  r->opt = (XfOptions){.cuda_device = gpu_index(a->gpu), .batch = is_sample ? a->nprompts * a->num_samples : a->batch / g_dist.size,
                       .global_batch = g_dist.size > 1 ? a->batch : 0, .seq = is_sample ? 0 : a->seq, .threads = (int)a->threads,
                       .lr = a->lr, .weight_decay = a->wd, .seed = (uint64_t)a->seed, .device = a->device, .gemm = a->gemm,
                       .accum = is_train ? (int)a->accum : 1, .clip = a->clip, .decay_matrices = a->decay_matrices};
  if (!(r->rt = xf_load(a->model, &r->opt, err, sizeof err))) return die("%s", err);
  if ((a->save && !writable(a->save, "--save", err, sizeof err)) || (a->log && !writable(a->log, "--log", err, sizeof err)) ||
      (r->ck && !xf_checkpoint_check(r->ck, r->rt, is_train, err, sizeof err)))
    return die("%s", err);
  if (a->resume && a->steps <= a->resume_step)
    return die("%s is at step %lld already and --steps is %lld%s: give --steps above %lld to train on", a->resume,
               (long long)a->resume_step, (long long)a->steps, a->given[A_STEPS] ? "" : " (the run it recorded is complete)",
               (long long)a->resume_step);
  int64_t vocab = xf_vocab(r->rt);
  const char *cache = NULL;
  bool need_data = !is_sample, own_tok = !a->tokenizer && !r->ck;
  if ((need_data || own_tok) && !(cache = xf_cache_dir(a->cache, r->cache_buf, sizeof r->cache_buf, err, sizeof err)))
    return die("%s", err);
  // the tokenizer given or carried: its vocabulary before the corpus is read
  if (!own_tok && (!get_tokenizer(a, r->ck, NULL, vocab, cache, &r->t, err, sizeof err) ||
                   !same_vocab(&r->t, a->model, vocab, err, sizeof err)))
    return die("%s", err);
  if (own_tok && vocab < 256)
    return die("the model's vocabulary of %lld is smaller than the 256 byte tokens a byte-level BPE starts from: "
               "compile it with -D vocab=256 or more, or give --tokenizer bytes to a model of vocab 256", (long long)vocab);
  if (need_data) {
    const char *def[] = {XF_DATA_DIR "/children"};
    if (!xf_corpus_read(a->ndata ? a->data : def, a->ndata ? a->ndata : 1, &r->corpus, err, sizeof err) ||
        !corpus_fits(&r->corpus, a->heldout, xf_options(r->rt)->seq, err, sizeof err))
      return die("%s", err);
  }
  if (own_tok && (!get_tokenizer(a, r->ck, &r->corpus, vocab, cache, &r->t, err, sizeof err) ||
                  !same_vocab(&r->t, a->model, vocab, err, sizeof err)))
    return die("%s", err);
  int64_t seq = xf_options(r->rt)->seq;
  if (need_data) {
    if (!xf_data_load(&r->corpus, r->t.tok, a->heldout, vocab, cache, &r->d, err, sizeof err)) return die("%s", err);
    if (r->d.split <= seq || r->d.n - r->d.split <= seq)
      return die("the corpus has %lld tokens (%lld held out): too few for --seq %lld (need more than %lld in the "
                 "training part and in the held-out part)", (long long)r->d.n, (long long)(r->d.n - r->d.split),
                 (long long)seq, (long long)seq);
  }
  return is_sample ? run_prompts(a, r) : -1;
}

// Nothing left to refuse: the memory, the notes and warnings, the reduction
// across processes, the parameters. -1, or the exit status after a message.
static int run_start(Args *a, Run *r) {
  char err[1024];
  XfRuntime *rt = r->rt;
  bool root = g_dist.rank == 0;
  if (!xf_allocate(rt, err, sizeof err)) return die("%s", err);
  if (root && *a->resume_note) fprintf(stderr, "xfrun: %s\n", a->resume_note);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (root && cores > 0 && a->threads > cores)
    fprintf(stderr, "xfrun: warning: --threads %lld is more than the %ld cores here: the threads will wait on each "
            "other; give --threads %ld or less\n", (long long)a->threads, cores, cores);
  if (root && !strcmp(a->cmd, "train") && !a->save)
    fprintf(stderr, "xfrun: warning: no --save: the trained parameters will not be kept (give --save FILE)\n");
  if (xf_device_note(rt) && root) fprintf(stderr, "xfrun: %s\n", xf_device_note(rt));
  if (root && !strcmp(xf_device(rt), "cpu") && xf_model(rt)->precision == XF_PRECISION_BF16)
    fprintf(stderr, "xfrun: CPU GEMMs: %s\n", xf_cpu_gemms(rt));
  if (root && strcmp(xf_device(rt), "cpu")) fprintf(stderr, "xfrun: device: %s\n", xf_device_desc(rt));
  else if (strcmp(xf_device(rt), "cpu")) fprintf(stderr, "xfrun: rank %d: device: %s\n", g_dist.rank, xf_device_desc(rt));
  if (root && strcmp(xf_device(rt), "cuda")) gemm_line(stderr, xf_options(rt)->threads);
  if (g_dist.size > 1) {
    // gradients in device memory go over NCCL; in host memory (the CPU, the
    // CUDA emulation) over the MPI ring
    int64_t bucket_bytes;
    XfReducer red = dist_reducer(&g_dist, &bucket_bytes);
    if (!strcmp(xf_device(rt), "cuda")) red = nccl_reducer(&g_dist, xf_device_stream(rt), err, sizeof err);
    if (!red.start) return die("%s", strcmp(xf_device(rt), "cuda") ? "cannot start the communication thread" : err);
    xf_set_data_parallel(rt, g_dist.rank * r->opt.batch, &red, bucket_bytes);
  }
  if (!r->ck) xf_init_params(rt, (uint64_t)a->seed);  // a checkpoint sets every parameter
  if (r->ck && !xf_checkpoint_load(r->ck, rt, !strcmp(a->cmd, "train"), err, sizeof err)) return die("%s", err);
  return -1;
}

// xfrun train, eval and sample (argv[1] the command).
static int run_model(int argc, char **argv) {
  Args a;
  int status = xfrun_parse_args(argc, argv, &a);
  if (status >= 0) return status;
  char derr[512];
  block_stop_signals();
  if (!dist_init(&argc, &argv, &g_dist, derr, sizeof derr)) return die("%s", derr);
  catch_stop_signals(g_dist.size == 1);  // under a launcher, the launcher handles signals
  Run r = {0};
  if (g_dist.size > 1 && strcmp(a.cmd, "train"))
    status = die("only xfrun train runs on several processes (this is %s under an MPI launcher with %d)", a.cmd, g_dist.size);
  else if ((status = run_open(&a, &r)) < 0 && (status = run_check(&a, &r)) < 0 && (status = run_start(&a, &r)) < 0) {
    if (!strcmp(a.cmd, "sample")) {
      status = sample(&a, r.rt, &r.t, r.ptok, r.plen);
    } else if (!strcmp(a.cmd, "train")) {
      uint64_t data_key = r.corpus.hash ^ xf_tok_fingerprint(r.t.tok);
      const char *k = a.resume ? xf_checkpoint_meta(r.ck, "data") : NULL;
      char now_key[32];
      snprintf(now_key, sizeof now_key, "%016llx", (unsigned long long)data_key);
      if (k && strcmp(k, now_key))
        fprintf(stderr, "xfrun: warning: %s was trained on other data; the run continues on this corpus\n", a.resume);
      status = train(&a, r.rt, &r.d, &r.t, data_key);
    } else {
      double mean = heldout_loss(r.rt, &r.d, a.eval_batches);
      printf("%s: held-out loss %.4f, perplexity %.2f (%lld batches of %lld x %lld tokens%s)\n", xf_model(r.rt)->name,
             mean, exp(mean), (long long)a.eval_batches, (long long)xf_options(r.rt)->batch,
             (long long)xf_options(r.rt)->seq, r.ck ? "" : "; fresh parameters: no --checkpoint");
      status = 0;
    }
  }
  run_close(&a, &r);
  dist_finalize(&g_dist);
  return status;
}

// The subcommands; `whole`: the command takes xfrun's argv (argv[1] its
// name), else the arguments after "xfrun" (argv[0] its name).
static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  bool whole;
} commands[] = {
    {"train", run_model, true},        {"eval", run_model, true},       {"sample", run_model, true},
    {"tokenize", xfrun_tokenize, false}, {"plot", xfrun_plot, false},   {"compare", xfrun_compare, false},
    {"export", xfrun_export, false},   {"info", info, false},
};

int main(int argc, char **argv) {
  if (argc < 2) return xfrun_usage(stderr), XF_EXIT_USAGE;
  const char *cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) return xfrun_usage(stdout), 0;
  if (!strcmp(cmd, "--version")) return version(), 0;
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (!strcmp(cmd, commands[i].name)) return commands[i].whole ? commands[i].run(argc, argv) : commands[i].run(argc - 1, argv + 1);
  const char *near = xfrun_nearest_command(cmd);
  if (cmd[0] == '-') return cli_usage_error("xfrun", "expected a command before %s (train, eval, sample, ...)", cmd);
  if (near) return cli_usage_error("xfrun", "unknown command '%s' (did you mean '%s'?)", cmd, near);
  return cli_usage_error("xfrun", "unknown command '%s' (train, eval, sample, tokenize, plot, compare, export or info)", cmd);
}
