// fuzz_checkpoint.c: libFuzzer target for safetensors checkpoints as xfrun
// reads them (--resume, --checkpoint): the input is the file. It is opened
// (header length, JSON header, dtypes, shapes, offsets tiling the data),
// its metadata read, checked against a small model with and without the
// optimizer state, loaded, and its embedded tokenizer parsed and used.
// A checkpoint that loads must survive a round trip: saved again, opened
// and loaded into a second runtime it gives the same parameters, moments
// and step.
// A bug: a crash, a sanitizer report or leak, a time-out, an out-of-memory
// on a small input, a failed round trip (abort()). An error return is a
// normal outcome.
#include "fuzz_util.h"

static XfRuntime *rt, *rt2;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  rt = fuzz_runtime(&FUZZ_MODEL, 2, 8);
  rt2 = fuzz_runtime(&FUZZ_MODEL, 2, 8);
  // XF_FUZZ_SEEDS=DIR: write seed checkpoints there (with a tokenizer, with
  // the byte tokenizer, one of another model size)
  const char *dir = getenv("XF_FUZZ_SEEDS");
  if (dir) {
    xf_init_params(rt, 7);
    xf_set_step(rt, 42);
    XfTokenizer *t = fuzz_bpe(300);
    char path[4096], err[512];
    const char *tokpath = fuzz_tmp("seed.json");
    if (!xf_tok_save(t, tokpath, err, sizeof err)) fuzz_bug("%s", err);
    size_t len;
    char *json = xf_read_file(tokpath, &len, err, sizeof err);
    if (!json) fuzz_bug("%s", err);
    remove(tokpath);
    XfMeta bpe[] = {{"data", "0123456789abcdef"}, {"tokenizer", "bpe"}, {"tokenizer.json", json}};
    XfMeta raw[] = {{"tokenizer", "bytes"}};
    snprintf(path, sizeof path, "%s/seed-checkpoint-bpe", dir);
    if (!xf_checkpoint_save(rt, path, bpe, 3, err, sizeof err)) fuzz_bug("%s", err);
    snprintf(path, sizeof path, "%s/seed-checkpoint-bytes", dir);
    if (!xf_checkpoint_save(rt, path, raw, 1, err, sizeof err)) fuzz_bug("%s", err);
    free(json);
    xf_tok_free(t);
  }
  return 0;
}

// Parameters, moments and step of a and b are the same.
static bool same_state(XfRuntime *a, XfRuntime *b) {
  if (xf_step_count(a) != xf_step_count(b)) return false;
  for (int p = 0; p < xf_nparams(a); p++) {
    int64_t n;
    const float *x = xf_param(a, p, NULL, &n), *y = xf_param(b, p, NULL, NULL);
    if (memcmp(x, y, 4 * (size_t)n) || memcmp(xf_moment(a, p, 0), xf_moment(b, p, 0), 4 * (size_t)n) ||
        memcmp(xf_moment(a, p, 1), xf_moment(b, p, 1), 4 * (size_t)n))
      return false;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_tmp("in.safetensors");
  fuzz_write(path, data, size);
  char err[1024];
  XfCheckpoint *c = xf_checkpoint_open(path, err, sizeof err);
  remove(path);
  if (!c) return 0;
  static const char *keys[] = {"format", "model", "step", "seed", "rng", "optimizer", "lr", "batch", "seq", "data"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) (void)xf_checkpoint_meta(c, keys[i]);
  const char *json = xf_checkpoint_meta(c, "tokenizer.json");
  if (json) {
    XfTokenizer *t = xf_tok_parse(json, strlen(json), "the checkpoint's tokenizer", err, sizeof err);
    if (t) fuzz_round_trip(t, FUZZ_TEXT, sizeof FUZZ_TEXT - 1, 0), xf_tok_free(t);
  }
  (void)xf_checkpoint_check(c, rt, false, err, sizeof err);
  bool fits = xf_checkpoint_check(c, rt, true, err, sizeof err);
  if (fits != xf_checkpoint_load(c, rt, true, err, sizeof err)) fuzz_bug("check and load disagree");
  xf_checkpoint_close(c);
  if (!fits) return 0;
  fuzz_resave(rt, rt2);
  if (!same_state(rt, rt2)) fuzz_bug("a checkpoint saved and loaded again differs");
  return 0;
}
