// loops.h: the loop-level kernel description, between the schedule and the
// backends.
//
// lower.c turns a kernel class of the Schedule (kernel.h) into an LKernel:
// what each output element is, as loops over indices, affine loads and
// stores on the kernel's operand slots (KS_*), scalar ALU expressions and
// reductions, plus the launch shape the middle chose for it. The backends
// print it: llvm.c as LLVM IR (one function over outer indices [lo, hi)),
// cuda.c as CUDA C (a grid over the outer indices), lower.c's lkernel_print
// as text (xfc --emit=loops). A backend decides nothing about what a kernel
// computes; it only chooses how to print each construct (an 8-lane tree on
// the CPU, a warp shuffle on the GPU for a reduction).
//
// Semantics of an LKernel, for each outer index o in [0, outer) (variable 0):
// run body. The outer indices are independent; a backend may run them in any
// order and in parallel. Variables are single-assignment: every LS_LET,
// LS_FOR and LS_REDUCE defines a fresh variable, visible to the statements
// after it in its block and inside them.
//
// Matrix products (MATMUL, the product of an FG_MATMUL_MAP group before its
// epilogue, FG_WEIGHT_GRAD) are described as GEMMs (LGemm, lower_gemm): the
// backends print a BLAS call or a cuBLAS record from it. On a GPU, the
// matrix-kind causal convolutions are a sequence of LKernels and strided-
// batched LGemms, and CONV_DW of the other kinds and SCATTER_ADD sequences
// of LKernels (LSteps, lower_steps). On a CPU a causal convolution is an
// LConv, which llvm.c prints as its loop nest.
#ifndef XF_LOOPS_H
#define XF_LOOPS_H

#include <stdio.h>

#include "kernel.h"

typedef enum {
  LT_I64,   // indices, sizes, token ids (loaded i32, sign-extended)
  LT_F32,   // values
  LT_BOOL,  // comparisons
} LType;

// Expressions: a subexpression may hang under several parents (a printer
// evaluates it at each use; lower.c puts what is costly, exponentials and
// dropout draws, in LS_LETs). Arithmetic kinds are typed by their operands
// (both LT_I64 or both LT_F32); integer division and remainder truncate.
typedef enum {
  // leaves
  LX_INT,     // i64 constant ival
  LX_FLT,     // f32 constant fval (may be +-inf or NaN)
  LX_DIM,     // i64: the batch size B (ival 0) or the time length T (ival 1)
  LX_VAR,     // the value of variable var
  LX_ROW0,    // i64: the global batch row of this call's row 0 (XfApi.row0;
              // data-parallel ranks see disjoint rows): dropout's element index
  LX_POS0,    // i64: the position of row 0 along the time axis: the step
              // program's frame (stepmem.c step_frame; XfApi.pos0), 0 in
              // every other program. What makes positions (iota(T), rows t of
              // a table) adds it; everything else is relative to the frame
  LX_WIN,     // i64: the step program's positions [w0, w1) (ival 0: w0, 1: w1),
              // for a kernel that windows its own body (lower_window LW_BODY);
              // 0 and T in every other program; ival 2: wk, the position
              // the next run starts from (its state h_{wk-1} kept), 0 in
              // every other program
  LX_LOAD,    // element a[0] (i64) of operand slot: f32, or (type LT_I64) an
              // int32 token id sign-extended
  // f32 -> f32 (x = a[0]): -x, e^x (the Cephes polynomial of both backends,
  // relative error about 1e-7), and libm's float functions
  // LX_EXP with ival 1: a GPU may compute it with its SFU (Schedule.fast_exp)
  LX_NEG, LX_EXP, LX_LOG, LX_SQRT, LX_SIN, LX_COS, LX_TANH, LX_ERF,
  // f32 or i64, two operands
  LX_ADD, LX_SUB, LX_MUL, LX_DIV,
  LX_REM,     // i64 only
  LX_MAX,     // a[0] > a[1] ? a[0] : a[1] (so max(NaN, y) = y, max(x, NaN) = NaN)
  // -> LT_BOOL; ordered comparisons for floats (false if either is NaN)
  LX_LT, LX_GT, LX_GE, LX_EQ,
  LX_AND,     // bool, bool
  LX_SELECT,  // a[0] (bool) ? a[1] : a[2]; a backend may evaluate both, so a
              // load under either must be in bounds whatever a[0] is
  LX_TOF,     // i64 -> f32
  LX_TOI,     // f32 -> i64, truncating: an index a kernel stored as f32 (exact below 2^24)
  LX_BF16,    // f32 -> f32: a[0] rounded to bf16's 8 significant bits (to
              // nearest even; a NaN stays NaN): what a store to a bf16 slot
              // keeps, for the kernel's own uses of a value it stores there
              // (lower_module), so that they see what every later kernel reads
  LX_KEEP,    // bool: dropout's draw: uniform(seed, KS_IMM, a[0], step) >= fval,
              // Philox4x32-10 of runtime/rng.h in double; only in training kernels
  LX_COUNT
} LExprKind;

typedef struct LExpr LExpr;
struct LExpr {
  LExprKind kind;
  LType type;
  int slot;      // LX_LOAD: the operand slot (KS_*)
  int var;       // LX_VAR
  int64_t ival;  // LX_INT, LX_DIM
  double fval;   // LX_FLT, LX_KEEP (p)
  bool narrow;   // an LT_I64 expression whose value and every integer
                 // subexpression's lie in [-LK_NARROW, LK_NARROW] at every
                 // B and T (lkernel_ranges): a backend may compute it in 32 bits
  LExpr *a[3];
};

typedef enum {
  LS_LET,     // var = val
  LS_STORE,   // slot[idx] = val (f32)
  LS_FOR,     // for var in [lo, hi): body. par: the iterations are independent
              // (no iteration reads what another writes), so a backend may
              // vectorise them or spread them over the lanes of a row's
              // threads; else they run in order
  LS_REDUCE,  // var = op over ivar in [lo, hi) of val (op LX_ADD: the sum from
              // 0; LX_MAX: the maximum from -inf, acc = x > acc ? x : acc, so
              // a NaN element is skipped). The association is the
              // backend's, fixed by its code (never by thread timing); wide
              // (LX_ADD only, the loss mean): accumulate in double, then round
              // to f32 (a CPU sums in index order, a GPU lane partials and a
              // butterfly: the same float up to double rounding)
  LS_CARRY,   // for var in [lo, hi) in order, carrying values: carry[k] =
              // init[k] before the loop; each iteration runs body with carry[k]
              // the values so far, then sets every carry[k] to step[k] at once
              // (step[] evaluated after the body, in its scope); after the loop
              // carry[k] hold the last values. The values live in registers
              // (a GPU thread's own, a CPU's), not in memory
  LS_GEMM,    // call: C = alpha op(A) op(B) + beta C (LCall; row-major as
              // cblas_sgemm), operands in slots or locals: on a CPU the
              // calling thread's GEMM; on a GPU only at row level in a block
              // (LKernel.team), by all of its threads (cuda.c xf_team_gemm)
  LS_COUNT
} LStmtKind;

// LS_GEMM's product: A m x k (k x m if ta) at slot[0][at[0]], rows ld[0]
// apart; B k x n (n x k if tb); C m x n. m, n or k may be 0 (nothing, or C
// scaled by beta).
enum { LC_A, LC_B, LC_C };
typedef struct {
  bool ta, tb;
  int slot[3];
  LExpr *at[3], *ld[3];
  LExpr *m, *n, *k;
  double alpha, beta;
} LCall;

typedef struct LStmt LStmt;
struct LStmt {
  LStmtKind kind;
  int var;              // LET, FOR and CARRY (the index), REDUCE (the result)
  int ivar;             // REDUCE: the index
  LExprKind op;         // REDUCE: LX_ADD or LX_MAX
  bool par;             // FOR
  bool wide;            // REDUCE
  int slot;             // STORE
  LExpr *lo, *hi;       // FOR, REDUCE, CARRY: the range
  LExpr *idx;           // STORE
  LExpr *val;           // LET, STORE, REDUCE (a function of ivar)
  int ncarry;           // CARRY: carried variables carry[0 .. ncarry)
  int *carry;
  LExpr **init, **step; // CARRY: [ncarry]
  LCall *call;          // GEMM
  LStmt *body;          // FOR, CARRY: the first statement of the body
  LStmt *next;          // the next statement of the block
};

#define LK_MAX_LOCALS 16
enum { LK_LOCAL0 = KS_COUNT };

// How the outer indices and the body are spread over threads: the middle's
// decision, which every backend follows.
typedef enum {
  LK_ELEMENTS,  // the body is LS_LETs of the outer index, then one par LS_FOR
                // over [0, inner) whose body is LS_LETs, LS_REDUCEs (the
                // thread's own, in order) and LS_STOREs only:
                // every (outer index, inner index) pair is independent (a GPU
                // thread each; a CPU loop nest)
  LK_ROWS,      // anything else: the body runs for one outer index at a
                // time, its par loops and reductions cooperatively (a warp
                // per outer index on a GPU, vector lanes on a CPU)
} LKernelShape;

typedef struct {
  const char *name;     // what it computes, for dumps: "layernorm", "map"
  LKernelShape shape;
  int nvars;            // variables 0 .. nvars-1; variable 0 is the outer index
  LType *types;         // [nvars]
  bool *narrow;         // [nvars]: an LT_I64 variable whose every value lies in
                        // [-LK_NARROW, LK_NARROW] (lkernel_ranges; NULL before it)
  const char **names;   // [nvars] for printing ("o", "j", "mu"); "" unnamed
  LExpr *outer;         // the outer extent (i64, a function of B and T only)
  LExpr *inner;         // LK_ELEMENTS: the inner extent; else NULL
  SymSize nouter, ninner;  // the same as polynomials (ninner {1,0,0} for LK_ROWS):
                        // launch geometry for a backend's table
  LStmt *body;          // run for each outer index
  bool dropout;         // holds a dropout: the training variant draws the mask
                        // (LX_KEEP), the inference one is the identity; a
                        // backend makes both (lower_kernel's train)
  bool slot_int[KS_COUNT];  // slot holds int32 token ids
  bool slot_bf16[KS_COUNT];  // slot's buffer is stored in bf16 (Buffer.bf16): an
                        // LX_LOAD widens its element to f32, an LS_STORE rounds
                        // the value to nearest even (lower_module, from the
                        // class's representative kernel)
  bool slot_read[KS_COUNT], slot_written[KS_COUNT];  // every operand slot an
                        // LX_LOAD or LS_STORE names is marked (locals are not)
  // Local arrays: f32 scratch of constant sizes, private to one outer index
  // (and the threads working on it), uninitialised; slot LK_LOCAL0 + i of an
  // LX_LOAD or LS_STORE names local i (a CPU stack array, GPU shared memory)
  int nlocals;
  int64_t local_size[LK_MAX_LOCALS];
  bool local_bf16[LK_MAX_LOCALS];  // local i holds bf16 elements (as slot_bf16:
                        // a load widens, a store rounds to nearest even); GPU
                        // team kernels only (Schedule.tiles_bf16: the team
                        // GEMMs' staged operands, read as packed pairs where
                        // lcall_packed says so)
  int team;             // LK_ROWS on a GPU: 0, the printer's choice (a warp per
                        // outer index); else a block of `team` threads per
                        // outer index, its par loops spread over all of them
} LKernel;

// lower_ranges.c: the ranges of a description's integers.
// Requires: lk complete (every variable defined before its uses); T at most t_max.
// Guarantees: LKernel.narrow and every LExpr.narrow of lk's body set: true
// where the interval of the value (and of each integer subexpression) at
// any B >= 1 and 1 <= T <= t_max lies within LK_NARROW, 2^31 - 2^16 (a
// 32-bit int, with room for a block's stride past a loop's end). The outer
// index (variable 0), the launch's 64-bit work item, is never narrow; a loop
// index only with narrow bounds. A GPU prints narrow values as int (cuda.c);
// a CPU's LLVM code keeps i64 (its 64-bit ALU is as fast), and the cost model
// counts an integer operation as one instruction at either width.
#define LK_NARROW (INT64_C(2147483647) - 65536)
void lkernel_ranges(Arena *a, LKernel *lk, int64_t t_max);

// Whether a GPU team GEMM reads operand x (LC_A or LC_B) of c as packed bf16
// pairs, k and k + 1 of a fragment register in one aligned 32-bit word: a
// bf16 local (LKernel.local_bf16) with k along its rows (A not ta, B tb), at
// a constant even offset, rows a constant even number of elements apart.
bool lcall_packed(const LKernel *lk, const LCall *c, int x);
// Whether a GPU team GEMM with bf16 products reads operand B of c by
// ldmatrix.trans, two 8 x 8 matrices of 16-byte rows per fragment (cuda.c
// xf_ldsm_t2): a bf16 local with k down its rows (not tb), at a constant
// offset and rows a constant number of elements apart, both multiples of 8,
// and n constant, at most ld rounded down to 8 (a matrix row's 8 columns
// stay inside its row).
bool lcall_ldsm(const LKernel *lk, const LCall *c);

// Which processor the description is for: the middle picks the form of a
// kernel per target (attention: a query row across heads per outer index on
// a CPU, a (sequence, head) per block of threads on a GPU); both compute the
// same values.
typedef enum { LTARGET_CPU, LTARGET_GPU } LTarget;

// A product as GEMMs (MATMUL, the product of FG_MATMUL_MAP, FG_WEIGHT_GRAD),
// row-major as cblas_sgemm: for every batch entry, the coordinates c_i of
// the batch shape batch[0..nbatch),
//   C_c = op(A_c) op(B_c),  X_c = slot sX + sum_i c_i stride[X][i]
// (a stride 0: the operand is broadcast over that axis). Decided here once:
//   - the transposes (tb: a TRANSPOSE of B folded into the flag, Kernel.tb;
//     ta: the weight gradient x^T dy);
//   - flat: every operand's offset is a constant multiple of the flat batch
//     index (flat_stride): one strided-batched call; otherwise a backend
//     computes the entries one at a time (CPU) or as a direct kernel (GPU);
//   - fold: flat, B shared, A and C batched: the entries' rows are
//     contiguous, one GEMM of count * m rows;
//   - the parallel split (the kernel's outer index): batch entries, for
//     split_cols the columns of C (a slice of n per thread), for split_rows
//     (a CPU's folded product: lower_module) the count * m rows of A and C
//     (a slice of rows per thread, however few the entries: batch 1).
// The step program's LW_ROWS window is the rows of op(A) and C.
enum { LG_A, LG_B, LG_C };
typedef struct {
  bool ta, tb;
  int slot[3];                          // KS_* of A, B, C
  SymSize m, n, k, ld[3];
  int nbatch;
  SymSize batch[IR_MAX_RANK];
  SymSize stride[3][IR_MAX_RANK];
  bool flat, fold, split_cols, split_rows;
  SymSize count, flat_stride[3];        // count: the batch entries
  bool bf16[3];                         // A, B, C stored in bf16 (Buffer.bf16;
                                        // lower_module): the products read bf16,
                                        // sum in f32, round C to bf16
  bool staged[2];                       // a GPU's A or B read from the bf16 copy
                                        // in slot KS_STAGE (LClass.stage), made of
                                        // the float32 operand when the other is bf16
} LGemm;

// The GEMMs of kernel k (a product, the product inside an FG_MATMUL_MAP, a
// weight gradient), or NULL for any other kernel.
LGemm *lower_gemm(Arena *a, const Schedule *s, const Kernel *k);
void lgemm_print(FILE *f, const LGemm *gm);

// A kernel computed by several launches in order, each reading what the
// launches before it wrote (their own outer extents; a barrier between
// them): step i is an LKernel lk[i] or an LGemm gm[i], exactly one of the
// two. The GPU form of the matrix-kind causal convolutions (Kernel.chunk,
// seed 001 eq. 26) as chunked GEMMs, with C the chunk, NC = L / C, R the
// rows of x (every position of every sequence), U, Y, S, W^T the kernel's
// scratch (KS_CONV_*):
//   CAUSAL_CONV  unfold U[(b,i), (r,p)] = i >= r ? x[b, i-r, p] : 0 (r < C);
//                Y_D = U W_D for D < NC, W_D lags DC .. DC+C-1 of W (one
//                strided-batched GEMM, U shared); out[b, i] = sum over
//                D <= i / C, ascending, of Y_D[b, i - DC]
//   CONV_DX      the same in reversed time (position i' = T-1-i in the
//                unfold and the sum) on dy, with W^T[k] = W_k^T by a permute first
//   CONV_DW      unfold U of x; S_D[b, i] = i + DC < T ? dy[b, i + DC] : 0;
//                dW_D = U^T S_D, one strided-batched GEMM into dW (lags >= T: 0)
// Every product counts C lags per output row, twice the causal ones on average.
enum { LSTEPS_MAX = 5 };
typedef struct {
  int n;
  LKernel *lk[LSTEPS_MAX];
  LGemm *gm[LSTEPS_MAX];
} LSteps;
// The steps of kernel k on tgt, or NULL where it is one launch (every kernel
// but a matrix-kind causal convolution with Kernel.chunk set, on a GPU).
LSteps *lower_steps(Arena *a, const Schedule *s, const Kernel *k, LTarget tgt);
// Whether every step of st is an LKernel (no GEMM record among them): its
// slots are accessed element by element, as one kernel's loops access them.
bool lsteps_all_loops(const LSteps *st);


// lower.c: the loop description of kernel k (its class), or NULL for a
// product (lower_gemm) or a causal convolution (lower_steps, or each
// backend's own). For a
// FG_MATMUL_MAP kernel: the epilogue after the product, over the rows of the
// product's output (the GEMM has written them to KS_OUT first). An op inside
// a kernel that has no lowering is reported in err (file:line:col, the
// op's name) and NULL returned with err set; err[0] == 0 otherwise. train:
// the training variant (dropout draws its mask), else dropout is the identity.
LKernel *lower_kernel(Arena *a, const Schedule *s, const Kernel *k, LTarget tgt, bool train, char *err, size_t errlen);
// The step program (incremental decoding, XfModel.step) runs the sampling
// program's kernels on positions [w0, w1) of the time axis of their output
// (passes/causal.c). Computing more than the window is always correct
// (earlier positions come out the same, later ones are computed again when
// their turn comes); computing less is not.
typedef enum {
  LW_FULL,   // no time axis, or none that windows: the whole kernel
  LW_OUTER,  // the position is a coordinate of the outer index,
             // o = (q extent + t) stride + r: the o with t in [w0, w1)
  LW_ROWS,   // the positions are the rows of a product (or of a matrix-kind
             // convolution) inside one outer index, `extent` of them: each
             // outer index's rows [w0, w1) (a backend's windowed GEMMs)
  LW_BODY,   // the whole launch, whose body reads the window itself (LX_WIN)
} LWindowKind;

typedef struct {
  LWindowKind kind;
  SymSize stride, extent;  // LW_OUTER: in outer indices; LW_ROWS: stride 1
} LWindow;

// The window of kernel k of the sampling program on target tgt;
// time_axis[node] from causal_analyze (NULL: every kernel LW_FULL).
LWindow lower_window(const Schedule *s, const int *time_axis, const Kernel *k, LTarget tgt);
// stepmem.c: the storage of the step program. Every storage root the
// sampling program touches beside the parameters, in first-touch order:
// cache (read outside a later run's window: its own storage, kept between
// runs; the token input too) or workspace (lifetime [first, last] in the
// global kernel order, last = nkernels for what the host reads after the
// run), planned by memplan. out holds s->nbufs entries; returns the count,
// -1 out of memory.
typedef struct {
  int buf;
  bool cache;
  bool state;    // a scan's state row (a cache the same size at every position)
  int64_t back;  // how many positions before a run's window it reads: 0 none, -1 every one
  int first, last;
} StepBuf;
int step_buffers(const Schedule *s, const int *time_axis, StepBuf *out);
// The step program's frame (stepmem.c): when every read of an earlier
// position looks back at most H positions (a shift by s: s; a causal
// convolution of L lags: L - 1; attention with a key window W: W - 1; a
// scan's state: 1), a run that computes one position p needs only positions
// [p - H, p]: the buffers can hold F = H + 1 positions, addressed from the
// frame's first position (XfApi.pos0), the runtime moving the last H along
// after each run. Returns F, or 0 when some read has no bound (attention
// over every key, a product by rows of positions, a kernel that computes
// every position) or F would be the whole context. sb, n: step_buffers'.
int64_t step_frame(const Schedule *s, const StepBuf *sb, int n);
// Whether an expression of kind k, or (lstmt_uses) variable var, occurs in
// the statements from s on and inside them (lower.c).
bool lstmt_has(const LStmt *s, LExprKind k);
bool lstmt_uses(const LStmt *s, int var);
// Text of an LKernel: one line per statement.
void lkernel_print(FILE *f, const LKernel *lk);
// xfc --emit=loops: every kernel class of s as described for tgt, its loops
// or the backends' kernel it is. Returns 0, or 1 after printing a lowering
// error to stderr.
int lower_print(FILE *f, Arena *a, const Schedule *s, LTarget tgt);

// ---- the lowered module --------------------------------------------------------------
// A causal convolution on the CPU (seed 001 eqs. 23, 26, 28, 29; ir.h
// ConvKind), which a backend prints as loops and, for the matrix kind, a GEMM
// call per lag:
//   LCONV_FWD  out_i = sum_{i - L < j <= i} x_j (.) w_{i-j}   over rows of [.., T, din] -> [.., T, dout]
//   LCONV_DX   dx_i = sum_{i <= j < i + L} dy_j (.) w_{j-i}    (din: dy's features, dout: dx's)
//   LCONV_DW   dw_k = sum_b sum_{i >= k} x_{b,i-k} (.) dy_{b,i}, a lag k < L per outer index
// Slots: KS_IN0 x (dy for DX), KS_IN1 w (dy for DW), KS_OUT.
typedef enum { LCONV_FWD, LCONV_DX, LCONV_DW } LConvOp;
typedef struct {
  LConvOp op;
  int kind;           // ConvKind
  Dim T, din, dout;   // FWD, DX: time, features read, features written; DW: T, x's features d, dy's features e
  int64_t L;          // the lags (w's first axis), fewer than T or not
  const Shape *xs;    // KS_IN0's shape (its leading axes: the sequences)
} LConv;

// One kernel class as a backend prints it: exactly one form, besides the
// product an epilogue may follow.
typedef struct {
  const LGemm *gemm;            // its product, or NULL
  const LKernel *train, *infer;  // its loops: the training variant, the inference one (the same without dropout)
  const LSteps *steps;          // computed in steps (gemm, train NULL)
  const LKernel *stage;         // before the product: KS_STAGE = bf16 of its staged operand (LGemm.staged)
  const LConv *conv;            // a CPU causal convolution
  bool product_only;            // the product is the whole kernel (a matmul, a weight gradient)
  SymSize outer;                // the outer extent its function runs over
  const char *err;              // a located error (an op without a lowering here), or NULL
} LClass;

typedef struct {
  LTarget tgt;
  LClass *cls;        // [nkernels], at each class's representative kernel
  LWindow *window;    // [nkernels]: each kernel's window in the step program (NULL without a time axis)
  const LKernel *adamw;  // the optimizer's update (lower_optim.c; XF_ADAM_SLOT_*)
  const LKernel *adamw_twin;  // the same, also writing bf16(w) (XF_ADAM_SLOT_H: a GPU's twin, the CPU runtime's copy)
  const char *err;    // the first class's error, or NULL
} LModule;

// The schedule lowered for tgt: the only caller of lower_gemm, lower_kernel,
// lower_steps and lower_window outside this file's printers. time_axis from
// causal_analyze, or NULL.
LModule *lower_module(Arena *a, const Schedule *s, LTarget tgt, const int *time_axis);
// AdamW's update of one element (lower_optim.c), the same for every target.
LKernel *lower_adamw(Arena *a, bool twin);
// storage.c: bf16 storage for the activations of s whose every access
// converts on the CPU and, with gpu (a --target=cuda schedule), on a GPU
// (xfc --precision=bf16): sets Buffer.bf16, a GPU product's staged copy
// (Kernel.stage), and splits the kernel classes by their slots' storage;
// with gpu also Schedule.tiles_bf16. Returns the storage roots stored in bf16.
int schedule_storage(Arena *a, Schedule *s, bool gpu);

#endif
