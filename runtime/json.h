// json.h: the JSON the runtime reads and writes (Hugging Face tokenizer.json,
// safetensors headers). A strict RFC 8259 parser into a tree, and an
// appending writer.
//
//   Json *j = json_parse(text, len, err, sizeof err);   // NULL: err = "line L, column C: ..."
//   const Json *v = json_get(j, "model");               // NULL when absent or j is not an object
//   json_free(j);
//
// Strings are UTF-8 (\uXXXX escapes and surrogate pairs decoded) and may hold
// NUL bytes, so they carry a length. Objects keep their members in file
// order; json_get returns the last member with the key.
#ifndef XF_JSON_H
#define XF_JSON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonKind;

typedef struct Json Json;
struct Json {
  JsonKind kind;
  bool boolean;       // JSON_BOOL
  double number;      // JSON_NUMBER
  bool is_integer;    // JSON_NUMBER written without fraction or exponent, and within int64
  int64_t integer;    //   then its exact value
  char *str;          // JSON_STRING: NUL-terminated, len bytes (may contain NUL)
  size_t len;
  size_t n;           // JSON_ARRAY / JSON_OBJECT: element count
  Json **items;       //   elements / member values
  char **keys;        // JSON_OBJECT: member keys (NUL-terminated)
  size_t *keylens;    //   and their lengths
};

// Nesting is limited to 512 levels; trailing garbage is an error.
Json *json_parse(const char *text, size_t len, char *err, size_t errlen);
void json_free(Json *j);
const Json *json_get(const Json *obj, const char *key);
// The string of a JSON_STRING member, or NULL.
const char *json_get_str(const Json *obj, const char *key);

// Appending writer: every function is a no-op once oom is set.
typedef struct {
  char *buf;
  size_t len, cap;
  bool oom;
} JsonBuf;

void json_put_raw(JsonBuf *b, const char *s, size_t n);
void json_put_cstr(JsonBuf *b, const char *s);
void json_put_printf(JsonBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A quoted string: ", \ and control bytes escaped; other bytes copied (the
// caller passes UTF-8).
void json_put_string(JsonBuf *b, const char *s, size_t n);
void json_buf_free(JsonBuf *b);

#endif
