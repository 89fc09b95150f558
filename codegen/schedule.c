// schedule.c: graph IR -> unfused kernel schedule (see kernel.h).
//
// Requires: a verified graph with a backward pass (autodiff) and outputs
// "loss", "logits" (optional) and "grad.<param>".
// Guarantees: every IR node has a buffer (aliases for reshapes); every node
// that computes has exactly one kernel, but for what a fused schedule folds
// into another kernel (group members, transposes into a GEMM's flag, the
// slices of a split output: Kernel.nout); kernels of equal signature share a
// class; every storage root has its lifetime in the kernel order; each program lists the kernels it
// needs, in topological order: PROG_TRAIN everything reaching the loss, the
// gradients and the other scalar outputs, PROG_EVAL the loss's and the
// scalar outputs' forward cone, PROG_SAMPLE the logits'.
#include "kernel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/passes.h"

SymSize symsize_of(Dim d) {
  if (d.kind == DIM_B) return (SymSize){1, 1, 0, 1};
  if (d.kind == DIM_T) return (SymSize){1, 0, 1, dim_tdiv(d)};
  return (SymSize){d.n, 0, 0, 1};
}

// coef / tdiv in lowest terms
SymSize symsize_mul(SymSize a, SymSize b) {
  int64_t c = a.coef * b.coef, t = symsize_den(a) * symsize_den(b), x = c < 0 ? -c : c, y = t;
  while (y) {
    int64_t r = x % y;
    x = y, y = r;
  }
  if (x > 1) c /= x, t /= x;
  return (SymSize){c, a.pb + b.pb, a.pt + b.pt, t};
}
bool symsize_eq(SymSize a, SymSize b) {
  return a.coef * symsize_den(b) == b.coef * symsize_den(a) && a.pb == b.pb && a.pt == b.pt;
}

SymSize symsize_prod(const Shape *s, int from, int to) {
  SymSize r = {1, 0, 0, 1};
  for (int i = from; i < to; i++) r = symsize_mul(r, symsize_of(s->d[i]));
  return r;
}

int64_t symsize_eval(SymSize s, int64_t B, int64_t T) {
  int64_t v = s.coef;
  for (int i = 0; i < s.pb; i++) v *= B;
  for (int i = 0; i < s.pt; i++) v *= T;
  return v / symsize_den(s);
}

// SCAN_READ(_GRAD): the sequences (p, m) of k [P.., K, M.., dk, 1]; their states [dk, dv].
static SymSize read_sequences(const Graph *g, const Node *n) {
  const Shape *ks = &g->nodes[n->in[1]].shape;
  return symsize_mul(symsize_prod(ks, 0, n->axis), symsize_prod(ks, n->axis + 1, ks->rank - 2));
}

// The parallel outer extent of the kernel computing n.
static SymSize outer_of(const Graph *g, const Node *n) {
  const Shape *s = &n->shape;
  const Shape *x = n->nin ? &g->nodes[n->in[0]].shape : NULL;
  switch (n->op) {
  case OP_MATMUL: return symsize_prod(s, 0, s->rank - 2);                 // one gemm per batch entry
  case OP_ATTENTION_DBIAS: {  // rows of db (lower_attention.c)
    Dim seq[IR_MAX_RANK + 1], t;
    int ns = ir_attention_seq(g, n, seq, &t);
    return symsize_prod(s, 0, s->rank - (ir_attention_bias_axis(s, ns, ns + 1) >= 0));
  }
  case OP_ATTENTION: case OP_ATTENTION_LSE: case OP_ATTENTION_GRAD: {  // query rows; sequences, all heads (lower.c)
    int tax = x->rank - 2 - (n->axis != 0);
    return symsize_prod(x, 0, n->op == OP_ATTENTION_GRAD ? tax : tax + 1);
  }
  case OP_SUM: case OP_MEAN: case OP_MAX:  // rows of the output (llvm.c: emit_reduce_rows)
    if (ir_reduce_end(n) < x->rank - 1) return symsize_mul(symsize_prod(x, 0, n->axis), symsize_prod(x, ir_reduce_end(n) + 1, x->rank - 1));
    return symsize_prod(x, 0, n->axis);
  case OP_SOFTMAX: return symsize_prod(x, 0, n->axis);
  case OP_SCAN: case OP_SCAN_REV: return symsize_prod(s, 0, n->axis);  // one sequence of states each
  case OP_SCAN_READ: case OP_SCAN_READ_GRAD: return read_sequences(g, n);  // one sequence (p, m) each
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_LSE: return symsize_prod(x, 0, x->rank - 1);  // phase 0: rows
  case OP_SCATTER_ADD: return (SymSize){1, 0, 0, 1};                       // serial
  case OP_ROUTED_MATMUL:  // a part of an expert each (kernel.h ROUTE_SPLIT, _DW)
    return symsize_mul(symsize_of(g->nodes[n->in[1]].shape.d[0]), (SymSize){ROUTE_SPLIT, 0, 0, 1});
  case OP_ROUTED_MATMUL_DW: return symsize_mul(symsize_of(n->len), (SymSize){ROUTE_SPLIT_DW, 0, 0, 1});
  case OP_CONV_DW: return symsize_of(n->shape.d[0]);                      // one lag each
  case OP_CAUSAL_CONV: case OP_CONV_DX:                               // matrix kind: one sequence each
    if (n->conv == CONV_MATRIX) return symsize_prod(x, 0, x->rank - 2);
    return symsize_prod(s, 0, s->rank - 1);
  default: return s->rank ? symsize_prod(s, 0, s->rank - 1) : (SymSize){1, 0, 0, 1};  // rows
  }
}

// Attention's CPU forms, costed in vector-lane operations per (query, key,
// head) triple (16 float lanes, two FMA units):
//   rows     a query row per outer index, its dot products q . k and the
//            sums p v over the features: the heads side by side in the
//            lanes when h <= 8 (features unrolled), else eight partial
//            sums of one head (llvm.c row_reduce): 2 (h + e) / min(NH, 16)
//            or 2 (h + e) / 8, plus the exponential (about 20 operations)
//            on min(NH, 16) lanes or on one
//   blocked  the same products as GEMMs of BQ query rows against the keys,
//            whose rate falls with a short inner dimension k = h:
//            2 (h + e) / (32 min(1, h / 16)), plus the softmax's passes
//            over the block of scores (max, exp, sum, scale: about 16
//            operations on 16 lanes)
// Measured (2 layers of examples/transformer.xf, d 128, batch 64 x 128,
// training tokens/s, AVX-512, oneDNN 2.6.3): heads of 4 (NH 32) rows 33,771
// against blocked 31,600; of 8 (NH 16) 35,428 against 36,189; of 16 (NH 8)
// 23,957 against 38,161. The rule picks rows, blocked, blocked.
// The blocked gradient holds the scores and dP of BQ query rows against
// every key: 2 BQ att_score_ld(t_max) floats on the stack; the blocked gradient of a
// score bias (ATTENTION_DBIAS with a query and a key axis) a third array,
// the bias's rows summed over the sequences reading them.
enum { ATT_BQ = 64, ATT_BQ_MIN = 16, ATT_STACK_FLOATS = 1 << 18 };
static double att_rows_cost(int64_t NH, int64_t h, int64_t e) {
  double lanes = h <= 8 ? (NH < 16 ? (double)NH : 16) : 8;
  return 2.0 * (double)(h + e) / lanes + 20.0 / (h <= 8 ? lanes : 1);
}
static double att_blocked_cost(int64_t h, int64_t e) {
  double eff = h >= 16 ? 1 : (double)h / 16;
  return 2.0 * (double)(h + e) / (32 * eff) + 1.0;
}

int schedule_att_block(const Graph *g, const Node *n) {
  if (n->op != OP_ATTENTION && n->op != OP_ATTENTION_LSE && n->op != OP_ATTENTION_GRAD && n->op != OP_ATTENTION_DBIAS) return 0;
  const Shape *qs = &g->nodes[n->in[0]].shape, *vs = &g->nodes[n->in[2]].shape;
  int r = qs->rank;
  int64_t NH = n->axis ? qs->d[r - 2].n : 1, h = qs->d[r - 1].n, e = vs->d[r - 1].n;
  if (att_blocked_cost(h, e) >= att_rows_cost(NH, h, e)) return 0;
  // the bias's gradient blocked where the bias has a query and a key axis
  // (lower_attention_dbias_blocked): a third [BQ, t_max] array, G
  int arrays = 2;
  if (n->op == OP_ATTENTION_DBIAS) {
    Dim seq[IR_MAX_RANK + 1], t;
    int ns = ir_attention_seq(g, n, seq, &t);
    const Shape *bs = &g->nodes[n->in[ir_attention_bias(n)]].shape;
    if (ir_attention_bias_axis(bs, ns, ns) < 0 || ir_attention_bias_axis(bs, ns, ns + 1) < 0) return 0;
    arrays = 3;
  }
  int64_t bq = ATT_BQ, ld = att_score_ld(g->t_max);
  while (bq > ATT_BQ_MIN && arrays * bq * ld > ATT_STACK_FLOATS) bq /= 2;
  // a key window W (Node.start): a block reads W + BQ keys for its rows'
  // W (att_block_first_key), so BQ <= W / 4 (at most a quarter more; W 128:
  // 32 rows)
  while (n->start > 0 && bq > ATT_BQ_MIN && 4 * bq > n->start) bq /= 2;
  return arrays * bq * ld <= ATT_STACK_FLOATS ? (int)bq : 0;
}

// The CPU row form's gradient of a score bias inside the attention's
// gradient: the bias per head with a query and a key axis, broadcast along
// the other sequence axes ([NH, T, T] for [B, NH, T, T] scores), so that a
// group of HG heads owns its rows of db and of dq, dk, dv. Its kernel runs
// one head group per outer index over every sequence of those heads, the
// group's bias and db in locals [t_max, t_max, HG] (read and written once,
// the heads side by side), instead of a second kernel recomputing every
// probability (ATTENTION_DBIAS's). HG: the largest divisor of NH in
// [min(NH, 8), 16] (the heads fill the vector lanes) whose two locals fit
// ATT_GROUP_FLOATS (1 MiB: with the sequence's rows, a core's L2).
// Measured (2 layers of examples/relative_bias.xf, NH 32, T 128, batch
// 64 x 128, AVX-512, 2 threads): the gradient with db 33.0 ms per layer
// at HG 8, 42.3 at HG 4, 71.5 at HG 16 (2 MiB of locals); the row form
// and ATTENTION_DBIAS's kernel 33.4 + 21.5.
enum { ATT_GROUP_FLOATS = 1 << 18 };
int schedule_att_dbias_heads(const Graph *g, const Node *n) {
  if (n->op != OP_ATTENTION_GRAD || n->axis == 0 || ir_attention_bias(n) < 0 || schedule_att_block(g, n)) return 0;
  const Shape *qs = &g->nodes[n->in[0]].shape, *bs = &g->nodes[n->in[ir_attention_bias(n)]].shape;
  int64_t NH = qs->d[qs->rank - 2].n;
  Dim seq[IR_MAX_RANK + 1], t;
  int ns = ir_attention_seq(g, n, seq, &t);
  if (NH < 2 || ir_attention_bias_axis(bs, ns, ns - 1) < 0 || ir_attention_bias_axis(bs, ns, ns) < 0 ||
      ir_attention_bias_axis(bs, ns, ns + 1) < 0)
    return 0;
  for (int x = 0; x < ns - 1; x++)
    if (ir_attention_bias_axis(bs, ns, x) >= 0) return 0;
  for (int64_t hg = NH < 16 ? NH : 16; hg >= (NH < 8 ? NH : 8); hg--)
    if (NH % hg == 0 && 2 * hg * g->t_max * g->t_max <= ATT_GROUP_FLOATS) return (int)hg;
  return 0;
}

// An ATTENTION_DBIAS p with the inputs and attributes of an ATTENTION_GRAD r
// of the CPU row form's head groups (schedule_att_dbias_heads): r's kernel
// writes p (terms[r] = p, into[p] = r).
static void att_dbias_terms(const Graph *g, int *into, int *terms) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *p = &g->nodes[i];
    if (p->op != OP_ATTENTION_DBIAS || into[i] >= 0) continue;
    for (int r = 0; r < i; r++) {
      const Node *a = &g->nodes[r];
      if (a->op != OP_ATTENTION_GRAD || terms[r] >= 0 || into[r] >= 0) continue;
      bool same = a->axis == p->axis && a->fval == p->fval && a->start == p->start && a->in[6] == p->in[4];
      for (int k = 0; same && k < 4; k++) same = a->in[k] == p->in[k];
      if (!same || !schedule_att_dbias_heads(g, a)) continue;
      into[i] = r, terms[r] = i;
      break;
    }
  }
}

int schedule_conv_chunk(const Graph *g, const Node *n) {
  if ((n->op != OP_CAUSAL_CONV && n->op != OP_CONV_DX && n->op != OP_CONV_DW) || n->conv != CONV_MATRIX) return 0;
  Dim l = n->op == OP_CONV_DW ? n->shape.d[0] : g->nodes[n->in[1]].shape.d[0];  // the lags L
  // C = the largest of 16 (128 lags: 8 chunks), 8, 4, 2, 1 dividing L: every
  // constant L has a chunked form, its products on the tensor cores (the
  // direct form, a thread per output element on the FP32 cores, is 30-100x
  // slower at Table 1 widths: xfc --emit=cost)
  static const int64_t chunks[] = {16, 8, 4, 2, 1};
  for (size_t i = 0; l.kind == DIM_CONST && i < sizeof chunks / sizeof *chunks; i++)
    if (l.n % chunks[i] == 0) return (int)chunks[i];
  return 0;
}

int schedule_conv_dw_tile(const Graph *g, const Node *n) {
  if (n->op != OP_CONV_DW || n->conv == CONV_MATRIX) return 0;
  const char *hook = getenv("XF_TEST_CONV_DW_DIRECT");  // test hook: efff928's one-pass form (tests/cuda/cost.sh)
  if (hook && *hook == '1') return 0;
  const Shape *xs = &g->nodes[n->in[0]].shape;
  Dim d = xs->d[xs->rank - 1];
  if (d.kind != DIM_CONST) return 0;
  int ct = 8;
  while (d.n % ct) ct--;
  return ct;
}

bool schedule_reduce_rows_gpu(const Graph *g, const Node *n) {
  if (n->op != OP_SUM && n->op != OP_MEAN && n->op != OP_MAX) return false;
  const Shape *xs = &g->nodes[n->in[0]].shape;
  bool over_bt = false;  // sums over the batch or the positions (gradients of biases and gains), not a
                         // fixed axis inside a position (a readout over a state's rows: a row each)
  for (int i = n->axis; i <= ir_reduce_end(n); i++) over_bt = over_bt || xs->d[i].kind != DIM_CONST;
  return over_bt && ir_reduce_end(n) < xs->rank - 1 && xs->d[xs->rank - 1].kind == DIM_CONST;
}

int64_t gpu_red_tile_width(int64_t lc, bool split) {
  int64_t cw = split ? 32 : 8;
  while (cw > 1 && (lc % cw || (!split && lc / cw < GPU_RED_TILES))) cw /= 2;
  return cw;
}

int schedule_red_split(const Graph *g, const Node *n, int fusion, bool gpu) {
  const char *hook = getenv("XF_TEST_RED_ONE_PASS");  // test hook: every reduction over rows in one pass
  if (!gpu || (hook && *hook == '1') || (fusion != FG_NONE && fusion != FG_NORM_DG) || !schedule_reduce_rows_gpu(g, n))
    return 0;
  const Shape *xs = &g->nodes[n->in[0]].shape;
  int r = xs->rank, end = ir_reduce_end(n);
  int64_t rows = 1, lc = xs->d[r - 1].n;  // output rows: the axes before the reduced ones and after them
  for (int i = 0; i < r - 1; i++) {
    if (i >= n->axis && i <= end) continue;
    if (xs->d[i].kind != DIM_CONST) return 0;
    rows *= xs->d[i].n;
  }
  if (rows * (lc / gpu_red_tile_width(lc, false)) >= GPU_RED_MIN_BLOCKS) return 0;
  int64_t base = rows * (lc / gpu_red_tile_width(lc, true)), S = (GPU_RED_BLOCKS + base - 1) / base;
  return S < 2 ? 0 : (int)(S < GPU_RED_SPLIT_MAX ? S : GPU_RED_SPLIT_MAX);
}

int64_t gpu_tile_ld(int64_t n) {
  const char *hook = getenv("XF_TEST_TILE_UNPADDED");  // test hook: rows n apart, as before the padding
  if (hook && *hook == '1') return n;
  return n + (5 - n % 32 + 32) % 32;
}

int64_t gpu_tile_ld_bf16(int64_t n) {
  const char *hook = getenv("XF_TEST_TILE_UNPADDED");
  if (hook && *hook == '1') return n + (n & 1);
  return n + (8 - n % 16 + 16) % 16;
}

bool schedule_scatter_sorted(const Graph *g, const Node *n) {
  return n->op == OP_SCATTER_ADD && n->shape.d[0].kind == DIM_CONST && n->shape.d[1].kind == DIM_CONST &&
         g->nodes[n->in[1]].shape.rank >= 1;
}

int schedule_scan_chunk(const Graph *g, const Node *n, bool gpu) {
  if (n->op != OP_SCAN_READ && n->op != OP_SCAN_READ_GRAD) return 0;
  const Shape *ks = &g->nodes[n->in[1]].shape, *as = &g->nodes[n->in[3]].shape;
  int r = ks->rank;
  int64_t dk = ks->d[r - 2].n, dv = g->nodes[n->in[2]].shape.d[r - 1].n;
  bool per_key = scan_decay_per_key(as);
  for (int i = g->nconfig - 1; i >= 0; i--) {
    if (strcmp(g->config[i].name, "scan_chunk")) continue;
    int64_t C = g->config[i].value > 0 ? (int64_t)g->config[i].value : 0;  // halved until the arrays fit
    while (C > 1 && scan_chunk_floats(C, dk, dv, per_key, gpu) > (gpu ? SCAN_CHUNK_FLOATS : SCAN_CHUNK_CPU_FLOATS)) C /= 2;
    return (int)C;
  }
  if (!gpu) return 0;
  Dim t = ks->d[n->axis];
  int64_t K = t.kind == DIM_CONST ? t.n : g->t_max;
  static const int64_t chunks[] = {64, 32, 16, 8, 4};
  for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++)
    if ((chunks[i] <= K || chunks[i] <= 16) && (!per_key || chunks[i] <= 16) &&
        scan_chunk_floats(chunks[i], dk, dv, per_key, true) <= SCAN_CHUNK_FLOATS)
      return (int)chunks[i];
  return 0;
}

bool schedule_scan_state(const Node *n) {
  return (n->op == OP_SCAN || n->op == OP_SCAN_READ) && n->shape.d[n->axis].kind == DIM_T;
}

// A scratch buffer of size elements for node id's kernel (activations:
// planned, its lifetime the kernel's own).
static int add_scratch(Schedule *s, int id, SymSize size) {
  s->bufs[s->nbufs] = (Buffer){.role = BUF_ACT, .dtype = DT_F32, .size = size, .node = id, .name = "", .alias_of = -1};
  return s->nbufs++;
}

int schedule_kernel_scratch(Schedule *s, int ki, SymSize size) {
  if (s->nbufs >= s->g->nnodes * 4) return -1;  // schedule_build's capacity
  int b = add_scratch(s, s->kernels[ki].node, size);
  s->bufs[b].first = s->bufs[b].last = ki;
  return b;
}

int schedule_param_twin(Schedule *s, int p, int ki) {
  int b = 0;
  while (b < s->nbufs && !(s->bufs[b].role == BUF_TWIN && s->bufs[b].node == s->bufs[p].node)) b++;
  if (b == s->nbufs) {
    if (s->nbufs >= s->g->nnodes * 4) return -1;  // schedule_build's capacity
    s->bufs[s->nbufs++] = (Buffer){.role = BUF_TWIN, .dtype = DT_F32, .size = s->bufs[p].size, .node = s->bufs[p].node,
                                   .name = s->bufs[p].name, .alias_of = -1, .bf16 = true, .first = ki, .last = ki};
  }
  if (ki < s->bufs[b].first) s->bufs[b].first = ki;
  if (ki > s->bufs[b].last) s->bufs[b].last = ki;
  return b;
}

// The chunked form's scratch of convolution kernel k (C = k->chunk, NC = L / C,
// R = the rows of x, dy: every position of every sequence):
//   CAUSAL_CONV  x [.., T, d] * W [L, d, e]: U [R, C d], Y [NC, R, e]
//   CONV_DX      dy [.., T, e], W [L, d, e]: U [R, C e], Y [NC, R, d], W^T [L, e, d]
//   CONV_DW      x [.., T, d], dy [.., T, e]: U [R, C d], S [NC, R, e]
static void conv_scratch(Schedule *s, Kernel *k) {
  const Graph *g = s->g;
  const Node *n = &g->nodes[k->node];
  const Shape *xs = &g->nodes[n->in[0]].shape, *os = &n->shape;
  int r = xs->rank;
  SymSize rows = symsize_prod(xs, 0, r - 1), d = symsize_of(xs->d[r - 1]);
  int64_t L = n->op == OP_CONV_DW ? os->d[0].n : g->nodes[n->in[1]].shape.d[0].n, C = k->chunk;
  SymSize f = n->op == OP_CONV_DW ? symsize_of(g->nodes[n->in[1]].shape.d[r - 1]) : symsize_of(os->d[os->rank - 1]);
  k->scratch = add_scratch(s, k->node, symsize_mul(rows, symsize_mul(d, (SymSize){C, 0, 0, 1})));
  k->xscratch[0] = add_scratch(s, k->node, symsize_mul(rows, symsize_mul(f, (SymSize){L / C, 0, 0, 1})));
  if (n->op == OP_CONV_DX) k->xscratch[1] = add_scratch(s, k->node, symsize_mul(symsize_mul(d, f), (SymSize){L, 0, 0, 1}));
}

// The buffer a kernel reads for node id: a folded transpose's input.
static int read_buf(const Schedule *s, const bool *folded, int id) {
  return s->buf_of[folded[id] ? s->g->nodes[id].in[0] : id];
}

// The stored inputs of the group rooted at k->node, depth first, each once;
// and the group's dropout, if any.
static void collect_leaves(Schedule *s, const bool *folded, Kernel *k, int id) {
  const Node *n = &s->g->nodes[id];
  if (id != k->node && s->group[id] != k->node) {
    for (int i = 0; i < k->nin; i++)
      if (k->leaf[i] == id) return;
    k->in[k->nin] = read_buf(s, folded, id), k->leaf[k->nin++] = id;
    return;
  }
  if (n->op == OP_DROPOUT) k->dropout = id;
  if (n->op == OP_MATMUL) k->matmul = id;
  if (ir_op_info[n->op].props & IR_P_ROW_NORM) k->norm = id;
  for (int i = 0; i < n->nin; i++) collect_leaves(s, folded, k, n->in[i]);
}

// Transposes folded into GEMM flags: folded[t] when t swaps the last two
// axes of a float tensor, is no output, and every user is a product reading
// t as its right operand only, outside a weight-gradient group. Such a t gets
// no kernel and no storage; its products call the GEMM with trans_b.
static void fold_transposes(const Graph *g, const int *into, const int *kind, bool *folded) {
  int n = g->nnodes;
  for (int i = 0; i < n; i++) {
    const Node *t = &g->nodes[i];
    int r = t->shape.rank;
    folded[i] = t->op == OP_TRANSPOSE && r >= 2 && into[i] < 0 && t->dtype == DT_F32 &&
                ((t->axis == r - 1 && t->axis2 == r - 2) || (t->axis == r - 2 && t->axis2 == r - 1));
  }
  for (int o = 0; o < g->noutputs; o++) folded[g->outputs[o].node] = false;
  for (int i = 0; i < n; i++) {
    const Node *u = &g->nodes[i];
    for (int k = 0; k < u->nin; k++) {
      int t = u->in[k];
      if (!folded[t]) continue;
      bool product = u->op == OP_MATMUL && k == 1 && u->in[0] != t;
      int root = into[i] >= 0 ? into[i] : i;
      if (!product || kind[root] == FG_WEIGHT_GRAD) folded[t] = false;
    }
  }
}

// The parts along the last axis that node n's op defines, their starts and
// lengths: ATTENTION_GRAD's dq [..., h], dk [..., h], dv [..., e] (autodiff's
// slices); 0 for any other op.
static int split_parts(const Graph *g, const Node *n, int64_t *start, int64_t *len) {
  if (n->op == OP_SCAN_READ_GRAD) {  // dq [.., dk], dk [.., dk], dv [.., dv]
    int64_t dk = g->nodes[n->in[1]].shape.d[n->shape.rank - 1].n, dv = g->nodes[n->in[2]].shape.d[n->shape.rank].n;
    start[0] = 0, start[1] = dk, start[2] = 2 * dk;
    len[0] = dk, len[1] = dk, len[2] = dv;
    return 3;
  }
  if (n->op != OP_ATTENTION_GRAD) return 0;
  int r = n->shape.rank;
  int64_t h = g->nodes[n->in[0]].shape.d[r - 1].n, e = g->nodes[n->in[2]].shape.d[r - 1].n;
  start[0] = 0, start[1] = h, start[2] = 2 * h;
  len[0] = h, len[1] = h, len[2] = e;
  return 3;
}

// Values written as parts (Kernel.nout): a node a of split_parts, in no
// group and no output, whose every live reader is a SLICE, in no group, of
// one whole part, each part read by exactly one: parts[a KERNEL_MAX_OUT + p]
// = the slice of part p, whose buffer a's kernel writes; cut[slice]: it gets
// no kernel. parts (all -1 on entry) stays -1 for every other node.
static void fold_splits(const Graph *g, const bool *live, const int *into, const int *kind, int *parts, bool *cut) {
  int n = g->nnodes;
  int64_t start[KERNEL_MAX_OUT], len[KERNEL_MAX_OUT];
  bool *ok = calloc((size_t)n + 1, sizeof *ok);
  for (int i = 0; i < n; i++) ok[i] = live[i] && into[i] < 0 && kind[i] == FG_NONE && split_parts(g, &g->nodes[i], start, len);
  for (int o = 0; o < g->noutputs; o++) ok[g->outputs[o].node] = false;
  for (int i = 0; i < n; i++) {  // each reader of a candidate takes its part, or vetoes
    const Node *x = &g->nodes[i];
    for (int k = 0; live[i] && k < x->nin; k++) {
      int a = x->in[k];
      if (!ok[a]) continue;
      int np = split_parts(g, &g->nodes[a], start, len), p = 0;
      bool whole = x->op == OP_SLICE && into[i] < 0 && kind[i] == FG_NONE && x->axis == x->shape.rank - 1 &&
                   x->len.kind == DIM_CONST;
      while (p < np && !(whole && x->start == start[p] && x->len.n == len[p])) p++;
      if (p == np || parts[a * KERNEL_MAX_OUT + p] >= 0) ok[a] = false;
      else parts[a * KERNEL_MAX_OUT + p] = i;
    }
  }
  for (int a = 0; a < n; a++) {
    int np = split_parts(g, &g->nodes[a], start, len);
    for (int p = 0; p < np; p++) ok[a] = ok[a] && parts[a * KERNEL_MAX_OUT + p] >= 0;
    for (int p = 0; p < np; p++) {
      int *x = &parts[a * KERNEL_MAX_OUT + p];
      if (ok[a]) cut[*x] = true;
      else *x = -1;
    }
  }
  free(ok);
}

// Marks every node that a marked node reads, transitively (need[] in, out).
static void cone(const Graph *g, bool *need) {
  for (int i = g->nnodes - 1; i >= 0; i--)
    if (need[i])
      for (int j = 0; j < g->nodes[i].nin; j++) need[g->nodes[i].in[j]] = true;
}

// cone(), then also the root of every marked group member (its kernel
// computes the member: a stored member may be read where its root is not).
static void cone_groups(const Graph *g, const int *group, bool *need) {
  for (bool more = true; more;) {
    cone(g, need);
    more = false;
    for (int i = 0; i < g->nnodes; i++)
      if (need[i] && group[i] >= 0 && !need[group[i]]) need[group[i]] = more = true;
  }
}

static bool computes(OpKind op) {
  return op != OP_PARAM && op != OP_INPUT && op != OP_RESHAPE;
}

int schedule_root(const Schedule *s, int b) {
  while (s->bufs[b].alias_of >= 0) b = s->bufs[b].alias_of;
  return b;
}

void kernel_unlowered(char *buf, size_t len, const char *backend, const Node *n) {
  int at = n->loc.file ? snprintf(buf, len, "%s:%d:%d: ", n->loc.file, n->loc.line, n->loc.col) : 0;
  if (at < 0 || (size_t)at >= len) at = 0;
  snprintf(buf + at, len - (size_t)at, "error: the %s backend has no lowering for op '%s' (node %%%d)", backend,
           ir_op_info[n->op].name, n->id);
}

uint64_t kernel_imm(const Schedule *s, const Kernel *k) { return k->dropout >= 0 ? s->g->nodes[k->dropout].seed : 0; }

void kernel_slots(const Schedule *s, const Kernel *k, int slot[KS_IMM]) {
  for (int j = 0; j < KS_IMM; j++) slot[j] = -1;
  slot[KS_OUT] = k->out;
  for (int p = 1; p < k->nout; p++) slot[kernel_out_slot(p)] = k->xout[p - 1];
  for (int i = 0; i < k->nin; i++) slot[KS_IN0 + i] = k->in[i];
  slot[KS_SCRATCH] = k->scratch;
  if (k->terms >= 0) slot[kernel_terms_slot(k)] = k->terms;
  for (int i = 0; i < 2; i++)
    if (k->xscratch[i] >= 0) slot[KS_CONV_Y + i] = k->xscratch[i];
  if (k->stage >= 0) slot[KS_STAGE] = k->stage;
  for (int j = 0; j < KS_IMM; j++)
    if (slot[j] >= 0) slot[j] = schedule_root(s, slot[j]);
}

// ---- kernel classes: what a kernel computes, without where ------------------

static void sig_shape(char **p, char *end, const Shape *sh, DType t) {
  *p += snprintf(*p, (size_t)(end - *p), "%c[", t == DT_I32 ? 'i' : 'f');
  for (int i = 0; i < sh->rank && *p < end; i++)
    *p += snprintf(*p, (size_t)(end - *p), "%s%lld", i ? "," : "",
                   sh->d[i].kind == DIM_B ? -1LL : sh->d[i].kind == DIM_T ? -1LL - (long long)dim_tdiv(sh->d[i]) : (long long)sh->d[i].n);
  if (*p < end) *p += snprintf(*p, (size_t)(end - *p), "]");
}

static void sig_node(char **p, char *end, const Graph *g, const Node *n) {
  if (*p >= end) return;
  *p += snprintf(*p, (size_t)(end - *p), "%d:%d,%d,%a,%lld,%d.%lld,%d ", n->op, n->axis, n->axis2, n->fval,
                 (long long)n->start, n->len.kind, (long long)n->len.n, n->conv);
  sig_shape(p, end, &n->shape, n->dtype);
  for (int i = 0; i < n->nin && *p < end; i++) {
    *p += snprintf(*p, (size_t)(end - *p), " ");
    sig_shape(p, end, &g->nodes[n->in[i]].shape, g->nodes[n->in[i]].dtype);
  }
}

// The signature of node id inside kernel k: members of the group recursively,
// stored inputs as their slot and shape.
static void sig_expr(char **p, char *end, const Schedule *s, const Kernel *k, int id) {
  const Graph *g = s->g;
  if (*p >= end) return;
  if (id != k->node && s->group[id] != k->node) {
    for (int i = 0; i < k->nin; i++)
      if (k->leaf[i] == id) *p += snprintf(*p, (size_t)(end - *p), "L%d", i);
    sig_shape(p, end, &g->nodes[id].shape, g->nodes[id].dtype);
    return;
  }
  *p += snprintf(*p, (size_t)(end - *p), id == k->stored ? "(*" : "(");
  sig_node(p, end, g, &g->nodes[id]);
  for (int i = 0; i < g->nodes[id].nin; i++) {
    if (*p < end) *p += snprintf(*p, (size_t)(end - *p), " ");
    sig_expr(p, end, s, k, g->nodes[id].in[i]);
  }
  if (*p < end) *p += snprintf(*p, (size_t)(end - *p), ")");
}

// The signature of kernel k: op or group, phase, shapes and attributes of
// everything it computes; not its buffers and not dropout's stream (KS_IMM).
static char *kernel_sig(Arena *a, const Schedule *s, const Kernel *k) {
  char buf[8192], *p = buf, *end = buf + sizeof buf - 1;
  p += snprintf(p, (size_t)(end - p), "k%d.%d.%d.%d.%d.%d.%d.%d ", k->fusion, k->phase, k->tb, k->nout, k->terms >= 0, k->chunk, k->att_block,
                k->scan_chunk);
  if (k->fusion == FG_WEIGHT_GRAD) {
    sig_node(&p, end, s->g, &s->g->nodes[k->node]);
    for (int i = 0; i < k->nin && p < end; i++) {
      p += snprintf(p, (size_t)(end - p), " src ");
      sig_shape(&p, end, &s->g->nodes[k->leaf[i]].shape, DT_F32);
    }
  } else {
    sig_expr(&p, end, s, k, k->node);
  }
  *end = 0;
  return arena_strdup(a, buf);
}

static uint64_t hash_str(const char *str) {
  uint64_t h = 1469598103934665603ull;
  for (; *str; str++) h = (h ^ (unsigned char)*str) * 1099511628211ull;
  return h;
}

static void assign_classes(Arena *a, Schedule *s) {
  int cap = 16;
  while (cap < 2 * s->nkernels) cap *= 2;
  int *table = arena_alloc(a, sizeof(int) * (size_t)cap);
  char **sig = arena_alloc(a, sizeof(char *) * (size_t)(s->nkernels + 1));
  for (int i = 0; i < cap; i++) table[i] = -1;
  for (int k = 0; k < s->nkernels; k++) {
    sig[k] = kernel_sig(a, s, &s->kernels[k]);
    uint64_t h = hash_str(sig[k]) & (uint64_t)(cap - 1);
    while (table[h] >= 0 && strcmp(sig[table[h]], sig[k])) h = (h + 1) & (uint64_t)(cap - 1);
    if (table[h] < 0) table[h] = k, s->nclasses++;
    s->kernels[k].cls = table[h];
  }
}

// ---- lifetimes and the memory plan ------------------------------------------

static void use(Schedule *s, int b, int k) {
  if (b < 0) return;
  Buffer *r = &s->bufs[schedule_root(s, b)];
  if (r->first < 0 || k < r->first) r->first = k;
  if (k > r->last) r->last = k;
}

static void assign_lifetimes(Schedule *s) {
  for (int b = 0; b < s->nbufs; b++) s->bufs[b].first = s->bufs[b].last = -1;
  for (int k = 0; k < s->nkernels; k++) {
    int slot[KS_IMM];
    kernel_slots(s, &s->kernels[k], slot);
    for (int j = 0; j < KS_IMM; j++) use(s, slot[j], k);
  }
  for (int b = 0; b < s->nbufs; b++)
    if (s->bufs[b].alias_of < 0 && s->bufs[b].role == BUF_OUTPUT && s->bufs[b].first >= 0) s->bufs[b].last = s->nkernels;
}

// Bytes of a buffer at B, T, saturated at 2^40 (sizes from hostile -D values
// must not overflow the plan's sums).
static int64_t sym_bytes(SymSize z, int64_t esize, int64_t B, int64_t T) {
  const int64_t cap = (int64_t)1 << 40;
  int64_t v = esize;
  if (__builtin_mul_overflow(v, z.coef, &v) || v > cap) return cap;
  for (int i = 0; i < z.pb; i++)
    if (__builtin_mul_overflow(v, B, &v) || v > cap) return cap;
  for (int i = 0; i < z.pt; i++)
    if (__builtin_mul_overflow(v, T, &v) || v > cap) return cap;
  return v / symsize_den(z);
}

int64_t schedule_plan(const Schedule *s, int64_t B, int64_t T, int64_t *offsets, int64_t *persistent) {
  PlanItem *items = calloc((size_t)s->nbufs + 1, sizeof *items);
  int64_t pers = 0;
  for (int b = 0; b < s->nbufs; b++) {
    const Buffer *u = &s->bufs[b];
    int64_t bytes = sym_bytes(u->size, buffer_esize(u), B, T);
    if (u->alias_of >= 0) continue;
    if (buffer_persistent(u->role)) pers += (bytes + 63) / 64 * 64;
    else items[b] = (PlanItem){bytes, u->first, u->last};
  }
  int64_t top = memplan(items, s->nbufs, offsets);
  free(items);
  if (persistent) *persistent = pers;
  return top;
}

static const char *role_name(BufferRole r) {
  static const char *names[] = {"param", "grad", "input", "act", "output", "twin"};
  return names[r];
}

static const char *const fusions[] = {"", " fused=weight_grad", " fused=map", " fused=matmul_map", " fused=norm_dg", " fused=norm_map"};

void schedule_kernel_label(const Schedule *s, int k, char *buf, size_t n) {
  const Kernel *kn = &s->kernels[k];
  const Node *nd = &s->g->nodes[kn->node];
  snprintf(buf, n, "k%d %s%s %s:%d", kn->cls, ir_op_info[nd->op].name, fusions[kn->fusion], nd->loc.file ? nd->loc.file : "<compiler>",
           nd->loc.line);
}

void schedule_print(FILE *f, const Schedule *s, int64_t B, int64_t T) {
  const Graph *g = s->g;
  static const char *progs[] = {"train", "eval", "sample"};
  fprintf(f, "schedule %s: %d kernels, %d distinct functions, %d buffers\n", g->name, s->nkernels, s->nclasses, s->nbufs);
  for (int k = 0; k < s->nkernels; k++) {
    const Kernel *kn = &s->kernels[k];
    const Node *n = &g->nodes[kn->node];
    fprintf(f, "  k%-5d %-14s %%%d%s", k, ir_op_info[n->op].name, kn->node, fusions[kn->fusion]);
    if (kn->phase) fprintf(f, " phase=%d", kn->phase);
    if (kn->tb) fprintf(f, " trans_b");
    fprintf(f, " class=k%d out=b%d", kn->cls, schedule_root(s, kn->out));
    for (int p = 1; p < kn->nout; p++) fprintf(f, ",b%d", schedule_root(s, kn->xout[p - 1]));
    fprintf(f, " in=");
    for (int i = 0; i < kn->nin; i++) fprintf(f, "%sb%d", i ? "," : "", schedule_root(s, kn->in[i]));
    if (kn->scratch >= 0) fprintf(f, " scratch=b%d", kn->scratch);
    for (int i = 0; i < 2; i++)
      if (kn->xscratch[i] >= 0) fprintf(f, ",b%d", kn->xscratch[i]);
    if (kn->stage >= 0) fprintf(f, " stage=b%d", kn->stage);
    if (kn->chunk) fprintf(f, " chunk=%d", kn->chunk);
    if (kn->scan_chunk) fprintf(f, " scan_chunk=%d", kn->scan_chunk);
    if (kn->att_block) fprintf(f, " blocked=%d", kn->att_block);
    if (kn->terms >= 0) fprintf(f, " terms=b%d", kn->terms);
    if (kn->fusion != FG_NONE && kn->fusion != FG_WEIGHT_GRAD) {
      fprintf(f, " group=");
      for (int i = 0, first = 1; i < g->nnodes; i++)
        if (s->group[i] == kn->node)
          fprintf(f, "%s%s%%%d%s", first ? "" : ",", ir_op_info[g->nodes[i].op].name, i, i == kn->stored ? "*" : ""), first = 0;
    }
    if (n->loc.file) fprintf(f, "  # %s:%d:%d", n->loc.file, n->loc.line, n->loc.col);
    fputc('\n', f);
  }
  for (int p = 0; p < PROG_COUNT; p++) {
    fprintf(f, "program %s:", progs[p]);
    for (int i = 0; i < s->nprog[p]; i++) fprintf(f, " k%d", s->prog[p][i]);
    fputc('\n', f);
  }
  int64_t *off = calloc((size_t)s->nbufs + 1, sizeof *off), pers = 0;
  int64_t top = schedule_plan(s, B, T, off, &pers);
  fprintf(f, "memory at B=%lld T=%lld: planned %.2f MiB (activations and outputs), persistent %.2f MiB "
             "(parameters, gradients, inputs)\n", (long long)B, (long long)T, (double)top / (1 << 20),
          (double)pers / (1 << 20));
  for (int b = 0; b < s->nbufs; b++) {
    const Buffer *u = &s->bufs[b];
    int64_t bytes = sym_bytes(u->size, buffer_esize(u), B, T);
    fprintf(f, "  b%-5d %-6s %%%d %10lld B", b, role_name(u->role), u->node, (long long)bytes);
    if (u->alias_of >= 0) fprintf(f, "  alias of b%d", schedule_root(s, b));
    else if (buffer_persistent(u->role)) fprintf(f, "  persistent");
    else if (u->first < 0) fprintf(f, "  unused");
    else fprintf(f, "  live k%d..%s%d  offset %lld", u->first, u->last == s->nkernels ? "end/k" : "k", u->last,
                 (long long)off[b]);
    if (u->name && *u->name) fprintf(f, "  %s", u->name);
    if (u->bf16) fprintf(f, "  bf16");
    fputc('\n', f);
  }
  free(off);
}

Schedule *schedule_build(Arena *a, const Graph *g, bool fuse, bool gpu) {
  Schedule *s = arena_alloc(a, sizeof *s);
  s->g = g;
  s->buf_of = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  s->bufs = arena_alloc(a, sizeof(Buffer) * (size_t)g->nnodes * 4);  // a node's, and up to 3 scratch of its kernel
  s->kernels = arena_alloc(a, sizeof(Kernel) * (size_t)g->nnodes * 2);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    if (n->op == OP_RESHAPE) {  // alias
      s->buf_of[i] = s->buf_of[n->in[0]];
      continue;
    }
    Buffer *b = &s->bufs[s->nbufs];
    *b = (Buffer){.role = n->op == OP_PARAM ? BUF_PARAM : n->op == OP_INPUT ? BUF_INPUT : BUF_ACT,
                  .dtype = n->dtype, .size = symsize_prod(&n->shape, 0, n->shape.rank), .node = i, .name = n->name,
                  .alias_of = -1};
    s->buf_of[i] = s->nbufs++;
  }
  for (int o = 0; o < g->noutputs; o++) {  // outputs: gradients and read-back values
    Buffer *b = &s->bufs[s->buf_of[g->outputs[o].node]];
    if (b->role != BUF_ACT) continue;  // an output that is a param or input (never in practice)
    b->role = strncmp(g->outputs[o].name, "grad.", 5) ? BUF_OUTPUT : BUF_GRAD;
    b->name = g->outputs[o].name;
  }
  int *kernel_of = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  int *kind = arena_alloc(a, sizeof(int) * (size_t)g->nnodes), *stored = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  int *terms = arena_alloc(a, sizeof(int) * (size_t)g->nnodes), *after = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  s->group = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  fuse_groups(g, fuse, s->group, kind, stored, terms, after);
  if (fuse && !gpu) att_dbias_terms(g, s->group, terms);
  // kernels in node order, but a node with after[i] = r right after r
  int *order = arena_alloc(a, sizeof(int) * (size_t)g->nnodes), *follower = arena_alloc(a, sizeof(int) * (size_t)g->nnodes);
  for (int i = 0; i < g->nnodes; i++) follower[i] = -1;
  for (int i = 0; i < g->nnodes; i++)
    if (after[i] >= 0) follower[after[i]] = i;
  for (int i = 0, no = 0; i < g->nnodes; i++) {
    if (after[i] >= 0) continue;
    order[no++] = i;
    if (follower[i] >= 0) order[no++] = follower[i];
  }
  bool *folded = arena_alloc(a, sizeof(bool) * (size_t)g->nnodes);
  if (fuse) fold_transposes(g, s->group, kind, folded);
  // nodes no program needs (left behind by a rewrite such as fuse_attention) get no kernel
  bool *live = arena_alloc(a, sizeof(bool) * (size_t)g->nnodes);
  for (int o = 0; o < g->noutputs; o++) live[g->outputs[o].node] = true;
  cone_groups(g, s->group, live);
  int *parts = arena_alloc(a, sizeof(int) * (size_t)g->nnodes * KERNEL_MAX_OUT);
  bool *cut = arena_alloc(a, sizeof(bool) * (size_t)g->nnodes);
  for (int i = 0; i < g->nnodes * KERNEL_MAX_OUT; i++) parts[i] = -1;
  if (fuse) fold_splits(g, live, s->group, kind, parts, cut);
  for (int i = 0; i < g->nnodes; i++) kernel_of[i] = -1;
  for (int oi = 0; oi < g->nnodes; oi++) {
    int i = order[oi];
    const Node *n = &g->nodes[i];
    if (!computes(n->op) || s->group[i] >= 0 || !live[i] || folded[i] || cut[i]) continue;
    Kernel *k = &s->kernels[s->nkernels];
    k->node = i;
    k->out = s->buf_of[i];
    k->nout = 1;
    for (int p = 0; p < KERNEL_MAX_OUT - 1; p++) k->xout[p] = -1;
    k->xscratch[0] = k->xscratch[1] = -1;
    k->stage = -1;
    for (int p = 0; p < KERNEL_MAX_OUT && parts[i * KERNEL_MAX_OUT + p] >= 0; p++) {  // a split output
      int b = s->buf_of[parts[i * KERNEL_MAX_OUT + p]];
      if (p) k->xout[p - 1] = b;
      else k->out = b;
      k->nout = p + 1;
    }
    k->fusion = kind[i];
    k->dropout = n->op == OP_DROPOUT ? i : -1;
    k->matmul = -1;
    k->norm = -1;
    if (kind[i] == FG_MAP || kind[i] == FG_MATMUL_MAP || kind[i] == FG_NORM_MAP) collect_leaves(s, folded, k, i);
    else
      for (int j = 0; j < n->nin; j++) k->in[k->nin] = read_buf(s, folded, n->in[j]), k->leaf[k->nin++] = n->in[j];
    const Node *mm = k->matmul >= 0 ? &g->nodes[k->matmul] : n->op == OP_MATMUL ? n : NULL;
    k->tb = mm && folded[mm->in[1]];
    k->outer = outer_of(g, kind[i] == FG_MATMUL_MAP ? &g->nodes[k->matmul] : n);
    k->stored = stored[i];
    k->scratch = stored[i] >= 0 ? s->buf_of[stored[i]] : -1;
    k->terms = terms[i] >= 0 ? s->buf_of[terms[i]] : -1;
    if (kind[i] == FG_NORM_DG) {  // the bias sum's rows, dy, in slot KS_IN1
      int dy = g->nodes[stored[i]].in[0];
      k->in[k->nin] = s->buf_of[dy], k->leaf[k->nin++] = dy;
    }
    if (kind[i] == FG_WEIGHT_GRAD) {  // reads x and dy, one column block of dW per outer index
      const Node *m = &g->nodes[n->in[0]];
      int x = g->nodes[m->in[0]].in[0], dy = m->in[1];
      k->nin = 2;
      k->in[0] = s->buf_of[x], k->in[1] = s->buf_of[dy];
      k->leaf[0] = x, k->leaf[1] = dy;
      k->outer = symsize_of(g->nodes[dy].shape.d[g->nodes[dy].shape.rank - 1]);
    }
    k->chunk = gpu ? schedule_conv_chunk(g, n) : 0;
    k->att_block = schedule_att_block(g, n);
    k->scan_chunk = schedule_scan_chunk(g, n, gpu);
    if (k->chunk) conv_scratch(s, k);
    if (gpu && schedule_scatter_sorted(g, n)) {  // lower_steps.c's sorted scatter: F [lead, V] in scratch, U [rows, d], N [rows, 2]
      const Shape *is = &g->nodes[n->in[1]].shape;
      k->scratch = add_scratch(s, i, symsize_mul(symsize_prod(is, 0, is->rank - 1), symsize_of(n->shape.d[0])));
      k->xscratch[0] = add_scratch(s, i, symsize_mul(symsize_prod(is, 0, is->rank), symsize_of(n->shape.d[1])));
      k->xscratch[1] = add_scratch(s, i, symsize_mul(symsize_prod(is, 0, is->rank), (SymSize){2, 0, 0, 1}));
    }
    k->red_split = schedule_red_split(g, n, kind[i], gpu);
    if (k->red_split) {  // the partial sums of lower.c's two-step reduction over rows: [nsum, S, out]
      int64_t nsum = kind[i] == FG_NORM_DG ? 2 : 1;
      SymSize out = symsize_prod(&n->shape, 0, n->shape.rank);
      k->xscratch[0] = add_scratch(s, i, symsize_mul(out, (SymSize){nsum * k->red_split, 0, 0, 1}));
    }
    int ct = gpu ? schedule_conv_dw_tile(g, n) : 0;
    if (ct) {  // the partial sums P of lower.c's two-step CONV_DW: [lead, d / CT, L] (scalar), [lead, L, d]
      const Shape *xs = &g->nodes[n->in[0]].shape;
      int64_t d = xs->d[xs->rank - 1].n;
      SymSize lead = symsize_prod(xs, 0, xs->rank - 2), per = {n->conv == CONV_SCALAR ? d / ct : d, 0, 0, 1};
      k->scratch = add_scratch(s, i, symsize_mul(lead, symsize_mul(per, symsize_of(n->shape.d[0]))));
    }
    if (gpu && (n->op == OP_ROUTED_MATMUL || n->op == OP_ROUTED_MATMUL_DW)) {  // the GPU's: expert e's rows, gathered: [R, d] | [R, f]
      const Shape *xs = &g->nodes[n->in[0]].shape, *ys = &g->nodes[n->in[1]].shape;
      SymSize rows = symsize_prod(xs, 0, xs->rank - 1);
      int64_t w = xs->d[xs->rank - 1].n + ys->d[ys->rank - 1].n;
      k->scratch = add_scratch(s, i, symsize_mul(rows, (SymSize){w, 0, 0, 1}));
      // the GPU's index region (lower_route.c): pos [R], off [E], cnt [E], per-chunk counts [<= R, E]
      int64_t E = n->op == OP_ROUTED_MATMUL ? ys->d[0].n : n->len.n;
      k->xscratch[0] = add_scratch(s, i, symsize_mul(rows, (SymSize){E + 3, 0, 0, 1}));
    }
    if (schedule_scan_state(n) && n->op == OP_SCAN)  // the state row h_{keep-1} [P, Q] (lower.c lower_scan)
      k->scratch = add_scratch(s, i, symsize_mul(symsize_prod(&n->shape, 0, n->axis), symsize_prod(&n->shape, n->axis + 1, n->shape.rank)));
    else if (schedule_scan_state(n)) {  // SCAN_READ: S_{keep-1} [P M, dk dv] (lower.c lower_scan_read)
      const Shape *ks = &g->nodes[n->in[1]].shape;
      int64_t st = ks->d[ks->rank - 2].n * n->shape.d[n->shape.rank - 1].n;
      k->scratch = add_scratch(s, i, symsize_mul(read_sequences(g, n), (SymSize){st, 0, 0, 1}));
    }
    kernel_of[i] = s->nkernels++;
    if (n->op == OP_CROSS_ENTROPY) {  // per-row losses in scratch, then their mean
      k->scratch = add_scratch(s, i, k->outer);
      Kernel *k2 = &s->kernels[s->nkernels++];
      *k2 = *k;
      k2->phase = 1, k2->terms = -1;  // the row statistics are phase 0's
      k2->outer = (SymSize){1, 0, 0, 1};
    }
  }
  // programs: the cone of nodes each one needs
  bool *need = arena_alloc(a, sizeof(bool) * (size_t)g->nnodes);
  for (int p = 0; p < PROG_COUNT; p++) {
    memset(need, 0, sizeof(bool) * (size_t)g->nnodes);
    for (int o = 0; o < g->noutputs; o++) {
      const char *name = g->outputs[o].name;
      // the other scalar outputs (side outputs such as a load-balancing loss) for the log
      bool scalar = g->nodes[g->outputs[o].node].shape.rank == 0 && strncmp(name, "grad.", 5);
      bool want = p == PROG_TRAIN ? (!strcmp(name, "loss") || !strncmp(name, "grad.", 5) || scalar)
                  : p == PROG_EVAL ? !strcmp(name, "loss") || scalar : !strcmp(name, "logits");
      if (want) need[g->outputs[o].node] = true;
    }
    cone_groups(g, s->group, need);
    // a fused kernel reads the pattern's inputs directly (already needed above)
    s->prog[p] = arena_alloc(a, sizeof(int) * (size_t)(s->nkernels + 1));
    // kernel_of[i] + 1 is the second phase of a two-phase op
    for (int oi = 0; oi < g->nnodes; oi++) {
      int i = order[oi];
      if (need[i] && kernel_of[i] >= 0) {
        s->prog[p][s->nprog[p]++] = kernel_of[i];
        if (g->nodes[i].op == OP_CROSS_ENTROPY) s->prog[p][s->nprog[p]++] = kernel_of[i] + 1;
      }
    }
  }
  assign_classes(a, s);
  assign_lifetimes(s);
  return s;
}
