// passes.h: analyses and transformations over the graph IR. Each pass is
// one file with one entry point; the driver's pipeline calls them in order.
#ifndef XF_PASSES_H
#define XF_PASSES_H

#include <stdio.h>

#include "../ir/ir.h"
#include "../runtime/plan.h"

// ---- stats.c: parameter and arithmetic-operation counts -------------------

// Operation counts follow the conventions of seed 001 section 7 (Tables
// 3-4): a product of an m x k and a k x n matrix is m*k*n multiplications
// and m*(k-1)*n additions; work on entries that a causal mask discards is
// not counted; softmax over n entries is n exponentiations, n-1 additions
// and n divisions.
typedef struct {
  int64_t params;
  int64_t mul, add, div, exp, other;  // `other`: comparisons, sqrt, tanh, log, ...
} Cost;

int64_t cost_total_ops(const Cost *c);

// Fills incl[s] for every scope s with the cost of s and everything below
// it, for one forward pass (or, with backward, the backward part of the
// graph) of batch 1 and sequence length T. Parameters are counted in the
// forward pass.
void stats_compute(const Graph *g, int64_t T, bool backward, Cost *incl);

// Training (forward + backward) operations per token of g (with its backward
// pass) at T = context: what --stats prints, XfModel.train_ops.
double stats_train_ops_per_token(const Graph *g);

// The table printed by `xfc --stats`; with a backward pass in g, also the
// backward and training costs per token.
void stats_print(FILE *f, const Graph *g);

// ---- autodiff.c: reverse-mode gradients --------------------------------------

// Appends the backward pass of output "loss" and outputs "grad.<param>".
bool autodiff(Graph *g, char *err, size_t errlen);
// Whether the table has a gradient rule for op (every differentiable op must).
bool autodiff_has_rule(OpKind op);

// ---- fuse_attention.c: causal attention as one op --------------------------

// Rewrites every softmax(causal_mask(q @ transpose(k) * s)) @ v of the
// forward graph into ATTENTION(q, k, v); returns how many. Each
// attention-like product it leaves alone is recorded in notes[0 .. cap)
// (*nnotes of them; notes may be NULL): the softmax and the first reason.
typedef struct {
  int node;       // the softmax
  char why[512];
} FuseNote;
int fuse_attention(Graph *g, FuseNote *notes, int cap, int *nnotes);

// ---- fuse_scan.c: a scan of outer products read out as one op ----------------

// Rewrites every sum(q * scan(a, k * v, t), R - 2) of the forward graph that
// fuse_scan.c's conditions admit into SCAN_READ(q, k, v, a); returns how many.
int fuse_scan(Graph *g);

// ---- remat.c: recompute cheap forward values in the backward ----------------

// Returns how many forward nodes got a copy in the backward (see remat.c).
int remat(Graph *g);

// ---- causal.c: positions for the incremental decoder ------------------------

// time_axis[n] (nnodes entries): the axis of node n indexing positions, -1
// for none; false (with *bad the offending node, -1 if none, and why) when
// the logits are not provably causal (see causal.c).
bool causal_analyze(const Graph *g, int *time_axis, int *bad, char *why, size_t whylen);

// ---- fuse_groups.c: fusion groups for the schedule --------------------------

enum { FG_NONE, FG_WEIGHT_GRAD, FG_MAP, FG_MATMUL_MAP, FG_NORM_DG, FG_NORM_MAP };
#define FG_MAX_LEAVES 8
// into[node]: the root whose kernel computes node, or -1; kind[root]: FG_*;
// stored[root]: the member its kernel also stores, or -1; terms[root]: the
// _DYXH its kernel also writes (a second output), or -1; after[node]: the
// root whose kernel node's kernel follows, or -1 (node order otherwise).
// enable false: no groups (the --no-fuse schedule). See fuse_groups.c.
void fuse_groups(const Graph *g, bool enable, int *into, int *kind, int *stored, int *terms, int *after);

// memplan, memplan_after_caches: runtime/plan.h (the runtime plans with them too).

#endif
