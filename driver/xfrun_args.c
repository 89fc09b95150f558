// xfrun_args.c: the command line of xfrun train, eval and sample
// (xfrun_args.h).
#include "xfrun_args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum { G_DATA, G_TRAINING, G_SAMPLING, G_RUNNING, G_COUNT };
static const char *const group_names[G_COUNT] = {"data", "training", "sampling", "running"};

typedef struct {
  const char *name, *meta;  // --name META (meta NULL: a flag)
  unsigned cmds;
  int group;
  const char *help;
} OptHelp;

static const OptHelp opt_help[A_COUNT] = {
    [A_DATA] = {"data", "FILE|DIR", C_TRAIN | C_EVAL, G_DATA,
                "text files, a folder meaning its .txt files; repeatable\n"
                "(default: the bundled children's books, " XF_DATA_DIR "/children)"},
    [A_TOKENIZER] = {"tokenizer", "FILE", C_ALL, G_DATA,
                     "a byte-level BPE tokenizer.json, or 'bytes' for one token per byte\n"
                     "(default: the checkpoint's, else a BPE of the model's vocabulary\n"
                     "trained on the corpus and cached)"},
    [A_HELDOUT] = {"heldout", "X", C_TRAIN | C_EVAL, G_DATA, "fraction of each file held out for evaluation (default 0.01)"},
    [A_CACHE] = {"cache", "DIR", C_ALL, G_DATA,
                 "tokenizer and token cache (default $XF_CACHE_DIR, $XDG_CACHE_HOME/xf\nor ~/.cache/xf)"},
    [A_STEPS] = {"steps", "N", C_TRAIN, G_TRAINING,
                 "train until step N (default 100; with --resume, the checkpoint's)"},
    [A_SEQ] = {"seq", "N", C_TRAIN | C_EVAL, G_TRAINING, "tokens per sequence, at most the model's context (default: context)"},
    [A_BATCH] = {"batch", "N", C_TRAIN | C_EVAL, G_TRAINING, "sequences per step, or per micro-batch with --accum (default 8)"},
    [A_ACCUM] = {"accum", "N", C_TRAIN, G_TRAINING,
                 "micro-batches of --batch sequences per step, their gradients averaged\n"
                 "before one AdamW update: a step of N x --batch sequences (default 1)"},
    [A_LR] = {"lr", "X", C_TRAIN, G_TRAINING, "AdamW learning rate, the schedule's peak (default 0.001)"},
    [A_LR_SCHEDULE] = {"lr-schedule", "S", C_TRAIN, G_TRAINING,
                       "constant, cosine, linear or wsd (default constant), after --warmup:\n"
                       "  constant  lr\n"
                       "  cosine    min + (lr - min) (1 + cos(pi p)) / 2\n"
                       "  linear    lr + (min - lr) p\n"
                       "  wsd       lr until the last --cooldown steps, then linear to min\n"
                       "with p = (step - warmup) / (steps - warmup) in [0, 1]"},
    [A_WARMUP] = {"warmup", "N", C_TRAIN, G_TRAINING, "the first N steps rise linearly to lr: lr step / N (default 0)"},
    [A_MIN_LR] = {"min-lr", "X", C_TRAIN, G_TRAINING, "the rate the schedule decays to (default 0)"},
    [A_COOLDOWN] = {"cooldown", "N", C_TRAIN, G_TRAINING, "wsd: the steps of its decay (default: a fifth of --steps)"},
    [A_CLIP] = {"clip", "X", C_TRAIN, G_TRAINING,
                "scale the gradients to global L2 norm X when it is larger (as\n"
                "torch.nn.utils.clip_grad_norm_; default 0: no clipping); the norm\n"
                "before clipping is logged every step"},
    [A_WD] = {"weight-decay", "X", C_TRAIN, G_TRAINING, "AdamW weight decay (default 0.01)"},
    [A_WD_ON] = {"weight-decay-on", "W", C_TRAIN, G_TRAINING,
                 "all: every parameter (the default); matrices: parameters of\n"
                 "rank >= 2 only (weights and embeddings; not biases and gains)"},
    [A_LOG] = {"log", "FILE", C_TRAIN, G_TRAINING,
               "CSV of step, loss, tokens/s, elapsed seconds, lr, gradient norm,\n"
               "held-out loss (on --eval-every steps, else empty), model GFLOP/s (training\n"
               "ops per token of xfc --stats x tokens/s) and its fraction of the GEMM rate\n"
               "measured at start (mfu; empty on a CUDA device), then each other scalar\n"
               "output of the model by name (a side output such as a load-balancing loss);\n"
               "appended to on --resume"},
    [A_EVAL_EVERY] = {"eval-every", "N", C_TRAIN, G_TRAINING,
                      "also the held-out loss every N steps, into the log (default 0: at the end)"},
    [A_SAVE] = {"save", "FILE", C_TRAIN, G_TRAINING,
                "write a safetensors checkpoint at the end (and every --save-every steps);\n"
                "without it nothing is kept, and xfrun says so at the start"},
    [A_SAVE_EVERY] = {"save-every", "N", C_TRAIN, G_TRAINING, "also save every N steps"},
    [A_RESUME] = {"resume", "FILE", C_TRAIN, G_TRAINING,
                  "continue from a checkpoint: parameters, AdamW state, step, and the\n"
                  "run's settings (--data, --tokenizer, --cache, --log, --threads, --gemm,\n"
                  "--heldout, --eval-every, --eval-batches, --save-every, --steps, seed,\n"
                  "batch, seq, the recipe); --save defaults to FILE. Options given again\n"
                  "override them and are reported; the loss curve continues exactly"},
    [A_EVAL_BATCHES] = {"eval-batches", "N", C_TRAIN | C_EVAL, G_TRAINING, "held-out batches to average (default 16)"},
    [A_TIME_LIMIT] = {"time-limit", "S", C_TRAIN, G_TRAINING,
                      "stop training after S seconds (at the end of a step), then save and\n"
                      "evaluate as at --steps"},
    [A_PROFILE] = {"profile", NULL, C_TRAIN, G_TRAINING,
                   "print each kernel's share of the training steps after the first (CPU:\n"
                   "wall time per kernel, GEMMs and threads included; CUDA: the device's\n"
                   "time between events after each kernel, the optimizer a row of its own,\n"
                   "the steps run without their graph), largest first, by kernel class and\n"
                   "source line as xfc --emit=schedule names them"},
    [A_CHECKPOINT] = {"checkpoint", "FILE", C_EVAL | C_SAMPLE, G_SAMPLING,
                      "parameters (and tokenizer) to use (required by sample)"},
    [A_PROMPT] = {"prompt", "TEXT", C_SAMPLE, G_SAMPLING,
                  "(default \"Once upon a time there was a little princess who\"); a prompt\n"
                  "longer than the context keeps its last context tokens, and says so"},
    [A_PROMPTS] = {"prompts", "FILE", C_SAMPLE, G_SAMPLING,
                   "one prompt per line (empty lines skipped), all decoded in one batch\n"
                   "(N continuations each); prompts of different lengths share the steps"},
    [A_MAX_TOKENS] = {"max-tokens", "N", C_SAMPLE, G_SAMPLING, "tokens to generate (default 100)"},
    [A_TEMPERATURE] = {"temperature", "X", C_SAMPLE, G_SAMPLING, "softmax temperature; 0 is greedy (default 1)"},
    [A_TOP_K] = {"top-k", "N", C_SAMPLE, G_SAMPLING, "keep the N most probable tokens; 0 keeps all (default 0)"},
    [A_TOP_P] = {"top-p", "X", C_SAMPLE, G_SAMPLING,
                 "keep the most probable tokens up to mass X (default 0.6, seed 001 sec. 6)"},
    [A_NUM_SAMPLES] = {"num-samples", "N", C_SAMPLE, G_SAMPLING, "N continuations of the prompt in one batch (default 1)"},
    [A_NO_INCREMENTAL] = {"no-incremental", NULL, C_SAMPLE, G_SAMPLING,
                          "recompute the whole context for every token instead of the\n"
                          "model's incremental decoder (same text; for checking it)"},
    [A_SEED] = {"seed", "N", C_ALL, G_RUNNING, "parameters, dropout, batches and sampling (default 1)"},
    [A_THREADS] = {"threads", "N", C_ALL, G_RUNNING,
                   "worker threads (default: all cores; more than the cores warns)"},
    [A_GEMM] = {"gemm", "P", C_ALL, G_RUNNING,
                "GEMM provider: auto, onednn or openblas (default auto: oneDNN,\n"
                "whose kernels follow the CPU's features, when this build has it)"},
    [A_DEVICE] = {"device", "D", C_ALL, G_RUNNING,
                  "cpu or cuda (default: cuda when the model was compiled with\n"
                  "xfc --target=cuda and a GPU is there, else cpu, saying why);\n"
                  "checkpoints, logs and sampling are the same on both"},
    [A_GPU] = {"gpu", "N", C_ALL, G_RUNNING,
               "the GPU index (default: the process's local rank from the\n"
               "launcher: OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID\n"
               "or PMI_LOCAL_RANK, else 0)"},
    [A_H] = {"h", NULL, C_ALL, G_RUNNING, "this help"},
    [A_HELP] = {"help", NULL, C_ALL, G_RUNNING, "this help"},
};

// The run's settings a checkpoint records (besides the recipe, seed, batch
// and seq), so that `xfrun train model.so --resume FILE` alone continues the
// same run into the same files. Values as given on the command line; data
// paths one per line.
static const struct {
  int opt;
  const char *key;
} run_keys[] = {
    {A_DATA, "run.data"},       {A_TOKENIZER, "run.tokenizer"}, {A_CACHE, "run.cache"},
    {A_SAVE, "run.save"},       {A_LOG, "run.log"},             {A_THREADS, "run.threads"},
    {A_GEMM, "run.gemm"},       {A_DEVICE, "run.device"},       {A_HELDOUT, "run.heldout"},
    {A_EVAL_EVERY, "run.eval_every"}, {A_EVAL_BATCHES, "run.eval_batches"}, {A_SAVE_EVERY, "run.save_every"},
};
enum { NRUN_KEYS = sizeof run_keys / sizeof *run_keys };

static const char *const cmd_names[] = {"train", "eval", "sample", "tokenize", "plot", "compare", "export", "info"};

void xfrun_usage(FILE *f) {
  fputs("usage: xfrun COMMAND [arguments] [options]\n"
        "\n"
        "commands:\n"
        "  train    model.so [--data FILE|DIR ...]   AdamW on windows of the training part of the\n"
        "                                            corpus, then the held-out loss\n"
        "  eval     model.so [--checkpoint FILE]     mean loss and perplexity on the held-out part\n"
        "  sample   model.so --checkpoint FILE       continues --prompt, printing tokens as they come\n"
        "  tokenize --train|--encode|--decode|--split  byte-level BPE tokenizers and token files\n"
        "  plot     run.csv ... -o curves.svg        loss curves of xfrun train --log files\n"
        "  compare  A.xf B.xf ... --steps N          architectures on the same data and budget\n"
        "  export   checkpoint -o weights.safetensors  the weights alone, fp32 or bf16\n"
        "  info     [model.so]                       the CPU, its GEMM, the model's CUDA code\n"
        "\n"
        "xfrun COMMAND --help lists the options of COMMAND. Options with a value take it as\n"
        "--opt value or --opt=value. xfrun --version prints the version, commit, build type,\n"
        "GEMM providers and whether this build has CUDA.\n"
        "Exit status: 0 done; 1 an error while working (a file, the model, the device);\n"
        "2 a usage error (an unknown or malformed option, a missing argument); 128 + the\n"
        "signal after SIGINT or SIGTERM (training saves first).\n",
        f);
}

// The help of train, eval or sample: the options that command takes.
static void usage_cmd(FILE *f, const char *cmd, unsigned mask) {
  if (mask == C_TRAIN)
    fprintf(f, "usage: xfrun train model.so [--data FILE|DIR ...] [options]\n"
               "AdamW on windows drawn from the training part of the corpus, then the held-out loss.\n");
  else if (mask == C_EVAL)
    fprintf(f, "usage: xfrun eval model.so [--checkpoint FILE] [--data FILE|DIR ...] [options]\n"
               "Mean loss and perplexity on the held-out part of the corpus.\n");
  else
    fprintf(f, "usage: xfrun sample model.so --checkpoint FILE [--prompt TEXT] [options]\n"
               "Continues the prompt, printing tokens as they come.\n");
  for (int g = 0; g < G_COUNT; g++) {
    bool head = false;
    for (int k = 0; k < A_COUNT; k++) {
      const OptHelp *o = &opt_help[k];
      if (o->group != g || !(o->cmds & mask) || k == A_H) continue;
      if (!head) fprintf(f, "%s:\n", group_names[g]), head = true;
      char left[64];
      if (k == A_HELP) snprintf(left, sizeof left, "-h, --help");
      else snprintf(left, sizeof left, "--%s%s%s", o->name, o->meta ? " " : "", o->meta ? o->meta : "");
      fprintf(f, "  %-18s ", left);
      if (strlen(left) > 18) fprintf(f, "\n  %-18s ", "");
      for (const char *h = o->help; *h;) {
        const char *nl = strchr(h, '\n');
        int len = nl ? (int)(nl - h) : (int)strlen(h);
        fprintf(f, "%.*s\n", len, h);
        if (!nl) break;
        h = nl + 1;
        fprintf(f, "  %-18s ", "");
      }
    }
  }
  fprintf(f, "Options with a value take it as --opt value or --opt=value. Exit status: 0 done,\n"
             "1 an error while working, 2 a usage error, 128 + the signal after SIGINT/SIGTERM.\n"
             "(xfrun %s: see also xfrun --help for the other commands)\n", cmd);
}

const char *const lr_names[4] = {"constant", "cosine", "linear", "wsd"};

// The LR_* of a schedule's name, or -1.
int xfrun_lr_schedule_of(const char *name) {
  for (int k = 0; k < 4; k++)
    if (!strcmp(name, lr_names[k])) return k;
  return -1;
}

bool xfrun_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *v) {
  char *end;
  errno = 0;
  long long n = strtoll(s, &end, 10);
  if (!*s || *end || errno || n < lo || n > hi) return false;
  *v = n;
  return true;
}

bool xfrun_parse_real(const char *s, double *v) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(x) || x < 0) return false;
  *v = x;
  return true;
}

// Appends s to the line, in shell quotes when it needs them.
void xfrun_put_word(char *line, size_t n, const char *s) {
  size_t at = strlen(line);
  bool plain = *s != 0;
  for (const char *c = s; *c; c++) plain = plain && (isalnum((unsigned char)*c) || strchr("_./-+=:,@%", *c));
  if (plain) {
    snprintf(line + at, n - at, " %s", s);
    return;
  }
  at += (size_t)snprintf(line + at, n - at, " '");
  for (const char *c = s; *c && at < n; c++)
    at += (size_t)(*c == '\'' ? snprintf(line + at, n - at, "'\\''") : snprintf(line + at, n - at, "%c", *c));
  if (at < n) snprintf(line + at, n - at, "'");
}

bool xfrun_meta_int(const XfCheckpoint *ck, const char *key, int64_t *v) {
  const char *s = xf_checkpoint_meta(ck, key);
  return s && xfrun_parse_int(s, 0, INT64_MAX, v);
}

bool xfrun_meta_real(const XfCheckpoint *ck, const char *key, double *v) {
  const char *s = xf_checkpoint_meta(ck, key);
  return s && xfrun_parse_real(s, v);
}

// A usage error of `xfrun CMD`: exit 2.
#define usage_error(a, ...) cli_usage_error((a)->prog, __VA_ARGS__)

// Sets option k (A_*) to v, written as `arg` ("--steps"): from the command
// line or, on --resume, from the checkpoint. -1, or the exit status.
static int set_opt(Args *a, int k, const char *v, const char *arg) {
  bool ok = true;
  a->raw[k] = v;
  switch (k) {
  case A_NO_INCREMENTAL: a->no_incremental = true; break;
  case A_PROFILE: a->profile = true; break;
  case A_DATA:
    if (a->ndata == MAX_DATA) return usage_error(a, "more than %d --data arguments", MAX_DATA);
    a->data[a->ndata++] = v;
    break;
  case A_TOKENIZER: a->tokenizer = v; break;
  case A_LOG: a->log = v; break;
  case A_SAVE: a->save = v; break;
  case A_RESUME: a->resume = v; break;
  case A_CHECKPOINT: a->checkpoint = v; break;
  case A_PROMPT: a->prompt = v; break;
  case A_PROMPTS: a->prompts_file = v; break;
  case A_CACHE: a->cache = v; break;
  case A_DEVICE:
    if (!strcmp(v, "cpu")) a->device = XF_DEVICE_CPU;
    else if (!strcmp(v, "cuda")) a->device = XF_DEVICE_CUDA;
    else return usage_error(a, "--device %s: expected cpu or cuda", v);
    break;
  case A_GEMM:
    if (!xf_gemm_parse(v, &a->gemm)) return usage_error(a, "--gemm %s: expected auto, onednn or openblas", v);
    a->gemm_name = v;
    break;
  case A_GPU: ok = xfrun_parse_int(v, 0, 1023, &a->gpu); break;
  case A_STEPS: ok = xfrun_parse_int(v, 0, INT32_MAX, &a->steps); break;
  case A_BATCH: ok = xfrun_parse_int(v, 1, INT32_MAX, &a->batch); break;
  case A_SEQ: ok = xfrun_parse_int(v, 1, INT32_MAX, &a->seq); break;
  case A_SEED: ok = xfrun_parse_int(v, 0, INT64_MAX, &a->seed); break;
  case A_THREADS: ok = xfrun_parse_int(v, 0, 1024, &a->threads); break;
  case A_EVAL_BATCHES: ok = xfrun_parse_int(v, 1, INT32_MAX, &a->eval_batches); break;
  case A_SAVE_EVERY: ok = xfrun_parse_int(v, 1, INT32_MAX, &a->save_every); break;
  case A_MAX_TOKENS: ok = xfrun_parse_int(v, 0, 1 << 24, &a->max_tokens); break;
  case A_TOP_K: ok = xfrun_parse_int(v, 0, INT32_MAX, &a->top_k); break;
  case A_NUM_SAMPLES: ok = xfrun_parse_int(v, 1, 4096, &a->num_samples); break;
  case A_LR: ok = xfrun_parse_real(v, &a->lr); break;
  case A_WD: ok = xfrun_parse_real(v, &a->wd); break;
  case A_HELDOUT: ok = xfrun_parse_real(v, &a->heldout) && a->heldout < 1; break;
  case A_TEMPERATURE: ok = xfrun_parse_real(v, &a->temperature); break;
  case A_TOP_P: ok = xfrun_parse_real(v, &a->top_p) && a->top_p > 0 && a->top_p <= 1; break;
  case A_TIME_LIMIT: ok = xfrun_parse_real(v, &a->time_limit) && a->time_limit > 0; break;
  case A_LR_SCHEDULE:
    if ((a->schedule = xfrun_lr_schedule_of(v)) < 0)
      return usage_error(a, "--lr-schedule %s: expected constant, cosine, linear or wsd", v);
    break;
  case A_WARMUP: ok = xfrun_parse_int(v, 0, INT32_MAX, &a->warmup); break;
  case A_COOLDOWN: ok = xfrun_parse_int(v, 1, INT32_MAX, &a->cooldown); break;
  case A_MIN_LR: ok = xfrun_parse_real(v, &a->min_lr) && a->min_lr >= 0; break;
  case A_CLIP: ok = xfrun_parse_real(v, &a->clip) && a->clip >= 0; break;
  case A_ACCUM: ok = xfrun_parse_int(v, 1, 65536, &a->accum); break;
  case A_EVAL_EVERY: ok = xfrun_parse_int(v, 0, INT32_MAX, &a->eval_every); break;
  case A_WD_ON:
    if (strcmp(v, "all") && strcmp(v, "matrices")) return usage_error(a, "--weight-decay-on %s: expected all or matrices", v);
    a->decay_matrices = !strcmp(v, "matrices");
    break;
  }
  if (!ok) return usage_error(a, "%s %s: not a valid value", arg, v);
  return -1;
}

// Fills a from argv (argv[1] the command); -1 to go on, else the exit status.
int xfrun_parse_args(int argc, char **argv, Args *a) {
  *a = (Args){.cmd = argv[1], .steps = 100, .batch = 8, .seed = 1, .eval_batches = 16, .gpu = -1, .accum = 1,
              .max_tokens = 100, .num_samples = 1, .lr = 1e-3, .wd = 0.01, .heldout = 0.01, .temperature = 1, .top_p = 0.6,
              .prompt = "Once upon a time there was a little princess who"};
  snprintf(a->prog, sizeof a->prog, "xfrun %s", a->cmd);
  a->argv0 = argv[0];
  unsigned mask = !strcmp(a->cmd, "train") ? C_TRAIN : !strcmp(a->cmd, "eval") ? C_EVAL : C_SAMPLE;
  CliOption table[A_COUNT];
  for (int k = 0; k < A_COUNT; k++) table[k] = (CliOption){opt_help[k].name, opt_help[k].meta != NULL};
  Cli c = cli_start(a->prog, table, A_COUNT, argc, argv, 2);
  for (int k; (k = cli_next(&c)) != CLI_END;) {
    const char *v = c.value;
    if (k == CLI_BAD) return XF_EXIT_USAGE;
    if (k == CLI_ARG) {
      if (a->model) return usage_error(a, "one model.so (got %s and %s)", a->model, v);
      a->model = v;
      continue;
    }
    if (k == A_H || k == A_HELP) return usage_cmd(stdout, a->cmd, mask), 0;
    if (!(opt_help[k].cmds & mask)) {
      char takers[64] = "";
      for (int m = 0; m < 3; m++)
        if (opt_help[k].cmds & (1u << m))
          snprintf(takers + strlen(takers), sizeof takers - strlen(takers), "%sxfrun %s", *takers ? " and " : "",
                   cmd_names[m]);
      return usage_error(a, "%s is an option of %s, not of %s", c.arg, takers, a->prog);
    }
    a->given[k] = true;
    int st = set_opt(a, k, v, c.arg);
    if (st >= 0) return st;
  }
  if (!a->model) return usage_error(a, "no model.so (usage: %s model.so [options])", a->prog);
  bool train = mask == C_TRAIN;
  if (train && a->checkpoint) return usage_error(a, "xfrun train takes --resume FILE, not --checkpoint");
  if (a->save_every && !a->save && !a->resume) return usage_error(a, "--save-every needs --save FILE");
  if (mask == C_SAMPLE && !a->checkpoint)
    return usage_error(a, "--checkpoint FILE is required (train one with xfrun train --save FILE)");
  return -1;
}

// --resume: the settings the checkpoint recorded for every option not given
// again, reported in one line, with the given ones that differ. --steps
// must lie beyond the checkpoint's step. -1, or the exit status.
// run.data of the --data paths: one per line (malloc'd), NULL without
// --data. False: out of memory.
static bool data_list(const Args *a, char **out) {
  *out = NULL;
  if (!a->ndata) return true;
  size_t len = 1;
  for (int d = 0; d < a->ndata; d++) len += strlen(a->data[d]) + 1;
  if (!(*out = malloc(len))) return false;
  **out = 0;
  for (int d = 0; d < a->ndata; d++) strcat(strcat(*out, d ? "\n" : ""), a->data[d]);
  return true;
}

int xfrun_resume_settings(Args *a, const XfCheckpoint *ck, bool root) {
  int64_t v, at = 0;
  double x;
  char from[2048] = "", over[1024] = "";
  xfrun_meta_int(ck, "step", &at);
  for (int i = 0; i < NRUN_KEYS; i++) {
    int k = run_keys[i].opt;
    const char *m = xf_checkpoint_meta(ck, run_keys[i].key);
    if (!m) continue;
    char flag[40];
    snprintf(flag, sizeof flag, "--%s", opt_help[k].name);
    if (a->given[k]) {  // given again: reported where it differs
      char *list = NULL;
      if (k == A_DATA && !data_list(a, &list)) return fprintf(stderr, "xfrun: error: out of memory\n"), 1;
      const char *now = k == A_DATA ? list : a->raw[k];
      if (!now || strcmp(now, m))
        xfrun_put_word(over, sizeof over, flag), xfrun_put_word(over, sizeof over, k == A_DATA ? a->data[0] : a->raw[k]);
      free(list);
      continue;
    }
    if (k == A_DATA) {
      if (!(a->run_data = strdup(m))) return fprintf(stderr, "xfrun: error: out of memory\n"), 1;
      for (char *p = a->run_data; p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        int st = set_opt(a, k, p, "--data");
        if (st >= 0) return st;
        xfrun_put_word(from, sizeof from, flag), xfrun_put_word(from, sizeof from, p);
        p = nl ? nl + 1 : NULL;
      }
      continue;
    }
    int st = set_opt(a, k, m, flag);
    if (st >= 0) return st;
    xfrun_put_word(from, sizeof from, flag), xfrun_put_word(from, sizeof from, m);
  }
  // the recipe
  if (!a->given[A_SEED] && xfrun_meta_int(ck, "seed", &v)) a->seed = v;
  if (!a->given[A_BATCH] && xfrun_meta_int(ck, "batch", &v)) a->batch = v;
  if (!a->given[A_SEQ] && xfrun_meta_int(ck, "seq", &v)) a->seq = v;
  if (!a->given[A_LR] && xfrun_meta_real(ck, "lr", &x)) a->lr = x;
  if (!a->given[A_WD] && xfrun_meta_real(ck, "weight_decay", &x)) a->wd = x;
  const char *sch = xf_checkpoint_meta(ck, "lr_schedule"), *on = xf_checkpoint_meta(ck, "weight_decay_on");
  if (!a->given[A_LR_SCHEDULE] && sch && xfrun_lr_schedule_of(sch) >= 0) a->schedule = xfrun_lr_schedule_of(sch);
  if (xfrun_meta_int(ck, "lr_steps", &v)) {
    if (!a->given[A_STEPS]) {
      a->steps = v;
      char n[24];
      snprintf(n, sizeof n, "%lld", (long long)v);
      xfrun_put_word(from, sizeof from, "--steps"), xfrun_put_word(from, sizeof from, n);
    } else if (a->steps != v) {
      char n[24];
      snprintf(n, sizeof n, "%lld", (long long)a->steps);
      xfrun_put_word(over, sizeof over, "--steps"), xfrun_put_word(over, sizeof over, n);
      if (a->schedule != LR_CONSTANT && root)
        fprintf(stderr, "xfrun: warning: %s's schedule ran over %lld steps; now over --steps %lld\n", a->resume,
                (long long)v, (long long)a->steps);
    }
  }
  if (!a->given[A_WARMUP] && xfrun_meta_int(ck, "warmup", &v)) a->warmup = v;
  if (!a->given[A_COOLDOWN] && xfrun_meta_int(ck, "cooldown", &v)) a->cooldown = v;
  if (!a->given[A_MIN_LR] && xfrun_meta_real(ck, "min_lr", &x)) a->min_lr = x;
  if (!a->given[A_CLIP] && xfrun_meta_real(ck, "clip", &x)) a->clip = x;
  if (!a->given[A_ACCUM] && xfrun_meta_int(ck, "accum", &v) && v >= 1) a->accum = v;
  if (!a->given[A_WD_ON] && on) a->decay_matrices = !strcmp(on, "matrices");
  a->resume_step = at;
  snprintf(a->resume_note, sizeof a->resume_note, "resuming %s at step %lld%s%s%s%s", a->resume, (long long)at,
           *from ? "; from the checkpoint:" : "", from, *over ? "; given:" : "", over);
  return -1;
}


const char *xfrun_nearest_command(const char *cmd) {
  return cli_nearest(cmd, cmd_names, (int)(sizeof cmd_names / sizeof *cmd_names));
}

int xfrun_run_meta(const Args *a, XfMeta *meta, char **paths) {
  _Static_assert((int)NRUN_KEYS == (int)XFRUN_RUN_KEYS, "xfrun_args.h XFRUN_RUN_KEYS is the size of run_keys");
  if (!data_list(a, paths)) return -1;
  int n = 0;
  for (int i = 0; i < NRUN_KEYS; i++) {
    const char *v = run_keys[i].opt == A_DATA ? *paths : a->raw[run_keys[i].opt];
    if (v) meta[n++] = (XfMeta){run_keys[i].key, v};
  }
  return n;
}
