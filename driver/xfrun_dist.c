// xfrun_dist.c: data-parallel training over MPI.
//
// Every rank holds the model and takes rows [rank b, (rank + 1) b) of the
// global batch (b = batch / size). After the backward pass the gradients and
// the loss are packed into one buffer and all-reduced by a ring: a
// reduce-scatter, then an all-gather, over size chunks. Each chunk is
// summed along the ring in an order fixed by the rank count, so two runs
// with the same count give the same bits, and the result is the
// single-process gradient up to float summation order. AdamW then runs
// identically on every rank. Without MPI (XF_HAVE_MPI undefined) xfrun runs
// one process and refuses to run under a launcher.
#include "xfrun_dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool under_launcher(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i])) return true;
  return false;
}

#ifdef XF_HAVE_MPI
#include <mpi.h>

bool dist_init(int *argc, char ***argv, Dist *d, char *err, size_t errlen) {
  *d = (Dist){.rank = 0, .size = 1};
  if (!under_launcher()) return true;
  int rc = MPI_Init(argc, argv);
  if (rc != MPI_SUCCESS) return snprintf(err, errlen, "MPI_Init failed (error %d)", rc), false;
  MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &d->size);
  return true;
}

void dist_finalize(Dist *d) {
  free(d->buf), free(d->tmp);
  if (d->size > 1 || under_launcher()) MPI_Finalize();
}

static void chunk(int64_t L, int size, int k, int64_t *lo, int64_t *n) {
  k = ((k % size) + size) % size;
  *lo = L * k / size;
  *n = L * (k + 1) / size - *lo;
}

// In-place sum over the ranks of x[0..L), ring order.
static bool ring_allreduce(Dist *d, float *x, int64_t L) {
  int r = d->rank, N = d->size, right = (r + 1) % N, left = (r + N - 1) % N;
  for (int s = 0; s < N - 1; s++) {  // reduce-scatter: chunk r+1 ends complete on rank r
    int64_t so, sn, ro, rn;
    chunk(L, N, r - s, &so, &sn);
    chunk(L, N, r - s - 1, &ro, &rn);
    if (MPI_Sendrecv(x + so, (int)sn, MPI_FLOAT, right, s, d->tmp, (int)rn, MPI_FLOAT, left, s, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return false;
    for (int64_t i = 0; i < rn; i++) x[ro + i] += d->tmp[i];
  }
  for (int s = 0; s < N - 1; s++) {  // all-gather of the complete chunks
    int64_t so, sn, ro, rn;
    chunk(L, N, r + 1 - s, &so, &sn);
    chunk(L, N, r - s, &ro, &rn);
    if (MPI_Sendrecv(x + so, (int)sn, MPI_FLOAT, right, N + s, x + ro, (int)rn, MPI_FLOAT, left, N + s, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return false;
  }
  return true;
}

bool dist_reduce(void *ctx, float *const *grads, const int64_t *numel, int n, float *loss) {
  Dist *d = ctx;
  int64_t L = 1;
  for (int i = 0; i < n; i++) L += numel[i];
  if (L > d->cap) {  // the first step sizes the buffers; later steps reuse them
    free(d->buf), free(d->tmp);
    d->buf = malloc(sizeof(float) * (size_t)L), d->tmp = malloc(sizeof(float) * (size_t)(L / d->size + 2));
    if (!d->buf || !d->tmp) return false;
    d->cap = L;
  }
  int64_t at = 0;
  for (int i = 0; i < n; i++) memcpy(d->buf + at, grads[i], sizeof(float) * (size_t)numel[i]), at += numel[i];
  d->buf[at] = *loss;
  d->bytes = 4.0 * (double)L;
  if (!ring_allreduce(d, d->buf, L)) return false;
  float inv = 1.0f / (float)d->size;
  at = 0;
  for (int i = 0; i < n; i++) {
    for (int64_t k = 0; k < numel[i]; k++) grads[i][k] = d->buf[at + k] * inv;
    at += numel[i];
  }
  *loss = d->buf[at] * inv;
  return true;
}

double dist_mean(Dist *d, double v) {
  double s = v;
  if (d->size > 1) MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return s / d->size;
}

#else

bool dist_init(int *argc, char ***argv, Dist *d, char *err, size_t errlen) {
  (void)argc, (void)argv;
  *d = (Dist){.rank = 0, .size = 1};
  if (under_launcher())
    return snprintf(err, errlen, "this xfrun was built without MPI: install libopenmpi-dev and rebuild to train on several processes"),
           false;
  return true;
}

void dist_finalize(Dist *d) { (void)d; }

bool dist_reduce(void *ctx, float *const *grads, const int64_t *numel, int n, float *loss) {
  (void)ctx, (void)grads, (void)numel, (void)n, (void)loss;
  return true;
}

double dist_mean(Dist *d, double v) {
  (void)d;
  return v;
}

#endif
