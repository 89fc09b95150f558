// test_memplan.c: the memory plan on random lifetimes, through both of its
// strategies (greedy by size, and the sweep above 20000 items): no two items
// whose lifetimes intersect share a byte, offsets are aligned, the arena
// covers every item, the plan is deterministic, and sharing happens (the
// arena is well below the sum of the sizes).
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../check.h"
#include "passes.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

static void check_plan(int n, int span) {
  PlanItem *it = calloc((size_t)n, sizeof *it);
  int64_t *off = calloc((size_t)n, sizeof *off), *off2 = calloc((size_t)n, sizeof *off2), sum = 0;
  for (int i = 0; i < n; i++) {
    int first = (int)(next() % (uint64_t)n), len = (int)(next() % (uint64_t)span);
    it[i] = (PlanItem){(int64_t)(next() % 5000) + (i % 7 == 0 ? 0 : 1), first, first + len};
    if (i % 11 == 0) it[i].first = it[i].last = -1;  // untouched
    if (it[i].bytes && it[i].first >= 0) sum += it[i].bytes;
  }
  int64_t top = memplan(it, n, off), top2 = memplan(it, n, off2);
  CHECK(top == top2);
  int bad = 0, unplaced = 0;
  for (int i = 0; i < n; i++) {
    bool planned = it[i].bytes > 0 && it[i].first >= 0;
    if (off[i] != off2[i]) bad++;
    if (planned != (off[i] >= 0)) unplaced++;
    if (!planned) continue;
    if (off[i] % 64 || off[i] + it[i].bytes > top) bad++;
  }
  // pairwise check on a window of items sorted by first use (n^2 on the small case only)
  int limit = n < 3000 ? n : 3000;
  for (int i = 0; i < limit; i++)
    for (int j = i + 1; j < limit; j++) {
      if (off[i] < 0 || off[j] < 0) continue;
      bool live = it[i].first <= it[j].last && it[j].first <= it[i].last;
      bool overlap = off[i] < off[j] + it[j].bytes && off[j] < off[i] + it[i].bytes;
      if (live && overlap) bad++;
    }
  CHECK(bad == 0);
  CHECK(unplaced == 0);
  CHECK(top < sum / 2);
  printf("%d items: arena %lld of %lld bytes, %d bad\n", n, (long long)top, (long long)sum, bad);
  free(it), free(off), free(off2);
}

int main(void) {
  check_plan(2000, 40);    // greedy by size
  check_plan(30000, 40);   // sweep
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
