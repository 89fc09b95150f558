// plan.h: the memory plan (plan.c), the one both xfc (--stats,
// codegen/schedule.c) and the runtime (runtime.c, sampler.c) call: storage
// for buffers of known lifetimes packed into one arena, every block 64-byte
// aligned.
#ifndef XF_PLAN_H
#define XF_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The alignment of every planned block, and of every block the runtime
// places beside the plan (moments, gradient sums, the device's tables).
enum { XF_PLAN_ALIGN = 64 };
static inline int64_t xf_plan_round(int64_t bytes) { return (bytes + XF_PLAN_ALIGN - 1) / XF_PLAN_ALIGN * XF_PLAN_ALIGN; }


typedef struct {
  int64_t bytes;      // 0: not planned
  int first, last;    // lifetime, inclusive, in a common kernel order
} PlanItem;

// Fills offsets[i] (-1 for unplanned items) so that items with intersecting
// lifetimes never overlap; returns the arena's size in bytes (-1: out of memory).
int64_t memplan(const PlanItem *items, int n, int64_t *offsets);
// The step program's storage (codegen/stepmem.c): the items with cache[i]
// each have storage of their own, packed in order from offset 0 (sizes
// rounded up to 64 bytes), kept across runs; the others are planned by
// memplan after them. Fills every offsets[i] and *cached (the caches'
// bytes); returns the total bytes, -1 out of memory. xfc --stats and the
// runtime's sampler both plan with it.
int64_t memplan_after_caches(const PlanItem *items, const bool *cache, int n, int64_t *offsets, int64_t *cached);

#endif
