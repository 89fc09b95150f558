// tokenizer.c: byte-level BPE in the Hugging Face tokenizer.json format (tokenizer.h,
// docs/tokenizer.md).
//
// Encoding is Hugging Face's pipeline for byte-level BPE, step for step:
//   1. split the text on added tokens (leftmost-longest; first those with
//      normalized false, then, in the gaps, those with normalized true);
//   2. in each gap, the ByteLevel pre-tokenizer: an optional prefix space, then
//      the GPT-2 regex (xf_tok_piece_end) cuts it into pieces;
//   3. each byte of a piece becomes the id of its GPT-2 "byte char"
//      (bytes_to_unicode), then merges apply lowest rank first, leftmost on
//      ties, exactly as tokenizers' Word::merge_all orders its heap.
// A piece's ids depend on its bytes only, so each encode call keeps a cache
// from piece to ids; the cached ids live in the output array itself.
//
// Every id has two spellings: str, the string of tokenizer.json (byte chars
// for model tokens, the content for added tokens), and raw, the bytes it
// decodes to (each byte char mapped back; strings with other characters
// decode to themselves, as the ByteLevel decoder does).
#include "tokenizer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "xf.h"

static bool fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return false;
}

// Grows the array *pp (any object pointer type) to hold need elements.
static bool grow(void *pp, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *p;
  memcpy(&p, pp, sizeof p);
  if (!(p = realloc(p, c * elem))) return false;
  memcpy(pp, &p, sizeof p);
  *cap = c;
  return true;
}

// ---- bytes and characters ---------------------------------------------------------------

// GPT-2's bytes_to_unicode: printable bytes ('!'-'~', 0xA1-0xAC, 0xAE-0xFF) stand for
// themselves; the other 68 take U+0100 on, in byte order.
static uint32_t byte_char(unsigned b) {
  if (b <= 0x20) return 0x100 + b;
  if (b >= 0x7F && b <= 0xA0) return 0x121 + (b - 0x7F);
  if (b == 0xAD) return 0x143;
  return b;
}

static int char_byte(uint32_t cp) {
  if (cp < 0x100) return cp > 0x20 && (cp < 0x7F || cp > 0xA0) && cp != 0xAD ? (int)cp : -1;
  if (cp <= 0x120) return (int)(cp - 0x100);
  if (cp <= 0x142) return (int)(cp - 0x121 + 0x7F);
  return cp == 0x143 ? 0xAD : -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) return o[0] = (char)cp, 1;
  return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;  // cp < 0x800 here
}

// Length of the well-formed UTF-8 sequence at s (Unicode table 3-7), 0 if none.
static size_t utf8_decode(const unsigned char *s, size_t avail, uint32_t *cp) {
  unsigned c = s[0], lo = 0x80, hi = 0xBF;
  size_t n;
  uint32_t v;
  if (c < 0x80) return *cp = c, 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, v = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, v = c & 0x0F, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, v = c & 0x07, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (avail < n) return 0;
  for (size_t i = 1; i < n; i++, lo = 0x80, hi = 0xBF) {
    if (s[i] < lo || s[i] > hi) return 0;
    v = v << 6 | (s[i] & 0x3F);
  }
  return *cp = v, n;
}

// ---- the pre-tokenizer ------------------------------------------------------------------

enum { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };

static bool in_ranges(const uint32_t (*r)[2], int n, uint32_t cp) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < r[mid][0]) hi = mid - 1;
    else if (cp > r[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}

// Oniguruma's \s for Unicode: White_Space.
static bool is_space(uint32_t cp) {
  return (cp >= 9 && cp <= 13) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// The class of the character at s[p] and its length in *n; an invalid byte is one OTHER.
static int char_at(const unsigned char *s, size_t len, size_t p, size_t *n) {
  unsigned c = s[p];
  *n = 1;
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_LETTER;
    if (c >= '0' && c <= '9') return C_NUMBER;
    return c == ' ' || (c >= 9 && c <= 13) ? C_SPACE : C_OTHER;
  }
  uint32_t cp;
  if (!(*n = utf8_decode(s + p, len - p, &cp))) return *n = 1, C_OTHER;
  if (is_space(cp)) return C_SPACE;
  if (in_ranges(xf_unicode_letter, xf_unicode_letter_n, cp)) return C_LETTER;
  if (in_ranges(xf_unicode_number, xf_unicode_number_n, cp)) return C_NUMBER;
  return C_OTHER;
}

// The regex's alternatives are tried in order at pos; each one below is the
// first that can match there.
size_t xf_tok_piece_end(const char *text, size_t len, size_t pos) {
  const unsigned char *s = (const unsigned char *)text;
  if (s[pos] == '\'' && pos + 1 < len) {  // 's 't 're 've 'm 'll 'd
    unsigned c1 = s[pos + 1], c2 = pos + 2 < len ? s[pos + 2] : 0;
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return pos + 3;
  }
  size_t n, p = pos;
  int k = char_at(s, len, pos, &n);
  if (s[pos] == ' ' && pos + 1 < len) {  // ' ?' before a letter, number or other
    size_t n1;
    int k1 = char_at(s, len, pos + 1, &n1);
    if (k1 != C_SPACE) k = k1, p = pos + 1, n = n1;
  }
  if (k != C_SPACE) {  // \p{L}+ | \p{N}+ | [^\s\p{L}\p{N}]+
    for (p += n; p < len && char_at(s, len, p, &n) == k; p += n) {}
    return p;
  }
  // \s+(?!\S) takes the whole run at the end of the text, else backs off one
  // character (when it can: a run of one falls through to \s+).
  size_t last = pos;
  for (p = pos; p < len && char_at(s, len, p, &n) == C_SPACE; p += n) last = p;
  return p == len || last == pos ? p : last;
}

// ---- hash maps --------------------------------------------------------------------------

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h ^ h >> 29;
}

// Byte strings (not owned; they must outlive the map) to two int64 values.
typedef struct {
  const char *key;  // NULL: empty slot
  size_t len;
  uint64_t hash;
  int64_t a, b;
} StrSlot;
typedef struct {
  StrSlot *slots;
  size_t cap, n;  // cap a power of two, n <= cap / 2
} StrMap;

static StrSlot *str_find(const StrMap *m, const char *k, size_t len, uint64_t h) {
  for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    StrSlot *s = &m->slots[i];
    if (!s->key || (s->hash == h && s->len == len && !memcmp(s->key, k, len))) return s;
  }
}

static const StrSlot *str_get(const StrMap *m, const char *k, size_t len) {
  if (!m->cap) return NULL;
  const StrSlot *s = str_find(m, k, len, hash_bytes(k, len));
  return s->key ? s : NULL;
}

// The slot of k, added (values 0) when new; NULL on OOM.
static StrSlot *str_put(StrMap *m, const char *k, size_t len, bool *added) {
  if (2 * (m->n + 1) > m->cap) {
    StrMap g = {calloc(m->cap ? 2 * m->cap : 64, sizeof(StrSlot)), m->cap ? 2 * m->cap : 64, m->n};
    if (!g.slots) return NULL;
    for (size_t i = 0; i < m->cap; i++)
      if (m->slots[i].key) *str_find(&g, m->slots[i].key, m->slots[i].len, m->slots[i].hash) = m->slots[i];
    free(m->slots);
    *m = g;
  }
  uint64_t h = hash_bytes(k, len);
  StrSlot *s = str_find(m, k, len, h);
  *added = !s->key;
  if (!s->key) *s = (StrSlot){k, len, h, 0, 0}, m->n++;
  return s;
}

// uint64 keys (never UINT64_MAX) to int64 values.
typedef struct {
  uint64_t *keys;
  int64_t *vals;
  size_t cap, n;
} U64Map;

static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static size_t u64_slot(const U64Map *m, uint64_t k) {
  size_t i = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (m->cap - 1);
  while (m->keys[i] != UINT64_MAX && m->keys[i] != k) i = (i + 1) & (m->cap - 1);
  return i;
}

static int64_t u64_get(const U64Map *m, uint64_t k) {
  if (!m->cap) return -1;
  size_t i = u64_slot(m, k);
  return m->keys[i] == k ? m->vals[i] : -1;
}

static bool u64_put(U64Map *m, uint64_t k, int64_t v) {
  if (2 * (m->n + 1) > m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    U64Map g = {malloc(cap * sizeof(uint64_t)), malloc(cap * sizeof(int64_t)), cap, m->n};
    if (!g.keys || !g.vals) return free(g.keys), free(g.vals), false;
    memset(g.keys, 0xFF, cap * sizeof(uint64_t));
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i] != UINT64_MAX) {
        size_t j = u64_slot(&g, m->keys[i]);
        g.keys[j] = m->keys[i], g.vals[j] = m->vals[i];
      }
    free(m->keys), free(m->vals);
    *m = g;
  }
  size_t i = u64_slot(m, k);
  if (m->keys[i] == UINT64_MAX) m->keys[i] = k, m->n++;
  m->vals[i] = v;
  return true;
}

// ---- the tokenizer ----------------------------------------------------------------------

typedef struct {
  int32_t a, b, id;  // a and b merge into id
} Merge;

typedef struct {
  const char *content;  // in the pool
  size_t len;
  int32_t id;
  bool special, lstrip, rstrip, normalized;
} Added;

struct XfTokenizer {
  int64_t n, nmodel;   // ids [0, n); the model's vocab is [0, nmodel), added tokens after
  char *pool;          // every str and raw; sized once by tok_alloc, so pointers into it stay valid
  size_t pool_len;
  const char **str, **raw;
  size_t *slen, *rawlen;
  StrMap vocab;        // model str -> id (in a)
  Merge *merges;       // rank order, one per pair
  int64_t nmerges;
  U64Map rank;         // pair_key(a, b) -> rank
  Added *added;        // file order
  int nadded;
  unsigned char first[256];  // bit p: some added token of pass p starts with this byte
  int32_t byte_id[256];      // id of byte b's byte char, -1 when not in the vocab
  int32_t fallback[256];     // byte_fallback: id of "<0xXX>", -1 when not in the vocab
  int32_t unk;               // -1: none
  bool add_prefix_space, use_regex, ignore_merges, byte_fallback, fuse_unk;
  bool identity;             // encoding is one id per byte, id = byte
  uint64_t fingerprint;
};

void xf_tok_free(XfTokenizer *t) {
  if (!t) return;
  free(t->pool), free(t->str), free(t->raw), free(t->slen), free(t->rawlen);
  free(t->vocab.slots), free(t->merges), free(t->rank.keys), free(t->rank.vals), free(t->added);
  free(t);
}

int64_t xf_tok_vocab(const XfTokenizer *t) { return t->n; }
int64_t xf_tok_merges(const XfTokenizer *t) { return t->nmerges; }
uint64_t xf_tok_fingerprint(const XfTokenizer *t) { return t->fingerprint; }

// A tokenizer with room for n ids, nmerges merges, nadded added tokens and pool bytes.
static XfTokenizer *tok_alloc(int64_t n, int64_t nmerges, int nadded, size_t pool) {
  XfTokenizer *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  size_t m = (size_t)n + 1;
  t->pool = malloc(pool + 1);
  t->str = calloc(m, sizeof *t->str), t->raw = calloc(m, sizeof *t->raw);
  t->slen = calloc(m, sizeof *t->slen), t->rawlen = calloc(m, sizeof *t->rawlen);
  t->merges = malloc(((size_t)nmerges + 1) * sizeof *t->merges);
  t->added = calloc((size_t)nadded + 1, sizeof *t->added);
  if (!t->pool || !t->str || !t->raw || !t->slen || !t->rawlen || !t->merges || !t->added) {
    xf_tok_free(t);
    return NULL;
  }
  t->unk = -1;
  t->use_regex = true;
  return t;
}

static const char *pool_put(XfTokenizer *t, const char *s, size_t n) {
  char *p = t->pool + t->pool_len;  // tok_alloc sized the pool for everything put
  memcpy(p, s, n);
  t->pool_len += n;
  return p;
}

// The byte chars of raw bytes s, appended to the pool.
static const char *pool_put_chars(XfTokenizer *t, const char *s, size_t n, size_t *len) {
  char *p = t->pool + t->pool_len;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += put_utf8(p + k, byte_char((unsigned char)s[i]));
  t->pool_len += k;
  *len = k;
  return p;
}

// Derives raw, byte_id, fallback, first, rank, identity and the fingerprint from
// str, merges, added and the flags; t->vocab must be built.
static bool tok_finish(XfTokenizer *t) {
  for (int64_t id = 0; id < t->n; id++) {
    const unsigned char *s = (const unsigned char *)t->str[id];
    char *o = t->pool + t->pool_len;
    size_t k = 0, i = 0, n;
    uint32_t cp;
    for (int b; i < t->slen[id] && (n = utf8_decode(s + i, t->slen[id] - i, &cp)) && (b = char_byte(cp)) >= 0; i += n)
      o[k++] = (char)b;
    if (i < t->slen[id]) memcpy(o, s, k = t->slen[id]);  // not all byte chars: decodes to itself
    t->raw[id] = o, t->rawlen[id] = k, t->pool_len += k;
  }
  for (int b = 0; b < 256; b++) {
    char s[8];
    const StrSlot *v = str_get(&t->vocab, s, put_utf8(s, byte_char((unsigned)b)));
    t->byte_id[b] = v ? (int32_t)v->a : -1;
    snprintf(s, sizeof s, "<0x%02X>", b);
    v = str_get(&t->vocab, s, strlen(s));
    t->fallback[b] = v ? (int32_t)v->a : -1;
  }
  for (int64_t r = 0; r < t->nmerges; r++)
    if (!u64_put(&t->rank, pair_key(t->merges[r].a, t->merges[r].b), r)) return false;
  for (int i = 0; i < t->nadded; i++) t->first[(unsigned char)t->added[i].content[0]] |= 1 << t->added[i].normalized;
  t->identity = !t->nmerges && !t->nadded && !t->add_prefix_space && !t->ignore_merges;
  for (int b = 0; b < 256; b++) t->identity &= t->byte_id[b] == b;

  uint64_t h = xf_fnv1a(XF_FNV1A_BASIS, "xf-bpe-1", 8);
  bool flags[] = {t->add_prefix_space, t->use_regex, t->ignore_merges, t->byte_fallback, t->fuse_unk};
  h = xf_fnv1a(h, flags, sizeof flags);
  int64_t head[] = {t->n, t->nmodel, t->nmerges, t->nadded, t->unk};
  h = xf_fnv1a(h, head, sizeof head);
  for (int64_t id = 0; id < t->n; id++) h = xf_fnv1a(xf_fnv1a(h, &t->slen[id], sizeof(size_t)), t->str[id], t->slen[id]);
  h = xf_fnv1a(h, t->merges, (size_t)t->nmerges * sizeof *t->merges);
  for (int i = 0; i < t->nadded; i++) {
    const Added *a = &t->added[i];
    bool f[] = {a->lstrip, a->rstrip, a->normalized};
    h = xf_fnv1a(xf_fnv1a(xf_fnv1a(xf_fnv1a(h, &a->id, sizeof a->id), f, sizeof f), &a->len, sizeof a->len), a->content, a->len);
  }
  t->fingerprint = h;
  return true;
}

// ---- encoding ---------------------------------------------------------------------------

typedef struct {
  int64_t rank;
  int32_t pos, id;
} HeapEnt;

typedef struct {
  const XfTokenizer *t;
  int32_t *ids;  // the output
  size_t n, cap;
  int32_t *c, *prev, *next;  // a piece's symbols: id, linked list (-1 ends), c = -1 when merged away
  size_t symcap;
  HeapEnt *heap;
  size_t nheap, heapcap;
  char *buf, *pre;  // byte-char spellings; prefix-space copies
  size_t bufcap, precap;
  StrMap cache;  // piece -> (offset in ids, count)
} Enc;

static bool emit(Enc *e, int32_t id) {
  if (!grow(&e->ids, &e->cap, e->n + 1, sizeof *e->ids)) return false;
  e->ids[e->n++] = id;
  return true;
}

static bool heap_less(HeapEnt x, HeapEnt y) { return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos); }

static bool heap_push(Enc *e, int32_t a, int32_t b, int32_t pos) {
  int64_t r = u64_get(&e->t->rank, pair_key(a, b));
  if (r < 0) return true;
  if (!grow(&e->heap, &e->heapcap, e->nheap + 1, sizeof *e->heap)) return false;
  HeapEnt x = {r, pos, e->t->merges[r].id};
  size_t i = e->nheap++;
  for (; i && heap_less(x, e->heap[(i - 1) / 2]); i = (i - 1) / 2) e->heap[i] = e->heap[(i - 1) / 2];
  e->heap[i] = x;
  return true;
}

static HeapEnt heap_pop(Enc *e) {
  HeapEnt top = e->heap[0], x = e->heap[--e->nheap];
  size_t i = 0, n = e->nheap;
  for (size_t k; (k = 2 * i + 1) < n; i = k) {
    if (k + 1 < n && heap_less(e->heap[k + 1], e->heap[k])) k++;
    if (!heap_less(e->heap[k], x)) break;
    e->heap[i] = e->heap[k];
  }
  if (n) e->heap[i] = x;
  return top;
}

static bool push_sym(Enc *e, size_t *m, int32_t id) {
  if (*m == e->symcap) {
    size_t cap = e->symcap;
    if (!grow(&e->c, &cap, *m + 1, sizeof *e->c)) return false;
    int32_t *p = realloc(e->prev, cap * sizeof *p), *q = p ? realloc(e->next, cap * sizeof *q) : NULL;
    if (p) e->prev = p;
    if (q) e->next = q;
    if (!p || !q) return false;
    e->symcap = cap;
  }
  e->c[*m] = id, e->prev[*m] = (int32_t)*m - 1, e->next[*m] = -1;
  if (*m) e->next[*m - 1] = (int32_t)*m;
  ++*m;
  return true;
}

// Appends the BPE of one piece (tokenizers' BPE::merge_word and Word::merge_all).
static bool bpe(Enc *e, const char *piece, size_t len) {
  const XfTokenizer *t = e->t;
  if (len > INT32_MAX / 4) return false;
  if (t->ignore_merges) {
    if (!grow(&e->buf, &e->bufcap, 2 * len, 1)) return false;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) k += put_utf8(e->buf + k, byte_char((unsigned char)piece[i]));
    const StrSlot *v = str_get(&t->vocab, e->buf, k);
    if (v) return emit(e, (int32_t)v->a);
  }
  size_t m = 0;
  bool unk = false;  // an unknown token is pending
  for (size_t i = 0; i < len; i++) {
    unsigned b = (unsigned char)piece[i];
    if (t->byte_id[b] >= 0) {
      if (unk && !push_sym(e, &m, t->unk)) return false;
      unk = false;
      if (!push_sym(e, &m, t->byte_id[b])) return false;
      continue;
    }
    if (t->byte_fallback) {  // the UTF-8 bytes of the byte char, as <0xXX>; a pending unk stays pending
      char s[2];
      size_t k = put_utf8(s, byte_char(b));
      bool all = true;
      for (size_t j = 0; j < k; j++) all &= t->fallback[(unsigned char)s[j]] >= 0;
      if (all) {
        for (size_t j = 0; j < k; j++)
          if (!push_sym(e, &m, t->fallback[(unsigned char)s[j]])) return false;
        continue;
      }
    }
    if (t->unk >= 0) {
      if (unk && !t->fuse_unk && !push_sym(e, &m, t->unk)) return false;
      unk = true;
    }
  }
  if (unk && !push_sym(e, &m, t->unk)) return false;

  e->nheap = 0;
  for (size_t i = 0; i + 1 < m; i++)
    if (!heap_push(e, e->c[i], e->c[i + 1], (int32_t)i)) return false;
  while (e->nheap) {
    HeapEnt top = heap_pop(e);
    int32_t p = top.pos, q = e->next[p];
    if (e->c[p] < 0 || q < 0) continue;
    int64_t r = u64_get(&t->rank, pair_key(e->c[p], e->c[q]));
    if (r < 0 || t->merges[r].id != top.id) continue;  // stale entry (tokenizers checks the id only)
    e->c[p] = top.id, e->c[q] = -1, e->next[p] = e->next[q];
    if (e->next[p] >= 0) e->prev[e->next[p]] = p;
    if (e->prev[p] >= 0 && !heap_push(e, e->c[e->prev[p]], e->c[p], e->prev[p])) return false;
    if (e->next[p] >= 0 && !heap_push(e, e->c[p], e->c[e->next[p]], p)) return false;
  }
  for (size_t i = 0; i < m; i++)
    if (e->c[i] >= 0 && !emit(e, e->c[i])) return false;
  return true;
}

// Appends the ids of one piece through the cache; cached keys point into the text.
static bool encode_piece(Enc *e, const char *piece, size_t len) {
  bool added;
  StrSlot *s = str_put(&e->cache, piece, len, &added);
  if (!s) return false;
  if (!added) {
    size_t off = (size_t)s->a, k = (size_t)s->b;
    if (!grow(&e->ids, &e->cap, e->n + k, sizeof *e->ids)) return false;
    memcpy(e->ids + e->n, e->ids + off, k * sizeof *e->ids);
    e->n += k;
    return true;
  }
  size_t off = e->n;
  if (!bpe(e, piece, len)) return false;
  s->a = (int64_t)off, s->b = (int64_t)(e->n - off);
  return true;
}

// The ByteLevel pre-tokenizer and BPE on text between added tokens.
static bool encode_segment(Enc *e, const char *s, size_t len) {
  const XfTokenizer *t = e->t;
  if (!len) return true;
  if (t->add_prefix_space && s[0] != ' ') {
    // The first piece holds the added space and is not cached; the others are
    // pieces of s one byte to the left.
    if (!grow(&e->pre, &e->precap, len + 1, 1)) return false;
    e->pre[0] = ' ';
    memcpy(e->pre + 1, s, len);
    size_t end = t->use_regex ? xf_tok_piece_end(e->pre, len + 1, 0) : len + 1;
    if (!bpe(e, e->pre, end)) return false;
    s += end - 1, len -= end - 1;
  }
  if (!t->use_regex) return !len || encode_piece(e, s, len);
  for (size_t p = 0, q; p < len; p = q) {
    q = xf_tok_piece_end(s, len, p);
    if (!encode_piece(e, s + p, q - p)) return false;
  }
  return true;
}

// The start of the run of white space that ends at p, not before a.
static size_t space_before(const char *s, size_t a, size_t p) {
  while (p > a) {
    size_t q = p - 1, n;
    while (q > a && p - q < 4 && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
    if (char_at((const unsigned char *)s, p, q, &n) != C_SPACE || q + n != p) break;
    p = q;
  }
  return p;
}

// Splits [a, b) on the added tokens of pass 0 (normalized false) or 1
// (normalized true), leftmost-longest, and hands the gaps to the next pass.
static bool encode_span(Enc *e, const char *s, size_t a, size_t b, int pass) {
  const XfTokenizer *t = e->t;
  if (pass == 2) return encode_segment(e, s + a, b - a);
  size_t done = a;  // text before done is encoded
  for (size_t p = a; p < b; p++) {
    if (!(t->first[(unsigned char)s[p]] & 1 << pass)) continue;
    const Added *best = NULL;
    for (int i = 0; i < t->nadded; i++) {
      const Added *x = &t->added[i];
      if (x->normalized == pass && x->len <= b - p && (!best || x->len > best->len) &&
          !memcmp(s + p, x->content, x->len))
        best = x;
    }
    if (!best) continue;
    size_t start = best->lstrip ? space_before(s, a, p) : p, stop = p + best->len, n;
    if (start < done) start = done;
    if (best->rstrip)
      while (stop < b && char_at((const unsigned char *)s, b, stop, &n) == C_SPACE) stop += n;
    if (done < start && !encode_span(e, s, done, start, pass + 1)) return false;
    if (!emit(e, best->id)) return false;
    done = stop;
    p += best->len - 1;
  }
  return done >= b || encode_span(e, s, done, b, pass + 1);
}

int32_t *xf_tok_encode(const XfTokenizer *t, const char *text, size_t len, int64_t *n) {
  *n = 0;
  if (t->identity) {
    int32_t *ids = malloc((len ? len : 1) * sizeof *ids);
    if (!ids) return NULL;
    for (size_t i = 0; i < len; i++) ids[i] = (unsigned char)text[i];
    *n = (int64_t)len;
    return ids;
  }
  Enc e = {.t = t};
  bool ok = grow(&e.ids, &e.cap, len / 3 + 16, sizeof *e.ids) && encode_span(&e, text, 0, len, t->nadded ? 0 : 2);
  free(e.c), free(e.prev), free(e.next), free(e.heap), free(e.buf), free(e.pre), free(e.cache.slots);
  if (!ok) return free(e.ids), NULL;
  *n = (int64_t)e.n;
  return e.ids;
}

const char *xf_tok_token_bytes(const XfTokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n) return NULL;
  *len = t->rawlen[id];
  return t->raw[id];
}

char *xf_tok_decode(const XfTokenizer *t, const int32_t *ids, int64_t n, size_t *len) {
  size_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->n) return NULL;
    total += t->rawlen[ids[i]];
  }
  char *out = malloc(total + 1);
  if (!out) return NULL;
  size_t k = 0;
  for (int64_t i = 0; i < n; i++) memcpy(out + k, t->raw[ids[i]], t->rawlen[ids[i]]), k += t->rawlen[ids[i]];
  out[k] = 0;
  *len = k;
  return out;
}

// ---- loading ----------------------------------------------------------------------------

// The boolean member key of o (def when absent or null), or false with an error.
static bool get_bool(const Json *o, const char *key, bool def, bool *v, const char *name, const char *where, char *err,
                     size_t errlen) {
  const Json *j = json_get(o, key);
  if (!j || j->kind == JSON_NULL) return *v = def, true;
  if (j->kind != JSON_BOOL) return fail(err, errlen, "%s: %s \"%s\" must be true or false", name, where, key);
  return *v = j->boolean, true;
}

static const char *type_of(const Json *o) {
  const char *s = json_get_str(o, "type");
  return s ? s : "(no type)";
}

// Checks one ByteLevel pre-tokenizer (or a Sequence of exactly one) and takes its flags.
static bool load_pre_tokenizer(XfTokenizer *t, const Json *p, const char *name, char *err, size_t errlen) {
  if (!p || p->kind == JSON_NULL)
    return fail(err, errlen, "%s: pre_tokenizer is null; only ByteLevel (byte-level BPE) is supported", name);
  if (p->kind != JSON_OBJECT) return fail(err, errlen, "%s: pre_tokenizer must be an object", name);
  if (!strcmp(type_of(p), "Sequence")) {
    const Json *s = json_get(p, "pretokenizers");
    if (!s || s->kind != JSON_ARRAY || s->n != 1)
      return fail(err, errlen, "%s: a Sequence pre_tokenizer is supported only with one ByteLevel in it", name);
    p = s->items[0];
  }
  if (p->kind != JSON_OBJECT || strcmp(type_of(p), "ByteLevel"))
    return fail(err, errlen, "%s: pre_tokenizer %s is not supported (only ByteLevel)", name, type_of(p));
  return get_bool(p, "add_prefix_space", true, &t->add_prefix_space, name, "pre_tokenizer", err, errlen) &&
         get_bool(p, "use_regex", true, &t->use_regex, name, "pre_tokenizer", err, errlen);
}

// Accepts null or ByteLevel for a decoder or post_processor member.
static bool check_byte_level(const Json *root, const char *key, const char *name, char *err, size_t errlen) {
  const Json *d = json_get(root, key);
  if (!d || d->kind == JSON_NULL || (d->kind == JSON_OBJECT && !strcmp(type_of(d), "ByteLevel"))) return true;
  return fail(err, errlen, "%s: %s %s is not supported (only ByteLevel or null)", name, key,
              d->kind == JSON_OBJECT ? type_of(d) : "that is not an object");
}

// A string member that must be null, absent or empty (else unsupported).
static bool check_unset(const Json *m, const char *key, const char *name, char *err, size_t errlen) {
  const Json *j = json_get(m, key);
  if (!j || j->kind == JSON_NULL || (j->kind == JSON_STRING && !j->len)) return true;
  return fail(err, errlen, "%s: model \"%s\" is not supported (must be null)", name, key);
}

static const StrSlot *vocab_get(const XfTokenizer *t, const Json *s) { return str_get(&t->vocab, s->str, s->len); }

// One merge, "a b" or ["a", "b"], into ids; false with an error.
static bool load_merge(XfTokenizer *t, const Json *m, int64_t i, Merge *out, const char *name, char *err,
                       size_t errlen) {
  Json pa = {.kind = JSON_STRING}, pb = pa;
  const Json *a = &pa, *b = &pb;
  if (m->kind == JSON_STRING) {
    const char *sp = memchr(m->str, ' ', m->len);
    if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str)))
      return fail(err, errlen, "%s: merge %lld is not two tokens separated by one space", name, (long long)i);
    pa.str = m->str, pa.len = (size_t)(sp - m->str), pb.str = (char *)sp + 1, pb.len = m->len - pa.len - 1;
  } else if (m->kind == JSON_ARRAY && m->n == 2 && m->items[0]->kind == JSON_STRING &&
             m->items[1]->kind == JSON_STRING) {
    a = m->items[0], b = m->items[1];
  } else {
    return fail(err, errlen, "%s: merge %lld is neither \"a b\" nor [\"a\", \"b\"]", name, (long long)i);
  }
  const StrSlot *va = vocab_get(t, a), *vb = vocab_get(t, b);
  if (!va || !vb) {
    const Json *x = va ? b : a;
    return fail(err, errlen, "%s: merge %lld uses \"%.*s\", which is not in the vocab", name, (long long)i,
                (int)(x->len > 60 ? 60 : x->len), x->str);
  }
  char *ab = malloc(a->len + b->len + 1);
  if (!ab) return fail(err, errlen, "%s: out of memory", name);
  memcpy(ab, a->str, a->len), memcpy(ab + a->len, b->str, b->len);
  const StrSlot *v = str_get(&t->vocab, ab, a->len + b->len);
  free(ab);
  if (!v)
    return fail(err, errlen, "%s: merge %lld makes \"%.*s%.*s\", which is not in the vocab", name, (long long)i,
                (int)(a->len > 30 ? 30 : a->len), a->str, (int)(b->len > 30 ? 30 : b->len), b->str);
  *out = (Merge){(int32_t)va->a, (int32_t)vb->a, (int32_t)v->a};
  return true;
}

// One added token. Its id must be the one Hugging Face gives it: the vocab's, else the next free one.
static bool load_added(XfTokenizer *t, const Json *a, int i, const char *name, char *err, size_t errlen) {
  const Json *c = json_get(a, "content"), *id = json_get(a, "id");
  if (a->kind != JSON_OBJECT || !c || c->kind != JSON_STRING || !c->len || !id || id->kind != JSON_NUMBER ||
      !id->is_integer)
    return fail(err, errlen, "%s: added token %d needs a non-empty \"content\" and an integer \"id\"", name, i);
  Added *x = &t->added[t->nadded];
  bool single = false;
  if (!get_bool(a, "single_word", false, &single, name, "added token", err, errlen) ||
      !get_bool(a, "lstrip", false, &x->lstrip, name, "added token", err, errlen) ||
      !get_bool(a, "rstrip", false, &x->rstrip, name, "added token", err, errlen) ||
      !get_bool(a, "normalized", false, &x->normalized, name, "added token", err, errlen) ||
      !get_bool(a, "special", false, &x->special, name, "added token", err, errlen))
    return false;
  if (single) return fail(err, errlen, "%s: added token \"%s\": single_word is not supported", name, c->str);
  for (int k = 0; k < t->nadded; k++)
    if (t->added[k].len == c->len && !memcmp(t->added[k].content, c->str, c->len))
      return fail(err, errlen, "%s: added token \"%s\" is listed twice", name, c->str);
  const StrSlot *v = vocab_get(t, c);
  int64_t want = v ? v->a : t->n;
  if (id->integer != want)
    return fail(err, errlen, "%s: added token \"%s\" has id %lld, but %s %lld", name, c->str, (long long)id->integer,
                v ? "the vocab gives it" : "the next free id is", (long long)want);
  x->content = pool_put(t, c->str, c->len), x->len = c->len, x->id = (int32_t)want;
  if (!v) t->str[t->n] = x->content, t->slen[t->n] = x->len, t->n++;
  t->nadded++;
  return true;
}

static bool load_model(XfTokenizer *t, const Json *root, const char *name, char *err, size_t errlen) {
  const Json *m = json_get(root, "model"), *vocab = json_get(m, "vocab"), *merges = json_get(m, "merges");
  const Json *added = json_get(root, "added_tokens"), *j;
  for (size_t i = 0; i < vocab->n; i++) {  // ids dense and unique: checked by the caller
    int64_t id = vocab->items[i]->integer;
    bool is_new;
    const char *s = pool_put(t, vocab->keys[i], vocab->keylens[i]);
    StrSlot *v = str_put(&t->vocab, s, vocab->keylens[i], &is_new);
    if (!v) return fail(err, errlen, "%s: out of memory", name);
    if (!is_new) return fail(err, errlen, "%s: token \"%s\" appears twice in the vocab", name, vocab->keys[i]);
    if (t->str[id])
      return fail(err, errlen, "%s: vocab id %lld is given to two tokens (\"%s\" and \"%.*s\")", name, (long long)id,
                  vocab->keys[i], (int)t->slen[id], t->str[id]);
    v->a = id, t->str[id] = s, t->slen[id] = vocab->keylens[i];
  }
  for (size_t i = 0; added && i < added->n; i++)
    if (!load_added(t, added->items[i], (int)i, name, err, errlen)) return false;

  if (!check_unset(m, "continuing_subword_prefix", name, err, errlen) ||
      !check_unset(m, "end_of_word_suffix", name, err, errlen) ||
      !get_bool(m, "ignore_merges", false, &t->ignore_merges, name, "model", err, errlen) ||
      !get_bool(m, "byte_fallback", false, &t->byte_fallback, name, "model", err, errlen) ||
      !get_bool(m, "fuse_unk", false, &t->fuse_unk, name, "model", err, errlen))
    return false;
  if ((j = json_get(m, "dropout")) && j->kind != JSON_NULL && !(j->kind == JSON_NUMBER && j->number == 0))
    return fail(err, errlen, "%s: model dropout must be null or 0 (dropout makes encoding random)", name);
  if ((j = json_get(m, "unk_token")) && j->kind != JSON_NULL) {
    const StrSlot *v = j->kind == JSON_STRING ? vocab_get(t, j) : NULL;
    if (!v) return fail(err, errlen, "%s: model unk_token must be null or a token of the vocab", name);
    t->unk = (int32_t)v->a;
  }

  // A pair listed twice keeps its last rank, as in tokenizers' merge map.
  U64Map last = {0};
  bool ok = true;
  for (size_t i = 0; ok && i < merges->n; i++) {
    ok = load_merge(t, merges->items[i], (int64_t)i, &t->merges[i], name, err, errlen);
    if (ok && !u64_put(&last, pair_key(t->merges[i].a, t->merges[i].b), (int64_t)i))
      ok = fail(err, errlen, "%s: out of memory", name);
  }
  for (size_t i = 0; ok && i < merges->n; i++)
    if (u64_get(&last, pair_key(t->merges[i].a, t->merges[i].b)) == (int64_t)i) t->merges[t->nmerges++] = t->merges[i];
  free(last.keys), free(last.vals);
  return ok;
}

// Checks the parts of the file outside the model and sizes the tokenizer; NULL with an error.
static XfTokenizer *parse_root(const Json *root, const char *name, char *err, size_t errlen) {
  const Json *m = json_get(root, "model"), *vocab = json_get(m, "vocab"), *merges = json_get(m, "merges");
  const Json *added = json_get(root, "added_tokens"), *j;
  if (root->kind != JSON_OBJECT || !m || m->kind != JSON_OBJECT)
    return fail(err, errlen, "%s: no \"model\" object; not a tokenizer.json", name), NULL;
  if (strcmp(type_of(m), "BPE"))
    return fail(err, errlen, "%s: model type %s is not supported (only BPE)", name, type_of(m)), NULL;
  if (!vocab || vocab->kind != JSON_OBJECT || !merges || merges->kind != JSON_ARRAY)
    return fail(err, errlen, "%s: model needs a \"vocab\" object and a \"merges\" array", name), NULL;
  if (added && added->kind != JSON_ARRAY && added->kind != JSON_NULL)
    return fail(err, errlen, "%s: added_tokens must be an array", name), NULL;
  if ((j = json_get(root, "normalizer")) && j->kind != JSON_NULL)
    return fail(err, errlen, "%s: normalizer %s is not supported (only null)", name, type_of(j)), NULL;
  if ((j = json_get(root, "truncation")) && j->kind != JSON_NULL)
    return fail(err, errlen, "%s: truncation is not supported (must be null)", name), NULL;
  size_t pool = 0, nadded = added && added->kind == JSON_ARRAY ? added->n : 0;
  for (size_t i = 0; i < vocab->n; i++) {
    const Json *v = vocab->items[i];
    if (v->kind != JSON_NUMBER || !v->is_integer || v->integer < 0 || v->integer >= (int64_t)vocab->n)
      return fail(err, errlen, "%s: vocab id of \"%s\" is out of range (%zu tokens: ids 0 to %zu)", name,
                  vocab->keys[i], vocab->n, vocab->n - 1), NULL;
    if (!vocab->keylens[i]) return fail(err, errlen, "%s: the vocab has an empty token", name), NULL;
    pool += vocab->keylens[i];
  }
  for (size_t i = 0; i < nadded; i++) {
    const Json *c = json_get(added->items[i], "content");
    if (c && c->kind == JSON_STRING) pool += c->len;
  }
  if (vocab->n + nadded > INT32_MAX || merges->n > INT32_MAX)
    return fail(err, errlen, "%s: too many tokens", name), NULL;
  XfTokenizer *t = tok_alloc((int64_t)(vocab->n + nadded), (int64_t)merges->n, (int)nadded, 2 * pool);
  if (!t) return fail(err, errlen, "%s: out of memory", name), NULL;
  t->n = t->nmodel = (int64_t)vocab->n;
  if (load_pre_tokenizer(t, json_get(root, "pre_tokenizer"), name, err, errlen) &&
      check_byte_level(root, "decoder", name, err, errlen) &&
      check_byte_level(root, "post_processor", name, err, errlen) && load_model(t, root, name, err, errlen) &&
      (tok_finish(t) || fail(err, errlen, "%s: out of memory", name)))
    return t;
  xf_tok_free(t);
  return NULL;
}

XfTokenizer *xf_tok_parse(const char *text, size_t len, const char *name, char *err, size_t errlen) {
  char jerr[160];
  Json *root = json_parse(text, len, jerr, sizeof jerr);
  if (!root) return fail(err, errlen, "%s: not valid JSON: %s", name, jerr), NULL;
  XfTokenizer *t = parse_root(root, name, err, errlen);
  json_free(root);
  return t;
}

XfTokenizer *xf_tok_load(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, "cannot open %s: %s", path, strerror(errno)), NULL;
  char *text = NULL;
  size_t len = 0, cap = 0;
  bool ok = true;
  for (size_t got = 1; ok && got;) {
    ok = grow(&text, &cap, len + 65536, 1);
    if (ok) len += got = fread(text + len, 1, cap - len, f);
  }
  if (!ok || ferror(f)) {
    if (ok) fail(err, errlen, "cannot read %s: %s", path, strerror(errno));
    else fail(err, errlen, "%s: out of memory", path);
    fclose(f), free(text);
    return NULL;
  }
  fclose(f);
  XfTokenizer *t = xf_tok_parse(text, len, path, err, errlen);
  free(text);
  return t;
}

// ---- saving -----------------------------------------------------------------------------

static void put_bool(JsonBuf *b, const char *key, bool v) {
  json_put_printf(b, "\"%s\": %s", key, v ? "true" : "false");
}

static void put_byte_level(JsonBuf *b, const char *key, bool prefix) {
  json_put_printf(b, "  \"%s\": {\"type\": \"ByteLevel\", ", key);
  put_bool(b, "add_prefix_space", prefix);
  json_put_cstr(b, ", \"trim_offsets\": true, \"use_regex\": true},\n");
}

bool xf_tok_save(const XfTokenizer *t, const char *path, char *err, size_t errlen) {
  JsonBuf b = {0};
  json_put_cstr(&b, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
  for (int i = 0; i < t->nadded; i++) {
    const Added *a = &t->added[i];
    json_put_printf(&b, "%s\n    {\"id\": %d, \"content\": ", i ? "," : "", (int)a->id);
    json_put_string(&b, a->content, a->len);
    json_put_printf(&b,
                    ", \"single_word\": false, \"lstrip\": %s, \"rstrip\": %s, \"normalized\": %s, \"special\": %s}",
                    a->lstrip ? "true" : "false", a->rstrip ? "true" : "false", a->normalized ? "true" : "false",
                    a->special ? "true" : "false");
  }
  json_put_cstr(&b, t->nadded ? "\n  ],\n  \"normalizer\": null,\n" : "],\n  \"normalizer\": null,\n");
  json_put_cstr(&b, "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", ");
  put_bool(&b, "add_prefix_space", t->add_prefix_space);
  json_put_cstr(&b, ", \"trim_offsets\": true, ");
  put_bool(&b, "use_regex", t->use_regex);
  json_put_cstr(&b, "},\n");
  put_byte_level(&b, "post_processor", t->add_prefix_space);
  put_byte_level(&b, "decoder", t->add_prefix_space);
  json_put_cstr(&b, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": ");
  if (t->unk >= 0) json_put_string(&b, t->str[t->unk], t->slen[t->unk]);
  else json_put_cstr(&b, "null");
  json_put_cstr(&b, ",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    ");
  put_bool(&b, "fuse_unk", t->fuse_unk), json_put_cstr(&b, ",\n    ");
  put_bool(&b, "byte_fallback", t->byte_fallback), json_put_cstr(&b, ",\n    ");
  put_bool(&b, "ignore_merges", t->ignore_merges), json_put_cstr(&b, ",\n    \"vocab\": {");
  for (int64_t id = 0; id < t->nmodel; id++) {
    json_put_cstr(&b, id ? ",\n      " : "\n      ");
    json_put_string(&b, t->str[id], t->slen[id]);
    json_put_printf(&b, ": %lld", (long long)id);
  }
  json_put_cstr(&b, "\n    },\n    \"merges\": [");
  for (int64_t r = 0; r < t->nmerges; r++) {
    const Merge *m = &t->merges[r];
    json_put_cstr(&b, r ? ",\n      [" : "\n      [");
    json_put_string(&b, t->str[m->a], t->slen[m->a]);
    json_put_cstr(&b, ", ");
    json_put_string(&b, t->str[m->b], t->slen[m->b]);
    json_put_cstr(&b, "]");
  }
  json_put_cstr(&b, t->nmerges ? "\n    ]\n  }\n}\n" : "]\n  }\n}\n");
  if (b.oom) return json_buf_free(&b), fail(err, errlen, "%s: out of memory", path);

  size_t plen = strlen(path);
  char *tmp = malloc(plen + 16);
  if (!tmp) return json_buf_free(&b), fail(err, errlen, "%s: out of memory", path);
  memcpy(tmp, path, plen), memcpy(tmp + plen, ".tmp.XXXXXX", 12);
  int fd = mkstemp(tmp);
  bool ok = fd >= 0;
  if (!ok) fail(err, errlen, "cannot write %s: %s", path, strerror(errno));
  for (size_t off = 0; ok && off < b.len;) {
    ssize_t w = write(fd, b.buf + off, b.len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) ok = fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    else off += (size_t)w;
  }
  if (ok && (fchmod(fd, 0644) || fsync(fd))) ok = fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
  if (fd >= 0 && close(fd) && ok) ok = fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
  if (ok && rename(tmp, path)) ok = fail(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (!ok && fd >= 0) unlink(tmp);
  free(tmp);
  json_buf_free(&b);
  return ok;
}

// ---- training ---------------------------------------------------------------------------
//
// Pieces (xf_tok_piece_end) are counted once each; a distinct piece is a word
// of symbols with a count. Every adjacent pair keeps its total count and the
// words it was ever seen in ("where", a superset). Each step merges the pair
// with the highest count, ties to the smallest (left id, right id), in the
// words of its where list, left to right. Only pairs with the new token gain
// counts, and each gain pushes a heap entry, so the max-heap is lazy: an entry
// whose count is stale is dropped (the count grew: a newer entry exists) or
// pushed again with the current count (the count fell).

typedef struct {
  int64_t count;
  size_t off;  // symbols at Train.sym + off
  int32_t len;
  int64_t stamp;  // the last step that touched the word
} Word;

typedef struct {
  int32_t a, b;
  int64_t count, stamp;
  int32_t *where;
  size_t nwhere, capwhere;
} Pair;

typedef struct {
  int64_t count;
  int32_t a, b;
} PairEnt;

typedef struct {
  Word *words;
  int32_t *sym;
  Pair *pairs;
  size_t npairs, cappairs;
  U64Map index;  // pair_key -> index in pairs
  PairEnt *heap;
  size_t nheap, capheap;
  int32_t *touched;  // pairs with the new token, this step
  size_t ntouched, captouched;
} Train;

static bool pair_better(PairEnt x, PairEnt y) {
  return x.count > y.count || (x.count == y.count && (x.a < y.a || (x.a == y.a && x.b < y.b)));
}

static bool pheap_push(Train *tr, PairEnt x) {
  if (!grow(&tr->heap, &tr->capheap, tr->nheap + 1, sizeof *tr->heap)) return false;
  size_t i = tr->nheap++;
  for (; i && pair_better(x, tr->heap[(i - 1) / 2]); i = (i - 1) / 2) tr->heap[i] = tr->heap[(i - 1) / 2];
  tr->heap[i] = x;
  return true;
}

static PairEnt pheap_pop(Train *tr) {
  PairEnt top = tr->heap[0], x = tr->heap[--tr->nheap];
  size_t i = 0, n = tr->nheap;
  for (size_t k; (k = 2 * i + 1) < n; i = k) {
    if (k + 1 < n && pair_better(tr->heap[k + 1], tr->heap[k])) k++;
    if (!pair_better(tr->heap[k], x)) break;
    tr->heap[i] = tr->heap[k];
  }
  if (n) tr->heap[i] = x;
  return top;
}

// Adds delta to the count of (a, b); w >= 0 records word w in its where list.
static bool count_pair(Train *tr, int32_t a, int32_t b, int64_t delta, int32_t w, int64_t step) {
  uint64_t k = pair_key(a, b);
  int64_t i = u64_get(&tr->index, k);
  if (i < 0) {
    if (!grow(&tr->pairs, &tr->cappairs, tr->npairs + 1, sizeof *tr->pairs)) return false;
    i = (int64_t)tr->npairs++;
    tr->pairs[i] = (Pair){a, b, 0, -1, NULL, 0, 0};
    if (!u64_put(&tr->index, k, i)) return false;
  }
  Pair *p = &tr->pairs[i];
  p->count += delta;
  if (w < 0) return true;
  if (!p->nwhere || p->where[p->nwhere - 1] != w) {
    if (!grow(&p->where, &p->capwhere, p->nwhere + 1, sizeof *p->where)) return false;
    p->where[p->nwhere++] = w;
  }
  if (step >= 0 && p->stamp != step) {
    p->stamp = step;
    if (!grow(&tr->touched, &tr->captouched, tr->ntouched + 1, sizeof *tr->touched)) return false;
    tr->touched[tr->ntouched++] = (int32_t)i;
  }
  return true;
}

// Merges (a, b) into id in word w, left to right, moving the counts of the
// pairs around each occurrence to pairs with id.
static bool merge_in_word(Train *tr, int32_t w, int32_t a, int32_t b, int32_t id, int64_t step) {
  Word *wd = &tr->words[w];
  int32_t *s = tr->sym + wd->off, n = wd->len, j = 0;  // s[0, j) is the merged word; j <= i
  int64_t c = wd->count;
  for (int32_t i = 0; i < n;) {
    if (i + 1 == n || s[i] != a || s[i + 1] != b) {
      s[j++] = s[i++];
      continue;
    }
    if (!count_pair(tr, a, b, -c, -1, -1)) return false;
    if (j && !(count_pair(tr, s[j - 1], a, -c, -1, -1) && count_pair(tr, s[j - 1], id, c, w, step))) return false;
    if (i + 2 < n && !(count_pair(tr, b, s[i + 2], -c, -1, -1) && count_pair(tr, id, s[i + 2], c, w, step)))
      return false;
    s[j++] = id, i += 2;
  }
  wd->len = j;
  return true;
}

XfTokenizer *xf_tok_train(const char *const *texts, const size_t *lens, int ntexts, int64_t vocab, char *err,
                          size_t errlen) {
  if (vocab < 256)
    return fail(err, errlen, "vocab %lld is too small: the 256 bytes come first", (long long)vocab), NULL;
  if (vocab > INT32_MAX) return fail(err, errlen, "vocab %lld is too large", (long long)vocab), NULL;
  Train tr = {0};
  StrMap pieces = {0}, tokmap = {0};  // piece -> count; token bytes -> id
  struct {
    char *s;  // ids >= 256 malloc'd
    size_t len;
  } *tok = NULL;
  size_t captok = 0, ntok = 256, total = 0;
  Merge *merges = NULL;
  size_t nmerges = 0, capmerges = 0;
  XfTokenizer *t = NULL;
  char bytes[256];  // the one-byte tokens
  if (err && errlen) err[0] = 0;

  bool ok = grow(&tok, &captok, 256, sizeof *tok);
  for (int b = 0; ok && b < 256; b++) {
    bool is_new;
    bytes[b] = (char)b, tok[b].s = &bytes[b], tok[b].len = 1;
    StrSlot *s = str_put(&tokmap, &bytes[b], 1, &is_new);
    if (!(ok = s != NULL)) break;
    s->a = b;
  }
  for (int i = 0; ok && i < ntexts; i++)
    for (size_t p = 0, q; ok && p < lens[i]; p = q) {
      q = xf_tok_piece_end(texts[i], lens[i], p);
      bool is_new;
      StrSlot *s = str_put(&pieces, texts[i] + p, q - p, &is_new);
      if ((ok = s != NULL)) total += is_new ? q - p : 0, s->a++;
    }
  for (size_t i = 0; ok && i < pieces.cap; i++)
    if (pieces.slots[i].len > INT32_MAX) ok = fail(err, errlen, "a piece of the text is longer than 2 GB");
  if (ok && pieces.n > INT32_MAX) ok = fail(err, errlen, "too many distinct pieces");
  if (ok) {
    tr.words = malloc((pieces.n + 1) * sizeof *tr.words);
    tr.sym = malloc((total + 1) * sizeof *tr.sym);
    ok = tr.words && tr.sym;
  }
  int32_t nw = 0;
  for (size_t i = 0, off = 0; ok && i < pieces.cap; i++) {
    const StrSlot *s = &pieces.slots[i];
    if (!s->key) continue;
    tr.words[nw] = (Word){s->a, off, (int32_t)s->len, -1};
    for (size_t k = 0; k < s->len; k++) tr.sym[off + k] = (unsigned char)s->key[k];
    for (size_t k = 0; ok && k + 1 < s->len; k++)
      ok = count_pair(&tr, tr.sym[off + k], tr.sym[off + k + 1], s->a, nw, -1);
    off += s->len, nw++;
  }
  for (size_t i = 0; ok && i < tr.npairs; i++)
    ok = pheap_push(&tr, (PairEnt){tr.pairs[i].count, tr.pairs[i].a, tr.pairs[i].b});

  for (int64_t step = 0; ok && (int64_t)ntok < vocab && tr.nheap; step++) {
    PairEnt top = pheap_pop(&tr);
    Pair *p = &tr.pairs[u64_get(&tr.index, pair_key(top.a, top.b))];
    if (p->count != top.count) {
      if (p->count < top.count && p->count > 0) ok = pheap_push(&tr, (PairEnt){p->count, top.a, top.b});
      continue;
    }
    if (top.count < 2) break;  // a pair seen once is not a pattern
    // The new token; when its bytes are a token already (made by another merge), that id.
    size_t la = tok[top.a].len, lb = tok[top.b].len;
    char *s = malloc(la + lb);
    bool is_new;
    StrSlot *slot = NULL;
    if (s) memcpy(s, tok[top.a].s, la), memcpy(s + la, tok[top.b].s, lb);
    if (!(ok = s && grow(&tok, &captok, ntok + 1, sizeof *tok) && (slot = str_put(&tokmap, s, la + lb, &is_new)))) {
      free(s);
      break;
    }
    int32_t id = is_new ? (int32_t)ntok : (int32_t)slot->a;
    if (is_new) slot->a = id, tok[ntok].s = s, tok[ntok++].len = la + lb;
    else free(s);
    if (!(ok = grow(&merges, &capmerges, nmerges + 1, sizeof *merges))) break;
    merges[nmerges++] = (Merge){top.a, top.b, id};

    int32_t *where = p->where;  // detached: merging (a, b) never adds to its own list
    size_t nwhere = p->nwhere;
    p->where = NULL, p->nwhere = p->capwhere = 0;
    tr.ntouched = 0;
    for (size_t i = 0; ok && i < nwhere; i++) {
      Word *w = &tr.words[where[i]];
      if (w->stamp == step) continue;
      w->stamp = step;
      ok = merge_in_word(&tr, where[i], top.a, top.b, id, step);
    }
    free(where);
    for (size_t i = 0; ok && i < tr.ntouched; i++) {
      const Pair *q = &tr.pairs[tr.touched[i]];
      if (q->count > 0) ok = pheap_push(&tr, (PairEnt){q->count, q->a, q->b});
    }
  }

  size_t pool = 0;
  for (size_t i = 0; ok && i < ntok; i++) pool += tok[i].len;
  ok = ok && (t = tok_alloc((int64_t)ntok, (int64_t)nmerges, 0, 4 * pool));
  for (size_t i = 0; ok && i < ntok; i++) {
    bool is_new;
    t->str[i] = pool_put_chars(t, tok[i].s, tok[i].len, &t->slen[i]);
    StrSlot *s = str_put(&t->vocab, t->str[i], t->slen[i], &is_new);
    if (!(ok = s != NULL)) break;
    s->a = (int64_t)i;
  }
  if (ok) {
    t->n = t->nmodel = (int64_t)ntok, t->nmerges = (int64_t)nmerges;
    if (nmerges) memcpy(t->merges, merges, nmerges * sizeof *merges);
    ok = tok_finish(t);
  }
  if (!ok) {
    if (err && errlen && !err[0]) fail(err, errlen, "out of memory while training");
    xf_tok_free(t);
    t = NULL;
  }
  for (size_t i = 256; i < ntok; i++) free(tok[i].s);
  for (size_t i = 0; i < tr.npairs; i++) free(tr.pairs[i].where);
  free(tok), free(merges), free(pieces.slots), free(tokmap.slots);
  free(tr.words), free(tr.sym), free(tr.pairs), free(tr.index.keys), free(tr.index.vals), free(tr.heap),
      free(tr.touched);
  return t;
}

XfTokenizer *xf_tok_bytes(void) { return xf_tok_train(NULL, NULL, 0, 256, NULL, 0); }
