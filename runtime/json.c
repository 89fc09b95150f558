// json.c: a strict JSON parser into a tree and an appending writer (json.h).
#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 512 };

typedef struct {
  const char *s, *end, *p;
  char *err;
  size_t errlen;
  bool failed;
} Parser;

static void perr(Parser *ps, const char *msg) {
  if (ps->failed) return;
  ps->failed = true;
  int line = 1, col = 1;
  for (const char *q = ps->s; q < ps->p && q < ps->end; q++) {
    if (*q == '\n') line++, col = 1;
    else col++;
  }
  if (ps->err && ps->errlen) snprintf(ps->err, ps->errlen, "line %d, column %d: %s", line, col, msg);
}

static void skip_ws(Parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

void json_free(Json *j) {
  if (!j) return;
  for (size_t i = 0; i < j->n; i++) {
    if (j->items) json_free(j->items[i]);
    if (j->keys) free(j->keys[i]);
  }
  free(j->items);
  free(j->keys);
  free(j->keylens);
  free(j->str);
  free(j);
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap * 2 : 8;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return false;
  *p = q;
  *cap = c;
  return true;
}

static int hex4(const char *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) return o[0] = (char)cp, 1;
  if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

// Length of the valid UTF-8 sequence at p (1-4), or 0.
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  size_t n;
  unsigned cp, min;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if ((size_t)(end - p) < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

// Parses the string at ps->p (at the opening quote) into a malloc'd buffer.
static char *parse_string(Parser *ps, size_t *len) {
  ps->p++;
  // The decoded string is never longer than its source.
  const char *q = ps->p;
  while (q < ps->end && *q != '"') q += *q == '\\' && q + 1 < ps->end ? 2 : 1;
  if (q >= ps->end) return perr(ps, "unterminated string"), NULL;
  char *out = malloc((size_t)(q - ps->p) + 1), *o = out;
  if (!out) return perr(ps, "out of memory"), NULL;
  while (*ps->p != '"') {
    unsigned char c = (unsigned char)*ps->p;
    if (c < 0x20) return free(out), perr(ps, "control character in string (escape it)"), NULL;
    if (c != '\\') {
      size_t n = utf8_len((const unsigned char *)ps->p, (const unsigned char *)ps->end);
      if (!n) return free(out), perr(ps, "invalid UTF-8 in string"), NULL;
      memcpy(o, ps->p, n), o += n, ps->p += n;
      continue;
    }
    char e = ps->p[1];
    ps->p += 2;
    switch (e) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '/': *o++ = '/'; break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      int hi = ps->end - ps->p >= 4 ? hex4(ps->p) : -1;
      if (hi < 0) return free(out), perr(ps, "bad \\u escape (four hex digits expected)"), NULL;
      ps->p += 4;
      unsigned cp = (unsigned)hi;
      if (hi >= 0xd800 && hi <= 0xdbff) {
        int lo = ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u' ? hex4(ps->p + 2) : -1;
        if (lo < 0xdc00 || lo > 0xdfff) return free(out), perr(ps, "lone high surrogate in \\u escape"), NULL;
        ps->p += 6;
        cp = 0x10000 + (((unsigned)hi - 0xd800) << 10) + ((unsigned)lo - 0xdc00);
      } else if (hi >= 0xdc00 && hi <= 0xdfff) {
        return free(out), perr(ps, "lone low surrogate in \\u escape"), NULL;
      }
      // \uXXXX takes 6 source bytes and yields at most 3; a pair takes 12 and yields 4.
      o += put_utf8(o, cp);
      break;
    }
    default: ps->p -= 1; return free(out), perr(ps, "unknown escape in string"), NULL;
    }
  }
  ps->p++;
  *o = 0;
  *len = (size_t)(o - out);
  return out;
}

static Json *parse_value(Parser *ps, int depth);

static Json *new_node(Parser *ps, JsonKind k) {
  Json *j = calloc(1, sizeof *j);
  if (!j) return perr(ps, "out of memory"), NULL;
  j->kind = k;
  return j;
}

static bool literal(Parser *ps, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n)) return false;
  ps->p += n;
  return true;
}

static Json *parse_number(Parser *ps) {
  const char *s = ps->p, *p = s;
  bool integer = true;
  if (p < ps->end && *p == '-') p++;
  if (p >= ps->end || !(*p >= '0' && *p <= '9')) return perr(ps, "value expected"), NULL;
  if (*p == '0') p++;
  else while (p < ps->end && *p >= '0' && *p <= '9') p++;
  if (p < ps->end && *p == '.') {
    integer = false, p++;
    if (p >= ps->end || !(*p >= '0' && *p <= '9')) return ps->p = p, perr(ps, "digit expected after '.'"), NULL;
    while (p < ps->end && *p >= '0' && *p <= '9') p++;
  }
  if (p < ps->end && (*p == 'e' || *p == 'E')) {
    integer = false, p++;
    if (p < ps->end && (*p == '+' || *p == '-')) p++;
    if (p >= ps->end || !(*p >= '0' && *p <= '9')) return ps->p = p, perr(ps, "digit expected in exponent"), NULL;
    while (p < ps->end && *p >= '0' && *p <= '9') p++;
  }
  char buf[64];
  size_t n = (size_t)(p - s);
  if (n >= sizeof buf) {
    if (integer) return perr(ps, "number too long"), NULL;
    n = sizeof buf - 1;  // a long fraction: the first 63 characters fix a double well enough
  }
  memcpy(buf, s, n);
  buf[n] = 0;
  Json *j = new_node(ps, JSON_NUMBER);
  if (!j) return NULL;
  j->number = strtod(buf, NULL);
  if (integer) {
    char *e;
    errno = 0;
    long long v = strtoll(buf, &e, 10);
    j->is_integer = !*e && errno != ERANGE;
    j->integer = v;
  }
  ps->p = p;
  return j;
}

static Json *parse_container(Parser *ps, int depth, bool object) {
  Json *j = new_node(ps, object ? JSON_OBJECT : JSON_ARRAY);
  if (!j) return NULL;
  size_t cap = 0, kcap = 0, lcap = 0;
  char close = object ? '}' : ']';
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    return j;
  }
  for (;;) {
    skip_ws(ps);
    char *key = NULL;
    size_t klen = 0;
    if (object) {
      if (ps->p >= ps->end || *ps->p != '"') return json_free(j), perr(ps, "member name (a string) expected"), NULL;
      key = parse_string(ps, &klen);
      if (!key) return json_free(j), NULL;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') return free(key), json_free(j), perr(ps, "':' expected"), NULL;
      ps->p++;
    }
    Json *v = parse_value(ps, depth + 1);
    if (!v) return free(key), json_free(j), NULL;
    if (!grow((void **)&j->items, &cap, j->n + 1, sizeof *j->items) ||
        (object && (!grow((void **)&j->keys, &kcap, j->n + 1, sizeof *j->keys) ||
                    !grow((void **)&j->keylens, &lcap, j->n + 1, sizeof *j->keylens)))) {
      free(key), json_free(v), json_free(j);
      return perr(ps, "out of memory"), NULL;
    }
    if (object) j->keys[j->n] = key, j->keylens[j->n] = klen;
    j->items[j->n++] = v;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      continue;
    }
    if (ps->p < ps->end && *ps->p == close) {
      ps->p++;
      return j;
    }
    json_free(j);
    return perr(ps, object ? "',' or '}' expected" : "',' or ']' expected"), NULL;
  }
}

static Json *parse_value(Parser *ps, int depth) {
  if (depth > MAX_DEPTH) return perr(ps, "nested more than 512 levels deep"), NULL;
  skip_ws(ps);
  if (ps->p >= ps->end) return perr(ps, "value expected, found the end of the text"), NULL;
  Json *j;
  switch (*ps->p) {
  case '{': return parse_container(ps, depth, true);
  case '[': return parse_container(ps, depth, false);
  case '"':
    if (!(j = new_node(ps, JSON_STRING))) return NULL;
    if (!(j->str = parse_string(ps, &j->len))) return json_free(j), NULL;
    return j;
  case 't':
  case 'f':
  case 'n':
    if (literal(ps, "true") || literal(ps, "false")) {
      if ((j = new_node(ps, JSON_BOOL))) j->boolean = ps->p[-1] == 'e' && ps->p[-2] == 'u';
      return j;
    }
    if (literal(ps, "null")) return new_node(ps, JSON_NULL);
    return perr(ps, "value expected"), NULL;
  default: return parse_number(ps);
  }
}

Json *json_parse(const char *text, size_t len, char *err, size_t errlen) {
  Parser ps = {text, text + len, text, err, errlen, false};
  Json *j = parse_value(&ps, 0);
  if (!j) return NULL;
  skip_ws(&ps);
  if (ps.p != ps.end) {
    perr(&ps, "unexpected text after the JSON value");
    json_free(j);
    return NULL;
  }
  return j;
}

const Json *json_get(const Json *obj, const char *key) {
  if (!obj || obj->kind != JSON_OBJECT) return NULL;
  size_t n = strlen(key);
  for (size_t i = obj->n; i-- > 0;)
    if (obj->keylens[i] == n && !memcmp(obj->keys[i], key, n)) return obj->items[i];
  return NULL;
}

const char *json_get_str(const Json *obj, const char *key) {
  const Json *v = json_get(obj, key);
  return v && v->kind == JSON_STRING ? v->str : NULL;
}

// ---- writer ---------------------------------------------------------------------

void json_put_raw(JsonBuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (!grow((void **)&b->buf, &b->cap, b->len + n + 1, 1)) {
    b->oom = true;
    return;
  }
  memcpy(b->buf + b->len, s, n);
  b->len += n;
  b->buf[b->len] = 0;
}

void json_put_cstr(JsonBuf *b, const char *s) { json_put_raw(b, s, strlen(s)); }

void json_put_printf(JsonBuf *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = true;
    return;
  }
  if ((size_t)n < sizeof small) {
    json_put_raw(b, small, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    b->oom = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  json_put_raw(b, big, (size_t)n);
  free(big);
}

void json_put_string(JsonBuf *b, const char *s, size_t n) {
  json_put_raw(b, "\"", 1);
  size_t run = 0;  // s[run..i) is copied verbatim
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    json_put_raw(b, s + run, i - run);
    run = i + 1;
    switch (c) {
    case '"': json_put_raw(b, "\\\"", 2); break;
    case '\\': json_put_raw(b, "\\\\", 2); break;
    case '\n': json_put_raw(b, "\\n", 2); break;
    case '\t': json_put_raw(b, "\\t", 2); break;
    case '\r': json_put_raw(b, "\\r", 2); break;
    default: json_put_printf(b, "\\u%04x", c);
    }
  }
  json_put_raw(b, s + run, n - run);
  json_put_raw(b, "\"", 1);
}

void json_buf_free(JsonBuf *b) {
  free(b->buf);
  *b = (JsonBuf){0};
}
