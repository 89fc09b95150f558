// test_sample.c: the sampling filters of runtime/sample.h on hand-made
// distributions whose surviving ids are worked out by hand, and the draw's
// frequencies and reproducibility with the counter-based generator.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "rng.h"
#include "sample.h"

#define MAXV 64

// The ids with probs > 0 as a bit mask (vocab <= 64).
static uint64_t kept_mask(const float *probs, int64_t vocab) {
  uint64_t m = 0;
  for (int64_t i = 0; i < vocab; i++)
    if (probs[i] > 0) m |= 1ull << i;
  return m;
}

static uint64_t ids(int n, const int *list) {
  uint64_t m = 0;
  for (int i = 0; i < n; i++) m |= 1ull << list[i];
  return m;
}
#define IDS(...) ids((int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__})

static float probs[MAXV];
static int32_t order[2 * MAXV];

// Filters logits with (T, k, p); returns the kept mask and checks that the
// return value counts it, that probs sum to 1 and that order lists the kept
// ids first.
static uint64_t run(const float *logits, int64_t vocab, double t, int64_t k, double p) {
  XfSampling s = {t, k, p};
  int64_t n = xf_sample_filter(logits, vocab, &s, probs, order);
  uint64_t m = kept_mask(probs, vocab);
  CHECK(n >= 1 && n == __builtin_popcountll(m));
  double sum = 0;
  for (int64_t i = 0; i < vocab; i++) sum += probs[i];
  CHECK(fabs(sum - 1) < 1e-6);
  for (int64_t r = 0; r < n && r < vocab; r++) CHECK(probs[order[r]] > 0);
  return m;
}

static bool near(double a, double b, double tol) { return fabs(a - b) <= tol; }

// p = {0.5, 0.2, 0.15, 0.1, 0.05} as logits log p: cumulative masses 0.5,
// 0.7, 0.85, 0.95, 1. Thresholds stay 0.05 away from them (the exact
// boundary is tested on equal logits, where every mass is exact).
static void test_top_p(void) {
  const double p[5] = {0.5, 0.2, 0.15, 0.1, 0.05};
  float l[5];
  for (int i = 0; i < 5; i++) l[i] = (float)log(p[i]);
  CHECK(run(l, 5, 1, 0, 0.45) == IDS(0));
  CHECK(probs[0] == 1.0f);
  CHECK(run(l, 5, 1, 0, 0.55) == IDS(0, 1));
  CHECK(near(probs[0], 0.5 / 0.7, 1e-6) && near(probs[1], 0.2 / 0.7, 1e-6));
  CHECK(run(l, 5, 1, 0, 0.65) == IDS(0, 1));
  CHECK(run(l, 5, 1, 0, 0.75) == IDS(0, 1, 2));
  CHECK(near(probs[0], 0.5 / 0.85, 1e-6) && near(probs[1], 0.2 / 0.85, 1e-6) && near(probs[2], 0.15 / 0.85, 1e-6));
  CHECK(run(l, 5, 1, 0, 0.9) == IDS(0, 1, 2, 3));
  CHECK(run(l, 5, 1, 0, 0.99) == IDS(0, 1, 2, 3, 4));
  CHECK(run(l, 5, 1, 0, 1.0) == IDS(0, 1, 2, 3, 4));
  for (int i = 0; i < 5; i++) CHECK(near(probs[i], p[i], 1e-6));
  CHECK(run(l, 5, 1, 0, 1e-9) == IDS(0));

  // The same distribution with its ids shuffled: ranking is by probability.
  // id: 0     1    2     3    4
  //     0.1   0.5  0.05  0.2  0.15
  float sh[5] = {l[3], l[0], l[4], l[1], l[2]};
  CHECK(run(sh, 5, 1, 0, 0.45) == IDS(1));
  CHECK(run(sh, 5, 1, 0, 0.75) == IDS(1, 3, 4));
  CHECK(order[0] == 1 && order[1] == 3 && order[2] == 4);
  CHECK(run(sh, 5, 1, 0, 0.9) == IDS(0, 1, 3, 4));
}

static void test_top_k(void) {
  const double p[5] = {0.5, 0.2, 0.15, 0.1, 0.05};
  float l[5];
  for (int i = 0; i < 5; i++) l[i] = (float)log(p[i]);
  CHECK(run(l, 5, 1, 1, 1) == IDS(0));
  CHECK(run(l, 5, 1, 3, 1) == IDS(0, 1, 2));
  CHECK(near(probs[0], 0.5 / 0.85, 1e-6) && near(probs[1], 0.2 / 0.85, 1e-6) && near(probs[2], 0.15 / 0.85, 1e-6));
  CHECK(run(l, 5, 1, 5, 1) == IDS(0, 1, 2, 3, 4));
  CHECK(run(l, 5, 1, 1000, 1) == IDS(0, 1, 2, 3, 4));

  // top-k 2 then top-p on the renormalised pair {0.5/0.7, 0.2/0.7} =
  // {0.714, 0.286}: 0.6 is reached by id 0 alone (without top-k, 0.6 keeps
  // {0, 1}); 0.8 needs both.
  CHECK(run(l, 5, 1, 2, 0.6) == IDS(0));
  CHECK(probs[0] == 1.0f);
  CHECK(run(l, 5, 1, 0, 0.6) == IDS(0, 1));
  CHECK(run(l, 5, 1, 2, 0.8) == IDS(0, 1));
  CHECK(near(probs[0], 0.5 / 0.7, 1e-6) && near(probs[1], 0.2 / 0.7, 1e-6));
  // top-k 4 then top-p 0.9 on {0.5, 0.2, 0.15, 0.1} / 0.95: cumulative
  // 0.526, 0.737, 0.895, 1: the fourth token crosses 0.9.
  CHECK(run(l, 5, 1, 4, 0.9) == IDS(0, 1, 2, 3));
  CHECK(run(l, 5, 1, 4, 0.89) == IDS(0, 1, 2));
}

// Equal logits: every weight is exactly 1 and every cumulative mass exact,
// so the boundary of top-p (>=) is tested exactly.
static void test_ties_and_boundary(void) {
  float eq4[4] = {0, 0, 0, 0};
  CHECK(run(eq4, 4, 1, 0, 0.5) == IDS(0, 1));  // 0.25 + 0.25 reaches 0.5 exactly: id 2 not kept
  CHECK(probs[0] == 0.5f && probs[1] == 0.5f);
  CHECK(run(eq4, 4, 1, 0, nextafter(0.5, 1)) == IDS(0, 1, 2));
  CHECK(run(eq4, 4, 1, 0, nextafter(0.5, 0)) == IDS(0, 1));
  CHECK(run(eq4, 4, 1, 0, 0.25) == IDS(0));
  CHECK(run(eq4, 4, 1, 0, 0.75) == IDS(0, 1, 2));
  CHECK(run(eq4, 4, 1, 0, 1) == IDS(0, 1, 2, 3));
  float eq8[8] = {3, 3, 3, 3, 3, 3, 3, 3};
  CHECK(run(eq8, 8, 0.7, 0, 0.375) == IDS(0, 1, 2));
  CHECK(run(eq8, 8, 0.7, 0, 0.376) == IDS(0, 1, 2, 3));
  // Ties at the top-k boundary: exactly k kept, lower ids first.
  float t[6] = {2, 5, 5, 5, 5, 2};
  CHECK(run(t, 6, 1, 3, 1) == IDS(1, 2, 3));
  CHECK(order[0] == 1 && order[1] == 2 && order[2] == 3);
  CHECK(run(t, 6, 1, 5, 1) == IDS(0, 1, 2, 3, 4));
  CHECK(order[4] == 0);
  // top-p on the tie: four tokens of mass 0.25 * 4 e^5 / (4 e^5 + 2 e^2) each.
  double big = exp(5.0) / (4 * exp(5.0) + 2 * exp(2.0));
  CHECK(run(t, 6, 1, 0, 2 * big - 0.01) == IDS(1, 2));
  CHECK(run(t, 6, 1, 0, 4 * big + 0.001) == IDS(0, 1, 2, 3, 4));
}

static void test_greedy(void) {
  float l[4] = {1, 3, 2, 3};
  CHECK(run(l, 4, 0, 0, 1) == IDS(1));  // lowest id of the two 3s
  CHECK(probs[1] == 1.0f && order[0] == 1);
  CHECK(run(l, 4, 0, 3, 0.5) == IDS(1));  // top-k and top-p do not apply
  float n[3] = {NAN, -INFINITY, -5};
  CHECK(run(n, 3, 0, 0, 1) == IDS(2));
  float allinf[3] = {-INFINITY, -INFINITY, -INFINITY};
  CHECK(run(allinf, 3, 0, 0, 1) == IDS(0));
}

// softmax(l / T), computed here in double.
static void check_softmax(const float *l, int n, double t) {
  double m = -INFINITY, z = 0, ref[MAXV];
  for (int i = 0; i < n; i++) m = fmax(m, l[i] / t);
  for (int i = 0; i < n; i++) z += ref[i] = exp(l[i] / t - m);
  for (int i = 0; i < n; i++) CHECK(near(probs[i], ref[i] / z, 1e-6));
}

static void test_temperature(void) {
  float l[3] = {1, 2, 3};
  run(l, 3, 1, 0, 1);
  check_softmax(l, 3, 1);
  CHECK(near(probs[2], exp(2.0) / (1 + exp(1.0) + exp(2.0)), 1e-6));
  run(l, 3, 0.5, 0, 1);
  check_softmax(l, 3, 0.5);
  CHECK(near(probs[2], exp(4.0) / (1 + exp(2.0) + exp(4.0)), 1e-6));  // sharper
  run(l, 3, 2, 0, 1);
  check_softmax(l, 3, 2);
  CHECK(near(probs[2], exp(1.0) / (1 + exp(0.5) + exp(1.0)), 1e-6));  // flatter
  run(l, 3, 1e6, 0, 1);
  CHECK(near(probs[0], 1.0 / 3, 1e-5) && near(probs[2], 1.0 / 3, 1e-5));
  // A tiny temperature underflows all but the max: greedy in effect.
  CHECK(run(l, 3, 1e-3, 0, 1) == IDS(2));
  // Large logits: no overflow once the max is subtracted.
  float big[2] = {1000, 999};
  run(big, 2, 1, 0, 1);
  CHECK(near(probs[0], 1 / (1 + exp(-1.0)), 1e-6));
  // A weight of about 1e-45 that renormalises to 0 in float is not counted.
  float tiny[40];
  for (int i = 0; i < 40; i++) tiny[i] = 0;
  tiny[39] = -103.5f;  // exp(-103.5) ~ 1.2e-45 > 0 in float; / 40 rounds to 0
  CHECK(run(tiny, 40, 1, 0, 1) == ((1ull << 39) - 1));
    float huge[3] = {3e38f, -3e38f, 3e38f};
  CHECK(run(huge, 3, 1, 0, 1) == IDS(0, 2));
  // Temperature applies before top-p: at T = 1 the masses of {1, 2, 3} are
  // 0.090, 0.245, 0.665 (0.7 needs two tokens); at T = 0.5 they are 0.016,
  // 0.117, 0.867 (one token).
  CHECK(run(l, 3, 1, 0, 0.7) == IDS(1, 2));
  CHECK(run(l, 3, 0.5, 0, 0.7) == IDS(2));
}

static void test_nonfinite(void) {
  float l[4] = {-INFINITY, 0, -INFINITY, (float)log(3.0)};
  CHECK(run(l, 4, 1, 0, 1) == IDS(1, 3));
  CHECK(near(probs[1], 0.25, 1e-6) && near(probs[3], 0.75, 1e-6));
  CHECK(run(l, 4, 1, 3, 1) == IDS(1, 3));  // k larger than the tokens left
  CHECK(run(l, 4, 1, 0, 0.7) == IDS(3));
  float one[4] = {-INFINITY, -INFINITY, 5, -INFINITY};
  CHECK(run(one, 4, 1, 0, 1) == IDS(2));
  CHECK(probs[2] == 1.0f);
  CHECK(run(one, 4, 1, 3, 0.5) == IDS(2));
  CHECK(run(one, 4, 0.01, 0, 1e-6) == IDS(2));
  float nan[3] = {NAN, 1, 1};
  CHECK(run(nan, 3, 1, 0, 1) == IDS(1, 2));
  float pinf[3] = {0, INFINITY, INFINITY};
  CHECK(run(pinf, 3, 1, 0, 1) == IDS(1, 2));
  CHECK(probs[1] == 0.5f && probs[2] == 0.5f);
  float none[3] = {-INFINITY, NAN, -INFINITY};  // no usable logit: uniform
  CHECK(run(none, 3, 1, 0, 1) == IDS(0, 1, 2));
  CHECK(run(none, 3, 1, 1, 1) == IDS(0));
}

static void test_vocab_one(void) {
  float l[1] = {-7};
  CHECK(run(l, 1, 1, 0, 1) == IDS(0));
  CHECK(probs[0] == 1.0f);
  CHECK(run(l, 1, 0, 0, 1) == IDS(0));
  CHECK(run(l, 1, 0.3, 5, 0.01) == IDS(0));
  float inf[1] = {-INFINITY};
  CHECK(run(inf, 1, 1, 0, 1) == IDS(0));
  CHECK(xf_sample_draw(probs, 1, 0.5) == 0);
}

// A vocabulary of 5000 normal logits against brute force: top-k keeps the k
// largest logits; top-p's kept set has mass >= p and loses that without its
// least probable member; every kept token is at least as probable as every
// removed one.
static void test_large_vocab(void) {
  enum { V = 5000 };
  static float l[V], pr[V];
  static int32_t ord[2 * V];
  static double ref[V];
  for (int i = 0; i < V; i++) l[i] = (float)(2 * xf_rand_normal(11, 3, (uint64_t)i, 0));
  l[17] = l[4000];  // one exact tie
  double m = -INFINITY, z = 0;
  for (int i = 0; i < V; i++) m = fmax(m, l[i]);
  for (int i = 0; i < V; i++) z += ref[i] = exp(l[i] - m);
  for (int i = 0; i < V; i++) ref[i] /= z;

  XfSampling s = {1, 50, 1};
  CHECK(xf_sample_filter(l, V, &s, pr, ord) == 50);
  int bad = 0;
  for (int i = 0; i < V; i++) {
    int above = 0;  // tokens ranked before i
    for (int j = 0; j < V; j++) above += l[j] > l[i] || (l[j] == l[i] && j < i);
    bad += (pr[i] > 0) != (above < 50);
  }
  CHECK(bad == 0);

  s = (XfSampling){1, 0, 0.9};
  int64_t n = xf_sample_filter(l, V, &s, pr, ord);
  double mass = 0, min_kept = INFINITY, max_removed = 0;
  for (int i = 0; i < V; i++) {
    if (pr[i] > 0) mass += ref[i], min_kept = fmin(min_kept, ref[i]);
    else max_removed = fmax(max_removed, ref[i]);
  }
  CHECK(n > 1 && n < V);
  CHECK(mass >= 0.9 - 1e-6 && mass - min_kept < 0.9 + 1e-6);
  CHECK(min_kept >= max_removed);
  bad = 0;
  for (int64_t r = 1; r < n; r++) bad += !(pr[ord[r - 1]] > pr[ord[r]] || (pr[ord[r - 1]] == pr[ord[r]] && ord[r - 1] < ord[r]));
  for (int64_t r = 0; r < n; r++) bad += !near(pr[ord[r]], ref[ord[r]] / mass, 1e-5 * ref[ord[r]] / mass + 1e-9);
  CHECK(bad == 0);
}

static void test_draw(void) {
  // Inverse CDF in id order.
  float p3[3] = {0.25f, 0.25f, 0.5f};
  CHECK(xf_sample_draw(p3, 3, 0) == 0);
  CHECK(xf_sample_draw(p3, 3, 0.24) == 0);
  CHECK(xf_sample_draw(p3, 3, 0.25) == 1);
  CHECK(xf_sample_draw(p3, 3, 0.49) == 1);
  CHECK(xf_sample_draw(p3, 3, 0.5) == 2);
  CHECK(xf_sample_draw(p3, 3, 0.9999999) == 2);
  CHECK(xf_sample_draw(p3, 3, 1.0) == 2);    // clamped
  CHECK(xf_sample_draw(p3, 3, -0.5) == 0);   // clamped
  CHECK(xf_sample_draw(p3, 3, NAN) == 0);
  // Only ids with probs > 0, also at both ends of u.
  float z[5] = {0, 0.5f, 0, 0.5f, 0};
  CHECK(xf_sample_draw(z, 5, 0) == 1);
  CHECK(xf_sample_draw(z, 5, 0.5) == 3);
  CHECK(xf_sample_draw(z, 5, nextafter(1.0, 0)) == 3);
  float nn[3] = {NAN, 0.3f, -1};
  CHECK(xf_sample_draw(nn, 3, 0) == 1 && xf_sample_draw(nn, 3, 0.999) == 1);
  float none[2] = {0, 0};
  CHECK(xf_sample_draw(none, 2, 0.5) == -1);
  // Not summing to 1: scaled by the sum.
  float half[2] = {0.25f, 0.25f};
  CHECK(xf_sample_draw(half, 2, 0.4) == 0 && xf_sample_draw(half, 2, 0.6) == 1);

  // Frequencies of 100k draws with top-p 0.9 on {0.5, 0.2, 0.15, 0.1, 0.05}:
  // {0.5, 0.2, 0.15, 0.1} / 0.95, never id 4; each within 4 sigma.
  const double p[5] = {0.5, 0.2, 0.15, 0.1, 0.05};
  float l[5];
  for (int i = 0; i < 5; i++) l[i] = (float)log(p[i]);
  XfSampling s = {1, 0, 0.9};
  CHECK(xf_sample_filter(l, 5, &s, probs, order) == 4);
  enum { N = 100000 };
  long count[5] = {0}, outside = 0;
  for (uint64_t t = 0; t < N; t++) {
    int32_t id = xf_sample_draw(probs, 5, xf_rand_uniform(42, 7, t, 0));
    if (id >= 0 && id < 5) count[id]++;
    else outside++;
  }
  CHECK(outside == 0 && count[4] == 0);
  for (int i = 0; i < 4; i++) {
    double q = p[i] / 0.95, sd = sqrt(N * q * (1 - q));
    CHECK(fabs((double)count[i] - N * q) < 4 * sd);
  }

  // The same seed gives the same sequence; another seed another one.
  static int32_t a[1000], b[1000], c[1000];
  for (uint64_t t = 0; t < 1000; t++) {
    a[t] = xf_sample_draw(probs, 5, xf_rand_uniform(9, 1, t, 0));
    b[t] = xf_sample_draw(probs, 5, xf_rand_uniform(9, 1, t, 0));
    c[t] = xf_sample_draw(probs, 5, xf_rand_uniform(10, 1, t, 0));
  }
  CHECK(memcmp(a, b, sizeof a) == 0);
  CHECK(memcmp(a, c, sizeof a) != 0);
}

static void test_check(void) {
  char err[128];
  XfSampling ok[] = {{0, 0, 1}, {1, 0, 1}, {0.7, 40, 0.6}, {100, 1, 1e-9}};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) CHECK(xf_sampling_check(&ok[i], err, sizeof err));
  XfSampling s = {1, 0, 1.5};
  CHECK(!xf_sampling_check(&s, err, sizeof err) && !strncmp(err, "--top-p 1.5: must be in (0, 1]", 30));
  s = (XfSampling){1, 0, 0};
  CHECK(!xf_sampling_check(&s, err, sizeof err) && !strncmp(err, "--top-p 0: ", 11));
  s = (XfSampling){1, 0, NAN};
  CHECK(!xf_sampling_check(&s, err, sizeof err) && !strncmp(err, "--top-p ", 8));
  s = (XfSampling){1, -1, 1};
  CHECK(!xf_sampling_check(&s, err, sizeof err) && !strncmp(err, "--top-k -1: ", 12));
  s = (XfSampling){-0.5, 0, 1};
  CHECK(!xf_sampling_check(&s, err, sizeof err) && !strncmp(err, "--temperature -0.5: ", 20));
  s = (XfSampling){NAN, 0, 1};
  CHECK(!xf_sampling_check(&s, err, sizeof err) && !strncmp(err, "--temperature ", 14));
  s = (XfSampling){INFINITY, 0, 1};
  CHECK(!xf_sampling_check(&s, err, sizeof err));
  CHECK(strchr(err, '\n') == NULL);
}

// The filter as specified in sample.h, with a full sort of every token of
// positive weight (qsort by rank): the oracle of the partial selection,
// which must keep the same tokens with bit-identical probabilities.
static const float *ref_w;
static int by_rank(const void *pa, const void *pb) {
  int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
  if (ref_w[a] != ref_w[b]) return ref_w[a] > ref_w[b] ? -1 : 1;
  return a < b ? -1 : a > b;
}
static int64_t ref_filter(const float *logits, int64_t vocab, const XfSampling *s, float *pr, int32_t *ord) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < vocab; i++)
    if (logits[i] > mx) mx = logits[i];
  for (int64_t i = 0; i < vocab; i++)
    pr[i] = isfinite(logits[i]) ? (float)exp(((double)logits[i] - (double)mx) / s->temperature) : 0.0f;
  int64_t n = 0;
  for (int64_t i = 0; i < vocab; i++)
    if (pr[i] > 0) ord[n++] = (int32_t)i;
  ref_w = pr;
  qsort(ord, (size_t)n, sizeof *ord, by_rank);
  int64_t kept = s->top_k > 0 && s->top_k < n ? s->top_k : n;
  double total = 0;
  for (int64_t r = 0; r < kept; r++) total += pr[ord[r]];
  if (s->top_p < 1) {
    double cum = 0;
    for (int64_t r = 0; r < kept; r++) {
      cum += pr[ord[r]];
      if (cum / total >= s->top_p) {
        kept = r + 1, total = cum;
        break;
      }
    }
  }
  for (int64_t r = kept; r < n; r++) pr[ord[r]] = 0;
  for (int64_t r = 0; r < kept; r++) pr[ord[r]] = (float)(pr[ord[r]] / total);
  while (kept > 1 && pr[ord[kept - 1]] == 0) kept--;
  return kept;
}

// The partial selection against the full sort: logits of several spreads
// (flat ones, where every token changes the total; steep ones, where the
// early stop cuts most), with ties, every combination of temperature, top-k
// and top-p: the same count, the same ranked kept ids, the same bits.
static void test_partial_selection(void) {
  enum { V = 5000 };
  static float l[V], pr[V], rp[V];
  static int32_t ord[2 * V], rord[2 * V];
  const double spread[] = {0.01, 1, 4, 30};
  const double temps[] = {0.3, 1, 2.5};
  const int64_t ks[] = {0, 1, 7, 50, V - 1, V + 3};
  const double ps[] = {1, 0.999999, 0.9, 0.6, 0.05};
  int cases = 0, bad = 0;
  for (size_t a = 0; a < sizeof spread / sizeof *spread; a++) {
    for (int i = 0; i < V; i++) l[i] = (float)(spread[a] * xf_rand_normal(5, (uint64_t)a, (uint64_t)i, 0));
    for (int i = 0; i < 40; i++) l[(i * 97) % V] = l[(i * 31 + 7) % V];  // ties
    l[123] = -INFINITY;
    for (size_t t = 0; t < sizeof temps / sizeof *temps; t++)
      for (size_t k = 0; k < sizeof ks / sizeof *ks; k++)
        for (size_t p = 0; p < sizeof ps / sizeof *ps; p++) {
          XfSampling s = {temps[t], ks[k], ps[p]};
          int64_t n = xf_sample_filter(l, V, &s, pr, ord), rn = ref_filter(l, V, &s, rp, rord);
          bool same = n == rn && !memcmp(pr, rp, sizeof pr) && !memcmp(ord, rord, sizeof(int32_t) * (size_t)n);
          bad += !same, cases++;
        }
  }
  CHECK(cases == 360 && bad == 0);
  // A total that only a full sum gets right: one token of weight 1 and 1000
  // of weight about 2^-50 (4 ulps of 1 each: every one changes the sum), and
  // p just under 1: the first token's share, 1 - 8.9e-13, is short of p, so
  // the tail is kept; a sum stopped too early (total 1) would keep 1 token.
  for (int i = 0; i < 1001; i++) l[i] = i ? (float)(-50 * log(2.0)) : 0;
  XfSampling s = {1, 0, 1 - 1e-13};
  int64_t n = xf_sample_filter(l, 1001, &s, pr, ord);
  CHECK(n == ref_filter(l, 1001, &s, rp, rord) && n > 1 && !memcmp(pr, rp, sizeof(float) * 1001));
}

int main(void) {
  test_top_p();
  test_top_k();
  test_ties_and_boundary();
  test_greedy();
  test_temperature();
  test_nonfinite();
  test_vocab_one();
  test_large_vocab();
  test_partial_selection();
  test_draw();
  test_check();
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
