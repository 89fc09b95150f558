// xfrun_args.h: the command line of xfrun train, eval and sample
// (xfrun_args.c): one option table for the three, their --help, the
// parsed options (Args), and the run settings a checkpoint records so that
// --resume alone continues a run.
#ifndef XFRUN_ARGS_H
#define XFRUN_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gemm.h"
#include "xf.h"

#ifndef XF_DATA_DIR
#define XF_DATA_DIR "data"
#endif

enum { MAX_DATA = 256 };

// The subcommands train, eval and sample share one option table; each
// option says which of them take it (C_*), its section of --help and its
// help text (continuation lines are indented under the text).
enum { C_TRAIN = 1, C_EVAL = 2, C_SAMPLE = 4, C_ALL = 7 };
enum {
  A_DATA, A_TOKENIZER, A_HELDOUT, A_CACHE, A_STEPS, A_SEQ, A_BATCH, A_ACCUM, A_LR, A_LR_SCHEDULE, A_WARMUP, A_MIN_LR,
  A_COOLDOWN, A_CLIP, A_WD, A_WD_ON, A_LOG, A_EVAL_EVERY, A_SAVE, A_SAVE_EVERY, A_RESUME, A_EVAL_BATCHES, A_TIME_LIMIT, A_PROFILE,
  A_CHECKPOINT, A_PROMPT, A_PROMPTS, A_MAX_TOKENS, A_TEMPERATURE, A_TOP_K, A_TOP_P, A_NUM_SAMPLES, A_NO_INCREMENTAL,
  A_SEED, A_THREADS, A_GEMM, A_DEVICE, A_GPU, A_H, A_HELP, A_COUNT
};

enum { LR_CONSTANT, LR_COSINE, LR_LINEAR, LR_WSD };
extern const char *const lr_names[4];

typedef struct {
  const char *cmd, *model, *argv0;
  char prog[24];        // "xfrun train", for messages
  bool given[A_COUNT];  // the options on the command line (A_*)
  const char *raw[A_COUNT];  // each option's value as written (the last one), or NULL
  char *run_data;       // --resume: the checkpoint's run.data, its lines cut at '\n'
  int64_t resume_step;  // --resume: the checkpoint's step
  char resume_note[3200];  // --resume: where each setting came from, printed once nothing refuses the run
  const char *gemm_name;
  const char *data[MAX_DATA];
  int ndata;
  const char *tokenizer, *log, *save, *resume, *checkpoint, *prompt, *cache, *prompts_file;
  char *prompts_buf;     // --prompts: the file, its lines cut at '\n'
  const char **prompts;  // nprompts >= 1 prompts: --prompt, or the non-empty lines of --prompts
  int64_t nprompts;
  int device;  // XF_DEVICE_*
  XfGemmKind gemm;
  int64_t steps, batch, seq, seed, threads, eval_batches, save_every, max_tokens, top_k, num_samples, gpu;
  bool no_incremental, profile;
  double lr, wd, heldout, temperature, top_p, time_limit;
  // the recipe (xfrun train): the schedule of the rate (LR_*) over --steps,
  // its warm-up, floor, wsd's cooldown (0: a fifth of --steps), micro-batches
  // per step, clipping, weight decay on matrices only
  int schedule;
  int64_t warmup, cooldown, accum, eval_every;
  double min_lr, clip;
  bool decay_matrices;
} Args;


// xfrun --help: the commands.
void xfrun_usage(FILE *f);

// The command of argv[1] closest to a misspelt one, or NULL.
const char *xfrun_nearest_command(const char *cmd);

// Fills a from argv (argv[1]: train, eval or sample); -1 to go on, else
// the exit status (0 after --help, 2 after a usage error, printed).
int xfrun_parse_args(int argc, char **argv, Args *a);

// --resume: the settings the checkpoint ck records for every option not
// given again (a->resume_note says where each came from); -1, or the exit
// status after a message.
int xfrun_resume_settings(Args *a, const XfCheckpoint *ck, bool root);

// The run settings to record in a checkpoint: up to XFRUN_RUN_KEYS entries
// of meta; *paths holds the data paths (free it after the save).
enum { XFRUN_RUN_KEYS = 12 };
int xfrun_run_meta(const Args *a, XfMeta *meta, char **paths);

// Appends s to line (a command line being built), in shell quotes when it needs them.
void xfrun_put_word(char *line, size_t n, const char *s);

bool xfrun_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *v);
bool xfrun_parse_real(const char *s, double *v);
bool xfrun_meta_int(const XfCheckpoint *ck, const char *key, int64_t *v);
bool xfrun_meta_real(const XfCheckpoint *ck, const char *key, double *v);
int xfrun_lr_schedule_of(const char *name);

#endif
