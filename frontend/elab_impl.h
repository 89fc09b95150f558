// elab_impl.h: the elaborator's own types and the helpers its files share
// (elaborate.c: construction, expressions, bodies; builtins.c: the built-in
// functions). Not part of the frontend's interface (frontend.h).
#ifndef XF_ELAB_IMPL_H
#define XF_ELAB_IMPL_H

#include "frontend.h"

#include <stdbool.h>
#include <stdint.h>

// Limits keep every input to seconds of work and a bounded C stack:
//   MAX_DEPTH  nesting of eval (expressions, and calls through them);
//   MAX_NODES  forward nodes: autodiff and --stats multiply the work;
//   MAX_CALLS  function and block calls, which nodes do not bound (functions
//              of numbers can call each other exponentially often).
enum {
  MAX_FRAMES = 200,
  MAX_DEPTH = 1000,
  MAX_INSTANCES = 100000,
  MAX_NODES = 100000,
  MAX_CALLS = 1000000,
  MAX_REPEAT = 10000,
};
#define MAX_ELEMENTS (1LL << 46)

typedef enum {
  V_NONE,
  V_INT,      // i
  V_FLOAT,    // f
  V_DIM,      // dim: the symbolic sizes B and T
  V_SHAPE,    // shape
  V_TENSOR,   // node
  V_PARAM,    // a parameter seen at construction time: inst, i
  V_INST,     // inst
  V_DEF,      // a block or fn definition: def
  V_BUILTIN,  // i: index into builtins
} VKind;

typedef struct Inst Inst;

typedef struct {
  VKind kind;
  int64_t i;
  double f;
  Dim dim;
  Shape shape;
  int node;
  Inst *inst;
  const Def *def;
} Value;

typedef struct Binding Binding;
struct Binding {
  const char *name;
  Value v;
  Loc loc;
  Binding *next;
};

typedef struct Env Env;
struct Env {
  Binding *head;
  Env *parent;
};

typedef struct {
  const char *name;
  Shape shape;
  Init init;
  Loc loc;
  int node;
} PendingParam;

struct Inst {
  const Def *def;      // NULL for a repeat sequence
  Env *env;            // block arguments, params, lets
  Inst *owner;         // the instance that first bound this one
  const char *local;   // its name there
  Vec children;        // Inst* owned by this one, in binding order
  PendingParam *params;
  int nparams, cap_params;
  Inst **items;        // repeat sequence
  int nitems;
  const Member *forward;
  int scope;
  Loc loc;
};

typedef struct {
  Loc loc;
  const char *what;
} Frame;

typedef enum { CTX_BUILD, CTX_RUN } Ctx;

typedef struct {
  Diag *d;
  Arena *a;
  Graph *g;
  Def **defs;
  int ndefs;
  const Program *prog;
  int cur;        // the module whose code runs: names resolve as it sees them (find_def)
  uint8_t *seen;  // [nmodules]: find_def's walk
  const Def *stack[MAX_FRAMES];  // definitions being instantiated or called
  int nstack;
  Frame frames[MAX_FRAMES];
  int nframes;
  int depth;  // evals in progress
  int ncalls;  // calls made so far (push_frame)
  int scope;
  int call;  // the block call running (Graph.calls): the call of the nodes made
  Vec insts;
  uint32_t ndropout;
  Inst *root;
  Vec sides;  // Side*: the side outputs returned so far, in order
  int64_t tdiv;  // what `T` means where the code runs: T / tdiv (0 or 1: T); a
                 // forward or function whose tensor arguments declare [.., T, ..]
                 // and get [.., T / s, ..] runs with T meaning T / s (bind_args)
} Elab;

// A side output: `return y, name: value` of a block's forward or a function.
typedef struct {
  const char *name;
  int node;
} Side;

typedef enum {
  BI_UNARY,   // op: elementwise math, folds on numbers
  BI_BINARY,  // op: elementwise of two, broadcasting, folds on numbers (maximum, minimum, pow)
  BI_REDUCE,  // op(x, axis)
  BI_SOFTMAX,
  BI_LAYERNORM,
  BI_RMSNORM,
  BI_CAUSAL_MASK,
  BI_CAUSAL_CONV,
  BI_SCAN,
  BI_SHIFT,
  BI_EMBED,
  BI_ROUTED,  // routed_matmul(x, w, ids): row r of x times w[ids_r]
  BI_TOPK,    // topk(x, k, axis = -1): the indices of the k largest along axis
  BI_DROPOUT,
  BI_TRANSPOSE,
  BI_RESHAPE,
  BI_SLICE,
  BI_CONCAT,
  BI_IOTA,
  BI_CROSS_ENTROPY,
  BI_DIM,
  BI_SIDE,    // side("name"): the sum of the side outputs `name` returned so far
  BI_ONE_HOT, // one_hot(ids, n): [..., n] masks of token ids (onehot) or of float ids (ids == iota(n))
  BI_GATHER,  // gather(x, ids, axis): x's entries at ids along axis, through one_hot
  BI_SCATTER, // scatter_add(x, ids, n, axis): x's entries summed into n places along axis, through one_hot
  BI_INIT,    // normal, uniform, zeros, ones: only in param declarations
  BI_SIZE,    // B and T
} BuiltinKind;

typedef struct {
  const char *name;
  BuiltinKind kind;
  OpKind op;
  int nargs;
  const char *usage;
} Builtin;

extern const Builtin el_builtins[];
extern const int el_nbuiltins;
// Whether b can be called by name (the elementwise ops need IR_P_CALL).
bool el_callable(const Builtin *b);
// The index of the callable built-in `name`, or -1.
int el_find_builtin(const char *name);
// bi applied to the n argument values a (expressions ax) at loc (builtins.c).
Value el_call_builtin(Elab *E, const Builtin *bi, Value *a, const Expr **ax, int n, Loc loc, Ctx ctx);

// Reports an error at loc (with the call frames) and ends elaboration.
_Noreturn void el_err(Elab *E, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *el_kind_name(VKind k);
// A node made by ir_add at loc (its shape checked), in the current scope and call.
int el_add_node(Elab *E, Node n, Loc loc);
// The argument v as what the built-ins take, or an error at loc naming `what`.
int el_want_tensor(Elab *E, Value v, Loc loc, const char *what);
int el_want_tensor_strict(Elab *E, Value v, Loc loc, const char *what);
int64_t el_want_int(Elab *E, Value v, Loc loc, const char *what);
double el_want_number(Elab *E, Value v, Loc loc, const char *what);
int el_want_axis(Elab *E, Value v, Loc loc);
Dim el_want_size(Elab *E, Value v, Loc loc, const char *what);

static inline Value vint(int64_t i) { return (Value){.kind = V_INT, .i = i}; }
static inline Value vfloat(double f) { return (Value){.kind = V_FLOAT, .f = f}; }
static inline Value vtensor(int node) { return (Value){.kind = V_TENSOR, .node = node}; }
static inline bool is_number(Value v) { return v.kind == V_INT || v.kind == V_FLOAT; }
static inline double num(Value v) { return v.kind == V_INT ? (double)v.i : v.f; }

#endif
