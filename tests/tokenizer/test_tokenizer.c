// test_tokenizer.c: the byte-level BPE tokenizer (runtime/tokenizer.h): the
// pre-tokenizer, round trips on random bytes, golden merges, save and load,
// hostile tokenizer.json files. Runs from the repository root.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"
#include "json.h"
#include "tokenizer.h"

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) free(s), s = NULL;
  fclose(f);
  if (s) s[n] = 0, *len = (size_t)n;
  return s;
}

// A scratch file name under /tmp, one per process and name.
static const char *tmp(const char *name) {
  static char buf[4][128];
  static int k;
  char *b = buf[k++ % 4];
  snprintf(b, sizeof buf[0], "/tmp/xf-test-tokenizer-%d-%s", (int)getpid(), name);
  return b;
}

// The pieces of s joined by '|'.
static void check_split(const char *s, const char *want) {
  char got[512] = "";
  size_t len = strlen(s), k = 0;
  for (size_t p = 0, q; p < len; p = q) {
    q = xf_tok_piece_end(s, len, p);
    CHECK(q > p && q <= len);
    if (q <= p || q > len) return;
    if (p) got[k++] = '|';
    memcpy(got + k, s + p, q - p), k += q - p;
  }
  got[k] = 0;
  if (strcmp(got, want)) fprintf(stderr, "  split '%s': got '%s', want '%s'\n", s, got, want);
  CHECK(!strcmp(got, want));
}

// Pieces as Hugging Face tokenizers 0.23 cuts them (ByteLevel, add_prefix_space false).
static void test_pre_tokenizer(void) {
  check_split("Hello my friend, how is your day going?", "Hello| my| friend|,| how| is| your| day| going|?");
  check_split("it's they're we've I'm you'll he'd 'tis", "it|'s| they|'re| we|'ve| I|'m| you|'ll| he|'d| '|tis");
  check_split("'S 'LL '", "'|S| '|LL| '");  // contractions are lower case only
  // \s+(?!\S) leaves the last space of a run to the next piece; a run of one
  // before non-space is \s+ on its own; at the end the run stays whole.
  check_split("a  b\n\n c 'sa''s x\t\ty   ", "a| | b|\n\n| c| '|sa|''|s| x|\t|\t|y|   ");
  check_split("x  \ny", "x|  |\n|y");
  check_split("ok!? ..  ;-) \u00a0\u00a0z", "ok|!?| ..| | ;-)| \u00a0|\u00a0|z");
  check_split("x\u2028\u2028 \u2028y", "x|\u2028\u2028 |\u2028|y");
  check_split("\u3000x", "\u3000|x");
  check_split("abc123 4567 x1", "abc|123| 4567| x|1");
  check_split(
      "caf\u00e9 na\u00efve \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u65e5\u672c\u8a9e \u0661\u0662\u0663",
      "caf\u00e9| na\u00efve| \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac| \u65e5\u672c\u8a9e| "
      "\u0661\u0662\u0663");
  check_split("\U0001F600\U0001F600 ok", "\U0001F600\U0001F600| ok");
  // Invalid UTF-8: each bad byte is one character of class "other".
  check_split("a\xff\xfe" "b \xc3(", "a|\xff\xfe|b| \xc3(");
  check_split("\xed\xa0\x80x", "\xed\xa0\x80|x");  // a surrogate is not UTF-8
  check_split(" ", " ");
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ z >> 27) * 0x94D049BB133111EBull;
  return (uint32_t)((z ^ z >> 31) % n);
}

// A random string of 0-300 bytes: runs of ASCII words, spaces and newlines,
// apostrophes, digits, multi-byte UTF-8 and arbitrary bytes.
static size_t random_text(char *s) {
  static const char *const parts[] = {"'s", "'ll", "'", " ", "  ", "\n", "\n\n", "\t", "\r\n", "the", " cat", "Hello",
                                      "123", "4", " 56", "!", "...", "caf\u00e9", "\u65e5\u672c", "\u00a0",
                                      "\u3000", "\U0001F600", "\u0661", "<|endoftext|>"};
  size_t n = rnd(301), k = 0;
  int mode = (int)rnd(4);
  while (k < n) {
    if (mode == 0 || (mode == 1 && rnd(4) == 0)) s[k++] = (char)rnd(256);
    else if (mode == 2) s[k++] = rnd(2) ? (char)(' ' + rnd(95)) : "\n\t '"[rnd(4)];
    else {
      const char *p = parts[rnd(sizeof parts / sizeof *parts)];
      size_t m = strlen(p);
      if (k + m > n) m = n - k;
      memcpy(s + k, p, m), k += m;
    }
  }
  return n;
}

static void check_round_trip(const XfTokenizer *t, const char *s, size_t len) {
  int64_t n = -1;
  int32_t *ids = xf_tok_encode(t, s, len, &n);
  CHECK(ids != NULL);
  if (!ids) return;
  bool in_range = true;
  for (int64_t i = 0; i < n; i++) in_range &= ids[i] >= 0 && ids[i] < xf_tok_vocab(t);
  CHECK(in_range);
  size_t back_len = 0;
  char *back = xf_tok_decode(t, ids, n, &back_len);
  bool same = back && back_len == len && !memcmp(back, s, len) && back[len] == 0;
  if (!same) fprintf(stderr, "  round trip of %zu bytes failed\n", len);
  CHECK(same);
  free(ids), free(back);
}

static void test_round_trips(const XfTokenizer *trained, const XfTokenizer *on_noise) {
  const XfTokenizer *all[] = {trained, on_noise, xf_tok_bytes()};
  char s[301];
  int before = failed;
  for (int i = 0; i < 3000 && failed == before; i++) {
    size_t len = random_text(s);
    for (int k = 0; k < 3; k++) check_round_trip(all[k], s, len);
  }
  // Identity: one byte, one id.
  size_t len = random_text(s);
  int64_t n;
  int32_t *ids = xf_tok_encode(all[2], s, len, &n);
  bool ident = ids && n == (int64_t)len;
  for (size_t i = 0; ident && i < len; i++) ident = ids[i] == (unsigned char)s[i];
  CHECK(ident && xf_tok_vocab(all[2]) == 256);
  free(ids);
  for (int k = 0; k < 3; k++) {
    ids = xf_tok_encode(all[k], "", 0, &n);
    CHECK(ids && n == 0);
    size_t blen = 1;
    char *back = xf_tok_decode(all[k], ids, 0, &blen);
    CHECK(back && blen == 0 && back[0] == 0);
    free(ids), free(back);
  }
  int32_t bad[] = {1, (int32_t)xf_tok_vocab(trained)};
  size_t blen;
  CHECK(!xf_tok_decode(trained, bad, 2, &blen));
  CHECK(!xf_tok_token_bytes(trained, -1, &blen) && !xf_tok_token_bytes(trained, bad[1], &blen));
  CHECK(xf_tok_fingerprint(all[0]) != xf_tok_fingerprint(all[1]) &&
        xf_tok_fingerprint(all[1]) != xf_tok_fingerprint(all[2]));
  xf_tok_free((XfTokenizer *)all[2]);
}

// Golden merges on tests/tokenizer/golden.txt ("the cat sat on the mat\nthe
// hat is on the cat\n"). Its pieces: "the" x2, " the" x2, " cat" x2, " on" x2,
// " sat" " mat" " hat" " is" x1, "\n" x2. Pair counts (ids are bytes):
// (a,t) 5 = " cat" x2 + sat + mat + hat; (t,h) 4 and (h,e) 4 = "the" x2 +
// " the" x2; every other pair at most 2.
//   1. a+t, count 5.
//   2. h+e, count 4, tied with t+h: (104,101) < (116,104).
//   3. t+he, count 4.
//   4-8. the pairs of count 2 in id order: ' '+c (32,99), ' '+o (32,111),
//      ' '+the (32,258), " c"+at (259,256), " o"+n (260,110).
// Every pair left occurs once: training stops at 264 tokens though 276 were asked for.
static void test_golden_merges(void) {
  size_t len;
  char *text = read_all("tests/tokenizer/golden.txt", &len), err[256] = "";
  CHECK(text != NULL);
  if (!text) return;
  const char *texts[] = {text};
  XfTokenizer *t = xf_tok_train(texts, &len, 1, 276, err, sizeof err);
  CHECK(t && xf_tok_vocab(t) == 264 && xf_tok_merges(t) == 8);
  static const char *const want[] = {"at", "he", "the", " c", " o", " the", " cat", " on"};
  for (int i = 0; t && i < 8; i++) {
    size_t n;
    const char *b = xf_tok_token_bytes(t, 256 + i, &n);
    bool same = b && n == strlen(want[i]) && !memcmp(b, want[i], n);
    if (!same) fprintf(stderr, "  token %d: got '%.*s', want '%s'\n", 256 + i, b ? (int)n : 0, b ? b : "", want[i]);
    CHECK(same);
  }
  // The merges as tokenizer.json spells them (Ġ is the byte char of ' ').
  CHECK(t && xf_tok_save(t, tmp("golden.json"), err, sizeof err));
  size_t jlen;
  char *json = read_all(tmp("golden.json"), &jlen);
  Json *j = json ? json_parse(json, jlen, err, sizeof err) : NULL;
  const Json *merges = json_get(json_get(j, "model"), "merges");
  static const char *const pairs[][2] = {{"a", "t"},      {"h", "e"},        {"t", "he"},       {"\u0120", "c"},
                                         {"\u0120", "o"}, {"\u0120", "the"}, {"\u0120c", "at"}, {"\u0120o", "n"}};
  CHECK(merges && merges->kind == JSON_ARRAY && merges->n == 8);
  for (size_t i = 0; merges && i < merges->n && i < 8; i++) {
    const Json *m = merges->items[i];
    CHECK(m->kind == JSON_ARRAY && m->n == 2 && !strcmp(m->items[0]->str, pairs[i][0]) &&
          !strcmp(m->items[1]->str, pairs[i][1]));
  }
  int64_t n;
  int32_t *ids = t ? xf_tok_encode(t, "the cat\n", 8, &n) : NULL;
  CHECK(ids && n == 3 && ids[0] == 258 && ids[1] == 262 && ids[2] == '\n');
  free(ids), json_free(j), free(json), free(text), xf_tok_free(t);
  remove(tmp("golden.json"));
}

// The training algorithm written plainly, as the oracle: every piece is a
// word of its own and all pairs are counted again at each step.
enum { NAIVE_MAX = 400 };
static int64_t naive_count[NAIVE_MAX][NAIVE_MAX];

static int naive_train(const char *text, size_t len, int vocab, char **tok, size_t *toklen) {
  int32_t *sym = malloc(len * sizeof *sym);
  size_t *start = malloc((len + 1) * sizeof *start), *end = malloc((len + 1) * sizeof *end), nw = 0;
  for (size_t p = 0; p < len; p = xf_tok_piece_end(text, len, p)) start[nw] = end[nw] = p, nw++;
  for (size_t w = 0; w < nw; w++) {
    size_t e = w + 1 < nw ? start[w + 1] : len;
    for (size_t i = start[w]; i < e; i++) sym[end[w]++] = (unsigned char)text[i];
  }
  int ntok = 256;
  for (int i = 0; i < 256; i++) tok[i] = malloc(1), tok[i][0] = (char)i, toklen[i] = 1;
  while (ntok < vocab) {
    memset(naive_count, 0, sizeof naive_count);
    for (size_t w = 0; w < nw; w++)
      for (size_t i = start[w]; i + 1 < end[w]; i++) naive_count[sym[i]][sym[i + 1]]++;
    int ba = 0, bb = 0;
    for (int x = 0; x < ntok; x++)
      for (int y = 0; y < ntok; y++)
        if (naive_count[x][y] > naive_count[ba][bb]) ba = x, bb = y;
    if (naive_count[ba][bb] < 2) break;
    size_t n = toklen[ba] + toklen[bb];
    char *s = malloc(n);
    memcpy(s, tok[ba], toklen[ba]), memcpy(s + toklen[ba], tok[bb], toklen[bb]);
    int id = 0;
    while (id < ntok && (toklen[id] != n || memcmp(tok[id], s, n))) id++;
    if (id == ntok) tok[ntok] = s, toklen[ntok++] = n;
    else free(s);
    for (size_t w = 0; w < nw; w++) {
      size_t j = start[w];
      for (size_t i = start[w]; i < end[w];)
        if (i + 1 < end[w] && sym[i] == ba && sym[i + 1] == bb) sym[j++] = id, i += 2;
        else sym[j++] = sym[i++];
      end[w] = j;
    }
  }
  free(sym), free(start), free(end);
  return ntok;
}

static void check_against_naive(const char *text, size_t len, int vocab) {
  static char *tok[NAIVE_MAX];
  static size_t toklen[NAIVE_MAX];
  int n = naive_train(text, len, vocab, tok, toklen);
  char err[256] = "";
  XfTokenizer *t = xf_tok_train(&text, &len, 1, vocab, err, sizeof err);
  CHECK(t && xf_tok_vocab(t) == n);
  for (int id = 0; t && id < n && id < xf_tok_vocab(t); id++) {
    size_t k;
    const char *b = xf_tok_token_bytes(t, id, &k);
    bool same = k == toklen[id] && !memcmp(b, tok[id], k);
    if (!same) fprintf(stderr, "  token %d differs from the plain trainer's\n", id);
    CHECK(same);
    if (!same) break;
  }
  for (int id = 0; id < n; id++) free(tok[id]);
  xf_tok_free(t);
}

static bool same_file(const char *a, const char *b) {
  size_t la, lb;
  char *x = read_all(a, &la), *y = read_all(b, &lb);
  bool same = x && y && la == lb && !memcmp(x, y, la);
  free(x), free(y);
  return same;
}

static void test_save_load(const XfTokenizer *t, const char *sample, size_t len) {
  int64_t n;
  int32_t *ids = xf_tok_encode(t, sample, len, &n);
  CHECK(ids && n < (int64_t)len);
  free(ids);
  char err[256] = "";
  CHECK(xf_tok_save(t, tmp("a.json"), err, sizeof err));
  CHECK(xf_tok_save(t, tmp("b.json"), err, sizeof err));
  CHECK(same_file(tmp("a.json"), tmp("b.json")));  // deterministic
  XfTokenizer *u = xf_tok_load(tmp("a.json"), err, sizeof err);
  if (!u) fprintf(stderr, "  load: %s\n", err);
  CHECK(u != NULL);
  if (!u) return;
  CHECK(xf_tok_vocab(u) == xf_tok_vocab(t) && xf_tok_merges(u) == xf_tok_merges(t));
  CHECK(xf_tok_fingerprint(u) == xf_tok_fingerprint(t));
  bool tokens = true;
  for (int32_t id = 0; id < xf_tok_vocab(t); id++) {
    size_t a, b;
    const char *x = xf_tok_token_bytes(t, id, &a), *y = xf_tok_token_bytes(u, id, &b);
    tokens &= a == b && !memcmp(x, y, a);
  }
  CHECK(tokens);
  int64_t n1, n2;
  int32_t *i1 = xf_tok_encode(t, sample, len, &n1), *i2 = xf_tok_encode(u, sample, len, &n2);
  CHECK(i1 && i2 && n1 == n2 && !memcmp(i1, i2, (size_t)n1 * sizeof *i1));
  CHECK(xf_tok_save(u, tmp("b.json"), err, sizeof err));
  CHECK(same_file(tmp("a.json"), tmp("b.json")));  // byte-identical re-save
  free(i1), free(i2), xf_tok_free(u);
  remove(tmp("a.json")), remove(tmp("b.json"));
}

// A tokenizer.json with the 256 byte chars (id = byte), the given merges
// (JSON array text), added tokens and extra model members.
static char *make_json(const char *merges, const char *added, const char *extra) {
  JsonBuf b = {0};
  json_put_printf(&b, "{\"version\": \"1.0\", \"added_tokens\": [%s], \"normalizer\": null,\n"
                      "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},\n"
                      "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\"%s, \"vocab\": {",
                  added, extra);
  for (int c = 0; c < 256; c++) {
    int cp = c <= 0x20                ? 0x100 + c
             : c >= 0x7F && c <= 0xA0 ? 0x121 + c - 0x7F
             : c == 0xAD              ? 0x143
                                      : c;  // GPT-2's byte chars
    char s[3];
    size_t k = cp < 0x80 ? (s[0] = (char)cp, 1) : (s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3F)), 2);
    json_put_string(&b, s, k);
    json_put_printf(&b, ": %d, ", c);
  }
  json_put_printf(&b, "\"\u0120t\": 256, \"he\": 257, \"\u0120the\": 258}, \"merges\": %s}}", merges);
  json_put_raw(&b, "", 1);
  return b.buf;
}

static void check_load_error(const char *json, const char *want) {
  char err[256] = "";
  XfTokenizer *t = xf_tok_parse(json, strlen(json), "hostile.json", err, sizeof err);
  CHECK(!t);
  bool ok = strstr(err, "hostile.json: ") == err && strstr(err, want);
  if (!ok) fprintf(stderr, "  got '%s', want '%s'\n", err, want);
  CHECK(ok);
  xf_tok_free(t);
}

static void check_ids(const XfTokenizer *t, const char *s, const int32_t *want, int64_t nwant) {
  int64_t n;
  int32_t *ids = xf_tok_encode(t, s, strlen(s), &n);
  bool same = ids && n == nwant && !memcmp(ids, want, (size_t)n * sizeof *ids);
  if (!same) {
    fprintf(stderr, "  encode '%s':", s);
    for (int64_t i = 0; ids && i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
  }
  CHECK(same);
  free(ids);
}

static void test_hf_files(void) {
  char err[256] = "";
  // Both spellings of merges; an added token inside the vocab and one after it.
  char *j = make_json("[\"\u0120 t\", [\"h\", \"e\"], [\"\u0120t\", \"he\"]]",
                      "{\"id\": 258, \"content\": \"\u0120the\", \"special\": false, \"normalized\": true},"
                      "{\"id\": 259, \"content\": \"<|endoftext|>\", \"special\": true, \"normalized\": false}",
                      ", \"dropout\": null, \"unk_token\": null");
  XfTokenizer *t = xf_tok_parse(j, strlen(j), "hf.json", err, sizeof err);
  if (!t) fprintf(stderr, "  %s\n", err);
  CHECK(t && xf_tok_vocab(t) == 260 && xf_tok_merges(t) == 3);
  if (t) {
    check_ids(t, " the<|endoftext|>the", (int32_t[]){258, 259, 't', 257}, 4);
    check_ids(t, "<|endoftext|><|endoftext|>", (int32_t[]){259, 259}, 2);
    check_ids(t, "a <|endoftext", (int32_t[]){'a', ' ', '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't'}, 13);
    size_t n;
    const char *b = xf_tok_token_bytes(t, 259, &n);
    CHECK(b && n == 13 && !memcmp(b, "<|endoftext|>", 13));
    b = xf_tok_token_bytes(t, 258, &n);
    CHECK(b && n == 4 && !memcmp(b, " the", 4));
    // The vocab written back loads to the same tokenizer.
    CHECK(xf_tok_save(t, tmp("hf.json"), err, sizeof err));
    XfTokenizer *u = xf_tok_load(tmp("hf.json"), err, sizeof err);
    CHECK(u && xf_tok_fingerprint(u) == xf_tok_fingerprint(t));
    xf_tok_free(u);
    remove(tmp("hf.json"));
  }
  xf_tok_free(t), free(j);

  // The last rank of a pair listed twice counts; ignore_merges takes whole pieces.
  j = make_json("[[\"h\", \"e\"], [\"\u0120\", \"t\"], [\"\u0120t\", \"he\"], [\"h\", \"e\"]]", "",
                ", \"ignore_merges\": true");
  t = xf_tok_parse(j, strlen(j), "hf.json", err, sizeof err);
  CHECK(t && xf_tok_merges(t) == 3);
  if (t) check_ids(t, " the he", (int32_t[]){258, ' ', 257}, 3);
  xf_tok_free(t), free(j);

  j = make_json("[]", "", "");
  t = xf_tok_parse(j, strlen(j), "hf.json", err, sizeof err);
  CHECK(t && xf_tok_vocab(t) == 259);
  if (t) check_ids(t, " the", (int32_t[]){' ', 't', 'h', 'e'}, 4);
  xf_tok_free(t), free(j);
}

static void test_hostile(void) {
  char err[256] = "";
  CHECK(!xf_tok_load("tests/tokenizer/no-such-file.json", err, sizeof err));
  CHECK(strstr(err, "no-such-file.json") && strstr(err, "No such file"));
  check_load_error("", "not valid JSON");
  check_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}", "not valid JSON");
  check_load_error("[1, 2]", "no \"model\" object");
  check_load_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model type WordPiece is not supported");
  check_load_error("{\"model\": {\"type\": \"BPE\", \"merges\": []}}", "needs a \"vocab\" object");
  check_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2}, \"merges\": []}}",
                   "vocab id of \"b\" is out of range");
  check_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": -1}, \"merges\": []}}",
                   "out of range");
  check_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0.5}, \"merges\": []}}",
                   "out of range");
  check_load_error("{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                   "\"vocab\": {\"a\": 1, \"b\": 1}, \"merges\": []}}",
                   "vocab id 1 is given to two tokens");
  check_load_error("{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                   "\"vocab\": {\"a\": 1, \"a\": 0}, \"merges\": []}}",
                   "token \"a\" appears twice");
  check_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "pre_tokenizer is null");
  check_load_error("{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, "
                   "\"merges\": []}}",
                   "pre_tokenizer Metaspace is not supported");
  check_load_error(
      "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
      "normalizer NFC is not supported");
  char *j = make_json("[[\"h\", \"zz\"]]", "", "");
  check_load_error(j, "merge 0 uses \"zz\", which is not in the vocab");
  free(j);
  j = make_json("[[\"a\", \"b\"]]", "", "");
  check_load_error(j, "merge 0 makes \"ab\", which is not in the vocab");
  free(j);
  j = make_json("[\"h e x\"]", "", "");
  check_load_error(j, "merge 0 is not two tokens");
  free(j);
  j = make_json("[[\"h\"]]", "", "");
  check_load_error(j, "merge 0 is neither");
  free(j);
  j = make_json("[]", "", ", \"dropout\": 0.1");
  check_load_error(j, "dropout must be null or 0");
  free(j);
  j = make_json("[]", "", ", \"continuing_subword_prefix\": \"##\"");
  check_load_error(j, "\"continuing_subword_prefix\" is not supported");
  free(j);
  j = make_json("[]", "", ", \"unk_token\": \"<unk>\"");
  check_load_error(j, "unk_token must be null or a token of the vocab");
  free(j);
  j = make_json("[]", "{\"id\": 7, \"content\": \"<s>\"}", "");
  check_load_error(j, "added token \"<s>\" has id 7, but the next free id is 259");
  free(j);
  j = make_json("[]", "{\"id\": 259, \"content\": \"<s>\"}, {\"id\": 260, \"content\": \"<s>\"}", "");
  check_load_error(j, "listed twice");
  free(j);
  j = make_json("[]", "{\"id\": 259, \"content\": \"\"}", "");
  check_load_error(j, "non-empty \"content\"");
  free(j);
  j = make_json("[]", "{\"id\": 259, \"content\": \"<s>\", \"single_word\": true}", "");
  check_load_error(j, "single_word is not supported");
  free(j);
  char big[] = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999999}, \"merges\": []}}";
  check_load_error(big, "out of range");
  CHECK(!xf_tok_train(NULL, NULL, 0, 255, err, sizeof err) && strstr(err, "too small"));
}

int main(void) {
  test_pre_tokenizer();
  size_t len;
  char *alice = read_all("data/children/carroll-alice.txt", &len), err[256] = "";
  CHECK(alice != NULL);
  if (!alice) return 1;
  const char *texts[] = {alice};
  XfTokenizer *t = xf_tok_train(texts, &len, 1, 1000, err, sizeof err);
  CHECK(t && xf_tok_vocab(t) == 1000);
  if (t) {  // 1000 tokens: fewer than one token for two bytes of English
    int64_t n;
    int32_t *ids = xf_tok_encode(t, alice, len, &n);
    CHECK(ids && n > 0 && n < (int64_t)len / 2);
    free(ids);
  }
  // A tokenizer whose merges span invalid UTF-8: trained on random bytes.
  char *noise = malloc(1 << 16);
  for (int i = 0; noise && i < 1 << 16; i++) noise[i] = rnd(8) ? (char)rnd(256) : "ab \n"[rnd(4)];
  size_t nlen = 1 << 16;
  const char *ntexts[] = {noise};
  XfTokenizer *u = xf_tok_train(ntexts, &nlen, 1, 600, err, sizeof err);
  CHECK(u && xf_tok_vocab(u) > 256);
  if (t && u) {
    test_round_trips(t, u);
    test_save_load(t, alice, len);
    test_save_load(u, noise, nlen);
  }
  test_golden_merges();
  // Training against the plain oracle: English, random text, random bytes.
  check_against_naive(alice, 30000, NAIVE_MAX);
  char *mixed = malloc(30000);
  size_t mlen = 0;
  while (mixed && mlen < 30000 - 301) mlen += random_text(mixed + mlen);
  check_against_naive(mixed, mlen, NAIVE_MAX);
  check_against_naive(noise, 20000, NAIVE_MAX);
  free(mixed);
  test_hf_files();
  test_hostile();
  xf_tok_free(t), xf_tok_free(u), free(alice), free(noise);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
