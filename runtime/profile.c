// profile.c: the kernel profile of xf.h (xf_profile_*). Kernel k's time is
// the clock from the previous mark to the end of k: a program's kernels run
// in order on the calling thread (parallel_for returns when every thread is
// done), and kernel_done follows each one, so the marks split a program's
// wall time between its kernels exactly, nothing counted twice. On a CUDA
// device the marks are the device's (XfGpu.timer_mark, events on the one
// stream): one before the training program, one after the last launch of
// each kernel, one after the optimizer (slot nkernels), read back after the
// step's loss; the intervals split the device's time the same way.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime_impl.h"

static double clock_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void xf_profile_mark(XfRuntime *rt) {
  if (rt->prof_s) rt->prof_t0 = clock_s();
}

// XfApi.kernel_done while profiling: k's time, then the hook it wraps (the
// debug poisoning, gradient buckets), whose work is left out of the next
// kernel's time.
static void profile_done(const XfApi *api, int32_t kernel) {
  XfRuntime *rt = ((Pool *)api->ctx)->rt;
  if (kernel >= 0 && kernel < rt->m->nkernels) {
    rt->prof_s[kernel] += clock_s() - rt->prof_t0;
    rt->prof_n[kernel]++;
  }
  if (rt->prof_next) rt->prof_next(api, kernel);
  rt->prof_t0 = clock_s();
}

// Undoes a failed start: no profile, so steps keep their graph.
static void profile_drop(XfRuntime *rt) {
  free(rt->prof_s), free(rt->prof_n), free(rt->prof_at), free(rt->prof_dt);
  rt->prof_s = NULL, rt->prof_n = NULL, rt->prof_at = NULL, rt->prof_dt = NULL;
}

bool xf_profile_start(XfRuntime *rt, char *err, size_t errlen) {
  size_t n = (size_t)rt->m->nkernels + 1;
  if (!rt->prof_s) {
    rt->prof_s = calloc(n, sizeof *rt->prof_s), rt->prof_n = calloc(n, sizeof *rt->prof_n);
    if (rt->gpu) rt->prof_at = calloc(n + 1, sizeof *rt->prof_at), rt->prof_dt = calloc(n + 1, sizeof *rt->prof_dt);
    if (!rt->prof_s || !rt->prof_n || (rt->gpu && (!rt->prof_at || !rt->prof_dt))) {
      profile_drop(rt);
      snprintf(err, errlen, "out of memory for the profile of %d kernels", rt->m->nkernels);
      return false;
    }
    if (rt->gpu && !rt->gpu->timer_open(rt->gpu, (int)n + 1)) {
      profile_drop(rt);
      snprintf(err, errlen, "%s", rt->gpu->err);
      return false;
    }
    if (!rt->gpu) rt->prof_next = rt->api.kernel_done, rt->api.kernel_done = profile_done;
  }
  for (size_t k = 0; k < n; k++) rt->prof_s[k] = 0, rt->prof_n[k] = 0;
  return true;
}

void xf_profile_read(const XfRuntime *rt, int k, double *seconds, int64_t *runs) {
  bool ok = rt->prof_s && k >= 0 && k <= rt->m->nkernels;
  *seconds = ok ? rt->prof_s[k] : 0, *runs = ok ? rt->prof_n[k] : 0;
}

void xf_profile_gpu_begin(XfRuntime *rt) {
  if (!rt->prof_s || !rt->gpu) return;
  if (!rt->gpu->timer_mark(rt->gpu, 0)) xf_device_fail(rt);
  rt->prof_marks = 1;
}

void xf_profile_gpu_mark(XfRuntime *rt, int kernel) {
  if (!rt->prof_marks) return;
  if (rt->prof_marks > rt->m->nkernels + 1 || kernel < 0 || kernel > rt->m->nkernels) {
    snprintf(rt->gpu->err, sizeof rt->gpu->err, "internal error: profile mark %d after kernel %d", rt->prof_marks, kernel);
    xf_device_fail(rt);
  }
  if (!rt->gpu->timer_mark(rt->gpu, rt->prof_marks)) xf_device_fail(rt);
  rt->prof_at[rt->prof_marks++] = kernel;
}

void xf_profile_gpu_collect(XfRuntime *rt) {
  if (!rt->prof_marks) return;
  int n = rt->prof_marks;
  rt->prof_marks = 0;
  if (!rt->gpu->timer_read(rt->gpu, n, rt->prof_dt)) xf_device_fail(rt);
  for (int i = 1; i < n; i++) rt->prof_s[rt->prof_at[i]] += rt->prof_dt[i], rt->prof_n[rt->prof_at[i]]++;
}
