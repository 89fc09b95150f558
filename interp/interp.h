// interp.h: the reference interpreter, the oracle of every backend.
//
// It executes any graph (forward, or forward plus backward) node by node
// with plain loops, at concrete sizes B and T. Values are held in double;
// in float32 mode every node's result (and every parameter) is rounded to
// float, so it tracks what a float32 backend computes. Nothing is clever
// here on purpose: it must be obviously correct.
#ifndef XF_INTERP_H
#define XF_INTERP_H

#include <stdbool.h>
#include <stdint.h>

#include <stdio.h>

#include "../ir/ir.h"

typedef struct {
  int64_t B, T;      // 1 <= T <= graph t_max
  bool f32;          // round every result to float32
  const bool *bf16;  // [nnodes] or NULL: round node i's result to bf16 (to
                     // nearest even, after float32) where bf16[i]: the
                     // stored values of xfc --precision=bf16 (codegen/storage.c)
  bool training;     // dropout active (else the identity)
  uint64_t seed;     // dropout masks: xf_rand_uniform(seed, stream, i, step)
  uint32_t step;
} InterpConfig;

typedef struct Interp Interp;

// NULL with a message in err when the sizes are invalid or memory is short.
Interp *interp_new(const Graph *g, InterpConfig cfg, char *err, size_t errlen);
void interp_free(Interp *in);

// Parameter storage (numel of the param node's shape), owned by the
// interpreter and kept across runs.
double *interp_param(Interp *in, int node);
// Every parameter from its initialiser: element i of parameter P is
// normal/uniform draw i of stream xf_stream_of(P's name) under seed.
void interp_init_params(Interp *in, uint64_t seed);

// Token ids of the input named name ([B, T] as the graph says); copied.
bool interp_set_input(Interp *in, const char *name, const int32_t *ids, char *err, size_t errlen);
// The largest id + 1 an input may hold: the smallest vocabulary among the
// ops that read it (embed tables, cross-entropy classes, one-hot).
int64_t interp_input_limit(const Graph *g, int input_node);

// Evaluates nodes [0, upto) (upto <= 0: all). False with a message on a
// run-time error (a token id out of range).
bool interp_run(Interp *in, int upto, char *err, size_t errlen);

// A node's value after interp_run, and its element count.
const double *interp_value(const Interp *in, int node);
int64_t interp_numel(const Interp *in, int node);
// The value of a named output (its first element for scalars); NaN if none.
double interp_output_scalar(const Interp *in, const char *name);
int interp_output_node(const Graph *g, const char *name);

// causal_probe.c: whether output `name`'s rows at positions t < T - 1 are
// the same when the tokens run at length T = min(t_max, 8) (into *T) and at
// T - 1 (random ids, the same parameters, in double): 1 yes (or nothing to
// compare), 0 no (*pos the first position that changed, *diff the largest
// change), -1 an error in err.
int interp_causal_probe(const Graph *g, const char *name, int64_t *T, int64_t *pos, double *diff, char *err, size_t errlen);

void interp_set_step(Interp *in, uint32_t step);
void interp_set_training(Interp *in, bool training);

#endif

// ---- gradcheck.c -------------------------------------------------------------

typedef struct {
  int64_t B, T;         // sizes of the check (T <= context)
  uint64_t seed;        // parameters, tokens and dropout masks
  bool dropout;         // keep dropout on, with fixed masks (default: off)
  int64_t max_elems;    // elements checked per parameter (<= 0: all)
  double tol;           // pass if every relative error is below
} GradCheckConfig;

// Compares the gradient outputs of g (after autodiff) with 5-point central
// finite differences of its loss, in float64, and prints one line per
// parameter. Relative error of a parameter: max_i |a_i - f_i| / max_i
// max(|a_i|, |f_i|) over its checked elements (a: autodiff, f: finite
// differences). Parameters are drawn around their initialiser's centre with
// standard deviation 0.5 so that every gradient is far above rounding.
// Returns false if any error is at least tol or the run fails.
bool gradcheck(const Graph *g, const GradCheckConfig *cfg, FILE *out, double *worst);
