// xf_dump.c: what xf computes for one batch, for tests/interop/test_pytorch.py
// to compare with the module of xfc --emit=pytorch.
//
//   xf_dump model.so checkpoint.safetensors B T STEPS OUT_DIR
//
// Loads the checkpoint's parameters into model.so (batch B, seq T, one
// thread, AdamW at lr 1e-3 and weight decay 0.01 as xfrun), sets tokens[b, t] = (7 b + 13 t + 1) mod
// V and targets = (tokens + 1) mod V, and writes into OUT_DIR:
//   logits.f32   the forward's logits [B, T, V]
//   grads.f32    every gradient of the first training step, in parameter order
//   params.txt   "name numel" per parameter, in that order
//   loss.txt     the loss of each of STEPS training steps on that batch
//   final.f32    every parameter after the STEPS AdamW updates
// Exit status 1 with a message on any failure.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xf.h"

static int die(const char *what, const char *err) {
  fprintf(stderr, "xf_dump: %s: %s\n", what, err);
  return 1;
}

static FILE *out(const char *dir, const char *name, const char *mode) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return fopen(path, mode);
}

int main(int argc, char **argv) {
  if (argc != 7) return fprintf(stderr, "usage: xf_dump model.so checkpoint.safetensors B T STEPS OUT_DIR\n"), 1;
  char err[1024];
  int64_t B = atoll(argv[3]), T = atoll(argv[4]), steps = atoll(argv[5]);
  XfOptions o = {.batch = B, .seq = T, .threads = 1, .seed = 1, .device = XF_DEVICE_CPU, .lr = 1e-3, .weight_decay = 0.01};
  XfRuntime *rt = xf_open(argv[1], &o, err, sizeof err);
  if (!rt) return die(argv[1], err);
  XfCheckpoint *ck = xf_checkpoint_open(argv[2], err, sizeof err);
  if (!ck || !xf_checkpoint_check(ck, rt, false, err, sizeof err) || !xf_checkpoint_load(ck, rt, false, err, sizeof err))
    return die(argv[2], err);
  xf_checkpoint_close(ck);
  int64_t V = xf_vocab(rt);
  int32_t *tok = xf_tokens(rt), *tgt = xf_targets(rt);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      tok[b * T + t] = (int32_t)((7 * b + 13 * t + 1) % V);
      tgt[b * T + t] = (int32_t)((tok[b * T + t] + 1) % V);
    }
  const float *logits = xf_forward(rt, B, T);
  FILE *fl = out(argv[6], "logits.f32", "wb"), *fg = out(argv[6], "grads.f32", "wb"), *fp = out(argv[6], "params.txt", "w");
  FILE *fs = out(argv[6], "loss.txt", "w"), *ff = out(argv[6], "final.f32", "wb");
  if (!logits || !fl || !fg || !fp || !fs || !ff) return die(argv[6], "cannot run the forward or write the outputs");
  fwrite(logits, sizeof(float), (size_t)(B * T * V), fl);
  for (int64_t s = 0; s < steps; s++) {
    fprintf(fs, "%.9g\n", xf_train_step(rt));
    for (int p = 0; s == 0 && p < xf_nparams(rt); p++) {
      const char *name;
      int64_t n;
      xf_param(rt, p, &name, &n);
      const float *g = xf_grad(rt, p);
      fprintf(fp, "%s %lld\n", name, (long long)n);
      for (int64_t i = 0; i < n; i++) {
        float z = g ? g[i] : 0;
        fwrite(&z, sizeof z, 1, fg);
      }
    }
  }
  for (int p = 0; p < xf_nparams(rt); p++) {
    int64_t n;
    const float *w = xf_param(rt, p, NULL, &n);
    fwrite(w, sizeof(float), (size_t)n, ff);
  }
  if (fclose(fl) || fclose(fg) || fclose(fp) || fclose(fs) || fclose(ff)) return die(argv[6], "cannot write the outputs");
  xf_close(rt);
  return 0;
}
