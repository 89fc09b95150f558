// fuzz_util.h: shared by the libFuzzer targets of the runtime's readers:
// temporary files, a BPE tokenizer trained at start-up, and a small model
// descriptor (the layout xfc emits: parameters, their gradients, the token
// inputs, loss and logits) whose programs do nothing, so the runtime can
// plan, allocate, checkpoint and step it without generated code.
#ifndef XF_FUZZ_UTIL_H
#define XF_FUZZ_UTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/tokenizer.h"
#include "../runtime/xf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static const char FUZZ_TEXT[] =
    "Once upon a time there was a little princess who lived in a castle. "
    "She said: \"I'll go, we've seen it; they're here.\" 1234 567 89\n\n"
    "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 caf\xc3\xa9 the the the cat sat on the mat\n";

__attribute__((noreturn, format(printf, 1, 2))) static inline void fuzz_bug(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("fuzz: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

// A per-process temporary path with the given suffix.
static inline const char *fuzz_tmp(const char *tag) {
  static char paths[4][128];
  static int next;
  char *p = paths[next++ % 4];
  snprintf(p, sizeof paths[0], "%s/xf-fuzz-%d-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(), tag);
  return p;
}

static inline void fuzz_write(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) fuzz_bug("cannot write %s", path);
}

// Writes DIR/NAME: the selector byte (if >= 0), then size bytes of data.
static inline void fuzz_seed(const char *dir, const char *name, int selector, const void *data, size_t size) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unsigned char *buf = malloc(size + 1);
  if (!buf) fuzz_bug("out of memory");
  size_t at = 0;
  if (selector >= 0) buf[at++] = (unsigned char)selector;
  memcpy(buf + at, data, size);
  fuzz_write(path, buf, size + at);
  free(buf);
}

static inline XfTokenizer *fuzz_bpe(int64_t vocab) {
  const char *texts[] = {FUZZ_TEXT};
  size_t lens[] = {sizeof FUZZ_TEXT - 1};
  char err[256];
  XfTokenizer *t = xf_tok_train(texts, lens, 1, vocab, err, sizeof err);
  if (!t) fuzz_bug("cannot train the tokenizer: %s", err);
  return t;
}

// Encodes s with t: ids in [0, vocab); with exact, decode gives s back.
static inline void fuzz_round_trip(const XfTokenizer *t, const char *s, size_t len, int exact) {
  int64_t n = 0;
  int32_t *ids = xf_tok_encode(t, s, len, &n);
  if (!ids) fuzz_bug("encode failed on %zu bytes", len);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= xf_tok_vocab(t)) fuzz_bug("id %d out of [0, %lld)", ids[i], (long long)xf_tok_vocab(t));
  size_t back_len = 0;
  char *back = xf_tok_decode(t, ids, n, &back_len);
  if (!back) fuzz_bug("decode failed");
  if (exact && (back_len != len || memcmp(back, s, len))) fuzz_bug("decode(encode(x)) != x for %zu bytes", len);
  free(back);
  free(ids);
}

static inline void fuzz_nop(const XfApi *api, void **bufs, int64_t B, int64_t T, uint64_t seed, uint32_t step) {
  (void)api, (void)bufs, (void)B, (void)T, (void)seed, (void)step;
}

// The optimizer's update over elements [lo, hi) of one parameter: reads and
// writes every operand slot the runtime fills (XF_ADAM_SLOT_*), so a wrong
// pointer or size shows under the sanitizers; a plain SGD step.
static inline void fuzz_adamw(void **slot, int64_t B, int64_t T, uint64_t seed, uint32_t step, int64_t lo, int64_t hi,
                              const XfApi *api) {
  (void)B, (void)T, (void)seed, (void)step, (void)api;
  float *w = slot[XF_ADAM_SLOT_W], *m = slot[XF_ADAM_SLOT_M], *v = slot[XF_ADAM_SLOT_V];
  const float *g = slot[XF_ADAM_SLOT_G], *st = slot[XF_ADAM_SLOT_STATE];
  for (int64_t i = lo; i < hi; i++) m[i] = g[i], v[i] = g[i] * g[i], w[i] -= st[XF_ADAM_LR] * g[i] * st[XF_ADAM_SCALE];
}

// emb [16, 8] and w [8] with gradients, tokens and targets [B, T], loss,
// logits [B, T, 16]; vocab 16, context 8, one kernel.
static const XfConfigEntry FUZZ_CONFIG[] = {{"vocab", 0, 16}, {"d", 0, 8}};
static const XfBuffer FUZZ_BUFFERS[] = {
    {"emb", XF_BUF_PARAM, 0, 0, -1, 128, 0, 0, 1, -1, 2, {16, 8}, XF_INIT_NORMAL, 0, 0.02, -1, -1},
    {"w", XF_BUF_PARAM, 0, 0, -1, 8, 0, 0, 1, -1, 1, {8}, XF_INIT_ONES, 0, 0, -1, -1},
    {"grad.emb", XF_BUF_GRAD, 0, 0, -1, 128, 0, 0, 1, -1, 2, {16, 8}, 0, 0, 0, 0, 0},
    {"grad.w", XF_BUF_GRAD, 0, 0, -1, 8, 0, 0, 1, -1, 1, {8}, 0, 0, 0, 0, 0},
    {"tokens", XF_BUF_INPUT, 1, 0, -1, 1, 1, 1, 1, -1, 2, {0, -1}, 0, 0, 0, 0, 0},
    {"targets", XF_BUF_INPUT, 1, 0, -1, 1, 1, 1, 1, -1, 2, {0, -1}, 0, 0, 0, 0, 0},
    {"loss", XF_BUF_OUTPUT, 0, 0, -1, 1, 0, 0, 1, -1, 0, {0}, 0, 0, 0, 0, 1},
    {"logits", XF_BUF_OUTPUT, 0, 0, -1, 16, 1, 1, 1, -1, 3, {0, -1, 16}, 0, 0, 0, 0, 1},
};
static const char *const FUZZ_LABELS[] = {"k0 embed fuzz:1"};
static const XfModel FUZZ_MODEL = {
    .abi_version = XF_ABI_VERSION, .name = "fuzz", .context = 8, .nconfig = 2, .config = FUZZ_CONFIG,
    .nbuffers = sizeof FUZZ_BUFFERS / sizeof *FUZZ_BUFFERS, .buffers = FUZZ_BUFFERS,
    .programs = {fuzz_nop, fuzz_nop, fuzz_nop}, .nkernels = 1, .kernel_labels = FUZZ_LABELS, .adamw = fuzz_adamw};

// Saves from's parameters, moments and step to a temporary checkpoint and
// loads them into into (which may be from); either failing is a bug.
static inline void fuzz_resave(XfRuntime *from, XfRuntime *into) {
  char err[1024];
  const char *path = fuzz_tmp("resave.safetensors");
  if (!xf_checkpoint_save(from, path, NULL, 0, err, sizeof err)) fuzz_bug("cannot save: %s", err);
  XfCheckpoint *c = xf_checkpoint_open(path, err, sizeof err);
  if (!c || !xf_checkpoint_load(c, into, true, err, sizeof err)) fuzz_bug("a saved checkpoint does not load: %s", err);
  xf_checkpoint_close(c);
  remove(path);
}

static inline XfRuntime *fuzz_runtime(const XfModel *m, int64_t batch, int64_t seq) {
  char err[512];
  XfOptions o = {.batch = batch, .seq = seq, .threads = 1, .device = XF_DEVICE_CPU, .seed = 1};
  XfRuntime *rt = xf_load_model(m, m->name, &o, err, sizeof err);
  if (!rt || !xf_allocate(rt, err, sizeof err)) fuzz_bug("cannot open model %s: %s", m->name, err);
  return rt;
}

#endif
