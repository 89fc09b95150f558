// lower_ranges.c: the intervals of a loop description's integers, and
// which of them fit 32 bits (loops.h lkernel_ranges).
//
// Requires: an LKernel whose variables are defined before their uses (the
// single-assignment order of loops.h); 1 <= T <= t_max (ir.h DIM_T).
// Guarantees: LKernel.narrow[v] and LExpr.narrow of every expression of the
// body, its loop bounds and its GEMM calls. An interval is [lo, hi] with
// both ends saturated at +-RNG_BIG ("any value"): B, row0 and pos0 are
// unbounded, a token id loaded is a 32-bit int, an index converted from a
// float (LX_TOI) and a carried integer are unbounded.
#include "loops.h"

#include <stdlib.h>

typedef struct {
  int64_t lo, hi;
} Rng;

static const int64_t RNG_BIG = INT64_C(1) << 62;
static const Rng RNG_ANY = {-(INT64_C(1) << 62), INT64_C(1) << 62};

static int64_t sat(__int128 v) { return v > RNG_BIG ? RNG_BIG : v < -RNG_BIG ? -RNG_BIG : (int64_t)v; }
static Rng rng(__int128 lo, __int128 hi) { return (Rng){sat(lo), sat(hi)}; }
static bool fits(Rng r) { return r.lo >= -LK_NARROW && r.hi <= LK_NARROW; }
static int64_t mag(Rng r) { return llabs(r.lo) > llabs(r.hi) ? llabs(r.lo) : llabs(r.hi); }
static int64_t min2(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max2(int64_t a, int64_t b) { return a > b ? a : b; }

typedef struct {
  LKernel *lk;
  int64_t t_max;
  Rng *var;  // [nvars]
} Ranges;

// The interval of x (integer kinds; others [0, 1] or any, unused); marks x
// and its subexpressions.
static Rng range_of(Ranges *R, LExpr *x) {
  if (!x) return RNG_ANY;
  Rng k[3] = {RNG_ANY, RNG_ANY, RNG_ANY}, r = RNG_ANY;  // the operands'
  bool kids = true;  // every integer operand narrow
  for (int i = 0; i < 3; i++) {
    if (!x->a[i]) continue;
    k[i] = range_of(R, x->a[i]);
    if (x->a[i]->type == LT_I64 && !x->a[i]->narrow) kids = false;
  }
  Rng a = k[0], b = k[1];
  switch (x->kind) {
  case LX_INT: r = (Rng){x->ival, x->ival}; break;
  case LX_DIM: r = x->ival ? (Rng){1, R->t_max} : (Rng){1, RNG_BIG}; break;
  case LX_VAR: r = R->var[x->var]; break;
  case LX_WIN: r = (Rng){0, R->t_max}; break;
  case LX_LOAD: r = x->type == LT_I64 ? (Rng){INT32_MIN, INT32_MAX} : RNG_ANY; break;
  case LX_ADD: r = rng((__int128)a.lo + b.lo, (__int128)a.hi + b.hi); break;
  case LX_SUB: r = rng((__int128)a.lo - b.hi, (__int128)a.hi - b.lo); break;
  case LX_MUL: {
    __int128 p[4] = {(__int128)a.lo * b.lo, (__int128)a.lo * b.hi, (__int128)a.hi * b.lo, (__int128)a.hi * b.hi};
    __int128 lo = p[0], hi = p[0];
    for (int i = 1; i < 4; i++) lo = p[i] < lo ? p[i] : lo, hi = p[i] > hi ? p[i] : hi;
    r = rng(lo, hi);
    break;
  }
  case LX_DIV:  // truncating; |a / b| <= |a| for any b != 0
    if (b.lo > 0) {
      int64_t q[4] = {a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi};
      r = (Rng){min2(min2(q[0], q[1]), min2(q[2], q[3])), max2(max2(q[0], q[1]), max2(q[2], q[3]))};
    } else {
      r = (Rng){-mag(a), mag(a)};
    }
    break;
  case LX_REM: {  // the sign of a, |a % b| < |b| and <= |a|
    int64_t m = max2(min2(mag(a), mag(b) - 1), 0);
    r = (Rng){a.lo >= 0 ? 0 : -m, a.hi <= 0 ? 0 : m};
    break;
  }
  case LX_NEG: r = (Rng){-a.hi, -a.lo}; break;
  case LX_MAX: r = (Rng){max2(a.lo, b.lo), max2(a.hi, b.hi)}; break;
  case LX_SELECT: r = (Rng){min2(b.lo, k[2].lo), max2(b.hi, k[2].hi)}; break;
  case LX_LT: case LX_GT: case LX_GE: case LX_EQ: case LX_AND: r = (Rng){0, 1}; break;
  default: break;  // floats, LX_TOI, row0, pos0: any
  }
  x->narrow = x->type == LT_I64 && kids && fits(r);
  if (x->kind == LX_VAR) x->narrow = R->lk->narrow[x->var];  // as the variable is declared
  return r;
}

static void define(Ranges *R, int v, Rng r) {
  R->var[v] = r;
  R->lk->narrow[v] = R->lk->types[v] == LT_I64 && fits(r) && v != 0;
}

// v in [lo, hi): [lo.lo, hi.hi - 1] (empty ranges: lo.lo).
static void define_loop(Ranges *R, int v, LExpr *lo, LExpr *hi) {
  Rng l = range_of(R, lo), h = range_of(R, hi);
  define(R, v, (Rng){l.lo, max2(l.lo, h.hi - 1)});
  // a loop index is narrow only with narrow bounds: its end is declared beside it
  if (!lo->narrow || !hi->narrow) R->lk->narrow[v] = false;
}

static void ranges_block(Ranges *R, LStmt *st) {
  for (; st; st = st->next) {
    switch (st->kind) {
    case LS_LET: define(R, st->var, range_of(R, st->val)); break;
    case LS_STORE: range_of(R, st->idx), range_of(R, st->val); break;
    case LS_FOR:
      define_loop(R, st->var, st->lo, st->hi);
      ranges_block(R, st->body);
      break;
    case LS_REDUCE:
      define_loop(R, st->ivar, st->lo, st->hi);
      range_of(R, st->val);
      define(R, st->var, RNG_ANY);
      break;
    case LS_CARRY:
      for (int c = 0; c < st->ncarry; c++) range_of(R, st->init[c]), define(R, st->carry[c], RNG_ANY);
      define_loop(R, st->var, st->lo, st->hi);
      ranges_block(R, st->body);
      for (int c = 0; c < st->ncarry; c++) range_of(R, st->step[c]);
      break;
    case LS_GEMM: {
      LCall *c = st->call;
      range_of(R, c->m), range_of(R, c->n), range_of(R, c->k);
      for (int x = 0; x < 3; x++) range_of(R, c->at[x]), range_of(R, c->ld[x]);
      break;
    }
    case LS_COUNT: break;
    }
  }
}

void lkernel_ranges(Arena *a, LKernel *lk, int64_t t_max) {
  Ranges R = {.lk = lk, .t_max = t_max > 0 ? t_max : RNG_BIG};
  R.var = arena_alloc(a, sizeof *R.var * ((size_t)lk->nvars + 1));
  lk->narrow = arena_alloc(a, sizeof *lk->narrow * ((size_t)lk->nvars + 1));
  for (int v = 0; v < lk->nvars; v++) R.var[v] = RNG_ANY;
  Rng o = range_of(&R, lk->outer);
  define(&R, 0, (Rng){0, max2(0, o.hi - 1)});
  if (lk->inner) range_of(&R, lk->inner);
  ranges_block(&R, lk->body);
}
