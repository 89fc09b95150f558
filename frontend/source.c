// source.c: reading a .xf file and everything it imports.
//
// `import "name"` looks for name (with ".xf" added unless present) in the
// importing file's folder, then in each -I folder, then in the standard
// library. A file is loaded once however often it is imported, so import
// cycles are harmless. Files from the standard library are named
// "stdlib/<file>" in messages and dumps, wherever it is installed.
#include "frontend.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { MAX_SOURCE_BYTES = 16 << 20 };

// Returns the contents, or NULL with errno-based text in why.
static char *read_file(Arena *a, const char *path, size_t *len, char *why, size_t whylen) {
  struct stat st;
  if (stat(path, &st) != 0) {
    snprintf(why, whylen, "%s", strerror(errno));
    return NULL;
  }
  if (S_ISDIR(st.st_mode)) {
    snprintf(why, whylen, "it is a directory");
    return NULL;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(why, whylen, "%s", strerror(errno));
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    if (n == cap) {
      char *nb = cap >= MAX_SOURCE_BYTES ? NULL : realloc(buf, cap * 2);
      if (!nb) {
        snprintf(why, whylen, "file is larger than %d bytes", MAX_SOURCE_BYTES);
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = nb, cap *= 2;
    }
    size_t k = fread(buf + n, 1, cap - n, f);
    n += k;
    if (k == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf || err) {
    snprintf(why, whylen, "%s", buf ? "read error" : "out of memory");
    free(buf);
    return NULL;
  }
  char *text = arena_strndup(a, buf, n);
  free(buf);
  *len = n;
  return text;
}

typedef struct {
  Diag *d;
  const SearchPath *sp;
  Program *p;
  const char **real;  // realpath of each module
  int cap;
} Loader;

static void add_module(Loader *L, const char *name, const char *path, const char *real,
                       const char *text, size_t len);

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static const char *dir_of(Arena *a, const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? arena_strndup(a, path, (size_t)(slash - path)) : ".";
}

static void load_import(Loader *L, const Module *from, Import *im) {
  Arena *a = L->d->arena;
  if (!*im->path) diag_error(L->d, im->loc, "empty import path");
  size_t n = strlen(im->path);
  const char *file = n > 3 && !strcmp(im->path + n - 3, ".xf") ? im->path
                                                                : arena_printf(a, "%s.xf", im->path);
  const char *path = NULL, *name = NULL;
  const char *here = arena_printf(a, "%s/%s", dir_of(a, from->src->path), file);
  if (file[0] == '/') {
    if (exists(file)) path = name = file;
  } else if (exists(here)) {
    path = here;
    name = arena_printf(a, "%s/%s", dir_of(a, from->src->name), file);
    if (!strncmp(name, "./", 2)) name += 2;
  } else {
    for (int i = 0; i < L->sp->ninclude && !path; i++) {
      const char *c = arena_printf(a, "%s/%s", L->sp->include_dirs[i], file);
      if (exists(c)) path = name = c;
    }
    if (!path && L->sp->stdlib_dir) {
      const char *c = arena_printf(a, "%s/%s", L->sp->stdlib_dir, file);
      if (exists(c)) path = c, name = arena_printf(a, "stdlib/%s", file);
    }
  }
  if (!path)
    diag_error(L->d, im->loc, "cannot find import \"%s\" (looked for %s next to %s, in -I folders and in the standard library)",
               im->path, file, from->src->name);
  char real[PATH_MAX];
  if (!realpath(path, real)) diag_error(L->d, im->loc, "cannot resolve import %s: %s", path, strerror(errno));
  for (int i = 0; i < L->p->nmodules; i++)
    if (!strcmp(L->real[i], real)) {
      im->module = i;
      return;
    }
  im->module = L->p->nmodules;
  size_t len;
  char why[256];
  char *text = read_file(a, path, &len, why, sizeof why);
  if (!text) diag_error(L->d, im->loc, "cannot read import %s: %s", path, why);
  add_module(L, name, path, arena_strdup(a, real), text, len);
}

static void add_module(Loader *L, const char *name, const char *path, const char *real,
                       const char *text, size_t len) {
  Arena *a = L->d->arena;
  Source *src = diag_add_source(L->d, name, path, text, len);
  Module *m = parse_source(L->d, src);
  if (L->p->nmodules == L->cap) {
    int nc = L->cap ? 2 * L->cap : 8;
    L->p->modules = arena_realloc(a, L->p->modules, sizeof *L->p->modules * (size_t)L->cap,
                                  sizeof *L->p->modules * (size_t)nc);
    L->real = arena_realloc(a, L->real, sizeof *L->real * (size_t)L->cap, sizeof *L->real * (size_t)nc);
    L->cap = nc;
  }
  L->real[L->p->nmodules] = real;
  L->p->modules[L->p->nmodules++] = m;
  for (int i = 0; i < m->imports.n; i++) load_import(L, m, m->imports.items[i]);
}

Program *load_program_text(Diag *d, const char *path, const char *text, size_t len, const SearchPath *sp) {
  Arena *a = d->arena;
  Loader L = {d, sp, arena_alloc(a, sizeof(Program)), NULL, 0};
  char real[PATH_MAX];
  if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
  add_module(&L, path, path, arena_strdup(a, real), arena_strndup(a, text, len), len);
  return L.p;
}

Program *load_program(Diag *d, const char *path, const SearchPath *sp) {
  size_t len;
  char why[256];
  char *text = read_file(d->arena, path, &len, why, sizeof why);
  if (!text) diag_error(d, (Loc){path, 0, 0}, "cannot read %s: %s", path, why);
  return load_program_text(d, path, text, len, sp);
}
