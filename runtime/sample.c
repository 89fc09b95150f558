// sample.c: temperature, top-k and top-p filtering of logits and the draw
// from the filtered distribution. Semantics in sample.h.
//
// probs doubles as the store of the unnormalised weights w (step 1), which
// the ranking reads; order holds the ranked ids. Nothing is allocated. Only
// what the filters read is ranked (a partial heap selection), so top-k costs
// O(vocab + k log vocab) and top-p O(vocab + m log vocab), m the tokens
// whose weights still change the total mass; the kept tokens and every sum
// are those of a full sort.
#include "sample.h"

#include <math.h>
#include <stdio.h>

// Rank order: a before b when w[a] > w[b], or w[a] == w[b] and a < b. A
// strict total order, so every selection below gives one result: the same
// ranked prefix a full sort would.
static bool ranks_before(const float *w, int32_t a, int32_t b) {
  return w[a] > w[b] || (w[a] == w[b] && a < b);
}

// Restores the heap property below position i of order[0 .. n-1], whose
// root is the best-ranked element.
static void sift_down(const float *w, int32_t *order, int64_t n, int64_t i) {
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && ranks_before(w, order[c + 1], order[c])) c++;
    if (!ranks_before(w, order[c], order[i])) return;
    int32_t t = order[i];
    order[i] = order[c];
    order[c] = t;
    i = c;
  }
}

// Ranks a prefix of order[0 .. n-1]: order[0 .. m-1] become the first m
// tokens in rank order (the rest stay in order[m .. n-1], unsorted) and
// *total their weights summed in double in rank order, which is the sum
// over the first `want` ranked tokens. m = want, or with `early` the first
// count at which the sum stops changing: once the next weight is below half
// an ulp of the sum, it and every later (smaller) weight round away. A
// heap, popped m times: O(n + m log n).
static int64_t rank_prefix(const float *w, int32_t *order, int64_t n, int64_t want, bool early, double *total) {
  for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(w, order, n, i);
  double sum = 0;
  int64_t m = 0;
  while (m < want) {  // the heap is order[0 .. n-m-1], the popped tokens order[n-m ..] from the end
    double v = w[order[0]];
    if (early && sum > 0 && v < (nextafter(sum, INFINITY) - sum) / 2) break;
    sum += v;
    m++;
    int32_t t = order[0];
    order[0] = order[n - m];
    order[n - m] = t;
    sift_down(w, order, n - m, 0);
  }
  for (int64_t i = 0, j = n - 1; i < j; i++, j--) {  // the popped tokens to the front, in rank order
    int32_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  *total = sum;
  return m;
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

  // Step 2: the tokens of positive weight (the max has w = 1, so n >= 1),
  // ranked as far as steps 3-5 read them.
  int64_t n = 0;
  for (int64_t i = 0; i < vocab; i++)
    if (probs[i] > 0) order[n++] = (int32_t)i;

  // Step 3: top-k; total: the survivors' mass, in rank order. Every kept
  // token gets ranked: top-p keeps no more than the ranked prefix whose sum
  // is total, so with top-p that prefix may stop early.
  int64_t kept = s->top_k > 0 && s->top_k < n ? s->top_k : n;
  double total;
  int64_t ranked = rank_prefix(probs, order, n, kept, s->top_p < 1, &total);

  // Step 4: top-p over the top-k survivors, cumulative mass in rank order
  // (it reaches total within the ranked prefix).
  if (s->top_p < 1) {
    double cum = 0;
    for (int64_t r = 0; r < ranked; r++) {
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
