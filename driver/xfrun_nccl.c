// xfrun_nccl.c: the gradient reduction of data-parallel training on CUDA
// devices, over NCCL (one process per GPU), behind the same bucket interface
// as the MPI ring (runtime/xf.h: XfReducer). MPI starts the processes and
// carries NCCL's unique id and the loss.
//
// start(b): records an event on the runtime's stream (the bucket's gradients
// are final there), makes NCCL's own stream wait for it on the device (the
// host does not wait), and queues one ncclAllReduce (average) per gradient of
// the bucket, grouped, on NCCL's own stream, in place on the device
// pointers; finish: waits for NCCL's stream, then averages the loss over MPI.
// NCCL's ring and tree algorithms are deterministic for a fixed device
// topology, so runs repeat bit for bit on the same machines.
//
// Without a GPU this is compiled and linked, not run: the tests drive the
// same bucket interface on the emulated device with the MPI ring standing in.
#include <stdio.h>
#include <stdlib.h>

#include "xfrun_dist.h"

#if defined(XF_HAVE_MPI) && defined(XF_HAVE_NCCL)
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

typedef struct {
  ncclComm_t comm;
  cudaStream_t stream, compute;  // NCCL's, the runtime's
  cudaEvent_t ready;             // recorded on compute when a bucket is final
  int size;
  bool failed;
} Nccl;

// The bucket's gradients are final once the kernels issued so far on the
// runtime's stream have run: NCCL's stream waits for that point on the
// device (no host synchronisation), while the backward goes on.
static void nccl_start(void *ctx, int bucket, float *const *grads, const int64_t *numel, int n) {
  Nccl *c = ctx;
  (void)bucket;
  if (cudaEventRecord(c->ready, c->compute) != cudaSuccess || cudaStreamWaitEvent(c->stream, c->ready, 0) != cudaSuccess ||
      ncclGroupStart() != ncclSuccess) {
    c->failed = true;
    return;
  }
  for (int i = 0; i < n; i++)
    if (ncclAllReduce(grads[i], grads[i], (size_t)numel[i], ncclFloat, ncclAvg, c->comm, c->stream) != ncclSuccess)
      c->failed = true;
  if (ncclGroupEnd() != ncclSuccess) c->failed = true;
}

static bool nccl_finish(void *ctx, float *loss) {
  Nccl *c = ctx;
  bool ok = !c->failed && cudaStreamSynchronize(c->stream) == cudaSuccess;
  float sum = 0;
  ok = ok && MPI_Allreduce(loss, &sum, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
  *loss = sum / (float)c->size;
  c->failed = false;
  return ok;
}

XfReducer nccl_reducer(Dist *d, void *stream, char *err, size_t errlen) {
  Nccl *c = calloc(1, sizeof *c);
  ncclUniqueId id;
  ncclResult_t r = ncclSuccess;
  if (!c) return snprintf(err, errlen, "out of memory"), (XfReducer){0};
  c->size = d->size, c->compute = stream;
  if (d->rank == 0) r = ncclGetUniqueId(&id);
  if (r != ncclSuccess || MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS ||
      cudaStreamCreate(&c->stream) != cudaSuccess ||
      cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming) != cudaSuccess ||
      (r = ncclCommInitRank(&c->comm, d->size, id, d->rank)) != ncclSuccess) {
    snprintf(err, errlen, "NCCL: cannot set up the communicator of %d ranks: %s", d->size, ncclGetErrorString(r));
    free(c);
    return (XfReducer){0};
  }
  return (XfReducer){.ctx = c, .start = nccl_start, .finish = nccl_finish};
}

#else

XfReducer nccl_reducer(Dist *d, void *stream, char *err, size_t errlen) {
  (void)d, (void)stream;
  snprintf(err, errlen, "this xfrun was built without NCCL (and MPI): data-parallel training on CUDA devices is not available");
  return (XfReducer){0};
}

#endif
