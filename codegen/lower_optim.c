// lower_optim.c: the optimizer's update as a loop description, the one
// definition of AdamW that both backends print (llvm.c as XfModel.adamw,
// cuda.c inside the device's segment loop, XfCuda.adamw).
//
// AdamW as torch.optim.AdamW (Loshchilov and Hutter), for element o of one
// parameter at step t, every operation in float32 in this order:
//   g' = g o scale                                (the clipping factor)
//   m  = b1 m + (1 - b1) g'
//   v  = b2 v + ((1 - b2) g') g'
//   w  = w decay - lr (m / bc1) / (sqrt(v) / sqrt_bc2 + eps)
// with bc1 = 1 - b1^t, sqrt_bc2 = sqrt(1 - b2^t), decay = 1 - lr wd (1 for a
// parameter without decay), all from the slot XF_ADAM_SLOT_STATE
// (runtime/xf_abi.h): the runtime computes them once per step. With twin,
// also h = bf16(w) (round to nearest even) into slot XF_ADAM_SLOT_H: the
// parameter's bf16 twin that a device's products read (storage.c).
#include "lower_impl.h"

#include "../runtime/xf_abi.h"

_Static_assert((int)XF_ADAM_NSLOTS <= (int)KS_IMM, "AdamW's slots are operand slots of a kernel");

// An LK_ELEMENTS kernel: one outer index per element, an inner extent of 1.
LKernel *lower_adamw(Arena *a, bool twin) {
  char err[8] = "";
  Lo L = {.a = a, .tgt = LTARGET_CPU, .err = err, .errlen = sizeof err};
  L.lk = arena_alloc(a, sizeof *L.lk);
  L.lk->name = twin ? "adamw_twin" : "adamw";
  L.lk->slot_bf16[XF_ADAM_SLOT_H] = twin;
  L.lk->shape = LK_ELEMENTS;
  L.tail[0] = &L.lk->body;
  int o = new_var(&L, LT_I64, "o");
  L.lk->outer = xi(&L, 1), L.lk->inner = xi(&L, 1);
  L.lk->nouter = L.lk->ninner = (SymSize){1, 0, 0, 1};
  for_begin(&L, xi(&L, 0), xi(&L, 1), true, "j");
  LExpr *i = xvar(&L, o);
#define ST(k) load(&L, XF_ADAM_SLOT_STATE, xi(&L, k))
  LExpr *b1 = ST(XF_ADAM_B1), *b2 = ST(XF_ADAM_B2);
  int g = let(&L, x2(&L, LX_MUL, load(&L, XF_ADAM_SLOT_G, i), ST(XF_ADAM_SCALE)), "g");
  LExpr *gv = xvar(&L, g);
  int m = let(&L, x2(&L, LX_ADD, x2(&L, LX_MUL, b1, load(&L, XF_ADAM_SLOT_M, i)), x2(&L, LX_MUL, x2(&L, LX_SUB, xf(&L, 1), b1), gv)), "m");
  int v = let(&L, x2(&L, LX_ADD, x2(&L, LX_MUL, b2, load(&L, XF_ADAM_SLOT_V, i)),
                     x2(&L, LX_MUL, x2(&L, LX_MUL, x2(&L, LX_SUB, xf(&L, 1), b2), gv), gv)), "v");
  LExpr *step = x2(&L, LX_DIV, x2(&L, LX_MUL, ST(XF_ADAM_LR), x2(&L, LX_DIV, xvar(&L, m), ST(XF_ADAM_BC1))),
                   x2(&L, LX_ADD, x2(&L, LX_DIV, x1(&L, LX_SQRT, xvar(&L, v)), ST(XF_ADAM_SQRT_BC2)), ST(XF_ADAM_EPS)));
  int w = let(&L, x2(&L, LX_SUB, x2(&L, LX_MUL, load(&L, XF_ADAM_SLOT_W, i), ST(XF_ADAM_DECAY)), step), "w");
#undef ST
  store(&L, XF_ADAM_SLOT_M, i, xvar(&L, m));
  store(&L, XF_ADAM_SLOT_V, i, xvar(&L, v));
  store(&L, XF_ADAM_SLOT_W, i, xvar(&L, w));
  if (twin) store(&L, XF_ADAM_SLOT_H, i, xvar(&L, w));
  for_end(&L);
  return L.lk;
}
