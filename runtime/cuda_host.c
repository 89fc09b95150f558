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
  return v;
}

enum { MAX_BLOCKS = 1 << 16 };

bool xf_cuda_program(XfGpu *g, const XfModel *m, int prog, void *const *dev, int64_t B, int64_t T, int64_t row0, uint64_t seed,
                     uint32_t step, void (*done)(void *ctx, int32_t kernel), void *ctx) {
  const XfCuda *c = m->cuda;
  for (int i = 0; i < c->nlaunch[prog]; i++) {
    const XfLaunch *L = &c->launch[prog][i];
    void *slot[XF_NSLOTS];
    for (int j = 0; j < XF_NSLOTS; j++) slot[j] = L->slots[j] >= 0 ? dev[L->slots[j]] : NULL;
    if (L->kind == XF_LAUNCH_GEMM) {
      int64_t count = sym(L->count, B, T), mm = sym(L->m, B, T), n = sym(L->n, B, T), k = sym(L->k, B, T);
      if (count > 0 && mm > 0 && n > 0 &&
          !g->gemm(g, L->ta, L->tb, mm, n, k, L->alpha, slot[L->sa], sym(L->lda, B, T), sym(L->stride_a, B, T), slot[L->sb],
                   sym(L->ldb, B, T), sym(L->stride_b, B, T), L->beta, slot[L->sc], sym(L->ldc, B, T),
                   sym(L->stride_c, B, T), count))
        return false;
    } else {
      XfKernelArgs a = {.B = B, .T = T, .n = sym(L->items, B, T), .row0 = row0, .seed = seed, .imm = L->imm, .step = step};
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
