// fuzz_cache.c: libFuzzer target for the token cache (tokens-<key>.bin in
// the cache folder, runtime/data.c): the input becomes the cache file of a
// small corpus. The first byte picks whether the rest is the whole file (0)
// or follows the file's real magic and key (1), which a damaged cache keeps.
// Whatever the file holds, xf_data_load must give exactly the tokens and
// split of encoding the corpus afresh: a cache that does not match is not
// used.
// A bug: a crash, a sanitizer report or leak, a time-out, an out-of-memory
// on a small input, an error return, other tokens than the corpus's
// (abort()).
#include <dirent.h>
#include <fcntl.h>

#include "fuzz_util.h"

static XfCorpus corpus;
static XfTokenizer *tok;
static XfData truth;
static char dir[4096], cache_path[4400];
static unsigned char prefix[16];
static const double HELDOUT = 0.1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  char err[512], path[4200];
  snprintf(dir, sizeof dir, "%s", fuzz_tmp("cache"));
  snprintf(path, sizeof path, "mkdir -p '%s'", dir);
  if (system(path) != 0) fuzz_bug("cannot create %s", dir);
  snprintf(path, sizeof path, "%s/corpus.txt", dir);
  fuzz_write(path, FUZZ_TEXT, sizeof FUZZ_TEXT - 1);
  const char *paths[] = {path};
  if (!xf_corpus_read(paths, 1, &corpus, err, sizeof err)) fuzz_bug("%s", err);
  tok = fuzz_bpe(300);
  // encoded without a cache: the truth; then once more to write the cache
  if (!xf_data_load(&corpus, tok, HELDOUT, 300, NULL, &truth, err, sizeof err)) fuzz_bug("%s", err);
  XfData d;
  if (!xf_data_load(&corpus, tok, HELDOUT, 300, dir, &d, err, sizeof err)) fuzz_bug("%s", err);
  xf_data_free(&d);
  DIR *dd = opendir(dir);
  for (struct dirent *e; dd && (e = readdir(dd));)
    if (!strncmp(e->d_name, "tokens-", 7)) snprintf(cache_path, sizeof cache_path, "%s/%s", dir, e->d_name);
  if (dd) closedir(dd);
  FILE *f = fopen(cache_path, "rb");
  if (!f || fread(prefix, 1, sizeof prefix, f) != sizeof prefix) fuzz_bug("no token cache written in %s", dir);
  fclose(f);
  // XF_FUZZ_SEEDS=DIR: the valid cache file as a seed
  const char *seeds = getenv("XF_FUZZ_SEEDS");
  if (seeds) {
    size_t len;
    char *body = xf_read_file(cache_path, &len, err, sizeof err);
    if (!body) fuzz_bug("%s", err);
    fuzz_seed(seeds, "seed-cache-valid", 0, body, len);
    fuzz_seed(seeds, "seed-cache-after-key", 1, body + sizeof prefix, len - sizeof prefix);
    free(body);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  FILE *f = fopen(cache_path, "wb");
  if (!f) fuzz_bug("cannot write %s", cache_path);
  if (data[0] & 1) fwrite(prefix, 1, sizeof prefix, f);
  if (size > 1) fwrite(data + 1, 1, size - 1, f);
  if (fclose(f) != 0) fuzz_bug("cannot write %s", cache_path);
  char err[512];
  XfData d;
  // the runtime's warning about a damaged cache, once per input, silenced
  // (a crash inside is reproduced with replay_cache FILE)
  int saved = dup(2), null = open("/dev/null", O_WRONLY);
  if (saved >= 0 && null >= 0) dup2(null, 2);
  bool ok = xf_data_load(&corpus, tok, HELDOUT, 300, dir, &d, err, sizeof err);
  if (saved >= 0) dup2(saved, 2), close(saved);
  if (null >= 0) close(null);
  if (!ok) fuzz_bug("load failed: %s", err);
  if (d.n != truth.n || d.split != truth.split || memcmp(d.tokens, truth.tokens, 4 * (size_t)d.n))
    fuzz_bug("the token cache gave other tokens than the corpus's (%lld tokens, split %lld; truth %lld, %lld)",
             (long long)d.n, (long long)d.split, (long long)truth.n, (long long)truth.split);
  xf_data_free(&d);
  return 0;
}
