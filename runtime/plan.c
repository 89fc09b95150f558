// plan.c: storage for buffers with known lifetimes, packed into one arena (plan.h).
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
// Above SWEEP_ABOVE items (a graph of tens of thousands of buffers, where the
// pairwise greedy would be quadratic) a sweep in order of first use takes
// over: dead items return their block to a free list (coalesced), a new item
// takes the best-fitting free block or extends the top.
// The backend-neutral middle of the compiler: xfc prints the plan, the
// runtime computes the same plan for the batch and sequence it opens with.
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

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

#define SWEEP_ABOVE 20000

static int by_first(const void *pa, const void *pb) {
  const PlanItem *a = &g_items[*(const int *)pa], *b = &g_items[*(const int *)pb];
  if (a->first != b->first) return a->first < b->first ? -1 : 1;
  return *(const int *)pa - *(const int *)pb;
}

// Frees [lo, hi) into the sorted, coalesced free list.
static void release(Span *free_, int *nf, int64_t lo, int64_t hi) {
  int i = 0;
  while (i < *nf && free_[i].lo < lo) i++;
  memmove(free_ + i + 1, free_ + i, sizeof *free_ * (size_t)(*nf - i));
  free_[i] = (Span){lo, hi};
  (*nf)++;
  if (i + 1 < *nf && free_[i].hi == free_[i + 1].lo) {
    free_[i].hi = free_[i + 1].hi;
    memmove(free_ + i + 1, free_ + i + 2, sizeof *free_ * (size_t)(*nf - i - 2));
    (*nf)--;
  }
  if (i > 0 && free_[i - 1].hi == free_[i].lo) {
    free_[i - 1].hi = free_[i].hi;
    memmove(free_ + i, free_ + i + 1, sizeof *free_ * (size_t)(*nf - i - 1));
    (*nf)--;
  }
}

// A binary min-heap of item indices by `last`, ties by index.
static bool heap_less(const PlanItem *it, int a, int b) {
  return it[a].last != it[b].last ? it[a].last < it[b].last : a < b;
}
static void heap_push(const PlanItem *it, int *h, int *n, int x) {
  int i = (*n)++;
  h[i] = x;
  while (i > 0 && heap_less(it, h[i], h[(i - 1) / 2])) {
    int p = (i - 1) / 2, t = h[p];
    h[p] = h[i], h[i] = t, i = p;
  }
}
static void heap_pop(const PlanItem *it, int *h, int *n) {
  h[0] = h[--(*n)];
  for (int i = 0;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && heap_less(it, h[l], h[m])) m = l;
    if (r < *n && heap_less(it, h[r], h[m])) m = r;
    if (m == i) break;
    int t = h[m];
    h[m] = h[i], h[i] = t, i = m;
  }
}

static int64_t sweep(const PlanItem *items, int *order, int m, int64_t *offsets, Span *free_) {
  qsort(order, (size_t)m, sizeof *order, by_first);
  int *live = malloc(sizeof(int) * (size_t)(m + 1));
  int nlive = 0, nf = 0;
  int64_t top = 0;
  for (int k = 0; k < m; k++) {
    const PlanItem *it = &items[order[k]];
    while (nlive > 0 && items[live[0]].last < it->first) {  // free what died before this item starts
      int d = live[0];
      release(free_, &nf, offsets[d], offsets[d] + (items[d].bytes + ALIGN - 1) / ALIGN * ALIGN);
      heap_pop(items, live, &nlive);
    }
    int64_t need = (it->bytes + ALIGN - 1) / ALIGN * ALIGN;
    int best = -1;
    for (int j = 0; j < nf; j++)
      if (free_[j].hi - free_[j].lo >= need && (best < 0 || free_[j].hi - free_[j].lo < free_[best].hi - free_[best].lo))
        best = j;
    if (best >= 0) {
      offsets[order[k]] = free_[best].lo;
      free_[best].lo += need;
      if (free_[best].lo == free_[best].hi) memmove(free_ + best, free_ + best + 1, sizeof *free_ * (size_t)(nf-- - best - 1));
    } else if (nf > 0 && free_[nf - 1].hi == top) {  // extend the free block at the top
      offsets[order[k]] = free_[nf - 1].lo;
      top = free_[nf - 1].lo + need;
      nf--;
    } else {
      offsets[order[k]] = top;
      top += need;
    }
    heap_push(items, live, &nlive, order[k]);
  }
  free(live);
  return top;
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
  if (m > SWEEP_ABOVE) {
    int64_t top = sweep(items, order, m, offsets, busy);
    free(order), free(placed), free(busy);
    return top;
  }
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

int64_t memplan_after_caches(const PlanItem *items, const bool *cache, int n, int64_t *offsets, int64_t *cached) {
  PlanItem *rest = calloc((size_t)n + 1, sizeof *rest);
  if (!rest) return -1;
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    rest[i] = cache[i] ? (PlanItem){.bytes = 0, .first = -1, .last = -1} : items[i];
    if (cache[i]) offsets[i] = at, at += (items[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
  }
  int64_t *wofs = malloc(sizeof *wofs * ((size_t)n + 1));
  int64_t work = wofs ? memplan(rest, n, wofs) : -1;
  for (int i = 0; work >= 0 && i < n; i++)
    if (!cache[i]) offsets[i] = at + (wofs[i] < 0 ? 0 : wofs[i]);  // -1: nothing to place
  free(rest), free(wofs);
  *cached = at;
  return work < 0 ? -1 : at + work;
}
