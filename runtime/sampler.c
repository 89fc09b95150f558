// sampler.c: the incremental decoder of xf.h (xf_sampler_*): the step
// program over per-sequence caches, or the whole forward without one.
#include "runtime_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

// ---- the incremental decoder ------------------------------------------------------------

struct XfSampler {
  XfRuntime *rt;
  int64_t nseq, ctx, vocab, len;
  bool incremental;
  int32_t *hist;     // [nseq, ctx]: the encoded tokens; past a stream's length, valid ids
  int64_t *lens;     // [nseq]: positions encoded per stream (len: the longest)
  int64_t keep;      // where the next run of the step program starts (XfApi.win_keep)
  int64_t frame;     // > 0: the step program's frame of positions (XfModel.step_frame)
  int64_t fbase;     // the frame's first position (XfApi.pos0) ...
  int64_t fnext;     // ... and the position its next run computes
  int64_t *nfeed;    // [nseq]: scratch of xf_sampler_feed
  void **bufs;       // the step program's buffers: parameters, then the cache arena
  char *arena;       // on a GPU: device storage, beside the runtime's parameters
  float *out;        // [nseq, vocab]
  size_t cache_bytes, work_bytes;  // the arena: caches, then the planned workspace
  char *shift;       // on a GPU with a frame: after them, the staging of frame_shift's moves
  int32_t *ftok;     // [nseq, frame]: a run's token ids, uploaded to a GPU
  bool poison;       // XF_DEBUG_POISON: the workspace NaN before every run
  XfApi api;
};

// The step program's storage at nseq sequences of ctx positions
// (memplan_after_caches, as xfc --stats plans it): offsets[i] for
// m->step_bufs[i], *cache the caches' bytes; the total, -1 out of memory.
static int64_t step_plan(const XfModel *m, int64_t nseq, int64_t ctx, int64_t *offsets, int64_t *cache) {
  int n = m->nstep_bufs;
  PlanItem *items = malloc(sizeof *items * ((size_t)n + 1));
  bool *cached = malloc(sizeof *cached * ((size_t)n + 1));
  int64_t total = -1;
  if (items && cached) {
    for (int i = 0; i < n; i++) {
      const XfBuffer *b = &m->buffers[m->step_bufs[i]];
      items[i] = (PlanItem){.bytes = xf_buf_numel(b, nseq, ctx) * xf_buf_esize(b), .first = m->step_first[i],
                            .last = m->step_last[i]};
      cached[i] = m->step_cache[i];
    }
    total = memplan_after_caches(items, cached, n, offsets, cache);
  }
  free(items), free(cached);
  return total;
}

// Step buffer i as the frame moves it: a cache of one time axis (T^1; the
// token ids are rewritten every run instead), outer x F x inner floats; false
// for the others.
static bool frame_moves(const XfModel *m, int i, int64_t nseq, int64_t *outer, int64_t *inner) {
  const XfBuffer *b = &m->buffers[m->step_bufs[i]];
  if (!m->step_cache[i] || b->pow_t != 1 || b->is_int) return false;
  int a = 0;
  *outer = *inner = 1;
  while (a < b->rank && b->dims[a] != -1) *outer *= b->dims[a] ? b->dims[a] : nseq, a++;
  for (int k = a + 1; k < b->rank; k++) *inner *= b->dims[k] ? b->dims[k] : nseq;
  return true;
}

XfSampler *xf_sampler_open(XfRuntime *rt, int64_t nseq, bool incremental, char *err, size_t errlen) {
  const XfModel *m = rt->m;
  if (rt->logits < 0) return fail(err, errlen, "model %s has no 'logits' output to sample from", m->name), NULL;
  if (nseq < 1 || nseq > rt->opt.batch)
    return fail(err, errlen, "%lld sequences: the runtime was opened for at most %lld", (long long)nseq, (long long)rt->opt.batch), NULL;
  XfSampler *s = calloc(1, sizeof *s);
  if (!s) return fail(err, errlen, "out of memory"), NULL;
  s->rt = rt, s->nseq = nseq, s->ctx = m->context, s->vocab = xf_vocab(rt);
  s->incremental = incremental && m->step && (!rt->gpu || m->cuda->nlaunch[XF_PROG_STEP] > 0);
  s->frame = s->incremental ? m->step_frame : 0;
  s->hist = calloc((size_t)(nseq * s->ctx), sizeof *s->hist);
  s->out = calloc((size_t)(nseq * s->vocab), sizeof *s->out);
  s->lens = calloc((size_t)nseq, sizeof *s->lens), s->nfeed = calloc((size_t)nseq, sizeof *s->nfeed);
  bool ok = s->hist && s->out && s->lens && s->nfeed;
  if (ok && s->incremental) {
    // the caches and the planned workspace of the step program at (nseq, context or the frame)
    int64_t cache = 0, *ofs = calloc((size_t)m->nstep_bufs + 1, sizeof *ofs);
    int64_t planned = ofs ? step_plan(m, nseq, s->frame ? s->frame : s->ctx, ofs, &cache) : -1;
    size_t total = planned > 0 ? (size_t)planned : 0, shift = 0;
    for (int i = 0; rt->gpu && s->frame && i < m->nstep_bufs; i++) {  // a device moves a cache through staging
      int64_t outer, inner;
      size_t es = (size_t)xf_buf_esize(&m->buffers[m->step_bufs[i]]);
      if (frame_moves(m, i, nseq, &outer, &inner) && (size_t)(outer * (s->frame - 1) * inner) * es > shift)
        shift = (size_t)(outer * (s->frame - 1) * inner) * es;
    }
    size_t bytes = total + shift ? total + shift : 64;
    s->cache_bytes = (size_t)cache, s->work_bytes = total - (size_t)cache;
    s->bufs = planned >= 0 ? calloc((size_t)m->nbuffers + 1, sizeof *s->bufs) : NULL;
    if (rt->gpu) {  // device storage (xf_sampler_close releases it)
      void *d = NULL;
      if (rt->gpu->alloc(rt->gpu, &d, bytes)) s->arena = d;
      s->shift = s->arena && shift ? s->arena + total : NULL;
      if (s->frame && !(s->ftok = calloc((size_t)(nseq * s->frame), sizeof *s->ftok))) s->arena = NULL;
      if (!s->arena || !rt->gpu->fill(rt->gpu, s->arena, 0, bytes)) {
        fail(err, errlen, "the sampler's caches on the device: %s", rt->gpu->err);
        free(ofs);
        xf_sampler_close(s);
        return NULL;
      }
    } else if (s->bufs && (s->arena = aligned_alloc(64, bytes))) {
      memset(s->arena, 0, total);
    }
    ok = s->bufs && s->arena;
    if (ok) {
      for (int i = 0; i < m->nbuffers; i++)
        if (m->buffers[i].role == XF_BUF_PARAM || m->buffers[i].role == XF_BUF_TWIN)
          s->bufs[i] = rt->gpu ? rt->dbufs[i] : rt->bufs[i];
      for (int i = 0; i < m->nstep_bufs; i++) s->bufs[m->step_bufs[i]] = s->arena + ofs[i];
      ok = s->bufs[rt->tokens] && s->bufs[rt->logits];
    }
    free(ofs);
    s->poison = rt->dead_at != NULL;  // XF_DEBUG_POISON (poison_lists)
    s->api = rt->api;
    s->api.kernel_done = NULL;
  }
  if (!ok) {
    xf_sampler_close(s);
    return fail(err, errlen, "out of memory for the sampler's caches (%lld sequences of %lld positions)", (long long)nseq,
                (long long)m->context), NULL;
  }
  return s;
}

void xf_sampler_close(XfSampler *s) {
  if (!s) return;
  if (s->rt->gpu && s->arena) s->rt->gpu->release(s->rt->gpu, s->arena);
  else free(s->arena);
  free(s->hist), free(s->out), free(s->bufs), free(s->lens), free(s->nfeed), free(s->ftok);
  free(s);
}

int64_t xf_sampler_length(const XfSampler *s) { return s->len; }
bool xf_sampler_incremental(const XfSampler *s) { return s->incremental; }
void xf_sampler_memory(const XfSampler *s, size_t *cache, size_t *work) {
  *cache = s->incremental ? s->cache_bytes : 0, *work = s->incremental ? s->work_bytes : 0;
}

// The frame's caches moved along by d positions: rows [d, F) of each
// cache's time axis to [0, F - d), per index of the axes before it
// (codegen/stepmem.c step_frame: each has one time axis, T^1); on a GPU
// through the staging after the arena (copies may not overlap).
static void frame_shift(XfSampler *s, int64_t d) {
  const XfModel *m = s->rt->m;
  XfGpu *g = s->rt->gpu;
  int64_t F = s->frame, outer, inner;
  if (d <= 0) return;
  for (int i = 0; i < m->nstep_bufs; i++) {
    if (!frame_moves(m, i, s->nseq, &outer, &inner)) continue;
    char *x = s->bufs[m->step_bufs[i]];
    size_t row = (size_t)(xf_buf_esize(&m->buffers[m->step_bufs[i]]) * inner), keep = row * (size_t)(F - d);
    if (g) {
      if (!g->copy2d(g, s->shift, keep, x + d * row, row * (size_t)F, keep, (size_t)outer) ||
          !g->copy2d(g, x, row * (size_t)F, s->shift, keep, keep, (size_t)outer))
        xf_device_fail(s->rt);
      continue;
    }
    for (int64_t o = 0; o < outer; o++) memmove(x + (size_t)(o * F) * row, x + (size_t)(o * F + d) * row, keep);
  }
}

// XF_DEBUG_POISON: the step program's workspace NaN before a run (nothing
// may rely on it between runs).
static void poison_workspace(XfSampler *s) {
  XfGpu *g = s->rt->gpu;
  if (!s->incremental || !s->poison || !s->work_bytes) return;
  if (g && !g->fill(g, s->arena + s->cache_bytes, 0xff, s->work_bytes)) xf_device_fail(s->rt);
  if (!g) memset(s->arena + s->cache_bytes, 0xff, s->work_bytes);
}

// Positions [from, T) of every stream, one run of the step program each in
// the frame [max(0, p - F + 1), p]; the logits of a stream ending at p
// are kept from p's run.
static void frame_feed(XfSampler *s, int64_t from, int64_t T) {
  XfRuntime *rt = s->rt;
  XfGpu *g = rt->gpu;
  int64_t F = s->frame, V = s->vocab, ctx = s->ctx;
  if (from != s->fnext) from = 0;  // the frame holds no other start
  if (from == 0) s->fbase = 0;
  int32_t *tok = g ? s->ftok : s->bufs[rt->tokens];
  const float *lg = s->bufs[rt->logits];
  if (g) xf_device_push(rt);
  for (int64_t p = from; p < T; p++) {
    int64_t r = p - s->fbase;  // p's row in the frame
    for (int64_t i = 0; i < s->nseq; i++) memcpy(tok + i * F, s->hist + i * ctx + s->fbase, sizeof(int32_t) * (size_t)(r + 1));
    poison_workspace(s);
    if (g) {
      if (!g->upload(g, s->bufs[rt->tokens], tok, sizeof(int32_t) * (size_t)(s->nseq * F)) ||
          !xf_cuda_program(g, rt->m, XF_PROG_STEP, s->bufs, s->nseq, F, r, r + 1, r + 1, s->fbase, rt->opt.seed, rt->dvars,
                           NULL, NULL))
        xf_device_fail(rt);
    } else {
      s->api.win_lo = r, s->api.win_hi = r + 1, s->api.win_keep = r + 1, s->api.pos0 = s->fbase;
      xf_bf16_current(rt);
      rt->m->step(&s->api, s->bufs, s->nseq, F, rt->opt.seed, rt->step);
    }
    for (int64_t i = 0; i < s->nseq; i++)
      if (s->lens[i] - 1 == p) {
        if (!g) memcpy(s->out + i * V, lg + (i * F + r) * V, sizeof(float) * (size_t)V);
        else if (!g->download(g, s->out + i * V, lg + (i * F + r) * V, sizeof(float) * (size_t)V)) xf_device_fail(rt);
      }
    int64_t next = p + 2 > F ? p + 2 - F : 0;  // the frame of p + 1
    frame_shift(s, next - s->fbase);
    s->fbase = next;
  }
  s->fnext = T;
}

const float *xf_sampler_feed(XfSampler *s, const int32_t *tokens, int64_t n) {
  if (n < 1) return NULL;
  for (int64_t i = 0; i < s->nseq; i++) s->nfeed[i] = n;
  return xf_sampler_feed_each(s, tokens, s->nfeed);
}

// Streams of different lengths run one window: positions [from, T), from
// the earliest position any stream changes to the longest stream's end. A
// stream shorter than T computes positions past its end from whatever ids
// its history holds there (valid ids: zeros or earlier tokens); by causality
// its own positions do not depend on them, and the next feed recomputes
// them from its first new position on.
const float *xf_sampler_feed_each(XfSampler *s, const int32_t *tokens, const int64_t *n) {
  XfRuntime *rt = s->rt;
  int64_t ctx = s->ctx, V = s->vocab, from = ctx, T = 0;
  for (int64_t i = 0; i < s->nseq; i++)
    if (n[i] < 1) return NULL;
  for (int64_t i = 0, at = 0; i < s->nseq; at += n[i], i++) {
    int32_t *h = s->hist + i * ctx;
    int64_t use = n[i], start = s->lens[i];
    if (s->lens[i] + n[i] > ctx) {  // the context rule (xf.h): keep the last K tokens of history + new
      int64_t K = n[i] < ctx ? n[i] : ctx;
      if (ctx / 2 > K) K = ctx / 2;
      use = n[i] < K ? n[i] : K;
      int64_t keep = K - use < s->lens[i] ? K - use : s->lens[i];
      memmove(h, h + s->lens[i] - keep, sizeof(int32_t) * (size_t)keep);
      s->lens[i] = keep, start = 0;
    }
    memcpy(h + s->lens[i], tokens + at + (n[i] - use), sizeof(int32_t) * (size_t)use);
    s->lens[i] += use;
    if (start < from) from = start;
    if (s->lens[i] > T) T = s->lens[i];
  }
  s->len = T;
  // a scan's state row holds h_{keep-1} of the run before (loops.h LX_WIN):
  // the window must start there, or at 0; the next one starts at the
  // shortest stream's end
  int64_t keep = T;
  for (int64_t i = 0; i < s->nseq; i++)
    if (s->lens[i] < keep) keep = s->lens[i];
  if (from != s->keep) from = 0;
  s->keep = keep;
  s->api.win_keep = keep;
  if (s->frame) {
    frame_feed(s, from, T);
    return s->out;
  }
  poison_workspace(s);
  if (s->incremental && rt->gpu) {  // hist is the token buffer at T = context
    XfGpu *g = rt->gpu;
    xf_device_push(rt);
    if (!g->upload(g, s->bufs[rt->tokens], s->hist, sizeof(int32_t) * (size_t)(s->nseq * ctx)) ||
        !xf_cuda_program(g, rt->m, XF_PROG_STEP, s->bufs, s->nseq, ctx, from, T, keep, 0, rt->opt.seed, rt->dvars, NULL, NULL))
      xf_device_fail(rt);
    const float *lg = s->bufs[rt->logits];
    for (int64_t i = 0; i < s->nseq; i++)
      if (!g->download(g, s->out + i * V, lg + (i * ctx + s->lens[i] - 1) * V, sizeof(float) * (size_t)V)) xf_device_fail(rt);
    return s->out;
  }
  if (s->incremental) {
    int32_t *tok = s->bufs[rt->tokens];
    for (int64_t i = 0; i < s->nseq; i++) memcpy(tok + i * ctx, s->hist + i * ctx, sizeof(int32_t) * (size_t)T);
    s->api.win_lo = from, s->api.win_hi = T;
    xf_bf16_current(rt);
    rt->m->step(&s->api, s->bufs, s->nseq, ctx, rt->opt.seed, rt->step);
    const float *lg = s->bufs[rt->logits];
    for (int64_t i = 0; i < s->nseq; i++) memcpy(s->out + i * V, lg + (i * ctx + s->lens[i] - 1) * V, sizeof(float) * (size_t)V);
    return s->out;
  }
  // a time axis T / s: T up to a multiple of s (the history past a stream's
  // end holds valid ids; by causality its positions do not read them)
  if (rt->m->t_multiple > 1) T = (T + rt->m->t_multiple - 1) / rt->m->t_multiple * rt->m->t_multiple;
  int32_t *tok = xf_tokens(rt);
  for (int64_t i = 0; i < s->nseq; i++) memcpy(tok + i * T, s->hist + i * ctx, sizeof(int32_t) * (size_t)T);
  const float *lg = xf_forward(rt, s->nseq, T);
  if (!lg) return NULL;
  for (int64_t i = 0; i < s->nseq; i++) memcpy(s->out + i * V, lg + (i * T + s->lens[i] - 1) * V, sizeof(float) * (size_t)V);
  return s->out;
}
