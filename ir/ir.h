// ir.h: the xf graph IR, the one place that defines it.
//
// A Graph is a list of Nodes in SSA form and topological order: a node's
// inputs are ids of nodes that come before it. Every node carries
//   - its op (one X-macro table, IR_OPS below, with arity and category),
//   - its element type and static shape; a dimension is a constant or one of
//     the two symbolic sizes B (batch) and T (time, 1 <= T <= graph.t_max),
//   - its attributes (axis, scalar, init, ...), all plain data,
//   - the source location that created it and the block instance (scope) it
//     belongs to, so errors, statistics and later fusion can name them.
// Nothing here assumes a CPU: shapes, op semantics and attributes are the
// whole kernel contract. Backends (LLVM, CUDA) live below this header.
//
// Memory: every IR object lives in an Arena owned by the caller and is freed
// at once with it.
#ifndef XF_IR_H
#define XF_IR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

// ---- arena (ir/arena.c) ----------------------------------------------------

typedef struct ArenaChunk ArenaChunk;
typedef struct {
  ArenaChunk *head;
} Arena;

void *arena_alloc(Arena *a, size_t n);          // zeroed, 16-byte aligned
void *arena_realloc(Arena *a, void *p, size_t old_n, size_t new_n);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

// ---- source locations ------------------------------------------------------

typedef struct {
  const char *file;   // path as given; NULL for compiler-made nodes
  int line, col;      // 1-based
} Loc;

// ---- dimensions and shapes -------------------------------------------------

typedef enum {
  DIM_CONST,  // a known size n >= 1
  DIM_B,      // the batch size, symbolic
  DIM_T,      // the sequence length, symbolic, 1 <= T <= Graph.t_max
} DimKind;

typedef struct {
  DimKind kind;
  int64_t n;  // DIM_CONST: the size; DIM_T: 0 for T, s >= 2 for T / s (a
              // time axis shortened by grouping s positions: reshape
              // [.., T, ..] <-> [.., T / s, s, ..]; T a multiple of s at
              // run time); DIM_B: 0
} Dim;
// The divisor s of a time axis T / s (1 for T).
static inline int64_t dim_tdiv(Dim d) { return d.kind == DIM_T && d.n > 1 ? d.n : 1; }
// The size of d at batch b and length t (t a multiple of dim_tdiv(d)).
static inline int64_t dim_size(Dim d, int64_t b, int64_t t) {
  return d.kind == DIM_B ? b : d.kind == DIM_T ? t / dim_tdiv(d) : d.n;
}

#define IR_MAX_RANK 6
typedef struct {
  int rank;
  Dim d[IR_MAX_RANK];
} Shape;

typedef enum {
  DT_F32,  // activations and parameters
  DT_I32,  // token ids
} DType;

// ---- ops -------------------------------------------------------------------
// X(NAME, "text", inputs, category, differentiable, properties, cost).
// differentiable says whether the autodiff pass must have a gradient rule for
// the op (1), or the op is a non-differentiable leaf or appears only in
// backward graphs (0); tests/unit checks that every differentiable op has its
// rule. cost is the op's cost rule (IrCost) for passes/stats.c.

typedef enum {
  OPC_LEAF,     // no inputs: params, inputs, constants
  OPC_UNARY,    // elementwise f(x)
  OPC_BINARY,   // elementwise f(x, y) with numpy broadcasting
  OPC_REDUCE,   // reduce one axis, keep it with size 1
  OPC_MATMUL,   // batched matrix product
  OPC_MOVE,     // data movement: transpose, reshape, slice, concat, gather
  OPC_NN,       // composite primitives with their own kernels
} OpCategory;

// Op properties the passes read from the table instead of listing ops:
//   IR_P_ROW_NORM   a row normalisation over the last axis whose kernel
//                   computes its row's statistics (mean and deviation, or
//                   the root mean square) and may take a group's members
//                   (passes/fuse_groups.c, codegen/schedule.c, lower.c)
//   IR_P_ROW_TERMS  the terms dy o xhat of a norm's gain gradient, summed
//                   over rows by its user (FG_NORM_DG)
//   IR_P_RMS        of the root-mean-square kind (no mean, no bias)
//   IR_P_HIST(i)    input i is read at earlier positions along time than
//                   the output row (the incremental decoder caches it:
//                   codegen/stepmem.c)
//   IR_P_CALL       the language calls it by its name, f(x) (elementwise
//                   unary ops: frontend/elaborate.c reads the table)
//   IR_P_TORCH_F    PyTorch spells it torch.nn.functional.<name> rather
//                   than torch.<name> (codegen/pytorch.c)
//   IR_P_OPT_LAST   its last input is optional: a node has the table's
//                   count of inputs or one fewer (verify.c)
enum { IR_P_ROW_NORM = 1u << 0, IR_P_ROW_TERMS = 1u << 1, IR_P_RMS = 1u << 2, IR_P_CALL = 1u << 3, IR_P_TORCH_F = 1u << 4,
       IR_P_OPT_LAST = 1u << 5 };
#define IR_P_HIST(i) (1u << (8 + (i)))

// The cost rule of an op (passes/stats.c, seed 001 section 7's counts):
//   CAT    the rule of its category: leaves count parameters, reductions k - 1
//          additions per output (MEAN one division more, MAX comparisons),
//          products m k n multiplications, moves nothing (SCATTER_ADD adds)
//   ADD, MUL, DIV, EXP, OTHER   one such operation per output element
//          (OTHER: comparisons, sqrt, log, tanh and the other functions)
//   OWN    a case of its own in stats.c; an OWN op without one is a -Wswitch
//          error there, as every op without a column here is one in ir.c
typedef enum { IR_COST_CAT, IR_COST_ADD, IR_COST_MUL, IR_COST_DIV, IR_COST_EXP, IR_COST_OTHER, IR_COST_OWN } IrCost;

#define IR_OPS(X)                                                                                \
  /* leaves */                                                                                   \
  X(PARAM, "param", 0, OPC_LEAF, 1, 0, CAT)               /* trainable; name, init */            \
  X(INPUT, "input", 0, OPC_LEAF, 0, 0, CAT)               /* graph input (tokens); name */       \
  X(CONST, "const", 0, OPC_LEAF, 0, 0, CAT)               /* scalar [] with value fval */        \
  X(IOTA, "iota", 0, OPC_LEAF, 0, 0, CAT)                 /* [n]: 0, 1, ..., n-1 */              \
  X(SIZE, "size", 0, OPC_LEAF, 0, 0, CAT)                 /* scalar []: the value of len */      \
  /* elementwise unary */                                                                        \
  X(NEG, "neg", 1, OPC_UNARY, 1, 0, ADD)                                                         \
  X(EXP, "exp", 1, OPC_UNARY, 1, IR_P_CALL, EXP)                                                 \
  X(LOG, "log", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)                                               \
  X(SQRT, "sqrt", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)                                             \
  X(TANH, "tanh", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)                                             \
  X(RELU, "relu", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)                                             \
  X(GELU, "gelu", 1, OPC_UNARY, 1, IR_P_CALL | IR_P_TORCH_F, OTHER) /* x * Phi(x), erf form */   \
  X(SIGMOID, "sigmoid", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)                                       \
  X(SIN, "sin", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)                                               \
  X(COS, "cos", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)                                               \
  X(SILU, "silu", 1, OPC_UNARY, 1, IR_P_CALL | IR_P_TORCH_F, OTHER) /* x sigmoid(x) */           \
  X(ABS, "abs", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)                                               \
  X(FLOOR, "floor", 1, OPC_UNARY, 0, IR_P_CALL, OTHER)      /* gradient 0 (ir_grad_zero) */      \
  X(SOFTPLUS, "softplus", 1, OPC_UNARY, 1, IR_P_CALL | IR_P_TORCH_F, OTHER) /* log(1 + e^x) */   \
  X(ERF, "erf", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)                                               \
  X(RSQRT, "rsqrt", 1, OPC_UNARY, 1, IR_P_CALL, OTHER)      /* 1 / sqrt(x) */                    \
  /* x, with no gradient through it (ir_grad_zero) */                                          \
  X(STOP_GRADIENT, "stop_gradient", 1, OPC_UNARY, 0, IR_P_CALL, CAT)                             \
  X(STEP, "step", 1, OPC_UNARY, 0, 0, OTHER)              /* x > 0 ? 1 : 0 (relu') */            \
  X(DGELU, "dgelu", 1, OPC_UNARY, 0, 0, OTHER)            /* gelu'(x) = Phi(x) + x phi(x) */     \
  /* elementwise binary, broadcasting */                                                         \
  X(ADD, "add", 2, OPC_BINARY, 1, 0, ADD)                                                        \
  X(SUB, "sub", 2, OPC_BINARY, 1, 0, ADD)                                                        \
  X(MUL, "mul", 2, OPC_BINARY, 1, 0, MUL)                                                        \
  X(DIV, "div", 2, OPC_BINARY, 1, 0, DIV)                                                        \
  X(EQ, "eq", 2, OPC_BINARY, 1, 0, OTHER)                 /* x == y ? 1 : 0; gradient 0 */       \
  X(LT, "lt", 2, OPC_BINARY, 1, 0, OTHER)                 /* x < y ? 1 : 0; gradient 0 */        \
  X(LE, "le", 2, OPC_BINARY, 1, 0, OTHER)                 /* x <= y ? 1 : 0; gradient 0 */       \
  /* callable by name: maximum(x, y), minimum(x, y) (a tie splits the gradient */               \
  /* evenly, as PyTorch's), pow(x, y) (x > 0, or y a constant integer) */                          \
  X(MAXIMUM, "maximum", 2, OPC_BINARY, 1, IR_P_CALL, OTHER)                                      \
  X(MINIMUM, "minimum", 2, OPC_BINARY, 1, IR_P_CALL, OTHER)                                      \
  X(POW, "pow", 2, OPC_BINARY, 1, IR_P_CALL, OTHER)                                              \
  /* reductions over attr axis, keepdim */                                                       \
  X(SUM, "sum", 1, OPC_REDUCE, 1, 0, CAT)                                                        \
  X(MEAN, "mean", 1, OPC_REDUCE, 1, 0, CAT)                                                      \
  X(MAX, "max", 1, OPC_REDUCE, 1, 0, CAT)                                                        \
  /* x [..., m, k] @ y [..., k, n] -> [..., m, n], batch dims broadcast */                       \
  X(MATMUL, "matmul", 2, OPC_MATMUL, 1, 0, CAT)                                                  \
  /* data movement */                                                                            \
  X(TRANSPOSE, "transpose", 1, OPC_MOVE, 1, 0, CAT)       /* swap axes axis, axis2 */            \
  X(RESHAPE, "reshape", 1, OPC_MOVE, 1, 0, CAT)           /* row-major, to node.shape */         \
  X(SLICE, "slice", 1, OPC_MOVE, 1, 0, CAT)               /* axis, [start, start+len) */         \
  X(CONCAT, "concat", 2, OPC_MOVE, 1, 0, CAT)             /* along axis */                       \
  X(PAD, "pad", 1, OPC_MOVE, 0, 0, CAT)                   /* inverse of slice: zeros around */   \
  X(EXPAND, "expand", 1, OPC_MOVE, 0, 0, CAT)             /* broadcast to node.shape */          \
  X(EMBED, "embed", 2, OPC_MOVE, 1, 0, CAT)               /* W [V, d], ids [...] -> [..., d] */  \
  X(ONEHOT, "onehot", 1, OPC_MOVE, 0, 0, CAT)             /* ids [...] -> [..., len] */          \
  X(SCATTER_ADD, "scatter_add", 2, OPC_MOVE, 0, 0, CAT)   /* dy [..., d], ids -> [len, d] */     \
  /* out_t = x_{t - start} along axis, 0 where t - start is outside [0, n) */                    \
  X(SHIFT, "shift", 1, OPC_MOVE, 1, IR_P_HIST(0), CAT)                                           \
  /* neural-network primitives */                                                                \
  X(SOFTMAX, "softmax", 1, OPC_NN, 1, 0, OWN)             /* over axis */                        \
  X(LAYERNORM, "layernorm", 3, OPC_NN, 1, IR_P_ROW_NORM, OWN) /* x, g, b over last axis; eps */  \
  /* its gradients, rows recomputing mu and sigma: x, g, dy -> dx [..., d] */                    \
  X(LAYERNORM_DX, "layernorm_dx", 3, OPC_NN, 0, IR_P_ROW_NORM, OWN)                              \
  /* x, dy -> dy o xhat [..., d], the terms of the gain gradient (its sum) */                    \
  X(LAYERNORM_DYXH, "layernorm_dy_xhat", 2, OPC_NN, 0, IR_P_ROW_TERMS, OWN)                      \
  /* x, g over the last axis: g o x / sqrt(mean(x^2) + eps); eps */                              \
  X(RMSNORM, "rmsnorm", 2, OPC_NN, 1, IR_P_ROW_NORM | IR_P_RMS, OWN)                             \
  /* its gradients as LAYERNORM's: x, g, dy -> dx; x, dy -> dy o xhat */                         \
  X(RMSNORM_DX, "rmsnorm_dx", 3, OPC_NN, 0, IR_P_ROW_NORM | IR_P_RMS, OWN)                       \
  X(RMSNORM_DYXH, "rmsnorm_dy_xhat", 2, OPC_NN, 0, IR_P_ROW_TERMS | IR_P_RMS, OWN)               \
  X(CAUSAL_MASK, "causal_mask", 1, OPC_NN, 1, 0, OWN)     /* [..., T, T]: fval above diag */     \
  X(CAUSAL_CONV, "causal_conv", 2, OPC_NN, 1, IR_P_HIST(0), OWN) /* x [..., T, d], w [L, ...] */ \
  X(CONV_DX, "causal_conv_dx", 2, OPC_NN, 0, 0, OWN)      /* dy, w -> dx (see ConvKind) */       \
  X(CONV_DW, "causal_conv_dw", 2, OPC_NN, 0, 0, OWN)      /* x, dy -> dw [len, ...] */           \
  X(DROPOUT, "dropout", 1, OPC_NN, 1, 0, OWN)             /* p = fval, mask stream = seed */     \
  /* a broadcast to b: h_t = a_t o h_{t-1} + b_t along axis (see SCAN) */                        \
  X(SCAN, "scan", 2, OPC_NN, 1, 0, OWN)                                                          \
  /* a broadcast to dy: g_t = dy_t + a_{t+1} o g_{t+1} along axis */                             \
  X(SCAN_REV, "scan_rev", 2, OPC_NN, 0, 0, OWN)                                                  \
  /* q, k, v, a -> sum over rows of q o scan(a, k o v) (passes/fuse_scan.c) */                   \
  X(SCAN_READ, "scan_read", 4, OPC_NN, 1, 0, OWN)                                                \
  /* q, k, v, a, dy -> [.., 2 dk + dv]: dq | dk | dv of SCAN_READ */                             \
  X(SCAN_READ_GRAD, "scan_read_grad", 5, OPC_NN, 0, 0, OWN)                                      \
  X(CROSS_ENTROPY, "cross_entropy", 2, OPC_NN, 1, 0, OWN) /* logits, ids -> [] mean */           \
  /* logits [..., V] -> [..., 1]: log sum_c e^(x_c), cross_entropy's row */                       \
  /* statistics for its gradient (its kernel writes them: fuse_groups.c) */                       \
  X(CROSS_ENTROPY_LSE, "cross_entropy_lse", 1, OPC_NN, 0, 0, OWN)                                \
  /* fused causal attention (passes/fuse_attention.c), q, k [..., T, h], */                      \
  /* v [..., T, e][, b]: softmax(causal_mask(q k^T fval + b)) v -> */                            \
  /* [..., T, e]; axis 1: time-major heads, q, k [..., T, H, h], v */                            \
  /* [..., T, H, e] -> [..., T, H, e], one attention per (..., head) over */                     \
  /* T; b: the score bias (ir_attention_bias) */                                                 \
  X(ATTENTION, "attention", 4, OPC_NN, 1, IR_P_HIST(1) | IR_P_HIST(2) | IR_P_OPT_LAST, OWN)      \
  /* q, k, v[, b] -> [..., T(, H)]: ATTENTION's row statistics, L_i = */                          \
  /* log sum_j e^(s_ij) over the keys row i sees (the forward's kernel */                        \
  /* writes them beside o: passes/fuse_groups.c) */                                              \
  X(ATTENTION_LSE, "attention_lse", 4, OPC_NN, 0, IR_P_HIST(1) | IR_P_OPT_LAST, OWN)             \
  /* q, k, v, dy, L, o[, b] -> [..., T, 2h + e]: dq | dk | dv of ATTENTION */                    \
  /* (L its ATTENTION_LSE, o its value: P_ij = e^(s_ij - L_i), D_i = dy_i . o_i) */               \
  X(ATTENTION_GRAD, "attention_grad", 7, OPC_NN, 0, IR_P_OPT_LAST, OWN)                          \
  /* q, k, v, dy, b -> db: ATTENTION's score-bias gradient, b's shape */                         \
  X(ATTENTION_DBIAS, "attention_dbias", 5, OPC_NN, 0, 0, OWN)                                    \
  /* x [.., d], w [E, d, f], ids [..] (x's leading axes, f32): row r of x */                     \
  /* times w[ids_r] -> [.., f]; a row whose id is not in [0, E) is 0 (the */                    \
  /* expert of a row: the id truncated; each expert one GEMM over its rows) */                   \
  X(ROUTED_MATMUL, "routed_matmul", 3, OPC_NN, 1, 0, OWN)                                        \
  /* x [.., d], dy [.., f], ids [..] -> [E, d, f], E = len: sum over the */                      \
  /* rows r with expert e of x_r^T dy_r (ROUTED_MATMUL's weight gradient) */                     \
  X(ROUTED_MATMUL_DW, "routed_matmul_dw", 3, OPC_NN, 0, 0, OWN)                                  \
  /* x [.., n] -> [.., k], k = len: the indices (f32) of the k largest */                        \
  /* along the last axis, largest first, ties to the lower index; NaNs never */                  \
  /* chosen; no gradient (ir_grad_zero) */                                                       \
  X(TOPK, "topk", 1, OPC_NN, 0, 0, OWN)

typedef enum {
#define X(name, text, nin, cat, diff, props, cost) OP_##name,
  IR_OPS(X)
#undef X
  OP_COUNT
} OpKind;

// IR_CASES_UNARY: a case label for every op of category OPC_UNARY, so that a
// switch over OpKind that treats them alike stays exhaustive (-Wswitch) and
// takes a new one from the table.
#define IR_CASE_OPC_UNARY(name) case OP_##name:
#define IR_CASE_OPC_LEAF(name)
#define IR_CASE_OPC_BINARY(name)
#define IR_CASE_OPC_REDUCE(name)
#define IR_CASE_OPC_MATMUL(name)
#define IR_CASE_OPC_MOVE(name)
#define IR_CASE_OPC_NN(name)
#define IR_X_CASE_UNARY(name, text, nin, cat, diff, props, cost) IR_CASE_##cat(name)
#define IR_CASES_UNARY IR_OPS(IR_X_CASE_UNARY)
// IR_CASES_BINARY: the same for OPC_BINARY.
#define IR_BCASE_OPC_BINARY(name) case OP_##name:
#define IR_BCASE_OPC_LEAF(name)
#define IR_BCASE_OPC_UNARY(name)
#define IR_BCASE_OPC_REDUCE(name)
#define IR_BCASE_OPC_MATMUL(name)
#define IR_BCASE_OPC_MOVE(name)
#define IR_BCASE_OPC_NN(name)
#define IR_X_CASE_BINARY(name, text, nin, cat, diff, props, cost) IR_BCASE_##cat(name)
#define IR_CASES_BINARY IR_OPS(IR_X_CASE_BINARY)

typedef struct {
  const char *name;
  int nin;
  OpCategory cat;
  bool differentiable;
  unsigned props;  // IR_P_*
  IrCost cost;
} OpInfo;

extern const OpInfo ir_op_info[OP_COUNT];
// Whether a node of op may have nin inputs: the table's count, or one fewer
// for an op whose last input is optional (IR_P_OPT_LAST).
static inline bool ir_nin_ok(OpKind op, int nin) {
  return nin == ir_op_info[op].nin || ((ir_op_info[op].props & IR_P_OPT_LAST) && nin == ir_op_info[op].nin - 1);
}

// Kernel kind of CAUSAL_CONV, from the rank of w (seed 001):
//   scalar per lag  w [L]          out_i = sum_{j<=i} x_j * w_{i-j}    (eq. 29)
//   vector per lag  w [L, d]       out_i = sum_{j<=i} x_j o w_{i-j}    (eqs. 26, 28)
//   matrix per lag  w [L, d, e]    out_i = sum_{j<=i} x_j W_{i-j}      (eq. 23)
// with 0-based lags (the paper's w_{i-j+1}); L >= T is required.
// Its gradients (autodiff only):
//   CONV_DX  dx_j = sum_{i>=j} dy_i (.) w_{i-j}     (W^T for the matrix kind)
//   CONV_DW  dw_k = sum_i x_{i-k} (.) dy_i          (outer product x^T dy for
//            the matrix kind; summed over the last axis for the scalar kind)
typedef enum { CONV_SCALAR, CONV_VECTOR, CONV_MATRIX } ConvKind;

// SCAN, the linear recurrence of seed 003 eqs. (6.154)-(6.158), (6.164):
//   h_t = a_t o h_{t-1} + b_t,  h_{-1} = 0,  t along node.axis
// elementwise over every other axis, a numpy-broadcast to b (a decay shared
// by the columns of a state, or a constant); a matrix state (linear attention's
// S_t = diag(a_t) S_{t-1} + k_t^T v_t) is a b of shape [.., T, dk, dv].
// Its gradient (autodiff only), g = dL/dh summed over the future:
//   SCAN_REV  g_t = dy_t + a_{t+1} o g_{t+1};  db_t = g_t;  da_t = g_t o h_{t-1}
// (h_{t-1} as SHIFT(h, axis, 1)).
//
// SCAN_READ, a scan of an outer product read out by a contraction of its
// rows (linear attention, seed 003 eqs. 6.156-6.160; RetNet), with R the
// rank of k, the time t along node.axis < R - 2:
//   S_t = a_t o S_{t-1} + k_t v_t,  out_t = sum_i q_t[i] S_t[i, :]
// q, k [.., dk, 1], v [.., 1, dv] (k's axes before R - 2), a broadcast to
// k; out [.., 1, dv]. The state S [dk, dv] of a sequence is never stored.
// Its gradient (autodiff only), G_t = dL/dS_t summed over the future:
//   SCAN_READ_GRAD  G_t = a_{t+1} o G_{t+1} + q_t^T dy_t;
//                   dq_t = S_t dy_t^T, dk_t = G_t v_t^T, dv_t = k_t^T G_t
// as [.., 2 dk + dv] (k's axes before R - 2); da from those by
//   a_s o da_s = sum_{t >= s} (q_t o dq_t - k_t o dk_t)
// (the products of a_l over the pairs j < s <= t that a_s takes part in).

// Parameters' initialisers; numbered as XF_INIT_* (runtime/xf_abi.h).
typedef enum { INIT_NONE, INIT_NORMAL, INIT_UNIFORM, INIT_ZEROS, INIT_ONES, INIT_CONSTANT, INIT_TRUNC_NORMAL } InitKind;
typedef struct {
  InitKind kind;
  double a, b;  // normal: mean, std; uniform: low, high
} Init;

#define IR_MAX_IN 7

typedef struct {
  int id;
  OpKind op;
  DType dtype;
  Shape shape;
  int nin;
  int in[IR_MAX_IN];
  // attributes (meaning depends on op; unused ones are zero)
  int axis, axis2;       // REDUCE/SOFTMAX/SLICE/CONCAT: axis; TRANSPOSE: both;
                         // REDUCE: axes [axis, axis2] when axis2 > axis
  double fval;           // CONST: value; DROPOUT: p; LAYERNORM, RMSNORM (_DX, _DG): eps;
                         // ATTENTION(_GRAD): the scale of q k^T;
                         // CAUSAL_MASK: the fill above the diagonal (-inf
                         // in forward graphs, 0 in its gradient)
  int64_t start;         // SLICE, PAD: first index of the slice;
                         // ATTENTION(_GRAD, _DBIAS): the key window W,
                         // keys j <= i - W masked (0: none; the kernels
                         // skip them): a band the score bias masks, or the
                         // op's own mask where the bias was that band alone
  Dim len;               // SLICE: length; IOTA: n; SIZE: the size;
                         // ONEHOT, SCATTER_ADD: classes; CONV_DW: lags L
  ConvKind conv;         // CAUSAL_CONV
  uint32_t seed;         // DROPOUT: mask stream; nodes sharing one draw the
                         // same mask (a forward dropout and its gradient)
  Init init;             // PARAM
  const char *name;      // PARAM: dotted instance path; INPUT: argument name
  int scope;             // index into Graph.scopes
  int call;              // index into Graph.calls: the block call that made it
                         // (0: the model's forward; PARAM nodes: 0)
  Loc loc;
} Node;

// A block instance: the unit of parameter ownership and of --stats rows.
typedef struct {
  const char *path;    // "lm.layers.3.mixer"; "" for the model itself
  const char *block;   // block name
  int parent;          // -1 for the root
  Loc loc;             // where it was instantiated
} Scope;

// A call of a block instance during elaboration. The nodes a call and the
// calls below it made are contiguous in node order (elaboration runs them in
// turn); a call that made no node has none. Calls are in the order they
// began, so a call's parent comes before it. The call that owns a node is
// the innermost one running when it was made; the scope that owns it is
// that call's scope, not necessarily under the caller's (a block passed as an
// argument, called by another: LieTrotter's mixer called from its PreNorm).
typedef struct {
  int scope;          // the instance called (Graph.scopes); a repeat sequence's
                      // scope for the call running its items in turn
  int parent;         // the calling call; -1 for call 0, the model's forward
  const char *site;   // the name the caller called it by ("f", "ln"); NULL
                      // when not a plain name (a repeat's items)
} Call;

typedef struct {
  const char *name;
  bool is_float;
  double value;
} ConfigEntry;

typedef struct {
  const char *name;
  int node;
} Output;

typedef struct {
  Arena *arena;
  const char *name;      // model name
  int64_t t_max;         // bound of T: the model's context length
  bool noncausal;        // declared `noncausal model`: its logits may read
                         // later positions (an encoder), so no language
                         // model training or decoding is implied
  Node *nodes;
  int nnodes, cap_nodes;
  Scope *scopes;
  int nscopes, cap_scopes;
  Output *outputs;
  int noutputs, cap_outputs;
  int nforward;          // nodes [0, nforward) are the forward pass; the rest
                         // (autodiff) the backward pass. 0: no backward yet
  ConfigEntry *config;
  int nconfig, cap_config;
  Call *calls;           // the block calls of elaboration (0: none recorded,
  int ncalls, cap_calls; // every node then belongs to call 0)
} Graph;

// ---- ir.c ------------------------------------------------------------------

Graph *ir_graph_new(Arena *a, const char *name);
// A copy of g (nodes, scopes, outputs, config, calls) whose arrays live in a.
Graph *ir_graph_clone(Arena *a, const Graph *g);
int ir_scope_add(Graph *g, const char *path, const char *block, int parent, Loc loc);
void ir_output_add(Graph *g, const char *name, int node);
void ir_config_add(Graph *g, const char *name, bool is_float, double v);
int ir_call_add(Graph *g, int scope, int parent, const char *site);

// Appends n (op, inputs and attributes filled in; shape and dtype are
// inferred) and returns its id. On a shape or type error returns -1 and
// writes a message naming both shapes into err.
int ir_add(Graph *g, Node n, char *err, size_t errlen);

// The shape rule of every op: fills out->shape and out->dtype from the
// inputs. Returns false with a message on mismatch. Used by ir_add and by
// the verifier.
bool ir_infer(const Graph *g, const Node *n, Shape *shape, DType *dtype,
              char *err, size_t errlen);

bool dim_eq(Dim a, Dim b);
bool shape_eq(const Shape *a, const Shape *b);
int64_t shape_numel_const(const Shape *s, int64_t b, int64_t t);
// The least common multiple of every time axis's divisor s (T / s) in g's
// nodes: T must be a multiple of it (1: no shortened time axis).
int64_t ir_t_multiple(const Graph *g);
// "[B, T, 128]"
const char *shape_str(Arena *a, const Shape *s);
void shape_fmt(char *buf, size_t n, const Shape *s);
int ir_norm_axis(int axis, int rank);  // -1 -> rank-1; returns -1 if bad
// The last axis a reduction (SUM, MEAN, MAX) reduces: it reduces the axes
// [axis, axis2] when axis2 > axis (autodiff sums a broadcast over several
// leading axes at once), else axis alone. Any other node: its axis.
int ir_reduce_end(const Node *n);

// Writes a message into err and returns false: the error convention of the
// IR, the verifier and the interpreter.
bool ir_errorf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// The value of a unary elementwise op (OPC_UNARY) at x, in double: the one
// definition shared by constant folding and the reference interpreter.
double ir_eval_unary(OpKind op, double x);
// The value of a binary elementwise op (OPC_BINARY) at x, y, in double.
double ir_eval_binary(OpKind op, double x, double y);
// Whether a reshape of `from` into `to` only adds or drops axes of size 1
// (the others in order); then map[a] is the axis of `to` holding axis a of
// `from`, -1 for an axis of size 1.
bool ir_reshape_unit_map(const Shape *from, const Shape *to, int *map);
// Whether op's gradient is 0 almost everywhere (the comparisons, floor, topk) or
// cut on purpose (stop_gradient): nothing
// below it takes a gradient through it (autodiff's needs).
static inline bool ir_grad_zero(OpKind op) {
  return op == OP_EQ || op == OP_LT || op == OP_LE || op == OP_FLOOR || op == OP_STOP_GRADIENT || op == OP_TOPK;
}
// ATTENTION and ATTENTION_GRAD (axis 0): the query sequences that share one
// key and value sequence, G, when k and v are [..., 1, T, h] against q
// [..., G, T, h] (grouped-query attention: sequence m of q reads sequence
// m / G of k and v); else 1.
int64_t ir_attention_group(const Graph *g, const Node *n);
// ATTENTION (input 3), ATTENTION_GRAD and ATTENTION_DBIAS (input 4): the
// input index of the score bias b, or -1 without one. b broadcasts against
// the scores [seq..., T, T] (numpy's rules: its axes align with the scores'
// trailing ones, each equal to the score axis or 1): query i of sequence m
// (in the op's order: q's leading axes, then with axis 1 the heads) scores
// key j as fval q_i . k_j + b[c(m), i, j], c(m) m's coordinates on b's axes
// (0 on an axis of 1). One block for all, one per head, a key-padding row per
// batch entry ([B, 1, 1, T]), ... Its gradient is ATTENTION_DBIAS's.
int ir_attention_bias(const Node *n);
// The axes of the score sequences of attention n (q's leading axes, then
// the heads with axis 1) into seq[0 .. return), and the positions T into *t.
int ir_attention_seq(const Graph *g, const Node *n, Dim *seq, Dim *t);
// The axis of bias shape bs that reads score axis s of [seq_0 .. seq_(ns-1),
// T, T] (s = ns: the query axis, ns + 1: the key axis), or -1 where bs
// broadcasts along it (the axis is absent or 1).
int ir_attention_bias_axis(const Shape *bs, int ns, int s);
// Whether a bias of shape bs broadcasts against scores [seq_0 .. seq_(ns-1),
// t, t] (the shape rule, and the fusion's test).
bool ir_attention_bias_fits(const Dim *seq, int ns, Dim t, const Shape *bs);

// ---- verify.c --------------------------------------------------------------

// Checks every structural invariant (topological order, arity, attributes,
// shapes re-inferred equal to stored ones, names, outputs). Returns true, or
// false with the first violation in err.
bool ir_verify(const Graph *g, char *err, size_t errlen);

// ---- print.c ---------------------------------------------------------------

#include <stdio.h>
void ir_print(FILE *f, const Graph *g);

#endif
