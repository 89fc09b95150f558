// xfrun tokenize: trains a byte-level BPE tokenizer, encodes text to ids and
// decodes ids to text (runtime/tokenizer.h, docs/tokenizer.md).
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../runtime/tokenizer.h"
#include "cli.h"
#include "xfrun.h"

#define PROG "xfrun tokenize"
#define usage_error(...) cli_usage_error(PROG, __VA_ARGS__)

static void usage(FILE *f) {
  fputs("usage: xfrun tokenize --train --vocab N FILE_OR_DIR... -o tokenizer.json\n"
        "       xfrun tokenize --encode -t tokenizer.json [FILE|-]\n"
        "       xfrun tokenize --decode -t tokenizer.json [FILE|-]\n"
        "       xfrun tokenize --split [FILE|-]\n"
        "\n"
        "--train   byte-level BPE on the files (a folder means its *.txt files, by name)\n"
        "          up to N tokens in all (256 bytes, then merges), written in the\n"
        "          Hugging Face tokenizer.json format\n"
        "--encode  prints the ids of the text, separated by spaces (stdin without FILE or with -)\n"
        "--decode  reads ids separated by white space and writes their bytes\n"
        "--split   prints the byte offset where each piece of the GPT-2 pre-tokenizer starts\n"
        "\n"
        "options:\n"
        "  --vocab N          tokens in all, at least 256 (--train)\n"
        "  -o FILE            the tokenizer.json to write (--train)\n"
        "  -t FILE            the tokenizer.json to use (--encode, --decode)\n"
        "  -h, --help         this help\n"
        "\n"
        "Options with a value take it as --opt value or --opt=value (-o FILE or -oFILE).\n"
        "Exit status: 0 done, 1 an error while working (a file, the tokenizer), 2 a usage error.\n",
        f);
}

#define die xfrun_fail

static const char *mode_name(int mode) {
  static const char *const names[] = {"", "--train", "--encode", "--decode", "--split"};
  return names[mode];
}

// The whole of path ("-": stdin) in *text; false with a message printed.
static bool slurp(const char *path, char **text, size_t *len) {
  bool in = !strcmp(path, "-");
  FILE *f = in ? stdin : fopen(path, "rb");
  if (!f) return die("cannot open %s: %s", path, strerror(errno)), false;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (size_t got = 1; buf && got;) {
    if (n == cap) {
      char *b = realloc(buf, cap *= 2);
      if (!b) free(buf);
      buf = b;
      if (!b) break;
    }
    n += got = fread(buf + n, 1, cap - n, f);
  }
  bool ok = buf && !ferror(f);
  if (!buf) die("%s: out of memory", in ? "stdin" : path);
  else if (!ok) die("cannot read %s: %s", in ? "stdin" : path, strerror(errno));
  if (!in) fclose(f);
  if (!ok) return free(buf), false;
  *text = buf, *len = n;
  return true;
}

typedef struct {
  char **paths;
  int n, cap;
} Paths;

static bool add_path(Paths *p, const char *s) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    char **q = realloc(p->paths, (size_t)cap * sizeof *q);
    if (!q) return die("out of memory"), false;
    p->paths = q, p->cap = cap;
  }
  if (!(p->paths[p->n] = strdup(s))) return die("out of memory"), false;
  p->n++;
  return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// A file, or the *.txt files of a folder in name order.
static bool add_input(Paths *p, const char *path) {
  struct stat st;
  if (stat(path, &st)) return die("cannot open %s: %s", path, strerror(errno)), false;
  if (!S_ISDIR(st.st_mode)) return add_path(p, path);
  DIR *d = opendir(path);
  if (!d) return die("cannot open folder %s: %s", path, strerror(errno)), false;
  int first = p->n;
  bool ok = true;
  for (struct dirent *e; ok && (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".txt") || e->d_name[0] == '.') continue;
    char *full = malloc(strlen(path) + n + 2);
    if (!full) ok = false, die("out of memory");
    else sprintf(full, "%s/%s", path, e->d_name), ok = add_path(p, full);
    free(full);
  }
  closedir(d);
  if (ok && p->n == first) return die("folder %s has no .txt files", path), false;
  qsort(p->paths + first, (size_t)(p->n - first), sizeof *p->paths, cmp_str);
  return ok;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int train(Paths *in, long long vocab, const char *out) {
  char **texts = calloc((size_t)in->n, sizeof *texts), err[512];
  size_t *lens = calloc((size_t)in->n, sizeof *lens), bytes = 0;
  if (!texts || !lens) return free(texts), free(lens), die("out of memory");
  int status = 0;
  for (int i = 0; i < in->n && !status; i++) {
    if (!slurp(in->paths[i], &texts[i], &lens[i])) status = 1;
    else bytes += lens[i];
  }
  if (!status) {
    double t0 = now();
    XfTokenizer *t = xf_tok_train((const char *const *)texts, lens, in->n, vocab, err, sizeof err);
    if (!t) status = die("%s", err);
    else if (!xf_tok_save(t, out, err, sizeof err)) status = die("%s", err);
    else
      printf("tokenize: vocab %lld (%lld merges) from %zu bytes in %d file%s, %.2f s -> %s\n",
             (long long)xf_tok_vocab(t), (long long)xf_tok_merges(t), bytes, in->n, in->n == 1 ? "" : "s", now() - t0,
             out);
    xf_tok_free(t);
  }
  for (int i = 0; i < in->n; i++) free(texts[i]);
  free(texts), free(lens);
  return status;
}

// Buffered decimal numbers on stdout, separated by spaces.
typedef struct {
  char buf[1 << 16];
  size_t k;
  bool ok, any;
} Out;

static void put_number(Out *o, long long v) {
  if (o->k > sizeof o->buf - 24) o->ok &= fwrite(o->buf, 1, o->k, stdout) == o->k, o->k = 0;
  o->k += (size_t)snprintf(o->buf + o->k, 24, o->any ? " %lld" : "%lld", v);
  o->any = true;
}

static int put_end(Out *o) {
  o->buf[o->k++] = '\n';
  if (!o->ok || fwrite(o->buf, 1, o->k, stdout) != o->k || fflush(stdout))
    return die("cannot write the output: %s", strerror(errno));
  return 0;
}

static int encode(const XfTokenizer *t, const char *text, size_t len) {
  int64_t n;
  int32_t *ids = xf_tok_encode(t, text, len, &n);
  if (!ids) return die("out of memory while encoding");
  static Out o = {.ok = true};
  for (int64_t i = 0; i < n; i++) put_number(&o, ids[i]);
  free(ids);
  return put_end(&o);
}

// The byte offset where each piece of the pre-tokenizer starts.
static int split(const char *text, size_t len) {
  static Out o = {.ok = true};
  for (size_t p = 0; p < len; p = xf_tok_piece_end(text, len, p)) put_number(&o, (long long)p);
  return put_end(&o);
}

// Reads ids separated by white space and writes their bytes (nothing on a bad id).
static int decode(const XfTokenizer *t, const char *text, size_t len, const char *name) {
  int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);  // an id and a separator take two bytes or more
  int64_t n = 0;
  if (!ids) return die("out of memory");
  for (size_t p = 0, q; p < len; p = q) {
    while (p < len && strchr(" \t\n\r\v\f", text[p]) && text[p]) p++;
    for (q = p; q < len && !(strchr(" \t\n\r\v\f", text[q]) && text[q]);) q++;
    if (p == q) break;
    long long id = 0;  // saturates above INT32_MAX; -1: not a number
    for (size_t i = p; i < q && id >= 0; i++)
      id = text[i] < '0' || text[i] > '9' ? -1 : id > INT32_MAX ? id : id * 10 + (text[i] - '0');
    if (id < 0 || id >= xf_tok_vocab(t)) {
      free(ids);
      return die("%s: '%.*s' is not a token id (ids are 0 to %lld)", name, q - p > 40 ? 40 : (int)(q - p), text + p,
                 (long long)xf_tok_vocab(t) - 1);
    }
    ids[n++] = (int32_t)id;
  }
  size_t blen;
  char *bytes = xf_tok_decode(t, ids, n, &blen);
  free(ids);
  if (!bytes) return die("out of memory");
  bool ok = fwrite(bytes, 1, blen, stdout) == blen && !fflush(stdout);
  free(bytes);
  return ok ? 0 : die("cannot write the output: %s", strerror(errno));
}

// The options; T_TRAIN .. T_SPLIT in the order of the modes.
enum { T_TRAIN, T_ENCODE, T_DECODE, T_SPLIT, T_VOCAB, T_O, T_T, T_H, T_HELP, T_COUNT };
static const CliOption opts[T_COUNT] = {
    [T_TRAIN] = {"train", false}, [T_ENCODE] = {"encode", false}, [T_DECODE] = {"decode", false},
    [T_SPLIT] = {"split", false}, [T_VOCAB] = {"vocab", true},    [T_O] = {"o", true},
    [T_T] = {"t", true},          [T_H] = {"h", false},           [T_HELP] = {"help", false},
};

int xfrun_tokenize(int argc, char **argv) {
  enum { NONE, TRAIN, ENCODE, DECODE, SPLIT };
  int mode = NONE;
  const char *out = NULL, *tok = NULL;
  long long vocab = -1;
  Paths in = {0};
  int status = 0;
  Cli c = cli_start(PROG, opts, T_COUNT, argc, argv, 1);
  for (int k; !status && (k = cli_next(&c)) != CLI_END;) {
    const char *v = c.value;
    if (k == CLI_BAD) status = XF_EXIT_USAGE;
    else if (k == CLI_ARG) status = add_path(&in, v) ? 0 : XF_EXIT_ERROR;
    else if (k == T_H || k == T_HELP) {
      usage(stdout);
      goto done;
    } else if (k <= T_SPLIT) {
      if (mode != NONE && mode != TRAIN + k)
        status = usage_error("give one of --train, --encode, --decode, --split (got %s and %s)", mode_name(mode),
                             c.arg);
      mode = TRAIN + k;
    } else if (k == T_O) out = v;
    else if (k == T_T) tok = v;
    else {
      char *end;
      errno = 0;
      vocab = strtoll(v, &end, 10);
      if (!*v || *end || errno || vocab < 256 || vocab > INT32_MAX)
        status = usage_error("--vocab %s: expected a whole number from 256 to %d", v, INT32_MAX);
    }
  }
  if (status) goto done;
  if (mode == NONE) {
    status = usage_error("give --train, --encode, --decode or --split");
  } else if (mode == TRAIN) {
    if (vocab < 0) status = usage_error("--train needs --vocab N");
    else if (!out) status = usage_error("--train needs -o tokenizer.json");
    else if (!in.n) status = usage_error("--train needs input files or folders");
    else if (tok) status = usage_error("-t is for --encode and --decode; --train writes -o");
    Paths files = {0};
    for (int i = 0; i < in.n && !status; i++)
      if (!add_input(&files, in.paths[i])) status = 1;
    if (!status) status = train(&files, vocab, out);
    for (int i = 0; i < files.n; i++) free(files.paths[i]);
    free(files.paths);
  } else {
    const char *what = mode == ENCODE ? "--encode" : mode == DECODE ? "--decode" : "--split";
    if (!tok && mode != SPLIT) status = usage_error("%s needs -t tokenizer.json", what);
    else if (tok && mode == SPLIT) status = usage_error("--split takes no -t");
    else if (in.n > 1) status = usage_error("%s takes one input file (or stdin)", what);
    else if (out || vocab >= 0) status = usage_error("--vocab and -o are for --train");
    char err[512], *text = NULL;
    size_t len = 0;
    const char *path = in.n ? in.paths[0] : "-";
    XfTokenizer *t = status || !tok ? NULL : xf_tok_load(tok, err, sizeof err);
    if (!status && tok && !t) status = die("%s", err);
    if (!status && !slurp(path, &text, &len)) status = 1;
    if (!status)
      status = mode == ENCODE   ? encode(t, text, len)
               : mode == SPLIT  ? split(text, len)
                                : decode(t, text, len, strcmp(path, "-") ? path : "stdin");
    free(text);
    xf_tok_free(t);
  }
done:
  for (int i = 0; i < in.n; i++) free(in.paths[i]);
  free(in.paths);
  return status;
}
