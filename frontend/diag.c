// diag.c: sources and user-facing diagnostics (file:line:col, source line,
// caret). Errors longjmp to the front end's caller, so no error path needs
// to unwind by hand; everything lives in the arena.
#include "frontend.h"

#include <stdarg.h>
#include <string.h>

Source *diag_add_source(Diag *d, const char *name, const char *path, const char *text, size_t len) {
  Source *s = arena_alloc(d->arena, sizeof *s);
  *s = (Source){name, path, text, len};
  if (d->nsources == d->cap_sources) {
    int nc = d->cap_sources ? 2 * d->cap_sources : 8;
    d->sources = arena_realloc(d->arena, d->sources, sizeof *d->sources * (size_t)d->cap_sources,
                               sizeof *d->sources * (size_t)nc);
    d->cap_sources = nc;
  }
  d->sources[d->nsources++] = s;
  return s;
}

static const Source *find_source(Diag *d, const char *file) {
  for (int i = 0; i < d->nsources; i++)
    if (d->sources[i]->name == file || !strcmp(d->sources[i]->name, file)) return d->sources[i];
  return NULL;
}

static void print_line(Diag *d, Loc loc) {
  const Source *s = loc.file ? find_source(d, loc.file) : NULL;
  if (!s || loc.line < 1) return;
  const char *p = s->text, *end = s->text + s->len;
  for (int l = 1; l < loc.line && p < end; p++)
    if (*p == '\n') l++;
  if (p >= end && loc.line > 1) return;
  const char *q = p;
  while (q < end && *q != '\n') q++;
  fputs("  ", d->out);
  for (const char *c = p; c < q; c++) fputc(*c == '\0' ? ' ' : *c, d->out);
  fputs("\n  ", d->out);
  for (int i = 1; i < loc.col && p + i - 1 < q; i++) fputc(p[i - 1] == '\t' ? '\t' : ' ', d->out);
  fputs("^\n", d->out);
}

static void vprint(Diag *d, const char *kind, Loc loc, const char *fmt, va_list ap) {
  if (loc.file && loc.line > 0) fprintf(d->out, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
  else if (loc.file) fprintf(d->out, "%s: %s: ", loc.file, kind);
  else fprintf(d->out, "xfc: %s: ", kind);
  vfprintf(d->out, fmt, ap);
  fputc('\n', d->out);
  print_line(d, loc);
}

void diag_print(Diag *d, const char *kind, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprint(d, kind, loc, fmt, ap);
  va_end(ap);
}

_Noreturn void diag_fail(Diag *d) {
  fflush(d->out);
  longjmp(*d->on_error, 1);
}

_Noreturn void diag_error(Diag *d, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprint(d, "error", loc, fmt, ap);
  va_end(ap);
  diag_fail(d);
}
