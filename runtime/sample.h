// sample.h: the token-sampling filters of `xfrun sample` (temperature,
// top-k, top-p) and the draw from the filtered distribution.
//
//   XfSampling s = {.temperature = 0.8, .top_k = 0, .top_p = 0.6};
//   if (!xf_sampling_check(&s, err, sizeof err)) ...        // err: "--top-p 1.5: must be in (0, 1]"
//   xf_sample_filter(logits, vocab, &s, probs, order);       // probs: filtered, renormalised
//   int32_t id = xf_sample_draw(probs, vocab, xf_rand_uniform(seed, stream, t, 0));
//
// Semantics, in this order (the order of Hugging Face transformers'
// TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper):
//
//  1. Temperature. T = 0 is greedy: the kept set is the single token of
//     largest logit (lowest id among equal logits); top-k and top-p are not
//     applied. T > 0: w_i = exp((l_i - max_j l_j) / T), the unnormalised
//     softmax(l / T), computed in double and stored as float.
//  2. Ranking. Tokens with w_i > 0 are ranked by w_i descending, equal w_i
//     by lower id first. Tokens with w_i = 0 (logit -inf, or underflow) are
//     never kept.
//  3. Top-k (k > 0): the first min(k, #ranked) ranked tokens are kept,
//     exactly k even when several tokens tie with the k-th (Hugging Face keeps
//     every token tied with the k-th logit; here the lower ids win).
//  4. Top-p (p < 1): over the top-k survivors, with c_r the cumulative mass
//     of the first r of them divided by their total mass (both summed in
//     double in rank order, so the last c_r is exactly 1), the kept set is
//     the first r tokens for the smallest r with c_r >= p. The token that
//     crosses p is kept; a token whose predecessors already reach p exactly
//     is not (as transformers: remove when the mass of the more probable
//     tokens is >= p). p = 1 keeps every survivor.
//  5. probs[i] = w_i / (sum of the kept w) for kept tokens, 0 otherwise.
//
// Non-finite logits: -inf and NaN logits get w = 0. If any logit is +inf,
// the tokens with +inf share the mass equally. If no logit is finite or
// +inf, every token gets w = 1 (uniform) so that a token can still be drawn.
// At least one token is always kept.
#ifndef XF_SAMPLE_H
#define XF_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  double temperature;  // >= 0 and finite; 0 means greedy (argmax, lowest id on ties)
  int64_t top_k;       // 0: off; else keep the k most probable
  double top_p;        // 1.0: off; in (0, 1]: keep the smallest most-probable set with mass >= top_p
} XfSampling;

// Turns logits[vocab] (1 <= vocab <= INT32_MAX / 2) into the filtered,
// renormalised distribution probs[vocab] (0 for removed tokens) and returns
// the number of kept tokens (>= 1; exactly the entries with probs > 0).
// `order` is scratch of 2 vocab int32 (no allocation); on return order[0 ..
// kept-1] are the kept ids by rank. `s` must pass xf_sampling_check. Time:
// O(vocab) (greedy, top-p, neither: a radix sort), O(vocab + k log vocab)
// with a small top-k (sample.c).
int64_t xf_sample_filter(const float *logits, int64_t vocab, const XfSampling *s, float *probs, int32_t *order);

// Draws an id from probs[vocab] with u in [0, 1): the inverse CDF in id
// order, scaled by the actual sum of probs (so probs need not sum to exactly
// 1): the smallest id whose cumulative mass exceeds u * sum. NaN and
// negative entries count as 0; u outside [0, 1) is clamped. Always returns an
// id with probs > 0; -1 only if no entry is positive (never after
// xf_sample_filter).
int32_t xf_sample_draw(const float *probs, int64_t vocab, double u);

// The stream of runtime/rng.h that `xfrun sample` draws its uniforms from:
// sequence i's token k takes xf_rand_uniform(seed, XF_STREAM_SAMPLE, i << 32 | k, 0).
enum { XF_STREAM_SAMPLE = 0x73616d70 };

// Checks a sampling configuration; false with a one-line message naming the
// command-line option, e.g. "--top-p 1.5: must be in (0, 1]".
bool xf_sampling_check(const XfSampling *s, char *err, size_t errlen);

#endif
