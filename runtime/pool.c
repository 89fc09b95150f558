// pool.c: the thread pool of the runtime (runtime_impl.h).
#include "runtime_impl.h"

#include <stdlib.h>
#include <time.h>

#include "gemm.h"

typedef struct {
  Pool *pool;
  int index;
} Worker;

// The calling thread's index in its pool: 0 for the thread that runs
// xf_pool_for (and any other), i for worker i.
static _Thread_local int t_index;
int xf_pool_index(void) { return t_index; }

static void run_chunk(Pool *p, int index) {
  int64_t per = (p->n + p->nthreads - 1) / p->nthreads;
  int64_t lo = per * index, hi = lo + per < p->n ? lo + per : p->n;
  if (lo < hi) p->fn(p->bufs, p->B, p->T, p->seed, p->step, lo, hi, p->api);
}

int64_t xf_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins up to SPIN_NS until done(p, arg) holds; true if it does.
static bool spin_until(Pool *p, bool (*done)(Pool *, uint64_t), uint64_t arg) {
  int64_t t0 = 0;
  for (int i = 0;; i++) {
    if (done(p, arg)) return true;
    spin_pause();
    if ((i & 255) == 255) {
      int64_t t = xf_now_ns();
      if (!t0) t0 = t;
      else if (t - t0 > SPIN_NS) return false;
    }
  }
}

static bool new_job(Pool *p, uint64_t seen) {
  return atomic_load_explicit(&p->generation, memory_order_acquire) != seen || atomic_load(&p->quit);
}
static bool all_done(Pool *p, uint64_t unused) {
  (void)unused;
  return atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}

static void *worker_main(void *arg) {
  Worker *w = arg;
  Pool *p = w->pool;
  t_index = w->index;
  xf_gemm_thread_init();
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until(p, new_job, seen)) {
      pthread_mutex_lock(&p->mu);
      while (!new_job(p, seen)) pthread_cond_wait(&p->go, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->quit)) break;
    seen = atomic_load_explicit(&p->generation, memory_order_acquire);
    run_chunk(p, w->index);
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  free(w);
  return NULL;
}

void xf_pool_for(const XfApi *api, XfKernelFn fn, void **bufs, int64_t B, int64_t T, uint64_t seed, uint32_t step,
                     int64_t n) {
  Pool *p = api->ctx;
  if (p->nthreads == 1 || n == 1) {
    fn(bufs, B, T, seed, step, 0, n, api);
    return;
  }
  p->fn = fn, p->bufs = bufs, p->B = B, p->T = T, p->seed = seed, p->step = step, p->n = n, p->api = api;
  atomic_store_explicit(&p->pending, p->nthreads - 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  pthread_mutex_lock(&p->mu);  // wakes the workers that went to sleep (none waits: no system call)
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  run_chunk(p, 0);
  if (!spin_until(p, all_done, 0)) {
    pthread_mutex_lock(&p->mu);
    while (!all_done(p, 0)) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
}

bool xf_pool_start(Pool *p, int nthreads) {
  p->nthreads = nthreads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  p->threads = calloc((size_t)nthreads, sizeof *p->threads);
  if (!p->threads) return false;
  for (int i = 1; i < nthreads; i++) {
    Worker *w = malloc(sizeof *w);
    if (!w) return false;
    *w = (Worker){p, i};
    if (pthread_create(&p->threads[i], NULL, worker_main, w)) {
      free(w);
      p->nthreads = i;
      return false;
    }
  }
  return true;
}

void xf_pool_stop(Pool *p) {
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->quit, true);
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  free(p->threads);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
}
