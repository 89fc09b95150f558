// test_json.c: the runtime's JSON parser and writer (runtime/json.h).
#include <string.h>

#include "../check.h"
#include "json.h"

static Json *parse(const char *t, char *err) { return json_parse(t, strlen(t), err, 200); }

static void check_error(const char *text, const char *want) {
  char err[200] = "";
  Json *j = parse(text, err);
  CHECK(!j);
  if (!strstr(err, want)) fprintf(stderr, "  %s: got '%s', want '%s'\n", text, err, want);
  CHECK(strstr(err, want) != NULL);
  json_free(j);
}

int main(void) {
  char err[200];
  Json *j = parse("{\"a\": [1, -2.5e3, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\\u0000y\"],\n"
                  " \"b\": {\"c\": 9007199254740993, \"c\": 4}, \"big\": 99999999999999999999}",
                  err);
  CHECK(j && j->kind == JSON_OBJECT && j->n == 3);
  const Json *a = json_get(j, "a");
  CHECK(a && a->kind == JSON_ARRAY && a->n == 6);
  CHECK(a->items[0]->is_integer && a->items[0]->integer == 1);
  CHECK(!a->items[1]->is_integer && a->items[1]->number == -2500);
  CHECK(a->items[2]->boolean && !a->items[3]->boolean && a->items[4]->kind == JSON_NULL);
  // é is C3 A9, U+1F600 is F0 9F 98 80, then \n, NUL, y.
  CHECK(a->items[5]->len == 10 && !memcmp(a->items[5]->str, "x\xc3\xa9\xf0\x9f\x98\x80\n\0y", 10));
  CHECK(json_get(json_get(j, "b"), "c")->integer == 4);  // the last duplicate wins
  CHECK(!json_get(j, "big")->is_integer && json_get(j, "big")->number == 1e20);
  CHECK(!json_get(j, "zz") && !json_get(a, "a") && !json_get_str(j, "a"));
  json_free(j);

  check_error("", "line 1, column 1: value expected");
  check_error("{", "member name");
  check_error("[1,]", "column 4: value expected");
  check_error("{\"a\" 1}", "':' expected");
  check_error("[1\n,\n2 3]", "line 3, column 3: ',' or ']' expected");
  check_error("\"\\ud800\"", "lone high surrogate");
  check_error("\"\\udc00\"", "lone low surrogate");
  check_error("\"\\x\"", "unknown escape");
  check_error("\"\xff\"", "invalid UTF-8");
  check_error("\"\xc0\x80\"", "invalid UTF-8");
  check_error("\"abc", "unterminated string");
  check_error("01", "unexpected text");
  check_error("1.", "digit expected after '.'");
  check_error("1e+", "exponent");
  check_error("tru", "value expected");
  check_error("\"a\x01\"", "control character");
  char deep[1200];
  memset(deep, '[', sizeof deep - 1);
  deep[sizeof deep - 1] = 0;
  check_error(deep, "nested more than 512");

  JsonBuf b = {0};
  json_put_string(&b, "a\"b\\\n\x01z\xc3\xa9", 9);
  json_put_printf(&b, " %d", 42);
  CHECK(!b.oom && !strcmp(b.buf, "\"a\\\"b\\\\\\n\\u0001z\xc3\xa9\" 42"));
  // What the writer writes, the parser reads back.
  j = json_parse(b.buf, b.len - 3, err, sizeof err);
  CHECK(j && j->len == 9 && !memcmp(j->str, "a\"b\\\n\x01z\xc3\xa9", 9));
  json_free(j);
  json_buf_free(&b);

  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
