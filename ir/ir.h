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
  int64_t n;  // size when kind == DIM_CONST, else 0
} Dim;

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
// X(NAME, "text", inputs, category). inputs = -1: variable (see notes).

typedef enum {
  OPC_LEAF,     // no inputs: params, inputs, constants
  OPC_UNARY,    // elementwise f(x)
  OPC_BINARY,   // elementwise f(x, y) with numpy broadcasting
  OPC_REDUCE,   // reduce one axis, keep it with size 1
  OPC_MATMUL,   // batched matrix product
  OPC_MOVE,     // data movement: transpose, reshape, slice, concat, gather
  OPC_NN,       // composite primitives with their own kernels
} OpCategory;

#define IR_OPS(X)                                                              \
  /* leaves */                                                                 \
  X(PARAM, "param", 0, OPC_LEAF)       /* trainable; name, init */             \
  X(INPUT, "input", 0, OPC_LEAF)       /* graph input (tokens); name */        \
  X(CONST, "const", 0, OPC_LEAF)       /* scalar [] with value fval */         \
  X(IOTA, "iota", 0, OPC_LEAF)         /* [n]: 0, 1, ..., n-1 */               \
  /* elementwise unary */                                                      \
  X(NEG, "neg", 1, OPC_UNARY)                                                  \
  X(EXP, "exp", 1, OPC_UNARY)                                                  \
  X(LOG, "log", 1, OPC_UNARY)                                                  \
  X(SQRT, "sqrt", 1, OPC_UNARY)                                                \
  X(TANH, "tanh", 1, OPC_UNARY)                                                \
  X(RELU, "relu", 1, OPC_UNARY)                                                \
  X(GELU, "gelu", 1, OPC_UNARY)        /* x * Phi(x), erf form */              \
  X(SIGMOID, "sigmoid", 1, OPC_UNARY)                                          \
  X(SIN, "sin", 1, OPC_UNARY)                                                  \
  X(COS, "cos", 1, OPC_UNARY)                                                  \
  /* elementwise binary, broadcasting */                                       \
  X(ADD, "add", 2, OPC_BINARY)                                                 \
  X(SUB, "sub", 2, OPC_BINARY)                                                 \
  X(MUL, "mul", 2, OPC_BINARY)                                                 \
  X(DIV, "div", 2, OPC_BINARY)                                                 \
  /* reductions over attr axis, keepdim */                                     \
  X(SUM, "sum", 1, OPC_REDUCE)                                                 \
  X(MEAN, "mean", 1, OPC_REDUCE)                                               \
  X(MAX, "max", 1, OPC_REDUCE)                                                 \
  /* x [..., m, k] @ y [..., k, n] -> [..., m, n], batch dims broadcast */     \
  X(MATMUL, "matmul", 2, OPC_MATMUL)                                           \
  /* data movement */                                                          \
  X(TRANSPOSE, "transpose", 1, OPC_MOVE) /* swap axes axis, axis2 */           \
  X(RESHAPE, "reshape", 1, OPC_MOVE)     /* row-major, to node.shape */        \
  X(SLICE, "slice", 1, OPC_MOVE)         /* axis, [start, start+len) */        \
  X(CONCAT, "concat", 2, OPC_MOVE)       /* along axis */                      \
  X(EMBED, "embed", 2, OPC_MOVE)         /* W [V, d], ids [...] -> [..., d] */ \
  /* neural-network primitives */                                              \
  X(SOFTMAX, "softmax", 1, OPC_NN)       /* over axis */                       \
  X(LAYERNORM, "layernorm", 3, OPC_NN)   /* x, g, b over last axis; eps */     \
  X(CAUSAL_MASK, "causal_mask", 1, OPC_NN) /* [..., T, T]: -inf above diag */  \
  X(CAUSAL_CONV, "causal_conv", 2, OPC_NN) /* x [..., T, d], w [L, ...] */     \
  X(DROPOUT, "dropout", 1, OPC_NN)       /* p = fval, mask stream = seed */    \
  X(CROSS_ENTROPY, "cross_entropy", 2, OPC_NN) /* logits, ids -> [] mean */

typedef enum {
#define X(name, text, nin, cat) OP_##name,
  IR_OPS(X)
#undef X
  OP_COUNT
} OpKind;

typedef struct {
  const char *name;
  int nin;
  OpCategory cat;
} OpInfo;

extern const OpInfo ir_op_info[OP_COUNT];

// Kernel kind of CAUSAL_CONV, from the rank of w (seed 001):
//   scalar per lag  w [L]          out_i = sum_{j<=i} x_j * w_{i-j}    (eq. 29)
//   vector per lag  w [L, d]       out_i = sum_{j<=i} x_j o w_{i-j}    (eqs. 26, 28)
//   matrix per lag  w [L, d, e]    out_i = sum_{j<=i} x_j W_{i-j}      (eq. 23)
// with 0-based lags (the paper's w_{i-j+1}); L >= T is required.
typedef enum { CONV_SCALAR, CONV_VECTOR, CONV_MATRIX } ConvKind;

typedef enum { INIT_NONE, INIT_NORMAL, INIT_UNIFORM, INIT_ZEROS, INIT_ONES } InitKind;
typedef struct {
  InitKind kind;
  double a, b;  // normal: mean, std; uniform: low, high
} Init;

#define IR_MAX_IN 3

typedef struct {
  int id;
  OpKind op;
  DType dtype;
  Shape shape;
  int nin;
  int in[IR_MAX_IN];
  // attributes (meaning depends on op; unused ones are zero)
  int axis, axis2;       // REDUCE/SOFTMAX/SLICE/CONCAT: axis; TRANSPOSE: both
  double fval;           // CONST: value; DROPOUT: p; LAYERNORM: eps
  int64_t start;         // SLICE: first index
  Dim len;               // SLICE: length; IOTA: n
  ConvKind conv;         // CAUSAL_CONV
  uint32_t seed;         // DROPOUT: mask stream, unique per dropout node
  Init init;             // PARAM
  const char *name;      // PARAM: dotted instance path; INPUT: argument name
  int scope;             // index into Graph.scopes
  Loc loc;
} Node;

// A block instance: the unit of parameter ownership and of --stats rows.
typedef struct {
  const char *path;    // "lm.layers.3.mixer"; "" for the model itself
  const char *block;   // block name
  int parent;          // -1 for the root
  Loc loc;             // where it was instantiated
} Scope;

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
  Node *nodes;
  int nnodes, cap_nodes;
  Scope *scopes;
  int nscopes, cap_scopes;
  Output *outputs;
  int noutputs, cap_outputs;
  ConfigEntry *config;
  int nconfig, cap_config;
} Graph;

// ---- ir.c ------------------------------------------------------------------

Graph *ir_graph_new(Arena *a, const char *name);
int ir_scope_add(Graph *g, const char *path, const char *block, int parent, Loc loc);
void ir_output_add(Graph *g, const char *name, int node);
void ir_config_add(Graph *g, const char *name, bool is_float, double v);

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
// "[B, T, 128]"
const char *shape_str(Arena *a, const Shape *s);
void shape_fmt(char *buf, size_t n, const Shape *s);
int ir_norm_axis(int axis, int rank);  // -1 -> rank-1; returns -1 if bad

// ---- verify.c --------------------------------------------------------------

// Checks every structural invariant (topological order, arity, attributes,
// shapes re-inferred equal to stored ones, names, outputs). Returns true, or
// false with the first violation in err.
bool ir_verify(const Graph *g, char *err, size_t errlen);

// ---- print.c ---------------------------------------------------------------

#include <stdio.h>
void ir_print(FILE *f, const Graph *g);

#endif
