// cuda_emu.h: runs generated CUDA C on the CPU, for machines without a GPU.
//
// runtime/gpu_emu.c compiles the very source NVRTC compiles, unchanged, with
//   c++ -std=c++17 -DXF_EMULATION -include runtime/cuda_emu.h
// This header supplies what the source expects of CUDA: the qualifiers, the
// thread and block indices, shared memory, barriers, warp shuffles, atomics
// and the device math functions, and, for every kernel, the entry
//   extern "C" void <kernel>_emu(const void *args, unsigned grid, unsigned block, unsigned shmem, int fibers)
// (XF_EMU_ENTRY) that runs the kernel over the whole grid.
//
// Execution model. Blocks run one after another on the calling OS thread, so
// `static` storage is the block's shared memory (__shared__ is `static`) and
// one buffer is its dynamic shared memory (XF_DYN_SHARED). Inside a block:
//   - fibers == 0: the threads run one after another to completion. For
//     kernels that never synchronise; a barrier or shuffle in this mode stops
//     the process with a message naming the kernel.
//   - fibers == 1: every GPU thread is a fiber with its own stack. A barrier
//     (__syncthreads, __syncwarp) switches to the next fiber; the scheduler
//     resumes the fibers round-robin, so every thread of the block reaches a
//     barrier before any thread passes it. A warp shuffle is an exchange
//     between two barriers: each thread publishes its value, and reads its
//     source lane's (within its warp of 32) after the first barrier.
// Contract with the generated code (codegen/cuda.c keeps it): barriers and
// shuffles are reached by every thread of the block the same number of times
// (loops around them have block-uniform trip counts). Threads that have
// returned count as arrived, as on current GPUs.
//
// The fiber switch is a few lines of assembly on x86-64 (callee-saved
// registers and the stack pointer; glibc's swapcontext makes a system call
// per switch) and ucontext elsewhere.
#ifndef XF_CUDA_EMU_H
#define XF_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifndef __x86_64__
#include <ucontext.h>
#endif

// ---- qualifiers ------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static  // one block at a time: static storage is the block's
#define XF_DYN_SHARED(type, name) type *name = (type *)xf_emu::dyn_shared

// ---- indices ---------------------------------------------------------------------------

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
};
static uint3 threadIdx, blockIdx;  // set by the scheduler before it resumes a thread
static dim3 blockDim, gridDim;
static const int warpSize = 32;

namespace xf_emu {

enum { MAX_THREADS = 1024, STACK_BYTES = 256 * 1024 };

static char *dyn_shared;           // the launch's dynamic shared memory
static size_t dyn_bytes;
static const char *kernel_name;    // the kernel running (for messages)
static bool fibers_on;             // whether barriers are possible
static unsigned cur;               // the running thread
static unsigned char done[MAX_THREADS];
static uint64_t exchange[MAX_THREADS];  // shuffle values, one per thread
static float mma_in[MAX_THREADS][6];     // xf_emu_mma: each lane's fragments of A (4) and B (2)

// ---- fibers ------------------------------------------------------------------------------

#ifdef __x86_64__
// xf_emu_switch(save, to): saves the callee-saved registers on the current
// stack, stores the stack pointer in *save, loads `to` and pops the other
// fiber's registers; `ret` resumes it. A new fiber's stack holds six zero
// registers and the address of fiber_main.
extern "C" void xf_emu_switch(void **save, void *to);
__asm__(".text\n"
        ".globl xf_emu_switch\n"
        ".hidden xf_emu_switch\n"
        ".type xf_emu_switch,@function\n"
        "xf_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size xf_emu_switch, .-xf_emu_switch\n");
static void *sched_sp;
static void *fiber_sp[MAX_THREADS];
#else
static ucontext_t sched_ctx, fiber_ctx[MAX_THREADS];
#endif

static char *stacks;  // MAX_THREADS stacks, mapped once, untouched pages cost nothing
static void (*body)(void *);
static void *body_ctx;

static void to_scheduler() {
#ifdef __x86_64__
  xf_emu_switch(&fiber_sp[cur], sched_sp);
#else
  swapcontext(&fiber_ctx[cur], &sched_ctx);
#endif
}

static void fiber_main() {
  body(body_ctx);
  done[cur] = 1;
  to_scheduler();  // never resumed
  abort();
}

static void set_thread(unsigned t) {
  cur = t;
  threadIdx.x = t, threadIdx.y = 0, threadIdx.z = 0;
}

static void run_block(unsigned nthreads) {
  if (!fibers_on) {
    for (unsigned t = 0; t < nthreads; t++) set_thread(t), body(body_ctx);
    return;
  }
  if (!stacks) {
    void *p = mmap(NULL, (size_t)MAX_THREADS * STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      fprintf(stderr, "cuda-emulation: cannot map %d fiber stacks\n", MAX_THREADS);
      abort();
    }
    stacks = (char *)p;
  }
  for (unsigned t = 0; t < nthreads; t++) {
    done[t] = 0;
    char *top = stacks + (size_t)(t + 1) * STACK_BYTES;
#ifdef __x86_64__
    void **sp = (void **)top;
    *--sp = NULL;                              // fiber_main's return address: never used
    *--sp = (void *)fiber_main;                // popped by `ret`, 16-byte aligned slot
    for (int r = 0; r < 6; r++) *--sp = NULL;  // rbp rbx r12 r13 r14 r15
    fiber_sp[t] = sp;
#else
    getcontext(&fiber_ctx[t]);
    fiber_ctx[t].uc_stack.ss_sp = top - STACK_BYTES;
    fiber_ctx[t].uc_stack.ss_size = STACK_BYTES;
    fiber_ctx[t].uc_link = NULL;
    makecontext(&fiber_ctx[t], fiber_main, 0);
#endif
  }
  for (unsigned left = nthreads; left > 0;)
    for (unsigned t = 0; t < nthreads; t++) {
      if (done[t]) continue;
      set_thread(t);
#ifdef __x86_64__
      xf_emu_switch(&sched_sp, fiber_sp[t]);
#else
      swapcontext(&sched_ctx, &fiber_ctx[t]);
#endif
      if (done[t]) left--;
    }
}

static void barrier() {
  if (!fibers_on) {
    fprintf(stderr, "cuda-emulation: kernel %s synchronises its block but was launched without fibers\n", kernel_name);
    abort();
  }
  to_scheduler();
}

template <class T> static T shuffle(T v, unsigned src) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a wide type");
  memcpy(&exchange[cur], &v, sizeof v);
  barrier();
  unsigned base = cur & ~31u;
  T r = v;
  if (src < 32 && base + src < blockDim.x) memcpy(&r, &exchange[base + src], sizeof r);
  barrier();
  return r;
}

template <class A> struct Closure {
  void (*k)(A);
  A a;
};
template <class A> static void invoke(void *p) {
  Closure<A> *c = (Closure<A> *)p;
  c->k(c->a);
}

// The grid, block after block.
template <class A> static void run(void (*k)(A), const char *name, const void *args, unsigned grid, unsigned block,
                                   unsigned shmem, int fibers) {
  if (block == 0 || block > MAX_THREADS) {
    fprintf(stderr, "cuda-emulation: kernel %s launched with %u threads per block (1..%d)\n", name, block, MAX_THREADS);
    abort();
  }
  Closure<A> c;
  c.k = k;
  memcpy((void *)&c.a, args, sizeof c.a);
  if (shmem > dyn_bytes) {
    free(dyn_shared);
    dyn_shared = (char *)aligned_alloc(16, (shmem + 15) & ~(size_t)15);
    if (!dyn_shared) abort();
    dyn_bytes = shmem;
  }
  kernel_name = name, fibers_on = fibers != 0;
  body = invoke<A>, body_ctx = &c;
  gridDim.x = grid, gridDim.y = gridDim.z = 1;
  blockDim.x = block, blockDim.y = blockDim.z = 1;
  for (unsigned b = 0; b < grid; b++) {
    blockIdx.x = b, blockIdx.y = blockIdx.z = 0;
    run_block(block);
  }
}

// Unloading the kernels' library returns the shared memory and the stacks.
__attribute__((destructor)) static void release() {
  free(dyn_shared);
  if (stacks) munmap(stacks, (size_t)MAX_THREADS * STACK_BYTES);
}

}  // namespace xf_emu

#define XF_EMU_ENTRY(name)                                                                                 \
  extern "C" void name##_emu(const void *args, unsigned grid, unsigned block, unsigned shmem, int fibers) { \
    xf_emu::run(name, #name, args, grid, block, shmem, fibers);                                            \
  }

// ---- barriers, shuffles, atomics -------------------------------------------------------------

static inline void __syncthreads() { xf_emu::barrier(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  xf_emu::barrier();
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  (void)mask;
  unsigned lane = xf_emu::cur & 31u, seg = lane & ~(unsigned)(width - 1);
  return xf_emu::shuffle(v, seg + ((unsigned)src & (unsigned)(width - 1)));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  (void)mask;
  unsigned lane = xf_emu::cur & 31u, src = lane ^ (unsigned)lane_mask;
  if ((src & ~(unsigned)(width - 1)) != (lane & ~(unsigned)(width - 1))) src = lane;
  return xf_emu::shuffle(v, src);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  unsigned lane = xf_emu::cur & 31u, src = lane + delta;
  if ((src & ~(unsigned)(width - 1)) != (lane & ~(unsigned)(width - 1))) src = lane;  // beyond the segment: own value
  return xf_emu::shuffle(v, src);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  unsigned lane = xf_emu::cur & 31u, seg = lane & ~(unsigned)(width - 1);
  unsigned src = lane - delta < lane && lane - delta >= seg ? lane - delta : lane;
  return xf_emu::shuffle(v, src);
}
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 and
// m16n8k16.row.col.f32.bf16.bf16.f32 over the warp: each lane publishes its
// fragments, then (after the barrier) computes its four entries of D += A B
// from the whole warp's, in order of k, summing in float32 (PTX ISA
// layouts: lane l, g = l / 4, t = l % 4, holds D (g + 8 (r / 2), 2 t + r % 2);
// tf32: A (g + 8 (r % 2), t + 4 (r / 2)) and B (t + 4 r, g), one element per
// register; bf16: A (g + 8 (r % 2), 2 t + 8 (r / 2) + h) and B (2 t + 8 r + h,
// g), two per register, h = 0 in its low half, each widened exactly).
// cvt.rna.tf32.f32 keeps 10 bits of mantissa, rounding to nearest with ties
// away from zero.
static inline unsigned xf_tf32(float x) {
  unsigned u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  return u;
}
// Element q of a published register: the float itself (tf32), or its half
// q % 2 widened (bf16).
static inline float xf_emu_elem(const float *reg, unsigned q, bool bf16) {
  if (!bf16) return *reg;
  unsigned u;
  memcpy(&u, reg, sizeof u);
  u = (q & 1 ? u >> 16 : u & 0xffffu) << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
static inline void xf_emu_mma(float d[4], const unsigned a[4], const unsigned b[2], bool bf16) {
  unsigned me = xf_emu::cur, base = me & ~31u, l = me & 31u, k = bf16 ? 16 : 8;
  for (int r = 0; r < 4; r++) memcpy(&xf_emu::mma_in[me][r], &a[r], sizeof a[r]);
  for (int r = 0; r < 2; r++) memcpy(&xf_emu::mma_in[me][4 + r], &b[r], sizeof b[r]);
  xf_emu::barrier();
  for (int r = 0; r < 4; r++) {
    unsigned row = (l >> 2) + 8 * (r >> 1), col = 2 * (l & 3) + (r & 1);
    float s = d[r];
    for (unsigned q = 0; q < k; q++) {
      // (row, q) of A and (q, col) of B: lane 4 (row % 8) + t and 4 col + t, registers
      // row / 8 + 2 i and 4 + i, t = q % 4, i = q / 4 (tf32); t = (q % 8) / 2, i = q / 8 (bf16)
      unsigned t = bf16 ? (q & 7) >> 1 : q & 3, i = bf16 ? q >> 3 : q >> 2;
      float x = xf_emu_elem(&xf_emu::mma_in[base + 4 * (row & 7) + t][(row >> 3) + 2 * i], q, bf16);
      float y = xf_emu_elem(&xf_emu::mma_in[base + 4 * col + t][4 + i], q, bf16);
      s += x * y;
    }
    d[r] = s;
  }
  xf_emu::barrier();
}
// ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 over the warp: each lane
// publishes its row address (lanes 8 r .. 8 r + 7 the rows of matrix r), then
// (after the barrier) lane l = 4 g + t takes element g of rows 2 t and 2 t + 1
// of each matrix r into register r, the first in its low half (PTX ISA).
static inline void xf_ldsm_t2(unsigned b[2], const unsigned short *row) {
  unsigned me = xf_emu::cur, base = me & ~31u, l = me & 31u;
  memcpy(&xf_emu::exchange[me], &row, sizeof row);
  xf_emu::barrier();
  for (int r = 0; r < 2; r++) {
    unsigned v = 0;
    for (int h = 0; h < 2; h++) {
      const unsigned short *p;
      memcpy(&p, &xf_emu::exchange[base + 8 * r + 2 * (l & 3) + h], sizeof p);
      v |= (unsigned)p[l >> 2] << (16 * h);
    }
    b[r] = v;
  }
  xf_emu::barrier();
}
static inline void xf_mma_tf32(float d[4], const unsigned a[4], const unsigned b[2]) { xf_emu_mma(d, a, b, false); }
static inline void xf_mma_bf16(float d[4], const unsigned a[4], const unsigned b[2]) { xf_emu_mma(d, a, b, true); }

// One OS thread runs every GPU thread, so read-modify-write is atomic.
template <class T> static inline T atomicAdd(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
static inline int atomicMax(int *p, int v) {
  int old = *p;
  if (v > old) *p = v;
  return old;
}

// ---- device functions ------------------------------------------------------------------------

static inline int __float_as_int(float x) {
  int i;
  memcpy(&i, &x, sizeof i);
  return i;
}
static inline float __int_as_float(int i) {
  float x;
  memcpy(&x, &i, sizeof x);
  return x;
}
static inline unsigned __float_as_uint(float x) {
  unsigned i;
  memcpy(&i, &x, sizeof i);
  return i;
}
static inline float __uint_as_float(unsigned i) {
  float x;
  memcpy(&x, &i, sizeof x);
  return x;
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
static inline float __fdividef(float a, float b) { return a / b; }
#define __expf expf  // glibc declares __expf itself
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

#endif
