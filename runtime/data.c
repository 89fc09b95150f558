// data.c: corpora, token caches and the seeded batch sampler (see xf.h).
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rng.h"
#include "tokenizer.h"
#include "xf.h"

enum { STREAM_BATCH = 0x62617463u };

#define fail xf_errorf

// ---- corpora -------------------------------------------------------------------------

uint64_t xf_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}

static bool add_file(XfCorpus *c, const char *path, size_t *cap, char *err, size_t errlen) {
  if (c->n == (int)*cap) {
    size_t ncap = *cap ? *cap * 2 : 16;
    char **f = realloc(c->files, ncap * sizeof *f);
    if (!f) return fail(err, errlen, "out of memory");
    c->files = f, *cap = ncap;
  }
  if (!(c->files[c->n] = strdup(path))) return fail(err, errlen, "out of memory");
  c->n++;
  return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Appends the *.txt files of folder dir in name order.
static bool add_folder(XfCorpus *c, const char *dir, size_t *cap, char *err, size_t errlen) {
  DIR *d = opendir(dir);
  if (!d) return fail(err, errlen, "cannot open data folder %s: %s", dir, strerror(errno));
  int first = c->n;
  bool ok = true;
  for (struct dirent *e; ok && (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".txt") || e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) ok = add_file(c, path, cap, err, errlen);
  }
  closedir(d);
  if (ok && c->n == first) return fail(err, errlen, "data folder %s has no .txt files", dir);
  if (ok) qsort(c->files + first, (size_t)(c->n - first), sizeof *c->files, cmp_str);
  return ok;
}

bool xf_corpus_read(const char *const *paths, int npaths, XfCorpus *c, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  size_t cap = 0;
  bool ok = true;
  for (int i = 0; ok && i < npaths; i++) {
    struct stat st;
    if (stat(paths[i], &st) != 0) ok = fail(err, errlen, "cannot open data file %s: %s", paths[i], strerror(errno));
    else if (S_ISDIR(st.st_mode)) ok = add_folder(c, paths[i], &cap, err, errlen);
    else ok = add_file(c, paths[i], &cap, err, errlen);
  }
  if (ok && c->n == 0) ok = fail(err, errlen, "no data files given");
  if (ok && (!(c->texts = calloc((size_t)c->n, sizeof *c->texts)) || !(c->lens = calloc((size_t)c->n, sizeof *c->lens))))
    ok = fail(err, errlen, "out of memory");
  c->hash = XF_FNV1A_BASIS;
  for (int i = 0; ok && i < c->n; i++) {
    char ferr[512];
    if (!(c->texts[i] = xf_read_file(c->files[i], &c->lens[i], ferr, sizeof ferr)))
      ok = fail(err, errlen, "cannot read data file %s", ferr);
    else if (c->lens[i] == 0) ok = fail(err, errlen, "data file %s is empty", c->files[i]);
    if (!ok) break;
    uint64_t len = c->lens[i];
    c->hash = xf_fnv1a(xf_fnv1a(c->hash, &len, sizeof len), c->texts[i], c->lens[i]);
    c->bytes += c->lens[i];
  }
  if (!ok) xf_corpus_free(c);
  return ok;
}

void xf_corpus_free(XfCorpus *c) {
  for (int i = 0; i < c->n; i++) {
    free(c->files[i]);
    if (c->texts) free(c->texts[i]);
  }
  free(c->files), free(c->texts), free(c->lens);
  memset(c, 0, sizeof *c);
}

const char *xf_cache_dir(const char *dir, char *buf, size_t len, char *err, size_t errlen) {
  const char *env = getenv("XF_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (dir && *dir) snprintf(buf, len, "%s", dir);
  else if (env && *env) snprintf(buf, len, "%s", env);
  else if (xdg && *xdg) snprintf(buf, len, "%s/xf", xdg);
  else if (home && *home) snprintf(buf, len, "%s/.cache/xf", home);
  else return fail(err, errlen, "no cache folder: set XF_CACHE_DIR (or HOME)"), NULL;
  // mkdir -p
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p) continue;
    char c = *p;
    *p = 0;
    bool bad = mkdir(buf, 0755) != 0 && errno != EEXIST;
    *p = c;
    if (bad) return fail(err, errlen, "cannot create cache folder %s: %s", buf, strerror(errno)), NULL;
    if (!c) break;
  }
  return buf;
}

// ---- token cache ---------------------------------------------------------------------
// File: "XFTOKEN2", u64 key, u64 ntrain, u64 nheld, u64 sum, then int32
// tokens (host byte order; the key includes the byte order's check value).
// key: the corpus, tokenizer and held-out fraction (also in the file name);
// sum: FNV-1a of ntrain, nheld and the tokens. A file that does not match
// both is not used (the corpus is encoded again and the file rewritten).

typedef struct {
  char magic[8];
  uint64_t key, ntrain, nheld, sum;
} CacheHeader;

static const uint64_t MAX_CACHED = (uint64_t)1 << 36;  // tokens

static uint64_t cache_sum(uint64_t ntrain, uint64_t nheld, const int32_t *tokens) {
  uint64_t h = xf_fnv1a(XF_FNV1A_BASIS, &ntrain, sizeof ntrain);
  h = xf_fnv1a(h, &nheld, sizeof nheld);
  return xf_fnv1a(h, tokens, 4 * (size_t)(ntrain + nheld));
}

// false: no such file; a file that exists but does not hold this key's
// tokens is reported and not used.
static bool cache_read(const char *path, uint64_t key, XfData *d) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  CacheHeader h;
  struct stat st;
  bool ok = fread(&h, sizeof h, 1, f) == 1 && !memcmp(h.magic, "XFTOKEN2", 8) && h.key == key &&
            h.ntrain <= MAX_CACHED && h.nheld <= MAX_CACHED && h.ntrain + h.nheld > 0 && fstat(fileno(f), &st) == 0 &&
            (uint64_t)st.st_size == sizeof h + 4 * (h.ntrain + h.nheld);
  if (ok && (d->tokens = malloc(4 * (h.ntrain + h.nheld)))) {
    ok = fread(d->tokens, 4, h.ntrain + h.nheld, f) == h.ntrain + h.nheld &&
         cache_sum(h.ntrain, h.nheld, d->tokens) == h.sum;
    d->n = (int64_t)(h.ntrain + h.nheld), d->split = (int64_t)h.ntrain;
  } else {
    ok = false;
  }
  fclose(f);
  if (!ok) {
    xf_data_free(d);
    fprintf(stderr, "xfrun: warning: token cache %s is damaged or of another version: encoding the corpus again\n", path);
  }
  return ok;
}

bool xf_data_load(const XfCorpus *c, const XfTokenizer *t, double heldout, int64_t vocab, const char *cache_dir,
                  XfData *d, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  uint32_t order = 0x01020304;
  uint64_t key = xf_fnv1a(c->hash, &order, sizeof order), fp = xf_tok_fingerprint(t);
  key = xf_fnv1a(xf_fnv1a(key, &fp, sizeof fp), &heldout, sizeof heldout);
  char path[4200] = "";
  if (cache_dir) {
    snprintf(path, sizeof path, "%s/tokens-%016llx.bin", cache_dir, (unsigned long long)key);
    if (cache_read(path, key, d)) goto check;
  }
  {
    int32_t **ids = calloc((size_t)c->n, sizeof *ids);
    int64_t *nids = calloc((size_t)c->n, sizeof *nids), total = 0, train = 0;
    bool ok = ids && nids;
    for (int i = 0; ok && i < c->n; i++) {
      ok = (ids[i] = xf_tok_encode(t, c->texts[i], c->lens[i], &nids[i])) != NULL;
      total += nids[i];
    }
    if (ok) ok = (d->tokens = malloc(sizeof(int32_t) * (size_t)(total ? total : 1))) != NULL;
    // training parts in file order, then held-out parts in file order
    for (int pass = 0; ok && pass < 2; pass++)
      for (int i = 0; i < c->n; i++) {
        int64_t keep = nids[i] - (int64_t)((double)nids[i] * heldout);
        int64_t from = pass ? keep : 0, to = pass ? nids[i] : keep;
        memcpy(d->tokens + d->n, ids[i] + from, sizeof(int32_t) * (size_t)(to - from));
        d->n += to - from;
        if (!pass) train += to - from;
      }
    d->split = train;
    for (int i = 0; ids && i < c->n; i++) free(ids[i]);
    free(ids), free(nids);
    if (!ok) return xf_data_free(d), fail(err, errlen, "out of memory tokenizing the corpus");
    if (cache_dir) {
      CacheHeader h = {.key = key, .ntrain = (uint64_t)d->split, .nheld = (uint64_t)(d->n - d->split)};
      h.sum = cache_sum(h.ntrain, h.nheld, d->tokens);
      memcpy(h.magic, "XFTOKEN2", 8);
      XfSpan parts[] = {{&h, sizeof h}, {d->tokens, sizeof(int32_t) * (size_t)d->n}};
      char werr[512];
      if (!xf_write_atomic(path, parts, 2, werr, sizeof werr))
        fprintf(stderr, "xfrun: warning: tokens not cached: %s\n", werr);
    }
  }
check:
  if (d->n == 0) return xf_data_free(d), fail(err, errlen, "the corpus has no tokens");
  for (int64_t i = 0; i < d->n; i++)
    if (d->tokens[i] < 0 || d->tokens[i] >= vocab) {
      fail(err, errlen, "token %d is beyond the model's vocabulary of %lld", d->tokens[i], (long long)vocab);
      return xf_data_free(d), false;
    }
  return true;
}

void xf_data_free(XfData *d) {
  free(d->tokens);
  memset(d, 0, sizeof *d);
}

void xf_data_batch_rows(const XfData *d, int64_t from, int64_t to, int64_t row0, int64_t rows, int64_t seq, uint64_t seed,
                        uint32_t step, int32_t *tokens, int32_t *targets) {
  int64_t span = to - from - seq;  // window starts: [from, from + span)
  for (int64_t i = 0; i < rows; i++) {
    uint64_t r = (uint64_t)(row0 + i);
    int64_t start = from + (int64_t)(xf_rand_uniform(seed, STREAM_BATCH, r, step) * (double)span);
    memcpy(tokens + i * seq, d->tokens + start, sizeof(int32_t) * (size_t)seq);
    if (targets) memcpy(targets + i * seq, d->tokens + start + 1, sizeof(int32_t) * (size_t)seq);
  }
}

void xf_data_batch(const XfData *d, int64_t from, int64_t to, int64_t batch, int64_t seq, uint64_t seed, uint32_t step,
                   int32_t *tokens, int32_t *targets) {
  xf_data_batch_rows(d, from, to, 0, batch, seq, seed, step, tokens, targets);
}
