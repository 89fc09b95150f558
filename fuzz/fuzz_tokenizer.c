// fuzz_tokenizer.c: libFuzzer target for the tokenizer readers: the JSON
// parser (safetensors headers, tokenizer.json), the tokenizer.json loader
// (xf_tok_parse: --tokenizer FILE, the cached tokenizers, the one a
// checkpoint carries), and encoding. The first byte picks:
//   0  json_parse of the rest
//   1  xf_tok_parse of the rest; when it loads, encoding a fixed text and the
//      file itself gives ids in [0, vocab) that decode
//   2  the rest encoded by a BPE trained at start-up and by the byte
//      tokenizer: decode(encode(x)) == x for every byte string x
//   3  like 1, then the loaded tokenizer saved and loaded again encodes the
//      fixed text to the same ids
// A bug: a crash, a sanitizer report or leak, a time-out, an out-of-memory
// on a small input, an id out of range, a failed round trip (abort()). A
// reader's error return is a normal outcome.
#include "../runtime/json.h"
#include "fuzz_util.h"

static XfTokenizer *bpe, *bytes;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  bpe = fuzz_bpe(320);
  bytes = xf_tok_bytes();
  // XF_FUZZ_SEEDS=DIR: write seed inputs (a trained tokenizer.json) there
  const char *dir = getenv("XF_FUZZ_SEEDS");
  if (dir) {
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/trained.json", dir);
    if (!xf_tok_save(bpe, path, err, sizeof err)) fuzz_bug("%s", err);
    size_t len;
    char *text = xf_read_file(path, &len, err, sizeof err);
    if (!text) fuzz_bug("%s", err);
    remove(path);
    fuzz_seed(dir, "seed-tokenizer-trained", 1, text, len);
    fuzz_seed(dir, "seed-tokenizer-resave", 3, text, len);
    free(text);
  }
  return 0;
}

static int32_t *encode_text(const XfTokenizer *t, int64_t *n) {
  int32_t *ids = xf_tok_encode(t, FUZZ_TEXT, sizeof FUZZ_TEXT - 1, n);
  if (!ids) fuzz_bug("encode failed");
  return ids;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *s = (const char *)data + 1;
  size_t len = size - 1;
  char err[512];
  switch (data[0] & 3) {
  case 0:
    json_free(json_parse(s, len, err, sizeof err));
    break;
  case 1:
  case 3: {
    XfTokenizer *t = xf_tok_parse(s, len, "fuzz.json", err, sizeof err);
    if (!t) break;
    fuzz_round_trip(t, FUZZ_TEXT, sizeof FUZZ_TEXT - 1, 0);
    fuzz_round_trip(t, s, len, 0);
    if ((data[0] & 3) == 3) {
      const char *path = fuzz_tmp("tokenizer.json");
      if (!xf_tok_save(t, path, err, sizeof err)) fuzz_bug("cannot save a tokenizer that loaded: %s", err);
      XfTokenizer *u = xf_tok_load(path, err, sizeof err);
      if (!u) fuzz_bug("a saved tokenizer does not load: %s", err);
      int64_t n1, n2;
      int32_t *a = encode_text(t, &n1), *b = encode_text(u, &n2);
      if (n1 != n2 || memcmp(a, b, sizeof *a * (size_t)n1) || xf_tok_vocab(t) != xf_tok_vocab(u))
        fuzz_bug("a tokenizer saved and loaded again encodes differently");
      free(a), free(b);
      xf_tok_free(u);
      remove(path);
    }
    xf_tok_free(t);
    break;
  }
  case 2:
    fuzz_round_trip(bpe, s, len, 1);
    fuzz_round_trip(bytes, s, len, 1);
    break;
  }
  return 0;
}
