// xf.h: the xf runtime, usable from any C program.
//
//   XfRuntime *rt = xf_open("model.so", &(XfOptions){.batch = 8, .seq = 64}, err, sizeof err);
//   xf_init_params(rt, seed);
//   memcpy(xf_tokens(rt), ids, ...); memcpy(xf_targets(rt), next_ids, ...);
//   float loss = xf_train_step(rt);      // forward, backward, AdamW
//   xf_close(rt);
//
// xf_open loads the model (checking its ABI version), and plans and
// allocates all memory for the given batch and sequence length at once:
// parameters, gradients, AdamW moments and activations. No step allocates.
// Work is split over a pool of `threads` threads; matrix products call
// OpenBLAS.
#ifndef XF_H
#define XF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xf_abi.h"

typedef struct {
  int64_t batch, seq;     // B and T of every step (seq <= the model's context; 0: the context)
  int threads;            // 0: all cores
  double lr;              // AdamW (seed 001 Table 1): 1e-3
  double beta1, beta2;    // 0.9, 0.999
  double eps;             // 1e-8
  double weight_decay;    // 0.01 (PyTorch's default)
  uint64_t seed;          // parameters and dropout masks
} XfOptions;

typedef struct XfRuntime XfRuntime;

// NULL with a one-line message in err on failure (missing or invalid file,
// ABI mismatch, seq beyond the context, impossible batch, out of memory).
XfRuntime *xf_open(const char *so_path, const XfOptions *opt, char *err, size_t errlen);
void xf_close(XfRuntime *rt);

const XfModel *xf_model(const XfRuntime *rt);
const XfOptions *xf_options(const XfRuntime *rt);
// The vocabulary: the model's `vocab` config value, else its token limit.
int64_t xf_vocab(const XfRuntime *rt);

// Parameters from their initialisers with the counter-based RNG of rng.h
// (the same values as the reference interpreter for the same seed).
void xf_init_params(XfRuntime *rt, uint64_t seed);
int xf_nparams(const XfRuntime *rt);
float *xf_param(XfRuntime *rt, int i, const char **name, int64_t *numel);
const float *xf_grad(XfRuntime *rt, int i);

// Token buffers [batch, seq] of the next step.
int32_t *xf_tokens(XfRuntime *rt);
int32_t *xf_targets(XfRuntime *rt);

// One training step (dropout on, then AdamW); returns the loss.
float xf_train_step(XfRuntime *rt);
// The loss without dropout and without updating anything.
float xf_eval_step(XfRuntime *rt);
// Logits [batch, seq, vocab] of the tokens, without dropout.
const float *xf_forward(XfRuntime *rt);
// Steps taken so far (AdamW's t, and the dropout step counter).
uint32_t xf_step_count(const XfRuntime *rt);
// Bytes of memory planned at open.
size_t xf_memory_bytes(const XfRuntime *rt);

#endif

// Writes a message into err and returns false (the runtime's error convention).
bool xf_errorf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// ---- data.c: token files and batches ---------------------------------------------

typedef struct {
  int32_t *tokens;
  int64_t n;      // tokens in all
  int64_t split;  // [0, split) trains, [split, n) is held out
} XfData;

// A raw byte file as tokens (one byte, one token: vocabulary 256). The last
// `heldout` fraction is held out. Fails on a missing or empty file and on a
// token at or beyond vocab.
bool xf_data_load_bytes(const char *path, double heldout, int64_t vocab, XfData *d, char *err, size_t errlen);
void xf_data_free(XfData *d);
// Fills tokens and targets [batch, seq] with windows of [from, to): row r is
// the window at a start drawn by the counter-based RNG from (seed, r, step);
// targets are the tokens one position later. Needs to - from > seq.
void xf_data_batch(const XfData *d, int64_t from, int64_t to, int64_t batch, int64_t seq, uint64_t seed, uint32_t step,
                   int32_t *tokens, int32_t *targets);
