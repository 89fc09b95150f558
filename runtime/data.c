// data.c: token files and the seeded batch sampler (see xf.h).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "xf.h"

enum { STREAM_BATCH = 0x62617463u };

#define fail xf_errorf

bool xf_data_load_bytes(const char *path, double heldout, int64_t vocab, XfData *d, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, "cannot open data file %s: %s", path, strerror(errno));
  if (fseek(f, 0, SEEK_END) != 0) {
    fclose(f);
    return fail(err, errlen, "cannot read data file %s: not a regular file", path);
  }
  long size = ftell(f);
  rewind(f);
  if (size <= 0) {
    fclose(f);
    return fail(err, errlen, "data file %s is empty", path);
  }
  unsigned char *bytes = malloc((size_t)size);
  d->tokens = malloc(sizeof(int32_t) * (size_t)size);
  if (!bytes || !d->tokens) {
    free(bytes), fclose(f), xf_data_free(d);
    return fail(err, errlen, "out of memory reading %s", path);
  }
  size_t got = fread(bytes, 1, (size_t)size, f);
  bool rerr = ferror(f);
  fclose(f);
  if (rerr || got != (size_t)size) {
    free(bytes), xf_data_free(d);
    return fail(err, errlen, "cannot read data file %s", path);
  }
  for (long i = 0; i < size; i++) {
    if (bytes[i] >= vocab) {
      fail(err, errlen, "token %d (byte %ld of %s) is beyond the model's vocabulary of %lld", bytes[i], i, path,
           (long long)vocab);
      free(bytes), xf_data_free(d);
      return false;
    }
    d->tokens[i] = bytes[i];
  }
  free(bytes);
  d->n = size;
  d->split = size - (int64_t)((double)size * heldout);
  return true;
}

void xf_data_free(XfData *d) {
  free(d->tokens);
  memset(d, 0, sizeof *d);
}

void xf_data_batch(const XfData *d, int64_t from, int64_t to, int64_t batch, int64_t seq, uint64_t seed, uint32_t step,
                   int32_t *tokens, int32_t *targets) {
  int64_t span = to - from - seq;  // window starts: [from, from + span)
  for (int64_t r = 0; r < batch; r++) {
    int64_t start = from + (int64_t)(xf_rand_uniform(seed, STREAM_BATCH, (uint64_t)r, step) * (double)span);
    memcpy(tokens + r * seq, d->tokens + start, sizeof(int32_t) * (size_t)seq);
    if (targets) memcpy(targets + r * seq, d->tokens + start + 1, sizeof(int32_t) * (size_t)seq);
  }
}
