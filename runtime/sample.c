// sample.c: temperature, top-k and top-p filtering of logits and the draw
// from the filtered distribution. Semantics in sample.h.
//
// probs doubles as the store of the unnormalised weights w (step 1), which
// the ranking reads; order holds the ranked ids. Nothing is allocated.
#include "sample.h"

#include <math.h>
#include <stdio.h>

// Rank order: a before b when w[a] > w[b], or w[a] == w[b] and a < b. A
// strict total order, so the unstable heapsort below gives one result.
static bool ranks_before(const float *w, int32_t a, int32_t b) {
  return w[a] > w[b] || (w[a] == w[b] && a < b);
}

// Restores the heap property below position i of order[0 .. n-1], where the
// root is the element ranked last (so the heap sorts into rank order).
static void sift_down(const float *w, int32_t *order, int64_t n, int64_t i) {
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && ranks_before(w, order[c], order[c + 1])) c++;
    if (!ranks_before(w, order[i], order[c])) return;
    int32_t t = order[i];
    order[i] = order[c];
    order[c] = t;
    i = c;
  }
}

static void sort_by_rank(const float *w, int32_t *order, int64_t n) {
  for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(w, order, n, i);
  for (int64_t end = n - 1; end > 0; end--) {
    int32_t t = order[0];
    order[0] = order[end];
    order[end] = t;
    sift_down(w, order, end, 0);
  }
}

// Greedy: one-hot on the largest logit, lowest id on ties; NaN never wins.
static int64_t filter_greedy(const float *logits, int64_t vocab, float *probs, int32_t *order) {
  int64_t best = -1;
  for (int64_t i = 0; i < vocab; i++)
    if (!isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
  if (best < 0) best = 0;
  for (int64_t i = 0; i < vocab; i++) probs[i] = 0;
  probs[best] = 1;
  order[0] = (int32_t)best;
  return 1;
}

int64_t xf_sample_filter(const float *logits, int64_t vocab, const XfSampling *s, float *probs, int32_t *order) {
  if (s->temperature == 0) return filter_greedy(logits, vocab, probs, order);

  // Step 1: w = exp((l - max) / T), written into probs.
  float mx = -INFINITY;
  for (int64_t i = 0; i < vocab; i++)
    if (logits[i] > mx) mx = logits[i];  // NaN compares false
  if (mx == INFINITY) {
    for (int64_t i = 0; i < vocab; i++) probs[i] = logits[i] == INFINITY ? 1.0f : 0.0f;
  } else if (mx == -INFINITY) {
    for (int64_t i = 0; i < vocab; i++) probs[i] = 1;
  } else {
    for (int64_t i = 0; i < vocab; i++) {
      float l = logits[i];
      probs[i] = isfinite(l) ? (float)exp(((double)l - (double)mx) / s->temperature) : 0.0f;
    }
  }

  // Step 2: rank the tokens of positive weight (the max has w = 1, so n >= 1).
  int64_t n = 0;
  for (int64_t i = 0; i < vocab; i++)
    if (probs[i] > 0) order[n++] = (int32_t)i;
  sort_by_rank(probs, order, n);

  // Step 3: top-k.
  int64_t kept = n;
  if (s->top_k > 0 && s->top_k < kept) kept = s->top_k;

  // Step 4: top-p over the top-k survivors, cumulative mass in rank order.
  double total = 0;
  for (int64_t r = 0; r < kept; r++) total += probs[order[r]];
  if (s->top_p < 1) {
    double cum = 0;
    for (int64_t r = 0; r < kept; r++) {
      cum += probs[order[r]];
      if (cum / total >= s->top_p) {
        kept = r + 1;
        total = cum;
        break;
      }
    }
  }

  // Step 5: zero the removed tokens and renormalise the kept ones.
  for (int64_t r = kept; r < n; r++) probs[order[r]] = 0;
  for (int64_t r = 0; r < kept; r++) probs[order[r]] = (float)(probs[order[r]] / total);
  // A weight near the smallest float can round to 0 here; those are last in
  // rank order (the first has probability >= 1/vocab).
  while (kept > 1 && probs[order[kept - 1]] == 0) kept--;
  return kept;
}

int32_t xf_sample_draw(const float *probs, int64_t vocab, double u) {
  double total = 0;
  int32_t last = -1;
  for (int64_t i = 0; i < vocab; i++)
    if (probs[i] > 0) total += probs[i], last = (int32_t)i;
  if (last < 0) return -1;
  if (!(u > 0)) u = 0;  // also NaN
  if (u >= 1) u = nextafter(1.0, 0.0);
  double t = u * total, cum = 0;
  for (int64_t i = 0; i < vocab; i++) {
    if (!(probs[i] > 0)) continue;
    cum += probs[i];
    if (cum > t) return (int32_t)i;
  }
  return last;  // t rounded up to total
}

bool xf_sampling_check(const XfSampling *s, char *err, size_t errlen) {
  if (!(s->temperature >= 0) || !isfinite(s->temperature)) {
    snprintf(err, errlen, "--temperature %g: must be a finite number >= 0 (0: greedy)", s->temperature);
    return false;
  }
  if (s->top_k < 0) {
    snprintf(err, errlen, "--top-k %lld: must be >= 0 (0: off)", (long long)s->top_k);
    return false;
  }
  if (!(s->top_p > 0 && s->top_p <= 1)) {
    snprintf(err, errlen, "--top-p %g: must be in (0, 1] (1: off)", s->top_p);
    return false;
  }
  return true;
}
