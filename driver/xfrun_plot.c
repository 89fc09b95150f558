// xfrun_plot.c: `xfrun plot RUN.csv... -o FILE.svg`: training loss against
// step, one labelled curve per run, as a standalone SVG.
//
// Smoothing follows seed 001 Figs. 7-8 ("the medians of the training costs
// for every non-overlapping 2000 batches", 60000 batches: 30 medians per
// curve). Steps are cut into non-overlapping windows of N steps aligned to
// step 1, window k holding steps k*N+1 .. (k+1)*N as the paper's batches
// 1-2000, 2001-4000, ...; each window's logged losses give one point: their
// median (the mean of the two middle values for an even count) at the middle
// of the window's first and last logged step. A partial last window is
// drawn too. The default N is the 1-2-5 value (1, 2, 5, 10, 20, ...) nearest
// on a log scale to 1/30 of the step span of all runs, so that 60000 steps
// give the paper's 2000, and the longest run about 20 to 50 windows; the
// same N for every run; N = 1 draws the loss itself. The raw loss is drawn
// faintly behind (--no-raw to omit), reduced to the first, lowest, highest
// and last point of each pixel column, which draws the same picture at this
// width.
//
// Input: the CSV of `xfrun train --log` (header step,loss,tokens_per_s,
// elapsed_s,lr,grad_norm,eval_loss); `step`, `loss` and, where present,
// `eval_loss` are found by name, other columns ignored. A non-empty
// eval_loss (xfrun train --eval-every) is a held-out loss at that step.
// Every row has the header's number of fields; blank lines are skipped. Rows
// with a non-finite loss (a diverged run logs its NaN step) are skipped with
// one warning per file. A step at or below an earlier step (a run resumed
// from an earlier checkpoint, appending to its log) replaces the rows from
// that step on, with a warning.
//
// Output: the y range covers the medians and the held-out losses (not the
// raw loss, whose outliers are clipped to the plot area). The plot group carries the axis transform
// as data- attributes (data-left/top/width/height in SVG units,
// data-xmin/xmax/ymin/ymax in data units, data-log-y) so that a reader can
// map the points back; each curve is a <polyline class="median"|"raw"|
// "heldout"> with data-label, the held-out losses also open circles
// (class heldout-point) in the run's colour, with one legend entry. The medians are reduced per pixel column too, but only
// when there are more than four per column (--window 1 on a long run). The SVG is built in memory and written only when every
// input was read.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "xfrun.h"

#define PROG "xfrun plot"
#define usage_error(...) cli_usage_error(PROG, __VA_ARGS__)

// Canvas and plot area, in SVG units.
enum { CANVAS_W = 800, CANVAS_H = 500, PLOT_L = 72, PLOT_T = 56, PLOT_W = 704, PLOT_H = 384 };
enum { MAX_TICKS = 64, DEFAULT_WINDOWS = 30 };

// Colours of runs 0-7 (then again with the dash patterns below).
static const char *const palette[8] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                       "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
static const char *const dashes[4] = {NULL, "8 4", "2 3", "8 3 2 3"};

typedef struct {
  const char *path;
  const char *label;  // --label or the file's basename without ".csv" (owned when label_owned)
  bool label_owned;
  int64_t n, cap;     // rows with a finite loss; steps strictly increasing
  int64_t *step;
  double *loss;
  int64_t nm;         // window medians
  double *mx, *my;    // middle step and median loss of each window
  int64_t ne, ecap;   // the held-out losses (column eval_loss, where not empty), steps increasing
  int64_t *estep;
  double *eloss;
} PlotRun;

typedef struct {
  const char *out, *title;
  int64_t window;  // 0: default
  bool raw, log_y;
} PlotOptions;

// A growing string (the SVG).
typedef struct {
  char *s;
  size_t n, cap;
  bool oom;
} Buf;

__attribute__((format(printf, 2, 3))) static void bprintf(Buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      b->oom = true;
      return;
    }
    if (b->s && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap <= b->n + (size_t)k) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s, b->cap = cap;
  }
}

int xfrun_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "xfrun: error: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

static void usage(FILE *f) {
  fputs("usage: xfrun plot RUN.csv... -o FILE.svg [options]\n"
        "\n"
        "Draws the training loss of each run (the CSV of `xfrun train --log`) against the step as an SVG:\n"
        "the median of every non-overlapping window of N steps (seed 001 Figs. 7-8), one labelled\n"
        "curve per run, over the raw loss drawn faintly.\n"
        "\n"
        "options:\n"
        "  -o FILE            the SVG to write (required)\n"
        "  --window N         steps per median window (default: the one of 1, 2, 5, 10, 20, ... nearest\n"
        "                     to 1/30 of the steps, as the paper's 2000 of 60000)\n"
        "  --label NAME       the next run's label, in file order (default: file name without .csv)\n"
        "  --title TEXT       title (default \"Training loss\")\n"
        "  --raw, --no-raw    draw the raw loss faintly behind the medians, or not (default --raw)\n"
        "  --log-y            logarithmic loss axis\n"
        "  -h, --help         this help\n"
        "\n"
        "Prints the file written on stderr. Options with a value take it as --opt value or\n"
        "--opt=value (-o FILE or -oFILE). Exit status: 0 done, 1 an error while working (a file\n"
        "unreadable or malformed, the SVG not written), 2 a usage error.\n",
        f);
}

// Doubles the storage of a series of (step, loss) of *cap entries (first: the
// first size); false, the old storage kept, when out of memory.
static bool grow_series(int64_t *cap, int64_t **step, double **loss, int64_t first) {
  int64_t n = *cap ? 2 * *cap : first;
  int64_t *s = realloc(*step, (size_t)n * sizeof *s);
  if (s) *step = s;
  double *l = realloc(*loss, (size_t)n * sizeof *l);
  if (l) *loss = l;
  if (!s || !l) return false;
  *cap = n;
  return true;
}
static bool grow_run(PlotRun *r) { return grow_series(&r->cap, &r->step, &r->loss, 1024); }
static bool grow_eval(PlotRun *r) { return grow_series(&r->ecap, &r->estep, &r->eloss, 64); }

// Reads all of path into a NUL-terminated buffer; NULL with errno set.
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *s = malloc(cap);
  while (s) {
    n += fread(s + n, 1, cap - 1 - n, f);
    if (ferror(f)) {
      int e = errno ? errno : EIO;
      free(s);
      fclose(f);
      errno = e;
      return NULL;
    }
    if (feof(f)) break;
    char *t = realloc(s, cap * 2);
    if (!t) free(s);
    s = t, cap *= 2;
  }
  fclose(f);
  if (!s) {
    errno = ENOMEM;
    return NULL;
  }
  s[n] = 0;
  *len = n;
  return s;
}

// Cuts [s, end) at commas into NUL-terminated, blank-trimmed fields; returns
// the number of fields (up to max stored).
static int split_fields(char *s, char *end, char **field, int max) {
  int n = 0;
  for (;;) {
    char *c = memchr(s, ',', (size_t)(end - s));
    char *e = c ? c : end;
    char *a = s, *b = e;
    while (a < b && (*a == ' ' || *a == '\t')) a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
    *b = 0;
    if (n < max) field[n] = a;
    n++;
    if (!c) return n;
    s = c + 1;
  }
}

static bool is_blank(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\t') return false;
  return true;
}

// Reads one run's CSV into r; false after printing the error.
static bool read_run(PlotRun *r, bool log_y) {
  size_t len;
  char *text = read_file(r->path, &len);
  if (!text) return xfrun_fail("cannot read %s: %s", r->path, strerror(errno)), false;
  bool ok = false;
  char *p = text, *end = text + len;
  if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3;
  int64_t line = 0, nonfinite = 0, first_nonfinite = 0, replaced = 0, first_replaced = 0, rows = 0;
  int nfields = 0, step_col = -1, loss_col = -1, eval_col = -1;
  enum { MAX_FIELDS = 256 };
  char *field[MAX_FIELDS];
  if (p == end) {
    xfrun_fail("%s: empty file (expected the CSV of xfrun train --log: step,loss,...)", r->path);
    goto out;
  }
  for (char *next; p < end; p = next) {
    char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
    next = nl ? nl + 1 : end;
    if (e > p && e[-1] == '\r') e--;
    *e = 0;
    line++;
    if (line == 1) {
      nfields = split_fields(p, e, field, MAX_FIELDS);
      for (int i = 0; i < nfields && i < MAX_FIELDS; i++) {
        if (step_col < 0 && !strcmp(field[i], "step")) step_col = i;
        if (loss_col < 0 && !strcmp(field[i], "loss")) loss_col = i;
        if (eval_col < 0 && !strcmp(field[i], "eval_loss")) eval_col = i;
      }
      if (step_col < 0 || loss_col < 0) {
        xfrun_fail("%s:1: the header has no '%s' column (expected the CSV of xfrun train --log: step,loss,...)", r->path,
             step_col < 0 ? "step" : "loss");
        goto out;
      }
      continue;
    }
    if (is_blank(p)) continue;
    int n = split_fields(p, e, field, MAX_FIELDS);
    if (n != nfields) {
      xfrun_fail("%s:%lld: %d field%s where the header has %d", r->path, (long long)line, n, n == 1 ? "" : "s", nfields);
      goto out;
    }
    const char *fs = field[step_col], *fl = field[loss_col];
    char *stop;
    errno = 0;
    long long step = strtoll(fs, &stop, 10);
    if (!*fs || *stop || errno || step < -1000000000000000LL || step > 1000000000000000LL) {
      xfrun_fail("%s:%lld: step '%s' is not an integer in [-1e15, 1e15]", r->path, (long long)line, fs);
      goto out;
    }
    double loss = strtod(fl, &stop);
    if (!*fl || *stop) {
      xfrun_fail("%s:%lld: loss '%s' is not a number", r->path, (long long)line, fl);
      goto out;
    }
    rows++;
    // A step at or below an earlier one restarts the curve from there.
    int64_t keep = r->n;
    while (keep > 0 && r->step[keep - 1] >= step) keep--;
    if (keep < r->n) {
      if (!replaced) first_replaced = line;
      replaced += r->n - keep;
      r->n = keep;
    }
    while (r->ne > 0 && r->estep[r->ne - 1] >= step) r->ne--;
    if (eval_col >= 0 && *field[eval_col]) {  // a held-out loss at this step (xfrun train --eval-every)
      double ev = strtod(field[eval_col], &stop);
      if (*stop) {
        xfrun_fail("%s:%lld: eval_loss '%s' is not a number", r->path, (long long)line, field[eval_col]);
        goto out;
      }
      if (isfinite(ev) && (!log_y || ev > 0)) {
        if (r->ne == r->ecap && !grow_eval(r)) {
          xfrun_fail("out of memory reading %s", r->path);
          goto out;
        }
        r->estep[r->ne] = step, r->eloss[r->ne++] = ev;
      }
    }
    if (!isfinite(loss)) {
      if (!nonfinite) first_nonfinite = line;
      nonfinite++;
      continue;
    }
    if (log_y && loss <= 0) {
      xfrun_fail("%s:%lld: loss %g is not positive (--log-y)", r->path, (long long)line, loss);
      goto out;
    }
    if (r->n == r->cap && !grow_run(r)) {
      xfrun_fail("out of memory reading %s", r->path);
      goto out;
    }
    r->step[r->n] = step, r->loss[r->n] = loss;
    r->n++;
  }
  if (!rows) {
    xfrun_fail("%s: no rows after the header", r->path);
    goto out;
  }
  if (nonfinite)
    fprintf(stderr, "xfrun: warning: %s:%lld: %lld row%s with a non-finite loss skipped\n", r->path,
            (long long)first_nonfinite, (long long)nonfinite, nonfinite == 1 ? "" : "s");
  if (replaced)
    fprintf(stderr, "xfrun: warning: %s:%lld: the step goes back (a resumed run?); %lld earlier row%s replaced\n",
            r->path, (long long)first_replaced, (long long)replaced, replaced == 1 ? "" : "s");
  if (!r->n) {
    xfrun_fail("%s: no row with a finite loss", r->path);
    goto out;
  }
  ok = true;
out:
  free(text);
  return ok;
}

// The value of 1, 2, 5, 10, 20, 50, ... nearest to x on a log scale (the
// smaller on a tie; 1 when x < 1).
static int64_t nearest_125(double x) {
  int64_t best = 1;
  for (int64_t p = 1; p <= INT64_MAX / 50 && (double)p <= 10 * x; p *= 10)
    for (int m = 1; m <= 5; m += m == 1 ? 1 : 3)  // 1, 2, 5
      if (fabs(log((double)(m * p) / x)) < fabs(log((double)best / x))) best = m * p;
  return best;
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// The medians of r's windows of `window` steps (window k: steps k*window+1 ..
// (k+1)*window); scratch holds at least r->n doubles.
static bool window_medians(PlotRun *r, int64_t window, double *scratch) {
  r->mx = malloc((size_t)r->n * sizeof *r->mx);
  r->my = malloc((size_t)r->n * sizeof *r->my);
  if (!r->mx || !r->my) return false;
  r->nm = 0;
  for (int64_t i = 0, j; i < r->n; i = j) {
    int64_t k = floor_div(r->step[i] - 1, window);
    for (j = i; j < r->n && floor_div(r->step[j] - 1, window) == k; j++) scratch[j - i] = r->loss[j];
    int64_t c = j - i;
    qsort(scratch, (size_t)c, sizeof *scratch, cmp_double);
    r->mx[r->nm] = ((double)r->step[i] + (double)r->step[j - 1]) / 2;
    r->my[r->nm] = c % 2 ? scratch[c / 2] : (scratch[c / 2 - 1] + scratch[c / 2]) / 2;
    r->nm++;
  }
  return true;
}

// Axis ticks: values in data units and their labels.
typedef struct {
  int n;
  double v[MAX_TICKS];
  char text[MAX_TICKS][32];
} Ticks;

static void add_tick(Ticks *t, double v, int decimals) {
  if (t->n == MAX_TICKS) return;
  if (fabs(v) < 1e-300) v = 0;  // no "-0"
  t->v[t->n] = v;
  if (decimals < 0) snprintf(t->text[t->n], sizeof t->text[0], "%.4g", v);
  else snprintf(t->text[t->n], sizeof t->text[0], "%.*f", decimals > 12 ? 12 : decimals, v);
  t->n++;
}

// The smallest of 1, 2, 5 times a power of ten that is >= x (x > 0).
static double ceil_125(double x) {
  double e = pow(10, floor(log10(x))), f = x / e;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * e;
}

static int decimals_of(double step) {
  int d = (int)-floor(log10(step) + 1e-9);
  return d < 0 ? 0 : d;
}

// Linear axis over [*lo, *hi]: about six 1-2-5 steps; with `extend` the range
// grows to whole steps. Falls back to the two ends when the range defeats
// the arithmetic.
static void linear_ticks(double *lo, double *hi, bool extend, Ticks *t) {
  t->n = 0;
  double span = *hi - *lo;
  if (isfinite(span) && span > 0) {
    double step = ceil_125(span / 6);
    double a = extend ? floor(*lo / step + 1e-9) : ceil(*lo / step - 1e-9);
    double b = extend ? ceil(*hi / step - 1e-9) : floor(*hi / step + 1e-9);
    if (isfinite(step) && step > 0 && isfinite(a) && isfinite(b) && b - a >= 1 && b - a < MAX_TICKS &&
        fabs(a) < 1e15 && fabs(b) < 1e15) {
      if (extend) *lo = a * step, *hi = b * step;
      for (double i = a; i <= b; i++) add_tick(t, i * step, decimals_of(step));
      return;
    }
  }
  add_tick(t, *lo, -1);
  add_tick(t, *hi, -1);
}

// Logarithmic axis over [10^lo, 10^hi] (lo, hi are log10): the sparsest of
// {1}, {1, 2, 5}, {1, ..., 9} times powers of ten that gives at least four
// ticks, else linear 1-2-5 ticks within the range.
static void log_ticks(double lo, double hi, Ticks *t) {
  static const int sets[3][10] = {{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  for (int s = 0; s < 3; s++) {
    t->n = 0;
    double e0 = floor(lo), e1 = ceil(hi);
    double stride = s == 0 ? ceil((e1 - e0) / 8) : 1;  // many decades: every stride-th
    if (stride < 1) stride = 1;
    for (double e = e0; e <= e1 && t->n < MAX_TICKS; e += stride)
      for (int m = 0; m < 10 && sets[s][m]; m++) {
        double v = sets[s][m] * pow(10, e), lv = log10(v);
        if (lv >= lo - 1e-9 && lv <= hi + 1e-9) add_tick(t, v, e < 0 ? (int)-e : 0);
      }
    if (t->n >= 4) return;
  }
  double a = pow(10, lo), b = pow(10, hi);
  linear_ticks(&a, &b, false, t);
}

// Appends s as XML character data (also fit for attribute values): the five
// special characters escaped; bytes that are not valid UTF-8, and characters
// XML 1.0 forbids, replaced by U+FFFD.
static void put_xml(Buf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned c = *p;
    int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    bool valid = len > 0;
    for (int i = 1; valid && i < len; i++) {
      if ((p[i] & 0xC0) != 0x80) valid = false;
      else cp = cp << 6 | (p[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (valid && (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE ||
                  cp == 0xFFFF || (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r')))
      valid = false;
    if (!valid) {
      bprintf(b, "\xEF\xBF\xBD");
      p++;
      while ((*p & 0xC0) == 0x80) p++;  // the rest of a broken sequence
      continue;
    }
    if (c == '&') bprintf(b, "&amp;");
    else if (c == '<') bprintf(b, "&lt;");
    else if (c == '>') bprintf(b, "&gt;");
    else if (c == '"') bprintf(b, "&quot;");
    else if (c == '\'') bprintf(b, "&apos;");
    else if (c == '\t' || c == '\n' || c == '\r') bprintf(b, "&#%u;", c);
    else bprintf(b, "%.*s", len, (const char *)p);
    p += len;
  }
}

// Characters (code points) of a UTF-8 string, for the legend's width.
static int text_width(const char *s) {
  int n = 0;
  for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
  return n;
}

// The mapping from data to SVG units.
typedef struct {
  double xmin, xmax, ymin, ymax;  // ymin, ymax in log10 under log_y
  bool log_y;
} Axes;

static double px_of(const Axes *a, double x) { return PLOT_L + (x - a->xmin) / (a->xmax - a->xmin) * PLOT_W; }

static double py_of(const Axes *a, double y) {
  double v = a->log_y ? log10(y) : y;
  double py = PLOT_T + PLOT_H - (v - a->ymin) / (a->ymax - a->ymin) * PLOT_H;
  // Far outside the plot area (clipped anyway): bounded, so numbers stay short.
  if (py < PLOT_T - 1000.0 * PLOT_H) py = PLOT_T - 1000.0 * PLOT_H;
  if (py > PLOT_T + 1001.0 * PLOT_H) py = PLOT_T + 1001.0 * PLOT_H;
  return py;
}

static void put_stroke(Buf *b, int run) {
  const char *dash = dashes[(run / 8) % 4];
  bprintf(b, " fill=\"none\" stroke=\"%s\"", palette[run % 8]);
  if (dash) bprintf(b, " stroke-dasharray=\"%s\"", dash);
}

static void put_point(Buf *b, double x, double y, bool *first) {
  bprintf(b, "%s%.2f,%.2f", *first ? "" : " ", x, y);
  *first = false;
}

// The points of a series in polyline syntax: x from steps (int) or xs
// (double). With `reduce`, per pixel column only its first, lowest, highest
// and last point in order, which draws the same picture.
static void put_points(Buf *b, const Axes *a, int64_t n, const int64_t *steps, const double *xs, const double *y,
                       bool reduce) {
#define X(i) (steps ? (double)steps[i] : xs[i])
  bool first = true;
  for (int64_t i = 0, j; i < n; i = j) {
    if (!reduce) {
      put_point(b, px_of(a, X(i)), py_of(a, y[i]), &first);
      j = i + 1;
      continue;
    }
    double col = floor(px_of(a, X(i)));
    int64_t lo = i, hi = i;
    for (j = i; j < n && floor(px_of(a, X(j))) == col; j++) {
      if (y[j] < y[lo]) lo = j;
      if (y[j] > y[hi]) hi = j;
    }
    int64_t pick[4] = {i, lo < hi ? lo : hi, lo < hi ? hi : lo, j - 1};
    for (int k = 0; k < 4; k++)
      if (k == 0 || pick[k] != pick[k - 1]) put_point(b, px_of(a, X(pick[k])), py_of(a, y[pick[k]]), &first);
  }
#undef X
}

static void put_curve_start(Buf *b, const char *cls, const PlotRun *r, int run) {
  bprintf(b, "<polyline class=\"%s\" data-run=\"%d\" data-label=\"", cls, run);
  put_xml(b, r->label);
  bprintf(b, "\"");
  put_stroke(b, run);
}

// The raw loss, always reduced per pixel column.
static void put_raw(Buf *b, const PlotRun *r, int run, const Axes *a) {
  put_curve_start(b, "raw", r, run);
  bprintf(b, " stroke-opacity=\"0.28\" stroke-width=\"1\" stroke-linejoin=\"round\" points=\"");
  put_points(b, a, r->n, r->step, NULL, r->loss, true);
  bprintf(b, "\"/>\n");
}

// The medians, every one unless there are more than four per pixel column.
static void put_median(Buf *b, const PlotRun *r, int run, const Axes *a) {
  put_curve_start(b, "median", r, run);
  bprintf(b, " stroke-width=\"2\" stroke-linejoin=\"round\" points=\"");
  put_points(b, a, r->nm, NULL, r->mx, r->my, r->nm > 4 * PLOT_W);
  bprintf(b, "\"/>\n");
  if (r->nm == 1)  // a polyline of one point draws nothing
    bprintf(b, "<circle class=\"median-point\" cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n", px_of(a, r->mx[0]),
            py_of(a, r->my[0]), palette[run % 8]);
}

// The held-out losses (xfrun train --eval-every) as open circles on a thin
// line in the run's colour; false when the run has none.
static bool put_heldout(Buf *b, const PlotRun *r, int run, const Axes *a) {
  if (!r->ne) return false;
  put_curve_start(b, "heldout", r, run);
  bprintf(b, " stroke-width=\"1\" points=\"");
  put_points(b, a, r->ne, r->estep, NULL, r->eloss, false);
  bprintf(b, "\"/>\n");
  for (int64_t k = 0; k < r->ne; k++)
    bprintf(b, "<circle class=\"heldout-point\" data-run=\"%d\" cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"white\" "
               "stroke=\"%s\" stroke-width=\"1.5\"/>\n", run, px_of(a, (double)r->estep[k]), py_of(a, r->eloss[k]),
            palette[run % 8]);
  return true;
}

static void render(Buf *b, const PlotRun *runs, int nruns, const PlotOptions *o, int64_t window) {
  // Ranges: x over every logged step, y over the medians (2% margin).
  Axes a = {INFINITY, -INFINITY, INFINITY, -INFINITY, o->log_y};
  for (int i = 0; i < nruns; i++) {
    a.xmin = fmin(a.xmin, (double)runs[i].step[0]);
    a.xmax = fmax(a.xmax, (double)runs[i].step[runs[i].n - 1]);
    for (int64_t k = 0; k < runs[i].nm; k++) {
      double v = o->log_y ? log10(runs[i].my[k]) : runs[i].my[k];
      a.ymin = fmin(a.ymin, v), a.ymax = fmax(a.ymax, v);
    }
    for (int64_t k = 0; k < runs[i].ne; k++) {
      double v = o->log_y ? log10(runs[i].eloss[k]) : runs[i].eloss[k];
      a.ymin = fmin(a.ymin, v), a.ymax = fmax(a.ymax, v);
      a.xmin = fmin(a.xmin, (double)runs[i].estep[k]), a.xmax = fmax(a.xmax, (double)runs[i].estep[k]);
    }
  }
  if (a.xmax == a.xmin) a.xmin -= 1, a.xmax += 1;
  double pad = (a.ymax - a.ymin) * 0.02;
  if (!(pad > 0) || !isfinite(pad)) pad = fmax(fabs(a.ymax) * 0.05, 0.05);
  if (isfinite(a.ymin - pad) && isfinite(a.ymax + pad)) a.ymin -= pad, a.ymax += pad;
  Ticks xt, yt;
  linear_ticks(&a.xmin, &a.xmax, true, &xt);
  if (o->log_y) log_ticks(a.ymin, a.ymax, &yt);
  else linear_ticks(&a.ymin, &a.ymax, true, &yt);

  bprintf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  bprintf(b,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
          CANVAS_W, CANVAS_H, CANVAS_W, CANVAS_H);
  bprintf(b, "<title>");
  put_xml(b, o->title);
  bprintf(b, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", CANVAS_W, CANVAS_H);
  bprintf(b, "<text class=\"title\" x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">",
          PLOT_L + PLOT_W / 2);
  put_xml(b, o->title);
  bprintf(b, "</text>\n<text class=\"subtitle\" x=\"%d\" y=\"42\" text-anchor=\"middle\" fill=\"#555\">", PLOT_L + PLOT_W / 2);
  if (window == 1) bprintf(b, "loss at every logged step</text>\n");
  else bprintf(b, "median of every %lld steps%s</text>\n", (long long)window, o->raw ? "; faint: raw loss" : "");
  bprintf(b, "<defs><clipPath id=\"plot-area\"><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/></clipPath></defs>\n",
          PLOT_L, PLOT_T, PLOT_W, PLOT_H);

  // Grid, frame, ticks and their labels.
  bprintf(b, "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n");
  for (int i = 0; i < xt.n; i++) {
    double x = px_of(&a, xt.v[i]);
    bprintf(b, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n", x, PLOT_T, x, PLOT_T + PLOT_H);
  }
  for (int i = 0; i < yt.n; i++) {
    double y = py_of(&a, yt.v[i]);
    bprintf(b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>\n", PLOT_L, y, PLOT_L + PLOT_W, y);
  }
  bprintf(b, "</g>\n<g class=\"axes\" fill=\"#333\">\n");
  bprintf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", PLOT_L, PLOT_T,
          PLOT_W, PLOT_H);
  for (int i = 0; i < xt.n; i++) {
    double x = px_of(&a, xt.v[i]);
    bprintf(b, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/>", x, PLOT_T + PLOT_H, x,
            PLOT_T + PLOT_H + 5);
    bprintf(b, "<text class=\"tick x\" x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, PLOT_T + PLOT_H + 18,
            xt.text[i]);
  }
  for (int i = 0; i < yt.n; i++) {
    double y = py_of(&a, yt.v[i]);
    bprintf(b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#333\"/>", PLOT_L - 5, y, PLOT_L, y);
    bprintf(b, "<text class=\"tick y\" x=\"%d\" y=\"%.2f\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n",
            PLOT_L - 8, y, yt.text[i]);
  }
  bprintf(b, "<text class=\"label x\" x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">step</text>\n",
          PLOT_L + PLOT_W / 2, PLOT_T + PLOT_H + 40);
  bprintf(b,
          "<text class=\"label y\" transform=\"translate(18 %d) rotate(-90)\" text-anchor=\"middle\" "
          "font-size=\"13\">%s</text>\n</g>\n",
          PLOT_T + PLOT_H / 2, o->log_y ? "loss (log scale)" : "loss");

  // Curves: every raw series under every median.
  bprintf(b,
          "<g class=\"plot\" clip-path=\"url(#plot-area)\" data-left=\"%d\" data-top=\"%d\" data-width=\"%d\" "
          "data-height=\"%d\" data-xmin=\"%.17g\" data-xmax=\"%.17g\" data-ymin=\"%.17g\" data-ymax=\"%.17g\" "
          "data-log-y=\"%d\" data-window=\"%lld\">\n",
          PLOT_L, PLOT_T, PLOT_W, PLOT_H, a.xmin, a.xmax, o->log_y ? pow(10, a.ymin) : a.ymin,
          o->log_y ? pow(10, a.ymax) : a.ymax, o->log_y, (long long)window);
  if (o->raw && window > 1)
    for (int i = 0; i < nruns; i++) put_raw(b, &runs[i], i, &a);
  for (int i = 0; i < nruns; i++) put_median(b, &runs[i], i, &a);
  bool held = false;
  for (int i = 0; i < nruns; i++) held = held || put_heldout(b, &runs[i], i, &a);
  bprintf(b, "</g>\n");

  // Legend, top right inside the plot area.
  int wmax = 0;
  for (int i = 0; i < nruns; i++) {
    int w = text_width(runs[i].label);
    if (w > wmax) wmax = w;
  }
  if (held && wmax < 22) wmax = 22;
  int lw = 48 + (int)(7.5 * (wmax > 60 ? 60 : wmax)), lh = 10 + 18 * (nruns + held);
  int lx = PLOT_L + PLOT_W - 10 - lw, ly = PLOT_T + 10;
  bprintf(b, "<g class=\"legend\">\n");
  bprintf(b,
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#bbb\"/>\n",
          lx, ly, lw, lh);
  for (int i = 0; i < nruns; i++) {
    int y = ly + 14 + 18 * i;
    bprintf(b, "<g class=\"legend-entry\" data-run=\"%d\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"", i, lx + 8, y,
            lx + 32, y);
    put_stroke(b, i);
    bprintf(b, " stroke-width=\"2\"/><text class=\"legend-label\" x=\"%d\" y=\"%d\" dominant-baseline=\"middle\">",
            lx + 38, y);
    put_xml(b, runs[i].label);
    bprintf(b, "</text></g>\n");
  }
  if (held) {
    int y = ly + 14 + 18 * nruns;
    bprintf(b, "<g class=\"legend-entry heldout\"><circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"white\" stroke=\"#333\" "
               "stroke-width=\"1.5\"/><text class=\"legend-label\" x=\"%d\" y=\"%d\" dominant-baseline=\"middle\">"
               "held-out loss</text></g>\n", lx + 20, y, lx + 38, y);
  }
  bprintf(b, "</g>\n</svg>\n");
}

static bool parse_window(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long n = strtoll(s, &end, 10);
  if (!*s || *end || errno || n < 1 || n > 1000000000000000LL) return false;
  *v = n;
  return true;
}

// The default label: the basename without ".csv" (owned copy; NULL on OOM).
static char *default_label(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 4 && !strcmp(base + n - 4, ".csv")) n -= 4;
  char *s = malloc(n + 1);
  if (s) memcpy(s, base, n), s[n] = 0;
  return s;
}

static bool write_file(const char *path, const Buf *b) {
  FILE *f = fopen(path, "wb");
  if (!f) return xfrun_fail("cannot write %s: %s", path, strerror(errno)), false;
  bool ok = fwrite(b->s, 1, b->n, f) == b->n;
  int e = errno;
  if (fclose(f) != 0 && ok) ok = false, e = errno;
  if (!ok) {
    remove(path);
    return xfrun_fail("cannot write %s: %s", path, strerror(e ? e : EIO)), false;
  }
  return true;
}

enum { P_RAW, P_NO_RAW, P_LOG_Y, P_O, P_WINDOW, P_TITLE, P_LABEL, P_H, P_HELP, P_COUNT };
static const CliOption opts[P_COUNT] = {
    [P_RAW] = {"raw", false},     [P_NO_RAW] = {"no-raw", false}, [P_LOG_Y] = {"log-y", false},
    [P_O] = {"o", true},          [P_WINDOW] = {"window", true},  [P_TITLE] = {"title", true},
    [P_LABEL] = {"label", true},  [P_H] = {"h", false},           [P_HELP] = {"help", false},
};

int xfrun_plot(int argc, char **argv) {
  PlotOptions o = {.title = "Training loss", .raw = true};
  int nruns = 0, nlabels = 0, status = XF_EXIT_ERROR;
  PlotRun *runs = calloc((size_t)argc, sizeof *runs);
  const char **labels = calloc((size_t)argc, sizeof *labels);
  double *scratch = NULL;
  Buf b = {0};
  if (!runs || !labels) {
    xfrun_fail("out of memory");
    goto out;
  }
  // runs and labels have argc entries: each takes an argument of its own
  Cli c = cli_start(PROG, opts, P_COUNT, argc, argv, 1);
  for (int k; (k = cli_next(&c)) != CLI_END;) {
    const char *v = c.value;
    switch (k) {
    case CLI_BAD: status = XF_EXIT_USAGE; goto out;
    case CLI_ARG: runs[nruns++].path = v; break;
    case P_H:
    case P_HELP: usage(stdout), status = XF_EXIT_OK; goto out;
    case P_RAW: o.raw = true; break;
    case P_NO_RAW: o.raw = false; break;
    case P_LOG_Y: o.log_y = true; break;
    case P_O: o.out = v; break;
    case P_TITLE: o.title = v; break;
    case P_LABEL: labels[nlabels++] = v; break;
    case P_WINDOW:
      if (!parse_window(v, &o.window)) {
        status = usage_error("--window %s: must be an integer >= 1", v);
        goto out;
      }
      break;
    }
  }
  if (!nruns) {
    status = usage_error("no input files (usage: xfrun plot RUN.csv... -o FILE.svg)");
    goto out;
  }
  if (!o.out) {
    status = usage_error("-o FILE is required (the SVG to write)");
    goto out;
  }
  if (nlabels > nruns) {
    status = usage_error("%d --label options for %d input file%s", nlabels, nruns, nruns == 1 ? "" : "s");
    goto out;
  }
  int64_t maxn = 0;
  for (int i = 0; i < nruns; i++) {
    PlotRun *r = &runs[i];
    if (i < nlabels) r->label = labels[i];
    else if (!(r->label = default_label(r->path))) {
      xfrun_fail("out of memory");
      goto out;
    } else r->label_owned = true;
    if (!read_run(r, o.log_y)) goto out;
    if (r->n > maxn) maxn = r->n;
  }
  int64_t window = o.window;
  if (!window) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int i = 0; i < nruns; i++) {
      if (runs[i].step[0] < lo) lo = runs[i].step[0];
      if (runs[i].step[runs[i].n - 1] > hi) hi = runs[i].step[runs[i].n - 1];
    }
    window = nearest_125(((double)hi - (double)lo + 1) / DEFAULT_WINDOWS);
  }
  if (!(scratch = malloc((size_t)maxn * sizeof *scratch))) {
    xfrun_fail("out of memory");
    goto out;
  }
  for (int i = 0; i < nruns; i++)
    if (!window_medians(&runs[i], window, scratch)) {
      xfrun_fail("out of memory");
      goto out;
    }
  render(&b, runs, nruns, &o, window);
  if (b.oom) {
    xfrun_fail("out of memory");
    goto out;
  }
  if (write_file(o.out, &b)) {
    status = XF_EXIT_OK;
    fprintf(stderr, "xfrun: wrote %s (%d run%s)\n", o.out, nruns, nruns == 1 ? "" : "s");
  }
out:
  for (int i = 0; runs && i < nruns; i++) {
    if (runs[i].label_owned) free((char *)runs[i].label);
    free(runs[i].step), free(runs[i].loss), free(runs[i].mx), free(runs[i].my), free(runs[i].estep), free(runs[i].eloss);
  }
  free(runs), free(labels), free(scratch), free(b.s);
  return status;
}
