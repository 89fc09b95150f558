// stream.c: sampling from C with the xf runtime (runtime/xf.h), streaming
// each token as it is drawn. The tokenizer is the one the checkpoint carries
// (xfrun train stores it as metadata), so the printed text is what
// `xfrun sample` prints for the same settings.
//
//   stream model.so model.safetensors "Once upon a time" [tokens] [top-p] [seed]
//
// Greedy when top-p is 0 (the default); else temperature 1, nucleus top-p,
// token k drawn with the uniform of (seed, k) as xfrun does for one sample.
// Built with the project as build/xf-stream (CMakeLists.txt: it links the
// static runtime, xf_runtime); tests/sample/run_stream.sh checks its text
// against xfrun sample's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "sample.h"
#include "tokenizer.h"
#include "xf.h"

static int fail(const char *what, const char *why) {
  fprintf(stderr, "stream: %s: %s\n", what, why);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 4 || argc > 7) {
    fprintf(stderr, "usage: stream model.so checkpoint.safetensors prompt [tokens 40] [top-p 0: greedy] [seed 1]\n");
    return 2;
  }
  int64_t tokens = argc > 4 ? atoll(argv[4]) : 40;
  double top_p = argc > 5 ? atof(argv[5]) : 0;
  uint64_t seed = argc > 6 ? strtoull(argv[6], NULL, 10) : 1;
  char err[1024];

  // The runtime for one sequence of the model's context; the sampler needs no batch of its own.
  XfRuntime *rt = xf_load(argv[1], &(XfOptions){.batch = 1, .threads = 1}, err, sizeof err);
  if (!rt) return fail(argv[1], err);
  XfCheckpoint *ck = xf_checkpoint_open(argv[2], err, sizeof err);
  if (!ck || !xf_checkpoint_check(ck, rt, false, err, sizeof err) || !xf_allocate(rt, err, sizeof err) ||
      !xf_checkpoint_load(ck, rt, false, err, sizeof err))
    return fail(argv[2], err);
  const char *json = xf_checkpoint_meta(ck, "tokenizer.json");
  XfTokenizer *tok = json ? xf_tok_parse(json, strlen(json), argv[2], err, sizeof err) : xf_tok_bytes();
  if (!tok) return fail("the checkpoint's tokenizer", err);

  int64_t n = 0, V = xf_vocab(rt);
  int32_t *prompt = xf_tok_encode(tok, argv[3], strlen(argv[3]), &n);
  float *probs = malloc(sizeof(float) * (size_t)V);
  int32_t *order = malloc(sizeof(int32_t) * 2 * (size_t)V);  // xf_sample_filter's scratch
  if (!prompt || n < 1 || !probs || !order) return fail(argv[3], "an empty prompt, or out of memory");

  XfSampler *s = xf_sampler_open(rt, 1, true, err, sizeof err);  // caches for one sequence, allocated once
  if (!s) return fail("xf_sampler_open", err);
  XfSampling how = {.temperature = top_p > 0 ? 1 : 0, .top_k = 0, .top_p = top_p > 0 ? top_p : 1};
  if (!xf_sampling_check(&how, err, sizeof err)) return fail("sampling", err);

  fputs(argv[3], stdout);
  const float *logits = xf_sampler_feed(s, prompt, n);  // [1, V]: the prompt's last position
  for (int64_t k = 0; k < tokens && logits; k++) {
    xf_sample_filter(logits, V, &how, probs, order);
    int32_t id = xf_sample_draw(probs, V, xf_rand_uniform(seed, XF_STREAM_SAMPLE, (uint64_t)k, 0));
    size_t len;
    const char *bytes = xf_tok_token_bytes(tok, id, &len);
    if (bytes) fwrite(bytes, 1, len, stdout);
    fflush(stdout);                          // the token is out before the next step runs
    logits = xf_sampler_feed(s, &id, 1);     // one position: the step program
  }
  fputc('\n', stdout);

  xf_sampler_close(s);
  free(prompt), free(probs), free(order);
  xf_tok_free(tok);
  xf_checkpoint_close(ck);
  xf_close(rt);
  return logits ? 0 : fail(argv[1], "no 'logits' output to sample from");
}
