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
  int device;             // XF_DEVICE_*
  int cuda_device;        // which GPU (data-parallel: one per process)
  int64_t global_batch;   // data-parallel training: the batch over all ranks, which
                          // checkpoints record (0: batch, one process)
  int gemm;               // XfGemmKind (gemm.h): XF_GEMM_AUTO picks by the CPU's features
  int accum;              // micro-batches per optimizer step, their gradients averaged (0, 1: none)
  double clip;            // clip the gradients to this global L2 norm before AdamW (0: none)
  bool decay_matrices;    // weight decay only on parameters of rank >= 2 (false: on every one)
  bool fp32_gemms;        // float32 GEMMs on the CPU also where model.so asks for bf16
                          // products (XfModel.precision): the oracle of the tests
} XfOptions;

// XF_DEVICE_AUTO: CUDA when the model has CUDA code and a device opens, else
// the CPU (xf_device_note says why). XF_DEVICE_CUDA: CUDA or an error. With
// XF_CUDA_EMULATE=1 in the environment, "CUDA" is the emulation (gpu.h).
enum { XF_DEVICE_AUTO, XF_DEVICE_CPU, XF_DEVICE_CUDA };

typedef struct XfRuntime XfRuntime;

// NULL with a one-line message in err on failure (missing or invalid file,
// ABI mismatch, invalid descriptor, seq beyond the context, impossible batch,
// more memory than the machine has, out of memory). xf_open is xf_load, then
// xf_allocate.
XfRuntime *xf_open(const char *so_path, const XfOptions *opt, char *err, size_t errlen);
// Every check that can refuse a model and options, and the memory plan, but
// no allocation that grows with the model, batch or seq: what a caller can
// still refuse (tokenizer, checkpoint, data) is checked between xf_load and
// xf_allocate. Before xf_allocate only xf_model, xf_options, xf_device*,
// xf_vocab, xf_nparams, xf_param_name, xf_param_shape, xf_memory_bytes, xf_memory and
// xf_checkpoint_check may be called.
XfRuntime *xf_load(const char *so_path, const XfOptions *opt, char *err, size_t errlen);
// The same for a descriptor already in memory (label names it in messages);
// m must outlive the runtime.
XfRuntime *xf_load_model(const XfModel *m, const char *label, const XfOptions *opt, char *err, size_t errlen);
bool xf_allocate(XfRuntime *rt, char *err, size_t errlen);
void xf_close(XfRuntime *rt);
// The structural invariants of a descriptor that the runtime relies on
// (xf_load checks them): counts and indices in range, buffer sizes and
// shapes consistent, aliases ending at a storage root, lifetimes within the
// kernel order, unique parameter names, launch tables within their buffers
// and kernels. Pointers are not checked: a model.so is native code, trusted
// like any executable (docs/runtime.md).
bool xf_model_check(const XfModel *m, char *err, size_t errlen);

const XfModel *xf_model(const XfRuntime *rt);
const XfOptions *xf_options(const XfRuntime *rt);
// "cpu", "cuda" or "cuda-emulation": where the steps run.
const char *xf_device(const XfRuntime *rt);
// Which device, for a person: "GPU 0: <name>, sm_90" (XfOptions.cuda_device).
const char *xf_device_desc(const XfRuntime *rt);
// The cudaStream_t the steps are issued on (as void *); NULL on the CPU and
// in the emulation. A gradient bucket's kernels are done on the device once
// an event recorded on it after xf's kernel_done callback completes.
void *xf_device_stream(const XfRuntime *rt);
// Under XF_DEVICE_AUTO with a model that has CUDA code but no device: why
// the CPU runs it ("no NVIDIA GPU or driver on this machine (...): running on
// the CPU"); else NULL.
const char *xf_device_note(const XfRuntime *rt);
// What the CPU's GEMMs compute (after xf_allocate): "float32", the bf16
// products xfc --precision=bf16 asks for (xf_precision_name), or float32
// with the reason bf16 cannot run here.
const char *xf_cpu_gemms(const XfRuntime *rt);
// The vocabulary: the model's `vocab` config value, else its token limit.
int64_t xf_vocab(const XfRuntime *rt);

// Parameters from their initialisers with the counter-based RNG of rng.h
// (the same values as the reference interpreter for the same seed).
void xf_init_params(XfRuntime *rt, uint64_t seed);
int xf_nparams(const XfRuntime *rt);
float *xf_param(XfRuntime *rt, int i, const char **name, int64_t *numel);
const char *xf_param_name(const XfRuntime *rt, int i);
const float *xf_grad(XfRuntime *rt, int i);

// Token buffers [batch, seq] of the next step.
int32_t *xf_tokens(XfRuntime *rt);
int32_t *xf_targets(XfRuntime *rt);

// One training step (dropout on, then AdamW); returns the loss. With
// XfOptions.accum = N > 1 a step is N calls, one per micro-batch of
// [batch, seq] tokens: the first N - 1 keep the sum of their gradients (in
// storage planned at open, XfMemory.accum) and return their own loss; the
// N-th averages the N gradients (then over processes), clips them, runs
// AdamW and returns the mean of the N losses (and over processes).
float xf_train_step(XfRuntime *rt);
// The GEMM rate of the CPU as the kernels run it: every pool thread
// multiplying 512 x 512 matrices with the selected provider (one-thread
// GEMMs) for about 0.2 s; GFLOP/s over all threads. 0 on a CUDA device.
// Model FLOP/s over it: xf_model(rt)->train_ops x tokens/s / 1e9 / rate.
double xf_gemm_rate(XfRuntime *rt);
// The model's scalar outputs besides the loss (`output aux = side("aux")`):
// n of them; name and value of output i (0 <= i < n) after the last
// training or evaluation step (on a CUDA device read from it), for the log.
int xf_scalar_outputs(const XfRuntime *rt);
const char *xf_scalar_output_name(const XfRuntime *rt, int i);
double xf_scalar_output(XfRuntime *rt, int i);
// The kernel profile: from xf_profile_start on, the time of each kernel
// from the end of the kernel before it (the program's start for its first)
// to its own end, its GEMMs included. On the CPU the wall time (threads and
// their waits included) of every program run (training, evaluation, the
// forward), AdamW and the host's work between programs not. On a CUDA
// device the device's time of the training program's kernels (events on
// its stream; the step runs without its graph while profiling), and the
// optimizer's launches (the gradient norm, AdamW) as k = nkernels. A second
// call starts again from zero. False, saying why, when out of memory or a
// device call fails.
bool xf_profile_start(XfRuntime *rt, char *err, size_t errlen);
// Seconds in kernel k (the global order; XfModel.kernel_labels[k] names
// it; k = nkernels: the optimizer on a device) and how often it ran since
// xf_profile_start; 0 when not profiling.
void xf_profile_read(const XfRuntime *rt, int k, double *seconds, int64_t *runs);
// The learning rate of the following AdamW updates (a schedule's value at
// the next step); XfOptions.lr, the base rate checkpoints keep, is unchanged.
void xf_set_lr(XfRuntime *rt, double lr);
// The global L2 norm of the last step's gradients, before clipping (the
// mean gradients, after the reduction over processes), on either device
// (on a CUDA device summed there, and read back with the step's loss): NaN
// before the first step.
double xf_grad_norm(const XfRuntime *rt);
// The global batch row of row 0 of the next micro-batch (dropout draws from
// global element indices): set per micro-batch with XfOptions.accum > 1;
// xf_set_data_parallel sets it for one micro-batch per step.
void xf_set_row0(XfRuntime *rt, int64_t row0);
// Data-parallel training (driver/xfrun_dist.c). The gradients are reduced
// over the ranks in buckets (about bucket_bytes each, grouped in the order
// the backward pass finishes them): start(b) is called for bucket b from
// inside the training program as soon as its last gradient is final, so the
// reduction can run while the backward pass goes on; finish is called after
// the program, before AdamW, and waits for every bucket and averages the
// loss. Afterwards each gradient and the loss are the means over the ranks.
// row0 is the global batch row of this process's row 0: dropout draws from
// global element indices. Bucket composition depends only on the model, so
// the sums are the same in every run.
typedef struct {
  void *ctx;
  void (*start)(void *ctx, int bucket, float *const *grads, const int64_t *numel, int n);
  bool (*finish)(void *ctx, float *loss);
} XfReducer;
void xf_set_data_parallel(XfRuntime *rt, int64_t row0, const XfReducer *r, int64_t bucket_bytes);
// The number of gradient buckets (0: one process).
int xf_grad_buckets(const XfRuntime *rt);
// The loss without dropout and without updating anything.
float xf_eval_step(XfRuntime *rt);
// The batch and sequence length of the next training and eval steps (the
// tokens and targets then [batch, seq]): at most those planned at open,
// which are the default. False, and nothing changed, outside that.
bool xf_set_shape(XfRuntime *rt, int64_t batch, int64_t seq);
// What the device did so far (zeros on the CPU): the host's waits for it,
// training-step graphs captured, and graph replays (docs/cuda.md).
typedef struct {
  uint64_t syncs, captures, replays;
} XfDeviceCounts;
XfDeviceCounts xf_device_counts(const XfRuntime *rt);
// Logits [batch, seq, vocab] of the first batch x seq tokens of xf_tokens
// (laid out [batch, seq]), without dropout; batch and seq at most those
// planned at open, seq a multiple of XfModel.t_multiple. NULL if the model has no
// `logits` output or the sizes are outside those.
const float *xf_forward(XfRuntime *rt, int64_t batch, int64_t seq);
// Steps taken so far (AdamW's t, and the dropout step counter).
uint32_t xf_step_count(const XfRuntime *rt);
// AdamW's moments of parameter i: which 0 is exp_avg (m), 1 is exp_avg_sq (v).
float *xf_moment(XfRuntime *rt, int i, int which);
// Rank and dims of parameter i.
int xf_param_shape(const XfRuntime *rt, int i, int64_t dims[6]);
// Restores the step counter (with the parameters and moments: a resumed run).
void xf_set_step(XfRuntime *rt, uint32_t step);
// Bytes of memory planned (xf_load) and allocated, in one block, by
// xf_allocate: nothing else grows with the model, batch or seq.
size_t xf_memory_bytes(const XfRuntime *rt);
// The same, broken down as `xfc --stats` prints it (each buffer rounded up
// to 64 bytes): total = planned + persistent + moments + accum + gemm.
typedef struct {
  size_t planned;     // activations and outputs, sharing storage by lifetime
  size_t persistent;  // parameters, gradients, inputs
  size_t moments;     // AdamW's two moments per parameter
  size_t accum;       // XfOptions.accum > 1: the sum of the micro-batches' gradients
  size_t gemm;        // xfc --precision=bf16 on the CPU: the GEMMs' bf16 operands, one
                      // scratch per thread (allocated by xf_allocate, 0 before)
  size_t total;
} XfMemory;
XfMemory xf_memory(const XfRuntime *rt);

// ---- sampling: the incremental decoder --------------------------------------------
// A sampler continues nseq sequences over rt's parameters. Incrementally (the
// model's step program, XfModel.step) each call computes only the new
// positions, reading the earlier ones from per-sequence caches planned and
// allocated here, once (in device memory on a CUDA device, where the step
// program is XfCuda.launch[XF_PROG_STEP]); otherwise (incremental false, no
// step program) each call runs the whole forward over the sequences' tokens.
// Both give the same logits (to float rounding) under the same rule for the
// context: when a sequence would exceed the context length, it keeps its
// last max(context / 2, min(n, context)) tokens (n: the tokens being fed),
// which are encoded again in one pass. A model whose reads of
// earlier positions all look back a bounded distance (XfModel.step_frame:
// windows, short convolutions, shifts, scans) keeps only that many positions
// per sequence and runs the step program one position at a time
// (docs/decoding.md, "Frames").
//
//   XfSampler *s = xf_sampler_open(rt, 1, true, err, sizeof err);
//   const float *logits = xf_sampler_feed(s, prompt, n);   // [nseq, vocab]
//   logits = xf_sampler_feed(s, &next, 1);                 // one token per sequence
typedef struct XfSampler XfSampler;
XfSampler *xf_sampler_open(XfRuntime *rt, int64_t nseq, bool incremental, char *err, size_t errlen);
void xf_sampler_close(XfSampler *s);
// Appends n >= 1 tokens to every sequence (tokens[i * n + j]: token j of
// sequence i); returns the logits of each sequence's last position
// ([nseq, vocab], valid until the next call), or NULL if the model has no
// 'logits' output.
const float *xf_sampler_feed(XfSampler *s, const int32_t *tokens, int64_t n);
// The same with n[i] >= 1 tokens for sequence i, packed (sequence 0's
// first): streams of different lengths (prompts of their own) in one batch;
// logits of each sequence's own last position. The step program then runs
// from the earliest changed position to the longest sequence's end.
const float *xf_sampler_feed_each(XfSampler *s, const int32_t *tokens, const int64_t *n);
// Positions currently encoded by the longest sequence (<= the context length).
int64_t xf_sampler_length(const XfSampler *s);
// Whether feed runs the step program.
bool xf_sampler_incremental(const XfSampler *s);
// The bytes the sampler holds for its step program: caches (what later
// positions read: attention's keys and values, a convolution's inputs; kept
// between feeds) and workspace (planned by lifetimes, reused every feed).
// 0 and 0 when it recomputes.
void xf_sampler_memory(const XfSampler *s, size_t *cache, size_t *work);

// Writes a message into err and returns false (the runtime's error convention).
bool xf_errorf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// FNV-1a over n bytes, continuing from h (XF_FNV1A_BASIS to start): corpus
// keys, token cache checksums, tokenizer fingerprints.
#define XF_FNV1A_BASIS 0xcbf29ce484222325ull
uint64_t xf_fnv1a(uint64_t h, const void *p, size_t n);

// ---- data.c: corpora, token caches and batches ----------------------------------------

typedef struct {
  int32_t *tokens;
  int64_t n;      // tokens in all
  int64_t split;  // [0, split) trains, [split, n) is held out
} XfData;

// A corpus: files named on the command line, a folder meaning its *.txt
// files in name order. `hash` fingerprints the contents (not the names).
typedef struct {
  char **files;
  char **texts;
  size_t *lens;
  int n;
  uint64_t hash;
  size_t bytes;
} XfCorpus;

bool xf_corpus_read(const char *const *paths, int npaths, XfCorpus *c, char *err, size_t errlen);
void xf_corpus_free(XfCorpus *c);

struct XfTokenizer;
// The corpus as tokens: each file encoded on its own, the last `heldout`
// fraction of each file's tokens held out; the training parts come first,
// then the held-out parts. Cached in cache_dir (NULL: no cache) under a key
// of the corpus hash, the tokenizer's fingerprint and heldout. Fails on an
// empty corpus and on an id at or beyond vocab.
bool xf_data_load(const XfCorpus *c, const struct XfTokenizer *t, double heldout, int64_t vocab,
                  const char *cache_dir, XfData *d, char *err, size_t errlen);
void xf_data_free(XfData *d);
// Fills tokens and targets [batch, seq] with windows of [from, to): row r is
// the window at a start drawn by the counter-based RNG from (seed, r, step);
// targets are the tokens one position later. Needs to - from > seq.
void xf_data_batch(const XfData *d, int64_t from, int64_t to, int64_t batch, int64_t seq, uint64_t seed, uint32_t step,
                   int32_t *tokens, int32_t *targets);
// Rows [row0, row0 + rows) of the batch xf_data_batch would draw (a rank's
// share of a global batch in data-parallel training).
void xf_data_batch_rows(const XfData *d, int64_t from, int64_t to, int64_t row0, int64_t rows, int64_t seq, uint64_t seed,
                        uint32_t step, int32_t *tokens, int32_t *targets);

// The cache folder: dir if not NULL, else $XF_CACHE_DIR, else
// $XDG_CACHE_HOME/xf, else $HOME/.cache/xf; created if missing. NULL (with
// err) if none can be made.
const char *xf_cache_dir(const char *dir, char *buf, size_t len, char *err, size_t errlen);

// ---- fileio.c: whole files -----------------------------------------------------------

typedef struct {
  const void *data;
  size_t len;
} XfSpan;

// Writes the concatenated parts to path atomically: a temporary file beside
// it, fsync, rename, fsync of the folder. A crash at any point leaves path
// as it was or complete. (Test hook: XF_TEST_CRASH_SAVE=N makes the process
// exit with status 70 after writing N bytes, as a crash mid-write would.)
bool xf_write_atomic(const char *path, const XfSpan *parts, int nparts, char *err, size_t errlen);
// Reads a whole file into a NUL-terminated malloc'd buffer of *len bytes.
char *xf_read_file(const char *path, size_t *len, char *err, size_t errlen);

// ---- checkpoint.c: safetensors checkpoints -------------------------------------------
// A checkpoint is a safetensors file: every parameter as an F32 tensor under
// its DSL name (e.g. "lm.layers.0.mixer.W_ext"), AdamW's moments as
// "optimizer.exp_avg.<name>" and "optimizer.exp_avg_sq.<name>", and string
// metadata: "format" ("xf-checkpoint/1"), "model", "step", "seed", the AdamW
// settings, "rng" (the counter-based RNG's state is its seed and the step),
// the model's "context" and config values ("config.d": "128"; checkpoints
// written before them lack both, and nothing requires them), and whatever
// the caller adds (xfrun adds the tokenizer and the data key).

typedef struct {
  const char *key, *value;
} XfMeta;

// Writes atomically: a temporary file beside path, fsync, rename, fsync of
// the directory. A crash at any point leaves path as it was or complete.
bool xf_checkpoint_save(XfRuntime *rt, const char *path, const XfMeta *extra, int nextra, char *err, size_t errlen);

typedef struct XfCheckpoint XfCheckpoint;
// Reads and validates a safetensors file (header, offsets, dtypes).
XfCheckpoint *xf_checkpoint_open(const char *path, char *err, size_t errlen);
void xf_checkpoint_close(XfCheckpoint *c);
// A metadata value, or NULL.
const char *xf_checkpoint_meta(const XfCheckpoint *c, const char *key);
// Metadata entry i in file order: its key, and its value in *value (NULL when
// not a string); NULL past the last.
const char *xf_checkpoint_meta_at(const XfCheckpoint *c, int i, const char **value);
// The tensors in header order (a checkpoint's: the parameters, then the
// moments): tensor i's name, rank, dims, F32 little-endian data (numel
// elements, not necessarily 4-byte aligned); NULL past the last.
int xf_checkpoint_ntensors(const XfCheckpoint *c);
const char *xf_checkpoint_tensor(const XfCheckpoint *c, int i, int *rank, int64_t dims[8], const unsigned char **data,
                                 int64_t *numel);
// Whether c fits rt: every tensor rt needs (with optimizer, the moments and
// a valid 'step' too) with its shape, and no other. A missing, extra or
// mis-shaped tensor is an error naming it. Needs no allocation (xf_load).
bool xf_checkpoint_check(const XfCheckpoint *c, const XfRuntime *rt, bool optimizer, char *err, size_t errlen);
// Copies the parameters (and, with optimizer, the moments and the step) into
// rt after xf_checkpoint_check; on an error rt is left untouched.
bool xf_checkpoint_load(const XfCheckpoint *c, XfRuntime *rt, bool optimizer, char *err, size_t errlen);

#endif
