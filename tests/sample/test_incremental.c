// test_incremental.c: the step program (incremental decoding) against the
// full forward.
//
// For every example at small sizes and for a mixer written outside the
// standard library (tests/sample/user_mixer.xf), compiled by xfc: two
// samplers over the same parameters, one running the step program and one
// the whole forward, fed the same tokens for two sequences: a prompt of 1, 7
// or context tokens, then one token at a time until well past the context
// (the context rule re-encodes the kept tokens). After every feed the logits
// of each sequence's last position agree within 1e-5 relative (max-norm),
// with the step program's workspace poisoned (NaN) before every feed, so
// that only its caches carry values between feeds. Then two sequences with
// prompts of different lengths (1 and context - 2 tokens) in one batch.
// And a model whose scores are not masked (tests/fusion/attn_near.xf) has no
// step program: xfc names the op and its location.
// Usage (from the repo root): test_incremental path/to/xfc
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xf.h"

static int passed, failed;

static double rel_max(const float *a, const float *b, int64_t n) {
  double num = 0, den = 1e-30;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= num)) num = d;
    if (fabs(a[i]) > den) den = fabs(a[i]);
  }
  return num / den;
}

static bool compile(const char *xfc, const char *src, const char *defs, const char *so, char *log, size_t loglen) {
  char cmd[2048], tmp[] = "/tmp/xf-inc-log-XXXXXX";
  int fd = mkstemp(tmp);
  if (fd < 0) return false;
  close(fd);
  snprintf(cmd, sizeof cmd, "%s -o %s %s %s 2> %s", xfc, so, src, defs, tmp);
  bool ok = system(cmd) == 0;
  FILE *f = fopen(tmp, "r");
  size_t n = f ? fread(log, 1, loglen - 1, f) : 0;
  log[n] = 0;
  if (f) fclose(f);
  unlink(tmp);
  return ok;
}

static void check(const char *xfc, const char *src, const char *defs) {
  char so[] = "/tmp/xf-inc-XXXXXX.so", log[2048], err[1024];
  int fd = mkstemps(so, 3);
  if (fd < 0) return;
  close(fd);
  if (!compile(xfc, src, defs, so, log, sizeof log)) {
    printf("FAIL %s: xfc: %s\n", src, log);
    failed++;
    unlink(so);
    return;
  }
  XfRuntime *rt = xf_open(so, &(XfOptions){.batch = 2, .threads = 2, .seed = 5, .device = XF_DEVICE_CPU}, err, sizeof err);
  unlink(so);
  if (!rt) {
    printf("FAIL %s: %s\n", src, err);
    failed++;
    return;
  }
  xf_init_params(rt, 11);
  int64_t ctx = xf_model(rt)->context, V = xf_vocab(rt), total = 2 * ctx + 3;
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)(2 * total)), one[2];
  for (int64_t i = 0; i < 2 * total; i++) tok[i] = (int32_t)((i * 7 + i / 3 + 1) % V);
  int64_t prompts[] = {1, 7, ctx};
  double worst = 0;
  bool ok = true;
  for (int p = 0; p < 3 && ok; p++) {
    XfSampler *inc = xf_sampler_open(rt, 2, true, err, sizeof err), *full = xf_sampler_open(rt, 2, false, err, sizeof err);
    ok = inc && full && xf_sampler_incremental(inc) && !xf_sampler_incremental(full);
    if (!ok) {
      printf("FAIL %s: %s\n", src, inc && full ? "no step program" : err);
    }
    int64_t P = prompts[p];
    int32_t *pr = malloc(sizeof(int32_t) * (size_t)(2 * P));
    for (int64_t i = 0; i < 2; i++) memcpy(pr + i * P, tok + i * total, sizeof(int32_t) * (size_t)P);
    const float *a = ok ? xf_sampler_feed(inc, pr, P) : NULL;
    float *keep = malloc(sizeof(float) * (size_t)(2 * V));
    for (int64_t t = P; ok && t <= total; t++) {
      memcpy(keep, a, sizeof(float) * (size_t)(2 * V));
      const float *b = t == P ? xf_sampler_feed(full, pr, P) : xf_sampler_feed(full, one, 1);
      double e = rel_max(b, keep, 2 * V);
      if (!(e <= worst) && !isnan(worst)) worst = e;  // a NaN stays
      if (t == total) break;
      one[0] = tok[t], one[1] = tok[total + t];
      a = xf_sampler_feed(inc, one, 1);
    }
    free(pr), free(keep);
    xf_sampler_close(inc), xf_sampler_close(full);
  }
  // prompts of different lengths in one batch (xf_sampler_feed_each): 1 and
  // ctx - 2 tokens, then one token each to past the context
  if (ok) {
    XfSampler *inc = xf_sampler_open(rt, 2, true, err, sizeof err), *full = xf_sampler_open(rt, 2, false, err, sizeof err);
    int64_t n[2] = {1, ctx - 2};
    int32_t *pr = malloc(sizeof(int32_t) * (size_t)(n[0] + n[1]));
    for (int64_t i = 0; i < n[0] + n[1]; i++) pr[i] = tok[i];
    const float *a = inc && full ? xf_sampler_feed_each(inc, pr, n) : NULL, *b = a ? xf_sampler_feed_each(full, pr, n) : NULL;
    ok = a && b;
    float *keep = malloc(sizeof(float) * (size_t)(2 * V));
    for (int64_t t = 0; ok && t < ctx + 3; t++) {
      double e = rel_max(b, a, 2 * V);
      if (!(e <= worst) && !isnan(worst)) worst = e;
      one[0] = tok[t + 1], one[1] = tok[total + t];
      a = xf_sampler_feed(inc, one, 1);
      memcpy(keep, a, sizeof(float) * (size_t)(2 * V));
      b = xf_sampler_feed(full, one, 1);
      a = keep;
    }
    if (!ok) printf("FAIL %s: prompts of different lengths: %s\n", src, err);
    free(pr), free(keep);
    xf_sampler_close(inc), xf_sampler_close(full);
  }
  ok = ok && worst <= 1e-5;
  int64_t frame = xf_model(rt)->step_frame;  // > 0: the caches move along a frame of positions (codegen/stepmem.c)
  char fr[48] = "";
  if (frame) snprintf(fr, sizeof fr, "; a frame of %lld", (long long)frame);
  printf("%s %-36s prompts 1, 7, %lld then to position %lld; 1 and %lld in one batch%s: logits %.1e\n", ok ? "ok  " : "FAIL",
         src, (long long)ctx, (long long)total, (long long)(ctx - 2), fr, worst);
  ok ? passed++ : failed++;
  free(tok);
  xf_close(rt);
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: test_incremental path/to/xfc\n"), 2;
  const char *xfc = argv[1];
  // the samplers' workspace NaN before every feed: only the caches may carry
  // values from one feed to the next (codegen/stepmem.c)
  setenv("XF_DEBUG_POISON", "1", 1);
  static const char *examples[] = {"transformer", "she", "he", "we", "me", "macaron", "macaron_she", "postnorm", "rk4", "linear_attention",
                                   "gla", "retnet", "ssm", "moe", "mamba", "sliding_window"};
  for (size_t i = 0; i < sizeof examples / sizeof *examples; i++) {
    char src[256], defs[256];
    snprintf(src, sizeof src, "examples/%s.xf", examples[i]);
    bool heads = !strcmp(examples[i], "transformer") || !strcmp(examples[i], "macaron") || !strcmp(examples[i], "postnorm") ||
                 !strcmp(examples[i], "rk4") || !strcmp(examples[i], "linear_attention") ||
                 !strcmp(examples[i], "gla") || !strcmp(examples[i], "retnet") || !strcmp(examples[i], "moe") ||
                 !strcmp(examples[i], "sliding_window");
    bool window = !strcmp(examples[i], "sliding_window");  // a window of 4: the frame of 4 positions moves from position 4 on
    snprintf(defs, sizeof defs, "-D layers=2 -D d=16 -D context=12 -D vocab=29 -D ffn=24%s%s", heads ? " -D heads=2" : "",
             window ? " -D window=4" : "");
    check(xfc, src, defs);
  }
  check(xfc, "tests/sample/user_mixer.xf", "");
  check(xfc, "tests/golden/sinusoidal.xf", "");
  check(xfc, "tests/grad/recurrent_blocks.xf", "");  // scans with gates, fixed decays, a selective SSM
  check(xfc, "tests/sample/user_recurrence.xf", "");  // docs/language.md's worked example: scan and shift
  check(xfc, "tests/sample/alibi.xf", "");  // a bias of positions only, i - j from iota(T)
  check(xfc, "tests/fusion/attn_variants.xf", "");  // a learned temperature, a learned bias per key, grouped queries
  check(xfc, "tests/grad/attention_variants.xf", "");  // stdlib/attention.xf: ALiBi, temperature, GQA, MQA, window, relative bias
  check(xfc, "tests/fusion/attn_bias.xf", "");  // local + global, a learned slope, block-sparse
  check(xfc, "tests/sample/position_decay.xf", "");  // a scan's decay per position [T, 1]
  check(xfc, "tests/grad/modern.xf", "");  // stdlib/modern.xf: rotary attention, SwiGLU, RMSNorm (Llama blocks)
  check(xfc, "tests/grad/moe.xf", "");  // stdlib/modern.xf: mixtures of experts, routed and dense
  check(xfc, "tests/grad/mamba.xf", "");  // stdlib/modern.xf: Mamba blocks, short convolutions
  // the CPU's blocked attention (heads of 32) over two query blocks of 64
  check(xfc, "examples/transformer.xf", "-D layers=1 -D d=64 -D context=70 -D vocab=29 -D ffn=24 -D heads=2");
  check(xfc, "tests/grad/attention_variants.xf", "-D d=64 -D context=70");  // heads of 16, G 2 and 4
  // the CPU's short-head forward (16 heads of 4: lower_attention_short.c), the
  // step program's window of query rows in its parts; a window of 4
  check(xfc, "tests/grad/attention_variants.xf", "-D d=64 -D heads=16 -D context=20");
  check(xfc, "examples/sliding_window.xf", "-D layers=2 -D d=64 -D heads=16 -D context=12 -D vocab=29 -D ffn=24 -D window=4");
  // scan_read's chunked form (xfc --scan-chunk; the GPU's default): runs of
  // the step program cut where it keeps the state, chunks of 4 and 5 over
  // context 12; decays of either sign
  check(xfc, "examples/linear_attention.xf", "-D layers=2 -D d=16 -D context=12 -D vocab=29 -D ffn=24 -D heads=2 --scan-chunk=4");
  check(xfc, "examples/gla.xf", "-D layers=2 -D d=16 -D context=12 -D vocab=29 -D ffn=24 -D heads=2 --scan-chunk=5");
  check(xfc, "tests/fusion/scan_signs.xf", "--scan-chunk=4");
  // not causal: no step program, and xfc says which op and where
  char so[] = "/tmp/xf-inc-near-XXXXXX.so", log[2048];
  int fd = mkstemps(so, 3);
  if (fd >= 0) close(fd);
  bool built = compile(xfc, "tests/fusion/attn_near.xf", "", so, log, sizeof log);
  bool named = strstr(log, "no incremental decoder") && strstr(log, "tests/fusion/attn_near.xf:10:12: softmax");
  char err[1024];
  XfRuntime *rt = built ? xf_open(so, &(XfOptions){.batch = 1, .threads = 1}, err, sizeof err) : NULL;
  unlink(so);
  XfSampler *s = rt ? xf_sampler_open(rt, 1, true, err, sizeof err) : NULL;
  bool ok = built && named && s && !xf_sampler_incremental(s) && xf_model(rt)->step == NULL;
  printf("%s tests/fusion/attn_near.xf: no step program; xfc: %s", ok ? "ok  " : "FAIL", log);
  ok ? passed++ : failed++;
  xf_sampler_close(s);
  xf_close(rt);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
