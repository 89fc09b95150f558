// memplan.c: storage for buffers with known lifetimes, packed into one arena.
//
// Requires: items with a size in bytes and a lifetime [first, last] in a
// common order of kernels (inclusive: a kernel reading one buffer and writing
// another needs both at once).
// Guarantees: offsets such that two items whose lifetimes intersect never
// share a byte; every offset a multiple of 64. Deterministic: the same items
// give the same plan.
//
// Greedy by size over lifetime intervals: items are placed largest first
// (ties: earlier first, then index), each at the lowest offset where it fits
// between the items already placed that are live at the same time. Largest
// first keeps the big activations of one layer in the holes of the previous
// layer's, which is where nearly all the sharing in a training step is.
// The backend-neutral middle of the compiler: xfc prints the plan, the
// runtime computes the same plan for the batch and sequence it opens with.
#include <stdlib.h>

#include "passes.h"

#define ALIGN 64

static const PlanItem *g_items;

static int by_size(const void *pa, const void *pb) {
  const PlanItem *a = &g_items[*(const int *)pa], *b = &g_items[*(const int *)pb];
  if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
  if (a->first != b->first) return a->first < b->first ? -1 : 1;
  return *(const int *)pa - *(const int *)pb;
}

typedef struct {
  int64_t lo, hi;
} Span;

static int by_offset(const void *pa, const void *pb) {
  const Span *a = pa, *b = pb;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

int64_t memplan(const PlanItem *items, int n, int64_t *offsets) {
  int *order = malloc(sizeof(int) * (size_t)(n + 1));
  int *placed = malloc(sizeof(int) * (size_t)(n + 1));
  Span *busy = malloc(sizeof(Span) * (size_t)(n + 1));
  if (!order || !placed || !busy) {
    free(order), free(placed), free(busy);
    return -1;
  }
  int m = 0, np = 0;
  for (int i = 0; i < n; i++) {
    offsets[i] = -1;
    if (items[i].bytes > 0 && items[i].first >= 0) order[m++] = i;
  }
  g_items = items;
  qsort(order, (size_t)m, sizeof *order, by_size);
  int64_t top = 0;
  for (int k = 0; k < m; k++) {
    const PlanItem *it = &items[order[k]];
    int nb = 0;
    for (int j = 0; j < np; j++) {
      const PlanItem *o = &items[placed[j]];
      if (o->first <= it->last && it->first <= o->last)
        busy[nb++] = (Span){offsets[placed[j]], offsets[placed[j]] + o->bytes};
    }
    qsort(busy, (size_t)nb, sizeof *busy, by_offset);
    int64_t at = 0, need = (it->bytes + ALIGN - 1) / ALIGN * ALIGN;
    for (int j = 0; j < nb; j++) {
      if (busy[j].lo >= at + need) break;
      int64_t end = (busy[j].hi + ALIGN - 1) / ALIGN * ALIGN;
      if (end > at) at = end;
    }
    offsets[order[k]] = at;
    placed[np++] = order[k];
    if (at + need > top) top = at + need;
  }
  free(order), free(placed), free(busy);
  return top;
}
