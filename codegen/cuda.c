// cuda.c: the CUDA backend's renderer. Schedule -> CUDA C source + launch
// tables (xf_abi.h: XfLaunch).
//
// Requires: a Schedule (kernel.h) of a verified graph with its backward pass,
// the same one the LLVM backend renders (same kernels, classes, fusion
// groups, buffers and lifetimes).
// Guarantees: one __global__ function per kernel class (two when it holds a
// dropout: the training variant and `_infer`), each taking one XfKernelArgs
// by value and reading its operands only through its slots (KS_*); per
// program a launch table in kernel order where matrix products are GEMM
// records (cuBLAS strided-batched on a device) and everything else a kernel
// launch; and xf_adamw. The kernels lower.c describes (maps, reductions,
// norms, losses, embeddings, attention: codegen/loops.h) are printed from
// their LKernel, construct by construct (render_lkernel); the others (the
// GEMMs and their non-affine fallback, causal convolutions) are rendered
// here. The values are those of llvm.c: the same loops, the same exp
// polynomial, the same Philox dropout stream, the same serial order where
// the description fixes one (serial loops, wide reductions); parallel
// reductions (a row's) sum in a different order, within float rounding.
//
// Parallel shape of a kernel (its launch mode):
//   ELEM   one thread per element, grid-stride (LK_ELEMENTS, convolutions)
//   WARP   one warp per outer index, up to four per block (LK_ROWS)
//   ROW_BLOCK  one block per outer index (LK_ROWS with a constant few)
// Every loop that contains a barrier has a trip count uniform over the
// block, and every loop that contains a shuffle or __syncwarp one uniform
// over the warp (runtime/cuda_emu.h pairs shuffles within a warp; on the GPU
// every lane of the full mask takes part).
#include "cuda.h"

#include "loops.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MODE_ELEM, MODE_WARP, MODE_ROW_BLOCK };
enum { ELEM_THREADS = 256, WARP_THREADS = 128, ROW_BLOCK_THREADS = 512 };

typedef struct {
  FILE *f;
  const Schedule *s;
  const Graph *g;
  const Kernel *k;
  char *err;  // the first op without a lowering here (unlowered), located; or NULL
  Arena *a;
} R;

static void out(R *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(R *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(r->f, fmt, ap);
  va_end(ap);
}

// ---- sizes -------------------------------------------------------------------------

static XfSym sym_of(Dim d) {
  if (d.kind == DIM_B) return (XfSym){1, 1, 0};
  if (d.kind == DIM_T) return (XfSym){1, 0, 1};
  return (XfSym){d.n, 0, 0};
}
static XfSym sym_mul(XfSym a, XfSym b) { return (XfSym){a.coef * b.coef, a.pb + b.pb, a.pt + b.pt}; }
static XfSym sym_prod(const Shape *s, int from, int to) {
  XfSym r = {1, 0, 0};
  for (int i = from; i < to; i++) r = sym_mul(r, sym_of(s->d[i]));
  return r;
}
static XfSym sym_c(int64_t c) { return (XfSym){c, 0, 0}; }

// A dimension as a C expression: a.B, a.T or a constant.
static const char *dim(R *r, Dim d) {
  static char buf[8][32];
  static int next;
  (void)r;
  if (d.kind == DIM_B) return "a.B";
  if (d.kind == DIM_T) return "a.T";
  char *b = buf[next++ % 8];
  snprintf(b, 32, "%lldLL", (long long)d.n);
  return b;
}

// Row-major strides of s as C expressions (rank <= 6, so each fits in 256).
typedef char StrideExpr[256];
static void strides(R *r, const Shape *s, StrideExpr *st) {
  size_t n = 3;
  char acc[256] = "1LL";
  for (int k = s->rank - 1; k >= 0; k--) {
    memcpy(st[k], acc, n + 1);
    const char *d = dim(r, s->d[k]);
    size_t dl = strlen(d);
    if (n + 1 + dl < sizeof acc) acc[n++] = '*', memcpy(acc + n, d, dl + 1), n += dl;
  }
}

// "(d0*d1*...)" of dims [from, to) into buf.
static char *dprod(R *r, const Shape *s, int from, int to, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "(1LL");
  for (int i = from; i < to && n < len; i++) n += (size_t)snprintf(buf + n, len - n, "*%s", dim(r, s->d[i]));
  if (n < len) snprintf(buf + n, len - n, ")");
  return buf;
}

static const char *fconst(double v, char *buf) {
  if (v != v) return strcpy(buf, "__int_as_float(0x7fc00000)");
  if (v > 3.5e38) return strcpy(buf, "__int_as_float(0x7f800000)");
  if (v < -3.5e38) return strcpy(buf, "__int_as_float(0xff800000)");
  snprintf(buf, 48, "%.9gf", v);
  if (!strpbrk(buf, ".eE")) snprintf(buf, 48, "%.1ff", v);
  return buf;
}

// ---- the prelude: types, exp, Philox, reductions -----------------------------------------

// struct XfKernelArgs of the generated source, from its field list in
// xf_abi.h: the prelude's name of each field type tag it uses.
#define CU_TYPE_PTR "void *"
#define CU_TYPE_I64 "xf_i64 "
#define CU_TYPE_U64 "xf_u64 "
#define CU_TYPE_U32 "xf_u32 "
#define CU_FIELD(P, tag, name) "  " CU_TYPE_##tag #name ";\n"
#define CU_ARRAY(P, tag, name, n) "  " CU_TYPE_##tag #name "[" #n "];\n"

static void prelude(R *r) {
  out(r, "// Generated by xfc (codegen/cuda.c) for model '%s'. Compiled by NVRTC for the GPU and,\n"
         "// unchanged, by the host C++ compiler against runtime/cuda_emu.h (-DXF_EMULATION).\n"
         "#ifndef XF_EMULATION\n"
         "#define XF_DYN_SHARED(type, name) extern __shared__ type name[]\n"
         "#define XF_EMU_ENTRY(name)\n"
         "#endif\n"
         "typedef long long xf_i64;\n"
         "typedef unsigned long long xf_u64;\n"
         "typedef unsigned int xf_u32;\n"
         "#define XF_NSLOTS %d\n"
         "struct XfKernelArgs {\n" XF_KERNEL_ARGS_FIELDS(CU_FIELD, CU_ARRAY, XfKernelArgs) "};\n"
         "#define XF_INF __int_as_float(0x7f800000)\n"
         "\n",
      r->g->name, XF_NSLOTS);
  out(r, "// e^x as llvm.c's exp_f32: x = n ln2 + r, Cephes polynomial, 2^n by exponent bits.\n"
         "__device__ __forceinline__ float xf_exp(float x) {\n"
         "  const float lo = -87.3365447505531f, hi = 88.7228391116729f;\n"
         "  float xc = x > hi ? hi : x;\n"
         "  xc = xc < lo ? lo : xc;\n"
         "  float n = floorf(xc * 1.44269504088896341f + 0.5f);\n"
         "  float t = xc - n * 0.693359375f;\n"
         "  t = t - n * -2.12194440e-4f;\n"
         "  float p = 1.9875691500E-4f;\n"
         "  p = p * t + 1.3981999507E-3f;\n"
         "  p = p * t + 8.3334519073E-3f;\n"
         "  p = p * t + 4.1665795894E-2f;\n"
         "  p = p * t + 1.6666665459E-1f;\n"
         "  p = p * t + 5.0000001201E-1f;\n"
         "  float y = (p * (t * t) + t) + 1.0f;\n"
         "  float res = y * __int_as_float(((int)n + 127) << 23);\n"
         "  res = x < lo ? 0.0f : res;\n"
         "  return x > hi ? XF_INF : res;\n"
         "}\n"
         "__device__ __forceinline__ float xf_max(float x, float y) { return x > y ? x : y; }\n"
         "__device__ __forceinline__ xf_i64 xf_max(xf_i64 x, xf_i64 y) { return x > y ? x : y; }\n"
         "\n"
         "// Philox4x32-10 (runtime/rng.h): uniform in [0, 1) from (seed, stream, index, step).\n"
         "__device__ __forceinline__ double xf_uniform(xf_u64 seed, xf_u32 stream, xf_u64 index, xf_u32 step) {\n"
         "  xf_u32 x0 = (xf_u32)index, x1 = (xf_u32)(index >> 32), x2 = stream, x3 = step;\n"
         "  xf_u32 k0 = (xf_u32)seed, k1 = (xf_u32)(seed >> 32);\n"
         "  for (int i = 0; i < 10; i++) {\n"
         "    xf_u64 p0 = 0xD2511F53ull * x0, p1 = 0xCD9E8D57ull * x2;\n"
         "    xf_u32 hi0 = (xf_u32)(p0 >> 32), lo0 = (xf_u32)p0, hi1 = (xf_u32)(p1 >> 32), lo1 = (xf_u32)p1;\n"
         "    x0 = hi1 ^ x1 ^ k0;\n"
         "    x1 = lo1;\n"
         "    x2 = hi0 ^ x3 ^ k1;\n"
         "    x3 = lo0;\n"
         "    k0 += 0x9E3779B9u;\n"
         "    k1 += 0xBB67AE85u;\n"
         "  }\n"
         "  return (double)(x0 >> 8) * (1.0 / 16777216.0);\n"
         "}\n"
         "\n"
         "// Reductions over the 32 lanes of a warp (a butterfly: every lane gets the result).\n"
         "__device__ __forceinline__ float xf_warp_sum(float v) {\n"
         "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
         "  return v;\n"
         "}\n"
         "__device__ __forceinline__ float xf_warp_max(float v) {\n"
         "  for (int o = 16; o > 0; o >>= 1) v = xf_max(__shfl_xor_sync(0xffffffffu, v, o), v);\n"
         "  return v;\n"
         "}\n"
         "// Over the block: warp results in red[], summed by every thread in warp order.\n"
         "__device__ __forceinline__ float xf_block_sum(float v, float *red) {\n"
         "  v = xf_warp_sum(v);\n"
         "  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;\n"
         "  __syncthreads();\n"
         "  float t = 0.0f;\n"
         "  for (unsigned w = 0; w < (blockDim.x + 31) >> 5; w++) t += red[w];\n"
         "  __syncthreads();\n"
         "  return t;\n"
         "}\n"
         "__device__ __forceinline__ float xf_block_max(float v, float *red) {\n"
         "  v = xf_warp_max(v);\n"
         "  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;\n"
         "  __syncthreads();\n"
         "  float t = -XF_INF;\n"
         "  for (unsigned w = 0; w < (blockDim.x + 31) >> 5; w++) t = xf_max(red[w], t);\n"
         "  __syncthreads();\n"
         "  return t;\n"
         "}\n"
         "\n"
         "// Work item i of the launch (the step program's window: XfKernelArgs.wspan).\n"
         "#define XF_ITEM(i) (a.wspan ? (i) / a.wspan * a.wblock + a.wofs + (i) %% a.wspan : (i))\n"
         "#define XF_ELEM_LOOP(i) \\\n"
         "  for (xf_i64 i##_n = blockIdx.x * (xf_i64)blockDim.x + threadIdx.x; i##_n < a.n; i##_n += (xf_i64)gridDim.x * blockDim.x) \\\n"
         "    for (xf_i64 i = XF_ITEM(i##_n), i##_once = 1; i##_once; i##_once = 0)\n"
         "// One warp per row: the loop runs the same number of times in every warp of a block.\n"
         "#define XF_WARP_LOOP(row, live) \\\n"
         "  const int lane = threadIdx.x & 31; \\\n"
         "  const xf_i64 wpb = blockDim.x >> 5; \\\n"
         "  for (xf_i64 row##0 = blockIdx.x * wpb; row##0 < a.n; row##0 += gridDim.x * wpb) \\\n"
         "    for (xf_i64 row = row##0 + (threadIdx.x >> 5), live = row < a.n; live >= 0; live = -1)\n"
         "\n");
}

// ---- operands ------------------------------------------------------------------------------

static int leaf_slot(R *r, int id) {
  for (int i = 0; i < r->k->nin; i++)
    if (r->k->leaf[i] == id) return i;
  return 0;
}

// Offset expression of input xs at output coordinates c0.. of os, numpy-broadcast.
static void bcast_offset(R *r, const Shape *xs, const Shape *os, char *buf, size_t len) {
  StrideExpr st[IR_MAX_RANK];
  strides(r, xs, st);
  size_t n = (size_t)snprintf(buf, len, "(0LL");
  for (int k = os->rank - 1; k >= 0; k--) {
    int i = k - (os->rank - xs->rank);
    if (i < 0) break;
    bool one = xs->d[i].kind == DIM_CONST && xs->d[i].n == 1;
    if (!one && n < len) n += (size_t)snprintf(buf + n, len - n, " + c%d*%s", k, st[i]);
  }
  if (n < len) snprintf(buf + n, len - n, ")");
}

// An op this backend cannot compute where it stands: the first such is
// reported (file:line:col) in CudaModule.error; never an identity.
static void unlowered(R *r, const Node *n) {
  if (r->err) return;
  char msg[512];
  kernel_unlowered(msg, sizeof msg, "CUDA", n);
  r->err = arena_strdup(r->a, msg);
}

// ---- causal convolutions (seed 001 eqs. 23, 26, 28, 29; ir.h ConvKind) ---------------------

// CAUSAL_CONV and CONV_DX, one thread per output element (row = b T + i, c):
//   conv:  out_i = sum_{j<=i} x_j (.) w_{i-j};   dx: dx_i = sum_{j>=i} dy_j (.) w_{j-i}
// (matrix kind: W_k [din, dout]; for dx, W_k^T).
static int render_conv(R *r, const Node *n) {
  bool fwd = n->op == OP_CAUSAL_CONV;
  const Shape *xs = &r->g->nodes[n->in[0]].shape, *os = &n->shape;
  out(r, "  const float *x = (const float *)a.slot[%d], *w = (const float *)a.slot[%d];\n", KS_IN0, KS_IN1);
  out(r, "  float *out = (float *)a.slot[%d];\n", KS_OUT);
  out(r, "  const xf_i64 T = %s, din = %s, dout = %s;\n", dim(r, xs->d[xs->rank - 2]), dim(r, xs->d[xs->rank - 1]),
      dim(r, os->d[os->rank - 1]));
  out(r, "  XF_ELEM_LOOP(e) {\n    const xf_i64 row = e / dout, c = e - row * dout, i = row %% T, b0 = row - i;\n");
  out(r, "    float acc = 0.0f;\n");
  out(r, fwd ? "    for (xf_i64 j = 0; j <= i; j++) {\n      const xf_i64 lag = i - j;\n"
             : "    for (xf_i64 j = i; j < T; j++) {\n      const xf_i64 lag = j - i;\n");
  switch (n->conv) {
  case CONV_SCALAR: out(r, "      acc += x[(b0 + j) * din + c] * w[lag];\n"); break;
  case CONV_VECTOR: out(r, "      acc += x[(b0 + j) * din + c] * w[lag * dout + c];\n"); break;
  case CONV_MATRIX:
    if (fwd) out(r, "      for (xf_i64 q = 0; q < din; q++) acc += x[(b0 + j) * din + q] * w[(lag * din + q) * dout + c];\n");
    else out(r, "      for (xf_i64 q = 0; q < din; q++) acc += x[(b0 + j) * din + q] * w[(lag * dout + c) * din + q];\n");
    break;
  }
  out(r, "    }\n    out[e] = acc;\n  }\n");
  return MODE_ELEM;
}

// CONV_DW: dw_k = sum_b sum_{i>=k} x_{b,i-k} (.) dy_{b,i}, one thread per element
// of dw (lag k, then the kind's per-lag block); lags k >= T are zero.
static int render_conv_dw(R *r, const Node *n) {
  const Shape *xs = &r->g->nodes[n->in[0]].shape, *ys = &r->g->nodes[n->in[1]].shape;
  char lead[512];
  dprod(r, xs, 0, xs->rank - 2, lead, sizeof lead);
  out(r, "  const float *x = (const float *)a.slot[%d], *dy = (const float *)a.slot[%d];\n", KS_IN0, KS_IN1);
  out(r, "  float *out = (float *)a.slot[%d];\n", KS_OUT);
  out(r, "  const xf_i64 T = %s, d = %s, ew = %s, lead = %s;\n", dim(r, xs->d[xs->rank - 2]), dim(r, xs->d[xs->rank - 1]),
      dim(r, ys->d[ys->rank - 1]), lead);
  const char *per = n->conv == CONV_SCALAR ? "1LL" : n->conv == CONV_VECTOR ? "d" : "d * ew";
  out(r, "  XF_ELEM_LOOP(e) {\n    const xf_i64 lag = e / (%s), p = e - lag * (%s);\n    float acc = 0.0f;\n", per, per);
  out(r, "    for (xf_i64 b = 0; b < lead; b++)\n      for (xf_i64 i = lag; i < T; i++) {\n");
  out(r, "        const xf_i64 xr = (b * T + i - lag) * d, yr = (b * T + i) * ew;\n");
  switch (n->conv) {
  case CONV_SCALAR: out(r, "        for (xf_i64 c = 0; c < d; c++) acc += x[xr + c] * dy[yr + c];\n"); break;
  case CONV_VECTOR: out(r, "        acc += x[xr + p] * dy[yr + p];\n"); break;
  case CONV_MATRIX: out(r, "        acc += x[xr + p / ew] * dy[yr + p %% ew];\n"); break;
  }
  out(r, "      }\n    (void)p;\n    out[e] = acc;\n  }\n");
  return MODE_ELEM;
}

// ---- matrix products ----------------------------------------------------------------------

// The batch stride (in elements) of operand xs of a product with output batch
// bo when it is affine in the batch index: 0 (not batched) or one matrix per
// entry; -1 otherwise (a broadcast over some batch axes only).
static int64_t batch_kind(const Shape *xs, const Shape *os) {
  int bx = xs->rank - 2, bo = os->rank - 2;
  bool ones = true;
  for (int i = 0; i < bx; i++) ones = ones && xs->d[i].kind == DIM_CONST && xs->d[i].n == 1;
  if (ones) return 0;
  if (bx != bo) return -1;
  for (int i = 0; i < bx; i++)
    if (xs->d[i].kind != os->d[i].kind || xs->d[i].n != os->d[i].n) return -1;
  return 1;
}

static bool gemm_affine(const Graph *g, const Node *mm) {
  return batch_kind(&g->nodes[mm->in[0]].shape, &mm->shape) >= 0 && batch_kind(&g->nodes[mm->in[1]].shape, &mm->shape) >= 0;
}

// The GEMM record of product mm with operands in slots xs, ys (affine batch).
// fold: an unbatched right operand makes one GEMM of every entry's rows.
static XfLaunch gemm_record(const Graph *g, const Node *mm, int xslot, int yslot, bool tb, bool fold) {
  const Shape *xs = &g->nodes[mm->in[0]].shape, *ys = &g->nodes[mm->in[1]].shape, *os = &mm->shape;
  int rank = os->rank;
  XfSym m = sym_of(os->d[rank - 2]), nn = sym_of(os->d[rank - 1]), kk = sym_of(xs->d[xs->rank - 1]);
  XfSym count = sym_prod(os, 0, rank - 2);
  int64_t bx = batch_kind(xs, os), by = batch_kind(ys, os);
  XfLaunch L = {.kind = XF_LAUNCH_GEMM, .ta = 0, .tb = 0, .sa = xslot, .sb = yslot, .sc = KS_OUT, .alpha = 1, .beta = 0};
  L.m = m, L.n = nn, L.k = kk, L.lda = kk, L.ldb = tb ? kk : nn, L.ldc = nn, L.count = count;
  L.tb = tb;
  L.stride_a = bx ? sym_mul(m, kk) : sym_c(0);
  L.stride_b = by ? sym_mul(kk, nn) : sym_c(0);
  L.stride_c = sym_mul(m, nn);
  if (fold && bx && !by) {  // rows of every batch entry contiguous in x and out: one GEMM
    L.m = sym_mul(m, count), L.count = sym_c(1);
    L.stride_a = L.stride_b = L.stride_c = sym_c(0);
  }
  return L;
}

// A product whose batch broadcast is not affine: one thread per output
// element, the dot product in order of k.
static void render_matmul_direct(R *r, const Node *mm, int xslot, int yslot, bool tb) {
  const Shape *xs = &r->g->nodes[mm->in[0]].shape, *ys = &r->g->nodes[mm->in[1]].shape, *os = &mm->shape;
  int rank = os->rank;
  Shape bo = *os, bx = *xs, by = *ys;
  bo.rank -= 2, bx.rank -= 2, by.rank -= 2;
  char offx[1024], offy[1024];
  bcast_offset(r, &bx, &bo, offx, sizeof offx);
  bcast_offset(r, &by, &bo, offy, sizeof offy);
  out(r, "  const float *x = (const float *)a.slot[%d], *y = (const float *)a.slot[%d];\n", xslot, yslot);
  out(r, "  float *out = (float *)a.slot[%d];\n", KS_OUT);
  out(r, "  const xf_i64 M = %s, N = %s, K = %s;\n", dim(r, os->d[rank - 2]), dim(r, os->d[rank - 1]),
      dim(r, xs->d[xs->rank - 1]));
  out(r, "  XF_ELEM_LOOP(e) {\n    const xf_i64 col = e %% N, rowm = (e / N) %% M, bidx = e / (M * N);\n");
  out(r, "    xf_i64 rem = bidx;\n    (void)rem;\n");
  for (int k = bo.rank - 1; k >= 0; k--)
    out(r, "    const xf_i64 c%d = rem %% %s; rem /= %s;\n", k, dim(r, bo.d[k]), dim(r, bo.d[k]));
  out(r, "    const float *xr = x + %s * M * K + rowm * K, *yc = y + %s * K * N + col%s;\n", offx, offy, tb ? " * K" : "");
  out(r, "    float acc = 0.0f;\n    for (xf_i64 q = 0; q < K; q++) acc += xr[q] * yc[q%s];\n    out[e] = acc;\n  }\n",
      tb ? "" : " * N");
}

// ---- loop descriptions (loops.h) ----------------------------------------------------------
//
// A kernel lower.c describes is printed from its LKernel:
//   LK_ELEMENTS  ELEM mode: a thread per (outer, inner) pair, grid-stride over
//                e < nouter ninner, the outer index e / inner and the body's par
//                loop index e % inner (one 64-bit division per element, as a
//                map's row always had).
//   LK_ROWS      WARP mode: a warp per outer index (XF_WARP_LOOP). Statements
//                at row level run cooperatively: every lane computes a let
//                (rows' values are warp-uniform), a par loop spreads its
//                iterations over the lanes (j = lo + lane, step 32: coalesced
//                over a contiguous axis), a reduction sums lane-strided
//                partials and combines them with a butterfly (every lane gets
//                the result), a store is lane 0's, and a serial loop runs in
//                lockstep on every lane (its bounds are row-level values), its
//                body cooperative again. Inside a par loop everything is the
//                lane's own serial code. A wide reduction (the loss mean) is
//                lane 0's serial sum in double, in index order, broadcast with
//                a shuffle. After a row-level par loop, store or let that
//                writes a slot (or local) the kernel reads, or reads one it
//                writes, __syncwarp(): a later statement (or the next
//                iteration of a serial loop) may read what another lane
//                wrote, or overwrite what another lane has still to read.
// `live` is uniform over a warp, so the warp's whole row runs under it: the
// shuffles are executed by all 32 lanes of a live warp and by none of a warp
// past the last row (the emulation pairs shuffles within a warp only).
// ROW_BLOCK is the same with the block's threads for the lanes (block
// reductions, __syncthreads, the wide result broadcast through shared memory).
// Local arrays (LK_LOCAL0 + i) are X<i>: a region of dynamic shared memory per
// warp (WARP) or per block (ROW_BLOCK), a thread's own array in ELEM mode.

enum { LK_SLOTS = LK_LOCAL0 + LK_MAX_LOCALS };

typedef struct {
  R *r;
  const LKernel *lk;
  char **name;              // [nvars]: the C name of each variable
  bool loaded[LK_SLOTS];    // slots (and locals) some LX_LOAD reads
  bool stored[LK_SLOTS];    // slots (and locals) some LS_STORE writes
  int ind;                  // indentation (spaces)
  bool block;               // LK_ROWS: a block per outer index, not a warp
} LP;

// An LK_ROWS kernel with a few outer indices (a constant number, at most
// ROW_BLOCK_MAX: the serial kernels, the reductions over every row) gets a
// block of ROW_BLOCK_THREADS per outer index instead of a warp, its par loops
// and reductions spread over the block.
enum { ROW_BLOCK_MAX = 64 };
static bool lk_has_reduce(const LStmt *st) {
  for (; st; st = st->next)
    if (st->kind == LS_REDUCE || lk_has_reduce(st->body)) return true;
  return false;
}
static bool lk_row_block(const LKernel *lk) { return lk->nouter.pb == 0 && lk->nouter.pt == 0 && lk->nouter.coef <= ROW_BLOCK_MAX; }

static void lk_slots_expr(LP *p, const LExpr *e) {
  if (!e) return;
  if (e->kind == LX_LOAD && e->slot >= 0 && e->slot < LK_SLOTS) p->loaded[e->slot] = true;
  for (int i = 0; i < 3; i++) lk_slots_expr(p, e->a[i]);
}
static void lk_slots(LP *p, const LStmt *st) {
  for (; st; st = st->next) {
    lk_slots_expr(p, st->lo), lk_slots_expr(p, st->hi), lk_slots_expr(p, st->idx), lk_slots_expr(p, st->val);
    if (st->kind == LS_STORE && st->slot >= 0 && st->slot < LK_SLOTS) p->stored[st->slot] = true;
    lk_slots(p, st->body);
  }
}

// The slot's view: S<n> (written, maybe read), I<n> (token ids), L<n>
// (read-only floats); local i: X<i>.
static char view_of(const LP *p, int slot) {
  return slot >= LK_LOCAL0 ? 'X' : p->stored[slot] ? 'S' : p->lk->slot_int[slot] ? 'I' : 'L';
}
static int view_index(int slot) { return slot >= LK_LOCAL0 ? slot - LK_LOCAL0 : slot; }

// Variable names: "v<index>", or "<name>_<index>" (the last '_' separates the
// index, so two variables never share a name, nor one of the fixed names
// here: a, e, inner, row, live, lane, S/I/L<n>).
static void lk_names(LP *p) {
  const LKernel *lk = p->lk;
  p->name = arena_alloc(p->r->a, sizeof(char *) * (size_t)(lk->nvars ? lk->nvars : 1));
  for (int v = 0; v < lk->nvars; v++) {
    const char *n = lk->names ? lk->names[v] : NULL;
    if (!n || !*n) {
      p->name[v] = arena_printf(p->r->a, "v%d", v);
      continue;
    }
    char *s = arena_printf(p->r->a, "%s%s_%d", (n[0] >= '0' && n[0] <= '9') ? "v" : "", n, v);
    for (char *c = s; *c; c++)
      if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) *c = '_';
    p->name[v] = s;
  }
}

static const char *ltype(LType t) { return t == LT_I64 ? "xf_i64" : t == LT_F32 ? "float" : "bool"; }

static void lx(LP *p, const LExpr *e);

static void lx_call(LP *p, const char *fn, const LExpr *e) {
  out(p->r, "%s(", fn);
  lx(p, e->a[0]);
  if (e->a[1]) out(p->r, ", "), lx(p, e->a[1]);
  out(p->r, ")");
}
static void lx_bin(LP *p, const char *op, const LExpr *e) {
  out(p->r, "(");
  lx(p, e->a[0]);
  out(p->r, " %s ", op);
  lx(p, e->a[1]);
  out(p->r, ")");
}

// An expression as C; every composite one parenthesised.
static void lx(LP *p, const LExpr *e) {
  R *r = p->r;
  char c[48];
  switch (e->kind) {
  case LX_INT: out(r, e->ival < 0 ? "(%lldLL)" : "%lldLL", (long long)e->ival); return;
  case LX_FLT: {  // an f32 constant: rounded to float first, then printed exactly
    const char *s = fconst((double)(float)e->fval, c);
    out(r, s[0] == '-' ? "(%s)" : "%s", s);
    return;
  }
  case LX_DIM: out(r, e->ival ? "a.T" : "a.B"); return;
  case LX_VAR: out(r, "%s", p->name[e->var]); return;
  case LX_ROW0: out(r, "a.row0"); return;
  case LX_LOAD:
    if (view_of(p, e->slot) == 'I') out(r, "(xf_i64)I%d[", e->slot);
    else out(r, "%c%d[", view_of(p, e->slot), view_index(e->slot));
    lx(p, e->a[0]);
    out(r, "]");
    return;
  case LX_NEG: out(r, "(-"), lx(p, e->a[0]), out(r, ")"); return;
  case LX_EXP: lx_call(p, "xf_exp", e); return;
  case LX_LOG: lx_call(p, "logf", e); return;
  case LX_SQRT: lx_call(p, "sqrtf", e); return;
  case LX_SIN: lx_call(p, "sinf", e); return;
  case LX_COS: lx_call(p, "cosf", e); return;
  case LX_TANH: lx_call(p, "tanhf", e); return;
  case LX_ERF: lx_call(p, "erff", e); return;
  case LX_ADD: lx_bin(p, "+", e); return;
  case LX_SUB: lx_bin(p, "-", e); return;
  case LX_MUL: lx_bin(p, "*", e); return;
  case LX_DIV: lx_bin(p, "/", e); return;
  case LX_REM: lx_bin(p, "%", e); return;
  case LX_MAX: lx_call(p, "xf_max", e); return;  // float, or the xf_i64 overload
  case LX_LT: lx_bin(p, "<", e); return;
  case LX_GT: lx_bin(p, ">", e); return;
  case LX_GE: lx_bin(p, ">=", e); return;
  case LX_EQ: lx_bin(p, "==", e); return;
  case LX_AND: lx_bin(p, "&&", e); return;
  case LX_SELECT:
    out(r, "(");
    lx(p, e->a[0]);
    out(r, " ? ");
    lx(p, e->a[1]);
    out(r, " : ");
    lx(p, e->a[2]);
    out(r, ")");
    return;
  case LX_TOF: out(r, "(float)"), lx(p, e->a[0]); return;
  case LX_KEEP:  // dropout's draw, compared in double (runtime/rng.h)
    out(r, "(xf_uniform(a.seed, a.imm, (xf_u64)");
    lx(p, e->a[0]);
    out(r, ", a.step) >= %.17g)", e->fval);
    return;
  case LX_COUNT: break;
  }
  out(r, "0");
}

static void lk_line(LP *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lk_line(LP *p, const char *fmt, ...) {
  va_list ap;
  fprintf(p->r->f, "%*s", p->ind, "");
  va_start(ap, fmt);
  vfprintf(p->r->f, fmt, ap);
  va_end(ap);
}

// The threads of a row: a warp's lanes, or (ROW_BLOCK) the block's threads.
static const char *g_id(const LP *p) { return p->block ? "threadIdx.x" : "lane"; }
static const char *g_sync(const LP *p) { return p->block ? "__syncthreads();" : "__syncwarp();"; }

// "for (xf_i64 v = lo, v_end = hi; v < v_end; v++) {", or spread over the
// row's threads: from lo + the thread's index, stepping by their number.
static void lk_for_open(LP *p, int var, const LExpr *lo, const LExpr *hi, bool spread) {
  const char *v = p->name[var];
  lk_line(p, "for (xf_i64 %s = ", v);
  if (!spread) lx(p, lo);
  else if (lo->kind == LX_INT && lo->ival == 0) out(p->r, "%s", g_id(p));
  else lx(p, lo), out(p->r, " + %s", g_id(p));
  out(p->r, ", %s_end = ", v);
  lx(p, hi);
  if (spread) out(p->r, "; %s < %s_end; %s += %s) {\n", v, v, v, p->block ? "blockDim.x" : "32");
  else out(p->r, "; %s < %s_end; %s++) {\n", v, v, v);
}

static void lk_block(LP *p, const LStmt *st, bool coop);

// Accumulates the value of reduction st into var (declared by the caller)
// over the loop just opened: a float sum or maximum, or (wide) a double.
static void lk_accumulate(LP *p, const LStmt *st, bool wide) {
  const char *v = p->name[st->var];
  p->ind += 2;
  if (wide) {
    lk_line(p, "%s_w += (double)", v);
    lx(p, st->val);
  } else if (st->op == LX_MAX) {
    lk_line(p, "%s = xf_max(", v);
    lx(p, st->val);
    out(p->r, ", %s)", v);
  } else {
    lk_line(p, "%s = %s + ", v, v);
    lx(p, st->val);
  }
  out(p->r, ";\n");
  p->ind -= 2;
  lk_line(p, "}\n");
}

// A reduction as the thread's own serial loop, in index order.
static void lk_reduce_serial(LP *p, const LStmt *st) {
  const char *v = p->name[st->var];
  bool wide = st->wide && st->op == LX_ADD;
  if (wide) lk_line(p, "double %s_w = 0.0;\n", v);
  lk_for_open(p, st->ivar, st->lo, st->hi, false);
  lk_accumulate(p, st, wide);
  if (wide) lk_line(p, "%s = (float)%s_w;\n", v, v);
}

// Whether expression e loads a slot the kernel writes.
static bool lk_reads_written(const LP *p, const LExpr *e) {
  if (!e) return false;
  if (e->kind == LX_LOAD && e->slot >= 0 && e->slot < LK_SLOTS && p->stored[e->slot]) return true;
  return lk_reads_written(p, e->a[0]) || lk_reads_written(p, e->a[1]) || lk_reads_written(p, e->a[2]);
}

// Whether statements st (and their bodies) store to a slot the kernel reads
// or read a slot it writes: run by the row's threads, each on its share, they
// are followed by a barrier, so that no thread reads before another's store
// is done, or stores over what another has still to read.
static bool lk_shares(const LP *p, const LStmt *st, bool one) {
  for (; st; st = one ? NULL : st->next) {
    if (st->kind == LS_STORE && p->loaded[st->slot]) return true;
    if (lk_reads_written(p, st->lo) || lk_reads_written(p, st->hi) || lk_reads_written(p, st->idx) || lk_reads_written(p, st->val))
      return true;
    if (lk_shares(p, st->body, false)) return true;
  }
  return false;
}

// One statement, at row level (coop: the row's threads together) or as a
// thread's own serial code.
static void lk_stmt(LP *p, const LStmt *st, bool coop) {
  R *r = p->r;
  switch (st->kind) {
  case LS_LET:
    lk_line(p, "const %s %s = ", ltype(p->lk->types[st->var]), p->name[st->var]);
    lx(p, st->val);
    out(r, ";\n");
    if (coop && lk_shares(p, st, true)) lk_line(p, "%s\n", g_sync(p));
    return;
  case LS_STORE:
    lk_line(p, "%s%s%s%c%d[", coop ? "if (" : "", coop ? g_id(p) : "", coop ? " == 0) " : "", view_of(p, st->slot), view_index(st->slot));
    lx(p, st->idx);
    out(r, "] = ");
    lx(p, st->val);
    out(r, ";\n");
    if (coop && lk_shares(p, st, true)) lk_line(p, "%s\n", g_sync(p));
    return;
  case LS_FOR: {
    bool spread = coop && st->par;
    lk_for_open(p, st->var, st->lo, st->hi, spread);
    p->ind += 2;
    lk_block(p, st->body, coop && !st->par);
    p->ind -= 2;
    lk_line(p, "}\n");
    if (spread && lk_shares(p, st, true)) lk_line(p, "%s\n", g_sync(p));
    return;
  }
  case LS_REDUCE: {
    const char *v = p->name[st->var];
    lk_line(p, "float %s = %s;\n", v, st->op == LX_MAX ? "-XF_INF" : "0.0f");
    if (!coop) {
      lk_reduce_serial(p, st);
      return;
    }
    if (st->wide && st->op == LX_ADD) {  // thread 0 in index order, then broadcast
      lk_line(p, "if (%s == 0) {\n", g_id(p));
      p->ind += 2;
      lk_reduce_serial(p, st);
      if (p->block) lk_line(p, "red[0] = %s;\n", v);
      p->ind -= 2;
      lk_line(p, "}\n");
      if (p->block) lk_line(p, "__syncthreads();\n"), lk_line(p, "%s = red[0];\n", v), lk_line(p, "__syncthreads();\n");
      else lk_line(p, "%s = __shfl_sync(0xffffffffu, %s, 0);\n", v, v);
      return;
    }
    lk_for_open(p, st->ivar, st->lo, st->hi, true);
    lk_accumulate(p, st, false);
    const char *fn = st->op == LX_MAX ? (p->block ? "xf_block_max" : "xf_warp_max") : (p->block ? "xf_block_sum" : "xf_warp_sum");
    lk_line(p, "%s = %s(%s%s);\n", v, fn, v, p->block ? ", red" : "");
    return;
  }
  case LS_COUNT: break;
  }
}

static void lk_block(LP *p, const LStmt *st, bool coop) {
  for (; st; st = st->next) lk_stmt(p, st, coop);
}

// Local arrays: X<i> at offset off[i] floats (16-byte aligned) of `total`
// per outer index; in shared memory for a row's threads (a region per warp,
// or the block's), a thread's own array in ELEM mode.
static int64_t lk_locals(const LKernel *lk, int64_t *off) {
  int64_t total = 0;
  for (int i = 0; i < lk->nlocals; i++) {
    if (off) off[i] = total;
    total += (lk->local_size[i] + 3) & ~(int64_t)3;
  }
  return total;
}
// Warps per block in WARP mode: four, fewer where their locals would take
// more than LOCAL_BUDGET bytes of shared memory (two blocks fit an SM).
enum { LOCAL_BUDGET = 96 * 1024 };
static int lk_warps(const LKernel *lk) {
  int64_t per = lk_locals(lk, NULL) * (int64_t)sizeof(float);
  int w = WARP_THREADS / 32;
  while (w > 1 && w * per > LOCAL_BUDGET) w /= 2;
  return w;
}
static int lk_shmem(const LKernel *lk, int mode) {
  int64_t per = lk_locals(lk, NULL) * (int64_t)sizeof(float);
  return mode == MODE_WARP ? (int)(per * lk_warps(lk)) : mode == MODE_ROW_BLOCK ? (int)per : 0;
}
static void lk_local_views(LP *p, int mode) {
  int64_t off[LK_MAX_LOCALS], total = lk_locals(p->lk, off);
  if (!p->lk->nlocals) return;
  if (mode == MODE_ELEM) {
    for (int i = 0; i < p->lk->nlocals; i++) out(p->r, "  float X%d[%lld];\n", i, (long long)p->lk->local_size[i]);
    return;
  }
  out(p->r, "  XF_DYN_SHARED(float, xf_local);\n");
  for (int i = 0; i < p->lk->nlocals; i++)
    out(p->r, "  float *const X%d = xf_local + %s%lldLL;\n", i, mode == MODE_WARP ? arena_printf(p->r->a, "(threadIdx.x >> 5) * %lldLL + ", (long long)total) : "",
        (long long)off[i]);
}

// Prints the body of the __global__ function of lk; returns its mode.
static int render_lkernel(R *r, const LKernel *lk) {
  LP p = {.r = r, .lk = lk};
  lk_names(&p);
  lk_slots(&p, lk->body);
  for (int s = 0; s < KS_COUNT; s++) {
    if (p.stored[s]) out(r, "  float *__restrict__ S%d = (float *)a.slot[%d];\n", s, s);
    else if (p.loaded[s] && lk->slot_int[s]) out(r, "  const int *__restrict__ I%d = (const int *)a.slot[%d];\n", s, s);
    else if (p.loaded[s]) out(r, "  const float *__restrict__ L%d = (const float *)a.slot[%d];\n", s, s);
  }
  const char *o = p.name[0];
  if (lk->shape == LK_ROWS) {
    p.block = lk_row_block(lk);
    lk_local_views(&p, p.block ? MODE_ROW_BLOCK : MODE_WARP);
    if (p.block)
      out(r, "%s  for (xf_i64 row = blockIdx.x; row < a.n; row += gridDim.x) {\n    {\n",
          lk_has_reduce(lk->body) ? "  __shared__ float red[32];\n" : "");
    else out(r, "  XF_WARP_LOOP(row, live) {\n    if (live) {\n");
    out(r, "      const xf_i64 %s = XF_ITEM(row);\n      (void)%s;\n", o, o);
    p.ind = 6;
    lk_block(&p, lk->body, true);
    out(r, "    }\n  }\n");
    return p.block ? MODE_ROW_BLOCK : MODE_WARP;
  }
  // LK_ELEMENTS: lets, then the one par loop over [lo, lo + inner)
  lk_local_views(&p, MODE_ELEM);
  out(r, "  const xf_i64 inner = ");
  lx(&p, lk->inner);
  out(r, ";\n  XF_ELEM_LOOP(e) {\n    const xf_i64 %s = e / inner;\n    (void)%s;\n", o, o);
  p.ind = 4;
  const LStmt *st = lk->body;
  for (; st && st->kind == LS_LET; st = st->next) lk_stmt(&p, st, false);
  if (st && st->kind == LS_FOR && st->par && !st->next) {
    const char *j = p.name[st->var];
    out(r, "    const xf_i64 %s = ", j);
    if (!(st->lo->kind == LX_INT && st->lo->ival == 0)) lx(&p, st->lo), out(r, " + ");
    out(r, "(e - %s * inner);\n", o);
    lk_block(&p, st->body, false);
  } else if (st && !r->err) {
    r->err = arena_printf(r->a, "internal error: kernel %s: the body of an elements kernel is not one par loop", lk->name);
  }
  out(r, "  }\n");
  return MODE_ELEM;
}

// ---- functions and launches ----------------------------------------------------------------

static void fn_open(R *r, const char *name, int threads) {
  out(r, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const XfKernelArgs a) {\n", threads, name);
}
static void fn_close(R *r, const char *name) { out(r, "}\nXF_EMU_ENTRY(%s)\n\n", name); }

static int mode_threads(int mode) {
  return mode == MODE_ELEM ? ELEM_THREADS : mode == MODE_WARP ? WARP_THREADS : ROW_BLOCK_THREADS;
}

// Renders the body of the class function of a kernel lower.c leaves to the
// backends besides its GEMMs (the causal convolutions: ELEM mode, a thread
// per output element, which is its work item). Any other op here has no
// lowering: an error, and an empty function.
static int render_body(R *r, const Kernel *k) {
  const Node *n = &r->g->nodes[k->node];
  switch (n->op) {
  case OP_CAUSAL_CONV: case OP_CONV_DX: return render_conv(r, n);
  case OP_CONV_DW: return render_conv_dw(r, n);
  default: unlowered(r, n); return MODE_ELEM;
  }
}

static int line_of(const char *text, long offset) {
  int line = 1;
  for (long i = 0; i < offset && text[i]; i++) line += text[i] == '\n';
  return line;
}

CudaModule *cuda_render(Arena *a, const Schedule *s, const int *time_axis) {
  const Graph *g = s->g;
  CudaModule *m = arena_alloc(a, sizeof *m);
  int cap = 3 * s->nkernels + 2;
  m->names = arena_alloc(a, sizeof(char *) * (size_t)cap);
  m->name_line = arena_alloc(a, sizeof(int) * (size_t)cap);
  m->name_kernel = arena_alloc(a, sizeof(int) * (size_t)cap);
  long *name_off = calloc((size_t)cap, sizeof(long));
  // per class: function index of the training and inference variants, the
  // direct product (non-affine batch), mode, shared memory
  int *fn_train = calloc((size_t)s->nkernels + 1, sizeof(int)), *fn_infer = calloc((size_t)s->nkernels + 1, sizeof(int));
  int *fn_mm = calloc((size_t)s->nkernels + 1, sizeof(int)), *mode = calloc((size_t)s->nkernels + 1, sizeof(int));
  int *shmem = calloc((size_t)s->nkernels + 1, sizeof(int)), *threads = calloc((size_t)s->nkernels + 1, sizeof(int));
  // per class described by lower.c: its launch's work items, and the items
  // per outer index (the inner extent in ELEM mode, else 1)
  bool *lowered = calloc((size_t)s->nkernels + 1, sizeof(bool));
  XfSym *litems = calloc((size_t)s->nkernels + 1, sizeof(XfSym)), *linner = calloc((size_t)s->nkernels + 1, sizeof(XfSym));
  char *buf = NULL;
  size_t len = 0;
  R r = {.f = open_memstream(&buf, &len), .s = s, .g = g, .a = a};
  // test hook: XF_TEST_CUDA_BREAK=k breaks kernel k's source (xfc's NVRTC error path)
  const char *hook = getenv("XF_TEST_CUDA_BREAK");
  int broken = hook && *hook ? atoi(hook) : -1;
  prelude(&r);
  for (int ki = 0; ki < s->nkernels; ki++) {
    const Kernel *k = &s->kernels[ki];
    fn_train[ki] = fn_infer[ki] = fn_mm[ki] = -1;
    if (k->cls != ki) continue;
    const Node *n = &g->nodes[k->node];
    r.k = k;
    if (k->fusion == FG_WEIGHT_GRAD) continue;  // a GEMM only
    const Node *mm = k->fusion == FG_MATMUL_MAP ? &g->nodes[k->matmul] : n->op == OP_MATMUL ? n : NULL;
    if (mm && !gemm_affine(g, mm)) {
      char *name = arena_printf(a, "xf_k%d_mm", ki);
      fflush(r.f), name_off[m->nnames] = (long)len;
      m->name_kernel[m->nnames] = ki, fn_mm[ki] = m->nnames, m->names[m->nnames++] = name;
      fn_open(&r, name, ELEM_THREADS);
      int xs = KS_IN0 + leaf_slot(&r, mm->in[0]), ys = KS_IN0 + leaf_slot(&r, mm->in[1]);
      render_matmul_direct(&r, mm, xs, ys, k->tb);
      fn_close(&r, name);
    }
    if (n->op == OP_MATMUL) continue;
    // the loop description (training variant, and inference when it holds a
    // dropout), or NULL for the kernels rendered here, or an error
    char lerr[512] = "";
    LKernel *lk[2] = {lower_kernel(a, s, k, true, lerr, sizeof lerr), NULL};
    if (lk[0] && lk[0]->dropout) lk[1] = lower_kernel(a, s, k, false, lerr, sizeof lerr);
    if (lerr[0] && !r.err) r.err = arena_strdup(a, lerr);
    int nvariants = lk[0] ? 1 + (lk[1] != NULL) : k->dropout >= 0 ? 2 : 1;
    if (lk[0]) {
      SymSize z = lk[0]->nouter;
      if (lk[0]->shape == LK_ELEMENTS) z = (SymSize){z.coef * lk[0]->ninner.coef, z.pb + lk[0]->ninner.pb, z.pt + lk[0]->ninner.pt};
      lowered[ki] = true, litems[ki] = (XfSym){z.coef, z.pb, z.pt};
      SymSize in = lk[0]->shape == LK_ELEMENTS ? lk[0]->ninner : (SymSize){1, 0, 0};
      linner[ki] = (XfSym){in.coef, in.pb, in.pt};
    }
    for (int variant = 0; variant < nvariants; variant++) {
      char *name = arena_printf(a, variant ? "xf_k%d_infer" : "xf_k%d", ki);
      // the mode decides the launch bounds: render into a scratch stream first
      char *body = NULL;
      size_t blen = 0;
      FILE *saved = r.f;
      r.f = open_memstream(&body, &blen);
      shmem[ki] = 0;
      if (lk[variant]) mode[ki] = render_lkernel(&r, lk[variant]), shmem[ki] = lk_shmem(lk[variant], mode[ki]);
      else if (lerr[0]) mode[ki] = MODE_ELEM, lowered[ki] = true;  // an error: an empty function, no items
      else mode[ki] = render_body(&r, k);
      fclose(r.f);
      r.f = saved;
      fflush(r.f), name_off[m->nnames] = (long)len;
      m->name_kernel[m->nnames] = ki;
      if (variant) fn_infer[ki] = m->nnames;
      else fn_train[ki] = m->nnames;
      m->names[m->nnames++] = name;
      threads[ki] = lk[variant] && mode[ki] == MODE_WARP ? 32 * lk_warps(lk[variant]) : mode_threads(mode[ki]);
      fn_open(&r, name, threads[ki]);
      if (broken == ki) out(&r, "  xf_undefined_by_test_hook;\n");
      fputs(body, r.f);
      free(body);
      fn_close(&r, name);
    }
    if (fn_infer[ki] < 0) fn_infer[ki] = fn_train[ki];
  }
  // AdamW as torch.optim.AdamW (runtime.c adamw_range): slots w, m, v, g and
  // the hyper-parameters (lr, beta1, beta2, eps, weight decay) as doubles.
  fflush(r.f), name_off[m->nnames] = (long)len;
  m->adamw = m->nnames, m->name_kernel[m->nnames] = -1, m->names[m->nnames++] = "xf_adamw";
  out(&r, "extern \"C\" __global__ void __launch_bounds__(%d) xf_adamw(const XfKernelArgs a) {\n", ELEM_THREADS);
  out(&r, "  float *w = (float *)a.slot[0], *m = (float *)a.slot[1], *v = (float *)a.slot[2];\n"
          "  const float *g = (const float *)a.slot[3];\n  const double *hp = (const double *)a.slot[4];\n"
          "  const double t = (double)a.step;\n"
          "  const float lr = (float)hp[0], b1 = (float)hp[1], b2 = (float)hp[2], eps = (float)hp[3];\n"
          "  const float decay = (float)(1.0 - hp[0] * hp[4]);\n"
          "  const float bc1 = (float)(1.0 - pow(hp[1], t)), sqrt_bc2 = sqrtf((float)(1.0 - pow(hp[2], t)));\n"
          "  XF_ELEM_LOOP(i) {\n    w[i] *= decay;\n    m[i] = b1 * m[i] + (1.0f - b1) * g[i];\n"
          "    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];\n"
          "    w[i] -= lr * (m[i] / bc1) / (sqrtf(v[i]) / sqrt_bc2 + eps);\n  }\n");
  fn_close(&r, "xf_adamw");
  fclose(r.f);
  m->source = arena_strdup(a, buf);
  for (int i = 0; i < m->nnames; i++) m->name_line[i] = line_of(buf, name_off[i]);
  free(buf);

  // launch tables: the class function of each kernel with the kernel's
  // operands; the step program's are the sampling program's on their windows
  for (int p = 0; p <= XF_PROG_STEP; p++) {
    bool step = p == XF_PROG_STEP;
    int prog = step ? PROG_SAMPLE : p;
    if (step && !time_axis) {
      m->launch[p] = NULL, m->nlaunch[p] = 0;
      continue;
    }
    XfLaunch *L = arena_alloc(a, sizeof(XfLaunch) * (size_t)(2 * s->nprog[prog] + 1));
    int nl = 0;
    for (int i = 0; i < s->nprog[prog]; i++) {
      int ki = s->prog[prog][i], c = s->kernels[ki].cls;
      const Kernel *k = &s->kernels[ki];
      const Node *n = &g->nodes[k->node];
      LWindow w = step ? lower_window(s, time_axis, k) : (LWindow){LW_FULL, {1, 0, 0}, {1, 0, 0}};
      XfSym wstride = {w.stride.coef, w.stride.pb, w.stride.pt}, wext = {w.extent.coef, w.extent.pb, w.extent.pt};
      int slots[XF_NSLOTS];
      for (int j = 0; j < XF_NSLOTS; j++) slots[j] = -1;
      slots[KS_OUT] = schedule_root(s, k->out);
      if (k->scratch >= 0) slots[KS_SCRATCH] = schedule_root(s, k->scratch);
      for (int j = 0; j < k->nin; j++) slots[KS_IN0 + j] = schedule_root(s, k->in[j]);
      r.k = k;
      const Node *mm = k->fusion == FG_MATMUL_MAP ? &g->nodes[k->matmul] : n->op == OP_MATMUL ? n : NULL;
      XfLaunch rec;
      if (k->fusion == FG_WEIGHT_GRAD) {  // dW [d, c] = x^T dy over all rows
        const Shape *xs = &g->nodes[k->leaf[0]].shape, *ys = &g->nodes[k->leaf[1]].shape;
        XfSym d = sym_of(xs->d[2]), cc = sym_of(ys->d[2]);
        rec = (XfLaunch){.kind = XF_LAUNCH_GEMM, .ta = 1, .tb = 0, .sa = KS_IN0, .sb = KS_IN1, .sc = KS_OUT, .m = d,
                         .n = cc, .k = sym_prod(xs, 0, 2), .lda = d, .ldb = cc, .ldc = cc, .count = sym_c(1), .alpha = 1};
        memcpy(rec.slots, slots, sizeof slots);
        rec.kernel = ki, rec.last = 1;
        L[nl++] = rec;
        continue;
      }
      // the window of a launch whose work items are `per_outer` per outer
      // index of the kernel and `per_row` per position of LW_ROWS
#define WINDOW(rec, per_outer, per_row)                                                         \
  do {                                                                                          \
    if (w.kind == LW_OUTER) (rec).win_stride = sym_mul(wstride, per_outer), (rec).win_extent = wext; \
    if (w.kind == LW_ROWS) (rec).win_stride = (per_row), (rec).win_extent = wext;                 \
  } while (0)
      XfSym rows = sym_c(1);  // FG_MATMUL_MAP: rows of each product
      if (mm) {
        int xs = KS_IN0 + leaf_slot(&r, mm->in[0]), ys = KS_IN0 + leaf_slot(&r, mm->in[1]);
        int rk = mm->shape.rank;
        rows = sym_of(mm->shape.d[rk - 2]);
        if (fn_mm[c] >= 0) {
          rec = (XfLaunch){.kind = XF_LAUNCH_KERNEL, .fn = fn_mm[c], .items = sym_prod(&mm->shape, 0, rk),
                           .per_block = ELEM_THREADS, .threads = ELEM_THREADS};
          WINDOW(rec, sym_mul(rows, sym_of(mm->shape.d[rk - 1])), sym_of(mm->shape.d[rk - 1]));
        } else {
          rec = gemm_record(g, mm, xs, ys, k->tb, w.kind != LW_ROWS);
          if (w.kind == LW_ROWS) rec.win_stride = sym_c(1), rec.win_extent = wext;  // an LW_OUTER GEMM runs whole
        }
        memcpy(rec.slots, slots, sizeof slots);
        rec.kernel = ki, rec.last = n->op == OP_MATMUL;
        L[nl++] = rec;
        if (n->op == OP_MATMUL) continue;
      }
      int md = mode[c];
      rec = (XfLaunch){.kind = XF_LAUNCH_KERNEL, .fn = p == PROG_TRAIN ? fn_train[c] : fn_infer[c],
                       .items = lowered[c] ? litems[c] : sym_prod(&n->shape, 0, n->shape.rank),
                       .threads = threads[c], .shmem = shmem[c], .sync = md != MODE_ELEM};
      rec.per_block = md == MODE_ELEM ? ELEM_THREADS : md == MODE_WARP ? threads[c] / 32 : 1;
      if (lowered[c]) {  // the epilogue of a product works on its rows
        WINDOW(rec, sym_mul(rows, linner[c]), linner[c]);
      } else if (w.kind != LW_FULL) {  // a convolution, a thread per output element
        int rk = n->shape.rank;
        XfSym row = sym_of(n->shape.d[rk - 1]);
        XfSym per = n->conv == CONV_MATRIX ? sym_mul(sym_of(g->nodes[n->in[0]].shape.d[rk - 2]), row) : row;
        WINDOW(rec, per, row);
      }
#undef WINDOW
      memcpy(rec.slots, slots, sizeof slots);
      rec.imm = (uint32_t)kernel_imm(s, k);
      rec.kernel = ki, rec.last = 1;
      L[nl++] = rec;
    }
    m->launch[p] = L, m->nlaunch[p] = nl;
  }
  free(name_off), free(fn_train), free(fn_infer), free(fn_mm), free(mode), free(shmem), free(lowered), free(litems), free(linner), free(threads);
  m->error = r.err;
  return m;
}

int cuda_kernel_at_line(const CudaModule *m, int line) {
  int best = -1;
  for (int i = 0; i < m->nnames; i++)
    if (m->name_line[i] <= line) best = m->name_kernel[i];
  return best;
}
