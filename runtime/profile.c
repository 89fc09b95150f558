// profile.c: the kernel profile of xf.h (xf_profile_*). Kernel k's time is
// the clock from the previous mark to the end of k: a program's kernels run
// in order on the calling thread (parallel_for returns when every thread is
// done), and kernel_done follows each one, so the marks split a program's
// wall time between its kernels exactly, nothing counted twice.
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

bool xf_profile_start(XfRuntime *rt, char *err, size_t errlen) {
  if (rt->gpu) {
    snprintf(err, errlen, "the kernel profile measures CPU kernels; on a CUDA device they run asynchronously "
                          "(profile there with Nsight Systems)");
    return false;
  }
  size_t n = (size_t)rt->m->nkernels + 1;
  if (!rt->prof_s) {
    rt->prof_s = calloc(n, sizeof *rt->prof_s), rt->prof_n = calloc(n, sizeof *rt->prof_n);
    if (!rt->prof_s || !rt->prof_n) {
      free(rt->prof_s), free(rt->prof_n);
      rt->prof_s = NULL, rt->prof_n = NULL;
      snprintf(err, errlen, "out of memory for the profile of %d kernels", rt->m->nkernels);
      return false;
    }
    rt->prof_next = rt->api.kernel_done;
    rt->api.kernel_done = profile_done;
  }
  for (size_t k = 0; k < n; k++) rt->prof_s[k] = 0, rt->prof_n[k] = 0;
  return true;
}

void xf_profile_read(const XfRuntime *rt, int k, double *seconds, int64_t *runs) {
  bool ok = rt->prof_s && k >= 0 && k < rt->m->nkernels;
  *seconds = ok ? rt->prof_s[k] : 0, *runs = ok ? rt->prof_n[k] : 0;
}
