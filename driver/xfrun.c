// xfrun: trains and evaluates a compiled model.so with the xf runtime.
//
//   xfrun train model.so --data FILE [--steps N] [--batch B] [--seq T] ...
//   xfrun eval  model.so --data FILE [--batch B] [--seq T] ...
//
// Until the tokenizer exists, --data is a raw byte file (one byte, one
// token). The last 1% of the file is held out for evaluation.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/xf.h"
#include "xfrun.h"

static void usage(FILE *f) {
  fputs("usage: xfrun train model.so --data FILE [options]\n"
        "       xfrun eval model.so --data FILE [options]\n"
        "\n"
        "train: AdamW on windows drawn from the training part of FILE, then the held-out loss.\n"
        "eval:  mean loss and perplexity on the held-out part of FILE (fresh parameters until\n"
        "       checkpoints exist).\n"
        "\n"
        "options:\n"
        "  --data FILE        training text; a raw byte file, one byte per token\n"
        "  --steps N          training steps (default 100)\n"
        "  --batch N          sequences per step (default 8)\n"
        "  --seq N            tokens per sequence, at most the model's context (default: context)\n"
        "  --lr X             AdamW learning rate (default 0.001)\n"
        "  --weight-decay X   AdamW weight decay (default 0.01)\n"
        "  --seed N           parameters, dropout and batches (default 1)\n"
        "  --threads N        worker threads (default: all cores)\n"
        "  --log FILE         CSV of step, loss, tokens/s, elapsed seconds\n"
        "  --eval-batches N   held-out batches to average (default 16)\n"
        "  -h, --help         this help\n",
        f);
}

static int die(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "xfrun: error: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  return 1;
}

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *v) {
  char *end;
  errno = 0;
  long long n = strtoll(s, &end, 10);
  if (!*s || *end || errno || n < lo || n > hi) return false;
  *v = n;
  return true;
}

static bool parse_real(const char *s, double *v) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(x) || x < 0) return false;
  *v = x;
  return true;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Mean loss over up to n windows of the held-out split, taken in order.
static bool heldout_loss(XfRuntime *rt, const XfData *d, int64_t n, double *mean) {
  const XfOptions *o = xf_options(rt);
  int64_t span = d->n - d->split;
  if (span <= o->seq) return false;
  double total = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < n; b++) {
    xf_data_batch(d, d->split, d->n, o->batch, o->seq, o->seed ^ 0xe7a1u, (uint32_t)b, xf_tokens(rt), xf_targets(rt));
    total += xf_eval_step(rt);
    count++;
  }
  *mean = total / (double)count;
  return true;
}

int main(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) return usage(stdout), 0;
  if (argc >= 2 && !strcmp(argv[1], "tokenize")) return xfrun_tokenize(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "plot")) return xfrun_plot(argc - 1, argv + 1);
  if (argc < 3) {
    usage(stderr);
    return 1;
  }
  const char *cmd = argv[1], *model = argv[2], *data = NULL, *log = NULL;
  if (strcmp(cmd, "train") && strcmp(cmd, "eval")) return die("unknown command '%s'%s (train or eval)", cmd, "");
  int64_t steps = 100, batch = 8, seq = 0, seed = 1, threads = 0, eval_batches = 16;
  double lr = 1e-3, wd = 0.01;
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = true;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout), 0;
    if (!v) return die("%s needs a value%s", a, "");
    if (!strcmp(a, "--data")) data = v;
    else if (!strcmp(a, "--log")) log = v;
    else if (!strcmp(a, "--steps")) ok = parse_int(v, 0, INT32_MAX, &steps);
    else if (!strcmp(a, "--batch")) ok = parse_int(v, 1, INT32_MAX, &batch);
    else if (!strcmp(a, "--seq")) ok = parse_int(v, 1, INT32_MAX, &seq);
    else if (!strcmp(a, "--seed")) ok = parse_int(v, 0, INT64_MAX, &seed);
    else if (!strcmp(a, "--threads")) ok = parse_int(v, 0, 1024, &threads);
    else if (!strcmp(a, "--eval-batches")) ok = parse_int(v, 1, INT32_MAX, &eval_batches);
    else if (!strcmp(a, "--lr")) ok = parse_real(v, &lr);
    else if (!strcmp(a, "--weight-decay")) ok = parse_real(v, &wd);
    else return die("unknown option %s%s (see xfrun --help)", a, "");
    if (!ok) return die("%s %s: not a valid value", a, v);
    i++;
  }
  if (!data) return die("%s%s: --data FILE is required (a raw byte file)", cmd, "");
  char err[1024];
  XfOptions opt = {.batch = batch, .seq = seq, .threads = (int)threads, .lr = lr, .weight_decay = wd,
                   .seed = (uint64_t)seed};  // seq 0: the model's context
  XfRuntime *rt = xf_open(model, &opt, err, sizeof err);
  if (!rt) return die("%s%s", err, "");
  opt = *xf_options(rt);
  XfData d;
  if (!xf_data_load_bytes(data, 0.01, xf_vocab(rt), &d, err, sizeof err)) {
    xf_close(rt);
    return die("%s%s", err, "");
  }
  int status = 0;
  if (d.split <= opt.seq || d.n - d.split <= opt.seq) {
    fprintf(stderr, "xfrun: error: %s has %lld tokens: too few for --seq %lld (need more than %lld in the training part "
            "and in the held-out 1%%)\n", data, (long long)d.n, (long long)opt.seq, (long long)opt.seq);
    status = 1;
    goto out;
  }
  xf_init_params(rt, (uint64_t)seed);
  const XfModel *m = xf_model(rt);
  if (!strcmp(cmd, "eval")) {
    double mean;
    heldout_loss(rt, &d, eval_batches, &mean);
    printf("%s: held-out loss %.4f, perplexity %.2f (%lld batches of %lld x %lld tokens)\n", m->name, mean, exp(mean),
           (long long)eval_batches, (long long)opt.batch, (long long)opt.seq);
    goto out;
  }
  FILE *lf = NULL;
  if (log) {
    lf = fopen(log, "w");
    if (!lf) {
      fprintf(stderr, "xfrun: error: cannot write log %s: %s\n", log, strerror(errno));
      status = 1;
      goto out;
    }
    fprintf(lf, "step,loss,tokens_per_s,elapsed_s\n");
  }
  fprintf(stderr, "xfrun: training %s: %lld steps of %lld x %lld tokens, %d params tensors, %.1f MiB planned\n",
          m->name, (long long)steps, (long long)opt.batch, (long long)opt.seq, xf_nparams(rt),
          (double)xf_memory_bytes(rt) / (1 << 20));
  bool tty = isatty(2);
  double t0 = now(), loss = 0;
  for (int64_t s = 1; s <= steps; s++) {
    xf_data_batch(&d, 0, d.split, opt.batch, opt.seq, (uint64_t)seed, (uint32_t)s, xf_tokens(rt), xf_targets(rt));
    loss = xf_train_step(rt);
    double el = now() - t0, tps = (double)(s * opt.batch * opt.seq) / el;
    if (lf) fprintf(lf, "%lld,%.6f,%.1f,%.3f\n", (long long)s, loss, tps, el);
    if (!isfinite(loss)) {
      fprintf(stderr, "\nxfrun: error: the loss is %g at step %lld; lower --lr\n", loss, (long long)s);
      status = 1;
      break;
    }
    if (tty || s == steps || s % 10 == 0) {
      double eta = el / (double)s * (double)(steps - s);
      fprintf(stderr, "%sstep %lld/%lld  loss %.4f  %.0f tok/s  ETA %d:%02d%s", tty ? "\r" : "", (long long)s,
              (long long)steps, loss, tps, (int)eta / 60, (int)eta % 60, tty ? "   " : "\n");
    }
  }
  if (tty) fputc('\n', stderr);
  if (lf && fclose(lf) != 0) {
    fprintf(stderr, "xfrun: error: cannot write log %s\n", log);
    status = 1;
  }
  if (!status) {
    double mean;
    heldout_loss(rt, &d, eval_batches, &mean);
    printf("%s: final training loss %.4f, held-out loss %.4f, perplexity %.2f\n", m->name, loss, mean, exp(mean));
  }
out:
  xf_data_free(&d);
  xf_close(rt);
  return status;
}
