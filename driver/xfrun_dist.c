// xfrun_dist.c: data-parallel training over MPI.
//
// Every rank holds the model and takes rows [rank b, (rank + 1) b) of the
// global batch (b = batch / size). The runtime hands over gradient buckets
// as the backward pass finishes them (xf.h: XfReducer); a communication
// thread packs each bucket and all-reduces it by a ring (a reduce-scatter,
// then an all-gather, over size chunks) while the backward pass goes on.
// Each chunk is summed along the ring in an order fixed by the rank count,
// so two runs with the same count give the same bits, and the result is the
// single-process gradient up to float summation order. The loss is reduced
// last; AdamW then runs identically on every rank. MPI is initialised with
// MPI_THREAD_SERIALIZED: during a step only the communication thread calls
// MPI, outside steps only the main thread. Without MPI (XF_HAVE_MPI
// undefined) xfrun runs one process and refuses to run under a launcher.
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
#include <pthread.h>

// A bucket handed over by the runtime: its gradients are packed into
// buf[at, at + len) and reduced there.
typedef struct {
  float *const *grads;
  const int64_t *numel;
  int n;
  int64_t at, len;
} Job;

struct Comm {
  Dist *d;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t more, idle;
  Job *jobs;          // the step's buckets in the order started
  int njobs, cap, next;
  bool busy, quit, failed;
  float *buf, *tmp;   // packed gradients; a chunk received
  int64_t used, bufcap, tmpcap;
};

bool dist_init(int *argc, char ***argv, Dist *d, char *err, size_t errlen) {
  *d = (Dist){.rank = 0, .size = 1};
  if (!under_launcher()) return true;
  int provided = 0, rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) return snprintf(err, errlen, "MPI_Init_thread failed (error %d)", rc), false;
  if (provided < MPI_THREAD_SERIALIZED) return snprintf(err, errlen, "this MPI cannot be called from a communication thread (MPI_THREAD_SERIALIZED)"), false;
  MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &d->size);
  return true;
}

void dist_finalize(Dist *d) {
  Comm *c = d->comm;
  if (c) {
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_signal(&c->more);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    free(c->jobs), free(c->buf), free(c->tmp);
    free(c);
    d->comm = NULL;
  }
  if (d->size > 1 || under_launcher()) MPI_Finalize();
}

static void chunk(int64_t L, int size, int k, int64_t *lo, int64_t *n) {
  k = ((k % size) + size) % size;
  *lo = L * k / size;
  *n = L * (k + 1) / size - *lo;
}

// In-place sum over the ranks of x[0..L), ring order; tmp holds a chunk.
static bool ring_allreduce(Dist *d, float *x, int64_t L, float *tmp) {
  int r = d->rank, N = d->size, right = (r + 1) % N, left = (r + N - 1) % N;
  for (int s = 0; s < N - 1; s++) {  // reduce-scatter: chunk r+1 ends complete on rank r
    int64_t so, sn, ro, rn;
    chunk(L, N, r - s, &so, &sn);
    chunk(L, N, r - s - 1, &ro, &rn);
    if (MPI_Sendrecv(x + so, (int)sn, MPI_FLOAT, right, s, tmp, (int)rn, MPI_FLOAT, left, s, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return false;
    for (int64_t i = 0; i < rn; i++) x[ro + i] += tmp[i];
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

// Packs, reduces and unpacks (scaled by 1 / size) one bucket.
static bool run_job(Comm *c, const Job *j) {
  Dist *d = c->d;
  float *x = c->buf + j->at;
  int64_t at = 0;
  for (int i = 0; i < j->n; i++) memcpy(x + at, j->grads[i], sizeof(float) * (size_t)j->numel[i]), at += j->numel[i];
  if (!ring_allreduce(d, x, j->len, c->tmp)) return false;
  float inv = 1.0f / (float)d->size;
  at = 0;
  for (int i = 0; i < j->n; i++) {
    for (int64_t k = 0; k < j->numel[i]; k++) j->grads[i][k] = x[at + k] * inv;
    at += j->numel[i];
  }
  return true;
}

static void *comm_main(void *arg) {
  Comm *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->quit && c->next == c->njobs) pthread_cond_wait(&c->more, &c->mu);
    if (c->quit) break;
    Job j = c->jobs[c->next];
    c->busy = true;
    pthread_mutex_unlock(&c->mu);
    bool ok = run_job(c, &j);
    pthread_mutex_lock(&c->mu);
    c->failed = c->failed || !ok;
    c->next++, c->busy = false;
    pthread_cond_broadcast(&c->idle);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static bool grow(float **p, int64_t *cap, int64_t n) {
  if (n <= *cap) return true;
  float *q = realloc(*p, sizeof(float) * (size_t)n);
  if (!q) return false;
  *p = q, *cap = n;
  return true;
}

// Queues bucket b (called from inside the training program).
static void reducer_start(void *ctx, int bucket, float *const *grads, const int64_t *numel, int n) {
  Comm *c = ctx;
  (void)bucket;
  int64_t len = 0;
  for (int i = 0; i < n; i++) len += numel[i];
  pthread_mutex_lock(&c->mu);
  bool ok = c->njobs < c->cap || (c->cap = 2 * c->cap + 8, (c->jobs = realloc(c->jobs, sizeof(Job) * (size_t)c->cap)) != NULL);
  if (ok && (c->used + len + 1 > c->bufcap || len / c->d->size + 2 > c->tmpcap)) {
    // the first step sizes the buffers: wait until the thread is idle (the
    // packed buckets before are unpacked), then grow; later steps reuse them
    while (c->next < c->njobs || c->busy) pthread_cond_wait(&c->idle, &c->mu);
    ok = grow(&c->buf, &c->bufcap, c->used + len + 1) && grow(&c->tmp, &c->tmpcap, len / c->d->size + 2);
  }
  if (!ok) {
    c->failed = true;
  } else {
    c->jobs[c->njobs++] = (Job){grads, numel, n, c->used, len};
    c->used += len;
    pthread_cond_signal(&c->more);
  }
  pthread_mutex_unlock(&c->mu);
}

// Waits for every bucket, then averages the loss (main thread: the
// communication thread is idle).
static bool reducer_finish(void *ctx, float *loss) {
  Comm *c = ctx;
  pthread_mutex_lock(&c->mu);
  while (c->next < c->njobs || c->busy) pthread_cond_wait(&c->idle, &c->mu);
  bool ok = !c->failed;
  c->d->bytes = 4.0 * (double)(c->used + 1);  // the gradients and the loss
  c->njobs = c->next = 0, c->used = 0, c->failed = false;
  pthread_mutex_unlock(&c->mu);
  float one[1] = {*loss}, tmp[2];
  ok = ok && ring_allreduce(c->d, one, 1, tmp);
  *loss = one[0] / (float)c->d->size;
  return ok;
}

XfReducer dist_reducer(Dist *d, int64_t *bucket_bytes) {
  const char *env = getenv("XF_BUCKET_BYTES");
  *bucket_bytes = env && atoll(env) > 0 ? atoll(env) : (int64_t)4 << 20;
  Comm *c = calloc(1, sizeof *c);
  if (!c) return (XfReducer){0};
  c->d = d;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->more, NULL);
  pthread_cond_init(&c->idle, NULL);
  if (pthread_create(&c->thread, NULL, comm_main, c)) {
    free(c);
    return (XfReducer){0};
  }
  d->comm = c;
  return (XfReducer){.ctx = c, .start = reducer_start, .finish = reducer_finish};
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

XfReducer dist_reducer(Dist *d, int64_t *bucket_bytes) {
  (void)d;
  *bucket_bytes = 0;
  return (XfReducer){0};
}

double dist_mean(Dist *d, double v) {
  (void)d;
  return v;
}

#endif
