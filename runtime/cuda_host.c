// cuda_host.c: the host side of the CUDA target: walks a program's launch
// table (xf_abi.h: XfLaunch) on an XfGpu, the device or its emulation.
//
// Requires: m->cuda loaded into g (g->load), dev[] the device storage of
// every buffer at the B, T of the call (planned at open for the largest).
// Guarantees: launches in table order on one stream; a kernel's grid covers
// its work items (capped: the kernels loop grid-stride, so the cap changes
// no value); GEMMs as the records say; nothing allocated.
#include <stdio.h>

#include "gpu.h"

static int64_t sym(XfSym z, int64_t B, int64_t T) {
  int64_t v = z.coef;
  for (int i = 0; i < z.pb; i++) v *= B;
  for (int i = 0; i < z.pt; i++) v *= T;
  return z.tdiv > 1 ? v / z.tdiv : v;
}

enum { MAX_BLOCKS = 1 << 16 };

int64_t xf_cuda_gemm_operands(const XfCuda *c, int64_t B, int64_t T) {
  int64_t most = 0;
  for (int p = 0; p <= XF_PROG_STEP; p++)
    for (int i = 0; i < c->nlaunch[p]; i++) {
      const XfLaunch *L = &c->launch[p][i];
      if (L->kind != XF_LAUNCH_GEMM) continue;
      int64_t k = sym(L->k, B, T), n = sym(L->m, B, T) * k + k * sym(L->n, B, T);
      if (L->types & XF_GEMM_C_BF16) n += sym(L->m, B, T) * sym(L->n, B, T);
      if (n > most) most = n;
    }
  return most;
}

bool xf_cuda_program(XfGpu *g, const XfModel *m, int prog, void *const *dev, int64_t B, int64_t T, int64_t w0, int64_t w1, int64_t wk, int64_t pos0,
                     uint64_t seed, const XfStepVars *vars, void (*done)(void *ctx, int32_t kernel), void *ctx) {
  const XfCuda *c = m->cuda;
  for (int i = 0; i < c->nlaunch[prog]; i++) {
    const XfLaunch *L = &c->launch[prog][i];
    bool win = prog == XF_PROG_STEP && L->win_extent.coef > 0;
    void *slot[XF_NSLOTS];
    for (int j = 0; j < XF_NSLOTS; j++) slot[j] = L->slots[j] >= 0 ? dev[L->slots[j]] : NULL;
    if (L->kind == XF_LAUNCH_GEMM) {
      int64_t count = sym(L->count, B, T), mm = sym(L->m, B, T), n = sym(L->n, B, T), k = sym(L->k, B, T);
      int64_t lda = sym(L->lda, B, T), ldc = sym(L->ldc, B, T);
      const char *A = slot[L->sa];
      char *C = slot[L->sc];
      int64_t ea = L->types & XF_GEMM_A_BF16 ? 2 : 4, ec = L->types & XF_GEMM_C_BF16 ? 2 : 4;
      if (win) {  // rows [w0, w1) of each product (A not transposed: its rows are C's)
        if (L->ta || mm != sym(L->win_extent, B, T) || w0 < 0 || w1 > mm) {
          snprintf(g->err, sizeof g->err, "internal error: launch %d of the step program: a window of %lld..%lld over %lld rows",
                   i, (long long)w0, (long long)w1, (long long)mm);
          return false;
        }
        A += w0 * lda * ea, C += w0 * ldc * ec, mm = w1 - w0;
      }
      if (count > 0 && mm > 0 && n > 0 &&
          !g->gemm(g, L->ta, L->tb, mm, n, k, L->alpha, A, lda, sym(L->stride_a, B, T), slot[L->sb], sym(L->ldb, B, T),
                   sym(L->stride_b, B, T), L->beta, C, ldc, sym(L->stride_c, B, T), count, L->types))
        return false;
    } else {
      XfKernelArgs a = {.B = B, .T = T, .n = sym(L->items, B, T), .seed = seed, .imm = L->imm,
                        .vars = (void *)vars,
                        .w0 = prog == XF_PROG_STEP ? w0 : 0, .w1 = prog == XF_PROG_STEP ? w1 : T,
                        .wk = prog == XF_PROG_STEP ? wk : 0, .p0 = prog == XF_PROG_STEP ? pos0 : 0,
                        .mma = xf_team_mma(c->precision)};
      if (win) {  // of every block of extent * stride items, positions [w0, w1)
        int64_t stride = sym(L->win_stride, B, T), block = sym(L->win_extent, B, T) * stride;
        a.wspan = (w1 - w0) * stride, a.wblock = block, a.wofs = w0 * stride;
        a.n = block > 0 ? a.n / block * a.wspan : 0;
      }
      for (int j = 0; j < XF_NSLOTS; j++) a.slot[j] = slot[j];
      if (a.n > 0) {
        int64_t blocks = (a.n + L->per_block - 1) / L->per_block;
        if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
        if (!g->launch(g, L->fn, (unsigned)blocks, (unsigned)L->threads, (unsigned)L->shmem, L->sync != 0, &a)) return false;
      }
    }
    if (L->last && done) done(ctx, L->kernel);
  }
  return true;
}

// One optimizer kernel over the segment table: a block of XF_OPT_THREADS per
// chunk (grid-stride past MAX_BLOCKS), or one block (single).
static bool optimizer_launch(XfGpu *g, int fn, const XfCudaOptimizer *o, bool single, bool sync) {
  XfKernelArgs a = {.n = o->nchunks, .imm = (uint32_t)o->nsegs, .vars = (void *)o->vars};
  a.slot[0] = (void *)o->segs, a.slot[1] = o->hyper, a.slot[2] = o->partials;
  int64_t blocks = single ? 1 : o->nchunks < MAX_BLOCKS ? o->nchunks : MAX_BLOCKS;
  return g->launch(g, fn, (unsigned)blocks, XF_OPT_THREADS, 0, sync, &a);
}

bool xf_cuda_accumulate(XfGpu *g, const XfCuda *c, const XfCudaOptimizer *o) {
  return !o->nsegs || optimizer_launch(g, c->grad_accum, o, false, false);
}

bool xf_cuda_update(XfGpu *g, const XfCuda *c, const XfCudaOptimizer *o) {
  return !o->nsegs || (optimizer_launch(g, c->grad_norm, o, false, true) && optimizer_launch(g, c->grad_norm_sum, o, true, true) &&
                       optimizer_launch(g, c->adamw, o, false, false));
}
