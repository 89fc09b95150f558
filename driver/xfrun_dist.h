// xfrun_dist.h: data-parallel training over MPI (driver/xfrun_dist.c).
#ifndef XFRUN_DIST_H
#define XFRUN_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xf.h"

typedef struct Comm Comm;
typedef struct {
  int rank, size;    // size 1: one process, no MPI
  Comm *comm;        // the communication thread and its queue of buckets
  double bytes;      // bytes all-reduced per step
} Dist;

// Starts MPI when an MPI launcher started this process (size 1 otherwise).
// False with a one-line message when it did but this xfrun has no MPI.
bool dist_init(int *argc, char ***argv, Dist *d, char *err, size_t errlen);
void dist_finalize(Dist *d);
// The XfReducer (runtime/xf.h) of the ranks: each bucket is all-reduced by
// a ring on a communication thread while the backward pass continues, its
// chunks summed in an order fixed by the rank count, so runs repeat bit for
// bit. bucket_bytes: $XF_BUCKET_BYTES, default 4 MiB.
XfReducer dist_reducer(Dist *d, int64_t *bucket_bytes);
// The reducer for gradients on CUDA devices (driver/xfrun_nccl.c): NCCL,
// one process per GPU. Empty (start NULL) with err when unavailable.
XfReducer nccl_reducer(Dist *d, void *stream, char *err, size_t errlen);
// The mean of v over the ranks.
double dist_mean(Dist *d, double v);

#endif
