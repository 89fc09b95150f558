// xfrun_dist.h: data-parallel training over MPI (driver/xfrun_dist.c).
#ifndef XFRUN_DIST_H
#define XFRUN_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  int rank, size;    // size 1: one process, no MPI
  float *buf, *tmp;  // the packed gradients and loss; a chunk received
  int64_t cap;
  double bytes;      // bytes all-reduced per step
} Dist;

// Starts MPI when an MPI launcher started this process (size 1 otherwise).
// False with a one-line message when it did but this xfrun has no MPI.
bool dist_init(int *argc, char ***argv, Dist *d, char *err, size_t errlen);
void dist_finalize(Dist *d);
// XfGradReduce (runtime/xf.h): gradients and loss become their means over
// the ranks, summed in a fixed order (a ring), so runs repeat bit for bit.
bool dist_reduce(void *ctx, float *const *grads, const int64_t *numel, int n, float *loss);
// The mean of v over the ranks.
double dist_mean(Dist *d, double v);

#endif
