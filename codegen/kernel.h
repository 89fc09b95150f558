// kernel.h: the kernel description, between the graph IR and a backend.
//
// A Schedule lists the buffers a model needs and the kernels that fill them,
// in execution order, for three programs: the training step (forward and
// backward), the evaluation step (forward, loss) and the sampling forward
// (logits). Nothing here assumes a CPU: a kernel is an op over buffers with
// sizes that are polynomials in B and T; the LLVM backend emits each kernel as
// a loop nest over [lo, hi) of its outer index (so a thread pool can split
// it), a CUDA backend would emit the same kernel as a grid.
//
// Buffers:
//   - parameters, gradients and token inputs are owned by the runtime;
//   - activations are scratch, planned by the runtime from the size table;
//   - a reshape is an alias: its buffer is its input's buffer.
#ifndef XF_KERNEL_H
#define XF_KERNEL_H

#include <stdio.h>

#include "../ir/ir.h"
#include "../passes/passes.h"

// size = coef * B^pb * T^pt / tdiv (every IR size is a product of such
// factors; tdiv > 1 from time axes T / s, T a multiple of it; 0 or 1: none)
typedef struct {
  int64_t coef;
  int pb, pt;
  int64_t tdiv;
} SymSize;
static inline int64_t symsize_den(SymSize s) { return s.tdiv > 1 ? s.tdiv : 1; }

typedef enum {
  BUF_PARAM,   // a trainable parameter (runtime-owned, persists)
  BUF_GRAD,    // the gradient of a parameter (runtime-owned)
  BUF_INPUT,   // token ids, int32 (runtime-owned)
  BUF_ACT,     // scratch activations
  BUF_OUTPUT,  // loss or logits, read back by the runtime
  BUF_TWIN,    // a parameter's bf16 copy that GPU products read (storage.c):
               // node and size its parameter's; the optimizer and the
               // runtime keep it current (persists)
} BufferRole;

// Lifetimes are in the global kernel order (Schedule.kernels); every program
// runs a subsequence of it, so storage shared by buffers whose lifetimes do
// not overlap in that order is safe in every program.
typedef struct {
  BufferRole role;
  DType dtype;
  SymSize size;       // elements
  int node;           // the IR node whose value it holds
  const char *name;   // params, grads, inputs, outputs
  int alias_of;       // >= 0: shares the storage of that buffer
  bool bf16;          // stored as bf16, 2 bytes per element (storage.c: an
                      // activation under --precision=bf16 on the CPU); else
                      // 4 bytes (float32, int32)
  int first, last;    // kernels that first write and last read it (storage
                      // roots only); -1, -1: no kernel touches it.
                      // BUF_OUTPUT: last = nkernels (read back after the step)
} Buffer;

// Bytes per element of b's storage.
static inline int64_t buffer_esize(const Buffer *b) { return b->bf16 ? 2 : 4; }

// Params, gradients and inputs keep their own storage across steps; the
// rest is planned (runtime/plan.c).
static inline bool buffer_persistent(BufferRole r) {
  return r == BUF_PARAM || r == BUF_GRAD || r == BUF_INPUT || r == BUF_TWIN;
}

typedef enum {
  PROG_TRAIN,   // forward + backward: loss and every gradient
  PROG_EVAL,    // forward: loss
  PROG_SAMPLE,  // forward: logits
  PROG_COUNT,
} Program_;

// Fusion groups (passes/fuse_groups.c: FG_WEIGHT_GRAD, FG_MAP) are one
// kernel each; --no-fuse makes none and that schedule is the oracle the
// tests compare the fused one with.
#define KERNEL_MAX_IN FG_MAX_LEAVES
// A value cut along its last axis into parts that are only read whole (the
// dq | dk | dv of ATTENTION_GRAD, each read by one SLICE) is written by its
// kernel as one output per part, and the SLICEs get no kernel
// (schedule_build, fused schedules only).
#define KERNEL_MAX_OUT 3

typedef struct {
  int node;     // the IR node it computes (op, attributes, shapes); the
                // root of its group (Schedule.group)
  int out;      // buffer written (slot KS_OUT): the node's value, or with
                // nout > 1 its first part
  int xout[KERNEL_MAX_OUT - 1];  // nout > 1: the buffers of parts 1 .. nout-1
                // (slots KS_OUT1 + i), -1 past them
  int nout;     // 1, or the parts of the node's value along its last axis in
                // the op's order (ATTENTION_GRAD: dq [..., h], dk [..., h],
                // dv [..., e]), each written whole to a buffer of its own, a
                // SLICE's; the node's own buffer is then never written
  int in[KERNEL_MAX_IN];    // buffers read, in slots KS_IN0 + i
  int leaf[KERNEL_MAX_IN];  // the IR node whose value in[i] holds
  int nin;
  SymSize outer;  // the parallel outer extent; the kernel covers [0, outer) (a GPU form
                  // may choose its own: LKernel.nouter)
  int scratch;    // a scratch buffer of the kernel, or the stored member's, or -1
  int stored;     // FG_MAP, FG_MATMUL_MAP, FG_NORM_DG: the member whose value
                  // the kernel also writes, to slot KS_SCRATCH (buffer scratch), or -1
  int terms;      // the buffer of the LAYERNORM_DYXH or RMSNORM_DYXH whose rows the
                  // kernel of its _DX also writes, of the ATTENTION_LSE the
                  // ATTENTION's kernel writes, or of the ATTENTION_DBIAS the CPU
                  // row form of ATTENTION_GRAD writes (schedule_att_dbias_heads)
                  // (slot kernel_terms_slot), or -1
  int fusion;     // FG_NONE, or the group kind (passes.h) this kernel computes
  int dropout;    // the dropout node it computes (alone or in its group), or -1
  int matmul;     // FG_MATMUL_MAP: the product inside the group
  int norm;       // FG_NORM_MAP: the row op inside the group
  int phase;      // ops computed in two kernels: 0 the parallel part, 1 the
                  // serial one (cross_entropy: per-row losses, then their
                  // in-order mean, so the result does not depend on threads)
  bool tb;        // the product (the kernel's MATMUL, or its group's) reads
                  // its right operand y [..., k, n] as stored [..., n, k]:
                  // a TRANSPOSE of y's last two axes folded into the GEMM's
                  // flag; in[] holds the transpose's input (schedule_build)
  int cls;        // the first kernel computing the same function (op or
                  // group, shapes, attributes): a backend generates code once
                  // per class and calls it with each kernel's operands
  int chunk;      // a matrix-kind causal convolution in a GPU schedule: the
                  // chunk C (a divisor of the lags L) of its chunked-GEMM form
                  // (lower.c lower_steps), its scratch in slots KS_CONV_*:
                  // U in `scratch`, the others in xscratch[]; 0: the direct form
  int xscratch[2];  // the buffers of slots KS_CONV_Y and KS_CONV_WT (a chunked
                    // convolution's, the sorted scatter's U), or -1
  int stage;      // a GPU product whose A and B differ in storage (bf16
                  // storage, storage.c): slot KS_STAGE's buffer, the bf16
                  // copy of its float32 operand made before the product
                  // (LGemm.staged; cuBLAS multiplies bf16 by bf16 only), or -1
  int att_block;  // ATTENTION(_GRAD): the query block of the CPU's blocked
                  // form (schedule_att_block), 0: its row form
  int scan_chunk; // SCAN_READ(_GRAD): the chunk C of lower_scan_chunk.c's
                  // form (schedule_scan_chunk), 0: the sequential form
  int red_split;  // a GPU's reduction over rows in two steps (schedule_red_split):
                  // its S row slices, their partial sums in xscratch[0]; 0: one pass
} Kernel;

// The leading dimension of a block of attention scores with n key columns
// (the CPU's blocked forms: S, dP, the bias's gradient): n rounded up to 16,
// plus 16 where that is a multiple of 256 floats, so that the rows are not
// a multiple of 1 KiB apart (rows 4 KiB apart share the L1's sets:
// dnnl_sgemm TN 160 x 64 x 32 with A's rows 1,024 floats apart runs at 79
// GFLOP/s, 1,040 apart at 95; one AMD EPYC core).
static inline int64_t att_score_ld(int64_t n) {
  int64_t ld = (n + 15) / 16 * 16;
  return ld % 256 == 0 ? ld + 16 : ld;
}
// The row stride of a GPU block's tile of n columns in shared memory (the
// blocked attention's scores and accumulators, the chunked scans' blocks):
// n rounded up to 5 mod 32 words, so that a thread per row (rows ld apart)
// meets no bank conflict and the tensor-core fragments (rows g + 8 r,
// columns 2 t + c, lane 4 g + t) at most 2 words per bank; rows 64 floats
// apart took 32 words of one bank per warp access (cuda_cost.c counts the
// wavefronts).
// (Test hook: XF_TEST_TILE_UNPADDED=1 gives n, tests/cuda/cost.sh.)
int64_t gpu_tile_ld(int64_t n);
// The row stride, in elements, of a GPU block's bf16 tile of n columns (the
// team GEMMs' staged operands, Schedule.tiles_bf16): n rounded up to 8 mod
// 16, rows 4 mod 8 words apart. Even, so a pair of a row's elements at an
// even column is one aligned word; a warp's packed fragment reads (lane
// 4 g + t: row g, word t) then take one wavefront, as do its reads of one
// element (rows 2 t + c, column g) along k. (Test hook: with
// XF_TEST_TILE_UNPADDED=1, n rounded up to even.)
int64_t gpu_tile_ld_bf16(int64_t n);

// The CPU's ROUTED_MATMUL(_DW) kernels (lower_route.c) split each expert's
// work in parts, outer index o = s E + e (expert e, part s), so that the
// pool's contiguous ranges of outer indices give each thread a share of
// every expert whatever the experts' loads (an expert per outer index: 2
// threads ran the routed GEMMs at 0.69 of the GEMM rate against 0.80 on
// one, AMD EPYC): ROUTE_SPLIT parts of the rows forward; ROUTE_SPLIT_DW of
// the weight gradient's longer axis, each part gathering all of its rows'
// shorter operand (4 parts: 27 ms for Table 1's two weight gradients per
// layer on 2 threads and 58 on one; 2 parts: 25 and 50).
enum { ROUTE_SPLIT = 4, ROUTE_SPLIT_DW = 2 };

// Operand slots of a kernel call: what a backend passes for kernel k. A
// kernel's code refers to its operands only through these slots, so one
// function serves its whole class. KS_OUT1 ..: the parts after the first of
// a split output (Kernel.nout). The slots before KS_IMM hold buffers
// (runtime/xf_abi.h: XF_NSLOTS of them).
enum {
  KS_OUT, KS_IN0, KS_IN1, KS_IN2, KS_IN3, KS_SCRATCH = KS_IN0 + KERNEL_MAX_IN, KS_OUT1,
  KS_STAGE = KS_OUT1 + KERNEL_MAX_OUT - 1,  // Kernel.stage
  KS_IMM, KS_COUNT
};
// The slot of part p of a kernel's output.
static inline int kernel_out_slot(int p) { return p ? KS_OUT1 + p - 1 : KS_OUT; }
// The slot of a kernel's terms (Kernel.terms): KS_OUT1 for a kernel of one
// output, KS_SCRATCH for ATTENTION_GRAD's parts (nout 3, no scratch).
static inline int kernel_terms_slot(const Kernel *k) { return k->nout > 1 ? KS_SCRATCH : KS_OUT1; }
// The scratch of a convolution's chunked form (Kernel.chunk; nout 1): the
// unfolded rows U, the per-chunk products Y (or dW's shifted dy, S), the
// per-lag transposed weights W_k^T (CONV_DX only).
enum { KS_CONV_U = KS_SCRATCH, KS_CONV_Y = KS_OUT1, KS_CONV_WT = KS_OUT1 + 1 };

typedef struct {
  const Graph *g;
  Buffer *bufs;
  int nbufs;
  int *buf_of;          // buf_of[node]: buffer holding the node's value
  int *group;           // group[node]: the root whose kernel computes it inside, or -1
  Kernel *kernels;      // all kernels, forward first
  int nkernels;
  int *prog[PROG_COUNT];  // kernel indices of each program, in order
  int nprog[PROG_COUNT];
  int nclasses;           // distinct kernel functions
  bool tiles_bf16;        // a GPU's team GEMMs read the operand tiles they
                          // stage in shared memory in bf16 (schedule_storage
                          // on a GPU schedule: --precision=bf16, whose team
                          // GEMMs round every operand to bf16 anyway)
  bool fast_exp;          // a GPU's e^x may be the SFU's (__expf: ex2.approx of
                          // x log2 e, at most 2 + 1.173 |x| ulp off against the
                          // 1e-7 relative of the polynomial): --precision=tf32
                          // or bf16, whose products round to 10 or 7 bits
                          // (xfc; lower_module marks LX_EXP)
} Schedule;

// The root buffer holding buffer b's storage (aliases resolved).
int schedule_root(const Schedule *s, int b);
// The error of a backend ("CPU", "CUDA") that has no lowering for node n
// where it stands, located: "file:line:col: error: the B backend has no
// lowering for op 'X' (node %N)".
void kernel_unlowered(char *buf, size_t len, const char *backend, const Node *n);
// The storage root of the buffer in each operand slot KS_OUT .. KS_IMM - 1
// of kernel k, -1 where none: what a backend passes, what lifetimes count.
void kernel_slots(const Schedule *s, const Kernel *k, int slot[KS_IMM]);
// A new float32 activation of `size` elements that only kernel ki uses (its
// lifetime [ki, ki]), after schedule_build; -1 when the schedule's buffer
// table is full.
int schedule_kernel_scratch(Schedule *s, int ki, SymSize size);
// The bf16 twin (BUF_TWIN) of parameter buffer p (a storage root), made on
// the first call, read by kernel ki (its lifetime grows to cover ki), after
// schedule_build; -1 when the schedule's buffer table is full.
int schedule_param_twin(Schedule *s, int p, int ki);
// The immediate operand of kernel k (KS_IMM): its dropout's mask stream, else 0.
uint64_t kernel_imm(const Schedule *s, const Kernel *k);
// Kernel k's name in profiles (XfModel.kernel_labels): "k<class> <op>[
// fused=<kind>] <file>:<line>" of its node, the class and op as
// schedule_print writes them.
void schedule_kernel_label(const Schedule *s, int k, char *buf, size_t n);
// Prints the kernels in order with their classes and fusion, and every
// buffer's size, lifetime and (for B, T) planned offset: --emit=schedule.
void schedule_print(FILE *f, const Schedule *s, int64_t B, int64_t T);
// Bytes of planned storage (activations and outputs) at B, T, and of the
// persistent buffers (params, gradients, inputs).
int64_t schedule_plan(const Schedule *s, int64_t B, int64_t T, int64_t *offsets, int64_t *persistent);

// schedule.c: one kernel per IR node that computes something (leaves and
// reshapes compute nothing), except nodes folded into a fused kernel. gpu:
// the schedule a GPU runs too (xfc --target=cuda): the matrix-kind causal
// convolutions get their chunked form's scratch (Kernel.chunk); a CPU-only
// schedule has none.
Schedule *schedule_build(Arena *a, const Graph *g, bool fuse, bool gpu);
// The chunk C of the GPU's chunked form of kernel node n (Kernel.chunk): the
// largest of 16, 8, 4, 2, 1 dividing the lags of a matrix-kind convolution;
// 0 for any other node and where the lags are not constant (the direct form).
int schedule_conv_chunk(const Graph *g, const Node *n);
// The query block BQ of the CPU's blocked form of attention node n
// (lower_attention.c: GEMMs of BQ query rows against the keys, the softmax
// between them), or 0 where the row form costs less or the block's scratch
// does not fit (schedule.c has the cost rule).
int schedule_att_block(const Graph *g, const Node *n);
// The chunk C of the chunked form of SCAN_READ(_GRAD) node n
// (lower_scan_chunk.c; Kernel.scan_chunk), 0 for the sequential form and
// every other node. A config value scan_chunk of the model (xfc
// --scan-chunk) decides where there is one: 0 the sequential form, C > 0
// that chunk on every target (halved until its arrays fit); else on a GPU
// (gpu) the largest of 64, 32, 16, 8, 4 whose local arrays fit
// SCAN_CHUNK_FLOATS and that is at most 16 or the sequence's length, and
// at most 16 for a decay per key row (whose sums over a chunk's pairs are
// loops, C^2 dk / 2 terms: --emit=cost puts GLA's two kernels at 88 us per
// layer at 16, 128 at 32); a CPU takes the sequential form (its state's
// columns on vector lanes; a chunk's products are too small for the GEMM
// library: docs/recurrences.md).
int schedule_scan_chunk(const Graph *g, const Node *n, bool gpu);
// The chunked form's local arrays: a GPU block's shared memory, 48 KiB (the
// most a launch takes without opting in; rows padded, gpu_tile_ld); a CPU
// thread's stack, 512 KiB. A chunk asked for (scan_chunk) is halved until
// they fit.
enum { SCAN_CHUNK_FLOATS = 12288, SCAN_CHUNK_CPU_FLOATS = 1 << 17 };
// The chunked form's local arrays of chunk C (the gradient's; the forward's
// are fewer) and whether a decay of shape as varies along k's key rows
// (lower_scan_chunk.c).
int64_t scan_chunk_floats(int64_t C, int64_t dk, int64_t dv, bool per_key, bool gpu);
bool scan_decay_per_key(const Shape *as);
// The head group HG of the CPU row form of ATTENTION_GRAD node n that also
// writes its score bias's gradient (schedule.c), or 0 where it does not.
int schedule_att_dbias_heads(const Graph *g, const Node *n);
// The column tile CT of the GPU's two-step CONV_DW of the scalar and vector
// kinds (lower.c lower_steps; its partial sums in the kernel's scratch): 8,
// or the largest divisor of a constant width d below it; 0 for any other node
// (the matrix kind, a width not constant).
int schedule_conv_dw_tile(const Graph *g, const Node *n);
// The GPU's reductions over rows (lower.c lower_reduce_rows_gpu): SUM, MEAN
// or MAX over axes before the last, at least one of them B or T (a bias's or
// gain's gradient, a sum over the batch), the last axis constant.
bool schedule_reduce_rows_gpu(const Graph *g, const Node *n);
// Their column tile: a block's threads x = g cw + cl read cw adjacent columns
// of rows g, g + G, ...; one pass: the largest of 8, 4, 2, 1 dividing the
// width lc that leaves GPU_RED_TILES tiles (more, narrower tiles, more
// blocks); two steps: the largest of 32, ..., 1 dividing lc (a warp's loads
// of a step are then 32 / cw whole rows of cw adjacent floats).
int64_t gpu_red_tile_width(int64_t lc, bool split);
// The row slices S of a GPU reduction over rows in two steps, or 0 for one
// pass: a kernel of the reduction alone (fusion FG_NONE) or with the bias
// sum beside it (FG_NORM_DG; not a weight gradient's GEMM, FG_WEIGHT_GRAD,
// whose node is a SUM too), where its output is constant (no B or T axis) and one pass would
// run fewer blocks than GPU_RED_MIN_BLOCKS (half an H100's SMs), S slices of the
// rows make about GPU_RED_BLOCKS blocks (at most GPU_RED_SPLIT_MAX): each
// sums its slice into partials [S, out] (xscratch[0]); a second launch sums
// each output's S partials in order. RetNet's per-head RMSNorm gain gradient
// (16 columns, 65,536 rows at Table 1 sizes) ran 16 blocks of 512 threads
// each summing 512 partials in order: 22 us (--emit=cost), 2.3 + 2.4 in two
// steps; the Table 1 transformer's bias and gain gradients (64 blocks)
// 8.4-15.5 us, 4.1-7.7. At 96 blocks (GPT-2-small's 768 columns) one pass is memory-bound
// and the second launch costs more than it saves (17.0 us, 16.0 + 1.5).
// (Test hook: XF_TEST_RED_ONE_PASS=1 gives 0, tests/cuda/cost.sh.)
int schedule_red_split(const Graph *g, const Node *n, int fusion, bool gpu);
enum { GPU_RED_TILES = 64, GPU_RED_MIN_BLOCKS = 66, GPU_RED_BLOCKS = 264, GPU_RED_SPLIT_MAX = 128 };
// Whether a GPU schedule gives SCATTER_ADD node n the sorted form (lower.c
// lower_steps: a vocabulary V and width d constant): F [lead, V] in its
// scratch, U [rows, d] in xscratch[0] (slot KS_CONV_Y), N [rows, 2] in
// xscratch[1] (slot KS_CONV_WT).
bool schedule_scatter_sorted(const Graph *g, const Node *n);
// Whether kernel node n is a SCAN along T, whose kernel has a state row
// [P, Q] in its scratch (lower.c lower_scan: h_{w0-1} in the step program).
bool schedule_scan_state(const Node *n);
int64_t symsize_eval(SymSize s, int64_t B, int64_t T);
// The size of dimension d; a * b; a == b; the product of dims [from, to) of s.
SymSize symsize_of(Dim d);
SymSize symsize_mul(SymSize a, SymSize b);
bool symsize_eq(SymSize a, SymSize b);
SymSize symsize_prod(const Shape *s, int from, int to);

#endif
