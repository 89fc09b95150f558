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

#include "../ir/ir.h"

// size = coef * B^pb * T^pt (every IR size is a product of such factors)
typedef struct {
  int64_t coef;
  int pb, pt;
} SymSize;

typedef enum {
  BUF_PARAM,   // a trainable parameter (runtime-owned, persists)
  BUF_GRAD,    // the gradient of a parameter (runtime-owned)
  BUF_INPUT,   // token ids, int32 (runtime-owned)
  BUF_ACT,     // scratch activations
  BUF_OUTPUT,  // loss or logits, read back by the runtime
} BufferRole;

typedef struct {
  BufferRole role;
  DType dtype;
  SymSize size;       // elements
  int node;           // the IR node whose value it holds
  const char *name;   // params, grads, inputs, outputs
  int alias_of;       // >= 0: shares the storage of that buffer
} Buffer;

typedef enum {
  PROG_TRAIN,   // forward + backward: loss and every gradient
  PROG_EVAL,    // forward: loss
  PROG_SAMPLE,  // forward: logits
  PROG_COUNT,
} Program_;

// Fused patterns (schedule_build with fuse on; --no-fuse turns them off and
// the unfused schedule is the oracle the tests compare with):
//   KF_WEIGHT_GRAD  sum(transpose(x) @ dy, axis 0) with x [B, T, d] and
//                   dy [B, T, c]: the gradient of an unbatched weight, one
//                   GEMM [d, B*T] @ [B*T, c] instead of B GEMMs into a
//                   [B, d, c] tensor and its sum. The transpose and the
//                   batched product get no kernel.
enum { KF_NONE, KF_WEIGHT_GRAD };

typedef struct {
  int node;     // the IR node it computes (op, attributes, shapes)
  int out;      // buffer written
  int in[IR_MAX_IN];
  int nin;
  SymSize outer;  // the parallel outer extent; the kernel covers [0, outer)
  int scratch;    // a scratch buffer of the kernel, or -1
  int fusion;     // KF_NONE, or the fused pattern this kernel computes
  int src[2];     // KF_WEIGHT_GRAD: the IR nodes x and dy it reads
  int phase;      // ops computed in two kernels: 0 the parallel part, 1 the
                  // serial one (cross_entropy: per-row losses, then their
                  // in-order mean, so the result does not depend on threads)
} Kernel;

typedef struct {
  const Graph *g;
  Buffer *bufs;
  int nbufs;
  int *buf_of;          // buf_of[node]: buffer holding the node's value
  Kernel *kernels;      // all kernels, forward first
  int nkernels;
  int *prog[PROG_COUNT];  // kernel indices of each program, in order
  int nprog[PROG_COUNT];
} Schedule;

// schedule.c: one kernel per IR node that computes something (leaves and
// reshapes compute nothing), except nodes folded into a fused kernel.
Schedule *schedule_build(Arena *a, const Graph *g, bool fuse);
int64_t symsize_eval(SymSize s, int64_t B, int64_t T);

#endif
