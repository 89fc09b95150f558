// rng.h: the counter-based random numbers of xf (Philox4x32-10, Salmon et
// al., SC'11). Every random number is a pure function of
//   (seed, stream, index, step)
// so parameters and dropout masks are the same on every backend, thread
// count and device: the reference interpreter, generated CPU code and CUDA
// kernels all call these functions. Header-only, no dependencies.
//
// Streams: a parameter's initialiser uses xf_stream_of(name); a dropout node
// uses its IR `stream` attribute, with the training step as `step`.
#ifndef XF_RNG_H
#define XF_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
  uint32_t v[4];
} XfPhilox;

static inline uint32_t xf_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

// Philox4x32 with 10 rounds on counter c and key k.
static inline XfPhilox xf_philox4x32(const uint32_t c[4], const uint32_t k[2]) {
  uint32_t x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3], k0 = k[0], k1 = k[1];
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, hi1;
    uint32_t lo0 = xf_mulhilo32(0xD2511F53u, x0, &hi0);
    uint32_t lo1 = xf_mulhilo32(0xCD9E8D57u, x2, &hi1);
    x0 = hi1 ^ x1 ^ k0;
    x1 = lo1;
    x2 = hi0 ^ x3 ^ k1;
    x3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  XfPhilox r = {{x0, x1, x2, x3}};
  return r;
}

static inline XfPhilox xf_rand_bits(uint64_t seed, uint32_t stream, uint64_t index, uint32_t step) {
  uint32_t c[4] = {(uint32_t)index, (uint32_t)(index >> 32), stream, step};
  uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  return xf_philox4x32(c, k);
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
static inline double xf_rand_uniform(uint64_t seed, uint32_t stream, uint64_t index, uint32_t step) {
  return (double)(xf_rand_bits(seed, stream, index, step).v[0] >> 8) * (1.0 / 16777216.0);
}

// Standard normal by Box-Muller from the first two words.
static inline double xf_rand_normal(uint64_t seed, uint32_t stream, uint64_t index, uint32_t step) {
  XfPhilox r = xf_rand_bits(seed, stream, index, step);
  double u1 = ((double)(r.v[0] >> 8) + 1.0) * (1.0 / 16777216.0);  // (0, 1]
  double u2 = (double)(r.v[1] >> 8) * (1.0 / 16777216.0);          // [0, 1)
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// Element k of a parameter initialised by kind (XF_INIT_* of runtime/xf_abi.h:
// 1 normal, 2 uniform, 3 zeros, 4 ones, 5 constant, 6 trunc_normal; runtime.c
// checks the numbers) with arguments a, b from stream `stream` of seed:
// a + b z; uniform in [a, b); 0; 1; a; a + b z with z the first of the draws
// z_0, z_1, ... (Philox step 0, 1, ...) within [-2, 2] (a after 64 outside).
static inline double xf_init_draw(int kind, double a, double b, uint64_t seed, uint32_t stream, uint64_t k) {
  switch (kind) {
  case 1: return a + b * xf_rand_normal(seed, stream, k, 0);
  case 2: return a + (b - a) * xf_rand_uniform(seed, stream, k, 0);
  case 4: return 1;
  case 5: return a;
  case 6:
    for (uint32_t s = 0; s < 64; s++) {
      double z = xf_rand_normal(seed, stream, k, s);
      if (z >= -2 && z <= 2) return a + b * z;
    }
    return a;
  default: return 0;
  }
}

// Stream of a parameter: FNV-1a of its name.
static inline uint32_t xf_stream_of(const char *name) {
  uint32_t h = 2166136261u;
  for (; *name; name++) h = (h ^ (uint8_t)*name) * 16777619u;
  return h;
}

#endif
