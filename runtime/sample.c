// sample.c: temperature, top-k and top-p filtering of logits and the draw
// from the filtered distribution. Semantics in sample.h.
//
// probs doubles as the store of the unnormalised weights w (step 1), which
// the ranking reads; order holds the ranked ids. Nothing is allocated. Only
// what the filters read is ranked: top-k by a partial heap selection,
// O(vocab + k log vocab); otherwise a radix sort of the tokens whose weights
// can change a cumulative mass, O(vocab). The kept tokens and every sum are
// those of a full sort.
#include "sample.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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

static void swap_ids(int32_t *order, int64_t i, int64_t j) {
  int32_t t = order[i];
  order[i] = order[j];
  order[j] = t;
}

// The first `want` tokens of order[0 .. n-1] in rank order at the front (the
// rest unsorted after them) and *total their weights summed in double in
// rank order. A heap popped want times: O(n + want log n).
static void heap_prefix(const float *w, int32_t *order, int64_t n, int64_t want, double *total) {
  for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(w, order, n, i);
  double sum = 0;
  for (int64_t m = 1; m <= want; m++) {  // the heap is order[0 .. n-m], the popped tokens order[n-m+1 ..] from the end
    sum += w[order[0]];
    swap_ids(order, 0, n - m);
    sift_down(w, order, n - m, 0);
  }
  for (int64_t i = 0, j = n - 1; i < j; i++, j--) swap_ids(order, i, j);  // the popped tokens to the front
  *total = sum;
}

// Sorts order[0 .. n-1], ids in increasing order, into rank order: a
// least-significant-digit radix sort, 8 bits a pass, on the complemented
// bits of the weights (for w > 0 the bits grow with w), stable, so equal
// weights keep the lower id first. tmp: n ids of scratch. O(n).
static void radix_rank(const float *w, int32_t *order, int32_t *tmp, int64_t n) {
  int32_t *src = order, *dst = tmp;
  for (int shift = 0; shift < 32; shift += 8) {
    int64_t count[257] = {0};
    for (int64_t i = 0; i < n; i++) {
      uint32_t bits;
      memcpy(&bits, &w[src[i]], sizeof bits);
      count[((~bits >> shift) & 0xff) + 1]++;
    }
    for (int d = 0; d < 256; d++) count[d + 1] += count[d];
    for (int64_t i = 0; i < n; i++) {
      uint32_t bits;
      memcpy(&bits, &w[src[i]], sizeof bits);
      dst[count[(~bits >> shift) & 0xff]++] = src[i];
    }
    int32_t *t = src;
    src = dst, dst = t;
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

  // Step 2: the tokens of positive weight (the max has w = 1, so n >= 1).
  // With top-p and no top-k, a weight below 2^-53, half an ulp of any sum
  // that holds the max, changes no cumulative mass and is never kept: such
  // tokens stay out of the ranking (they are ranked last, after every kept
  // one, so the result is a full sort's).
  bool tail_out = s->top_p < 1 && s->top_k == 0;
  float least = tail_out ? 0x1p-53f : FLT_TRUE_MIN;  // the smallest weight ranked
  int64_t ranked = 0;
  for (int64_t i = 0; i < vocab; i++)
    if (probs[i] >= least) order[ranked++] = (int32_t)i;
  int64_t n = ranked;
  for (int64_t i = 0; i < vocab; i++)
    if (probs[i] > 0 && probs[i] < least) order[n++] = (int32_t)i;

  // Step 3: top-k, the first k ranked by a partial heap selection; else the
  // ranked set sorted. total: the survivors' mass, summed in rank order.
  int64_t kept = s->top_k > 0 && s->top_k < n ? s->top_k : n;
  double total = 0;
  if (kept < ranked / 8) {
    heap_prefix(probs, order, ranked, kept, &total);
  } else {
    radix_rank(probs, order, order + vocab, ranked);  // 4 passes: the result is back in order
    if (kept > ranked) kept = ranked;  // tail_out: the unranked tail adds nothing to total
    for (int64_t r = 0; r < kept; r++) total += probs[order[r]];
  }

  // Step 4: top-p over the top-k survivors, cumulative mass in rank order
  // (it reaches total within the ranked prefix).
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
