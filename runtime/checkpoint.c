// checkpoint.c: safetensors checkpoints (see xf.h).
//
// The safetensors layout: an 8-byte little-endian header length N, N bytes
// of JSON {"name": {"dtype": "F32", "shape": [...], "data_offsets": [a, b]},
// ..., "__metadata__": {"key": "value", ...}}, padded with spaces to a
// multiple of 8, then the tensor bytes. Offsets are relative to the end of
// the header; tensors tile the data exactly, in order, without holes.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json.h"
#include "xf.h"

#define fail xf_errorf

enum { MAX_HEADER = 100 << 20 };  // the limit the safetensors readers enforce

// The tensors of rt in file order: parameters, then exp_avg, then exp_avg_sq.
typedef struct {
  char name[1100];
  const float *data;
  int64_t numel;
  int rank;
  int64_t dims[6];
} Entry;

// Entry k's name and shape (data: NULL unless with_data, which needs xf_allocate).
static void entry_of(const XfRuntime *rt, int k, bool with_data, Entry *e) {
  int np = xf_nparams(rt), p = k % np, which = k / np;
  e->rank = xf_param_shape(rt, p, e->dims);
  e->numel = 1;
  for (int d = 0; d < e->rank; d++) e->numel *= e->dims[d];
  static const char *prefix[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
  snprintf(e->name, sizeof e->name, "%s%s", prefix[which], xf_param_name(rt, p));
  e->data = NULL;
  if (with_data) e->data = which ? xf_moment((XfRuntime *)rt, p, which - 1) : xf_param((XfRuntime *)rt, p, NULL, NULL);
}

static void entry(XfRuntime *rt, int k, Entry *e) { entry_of(rt, k, true, e); }

static bool little_endian(void) {
  uint16_t one = 1;
  return *(uint8_t *)&one == 1;
}

static void put_u64le(unsigned char *o, uint64_t v) {
  for (int i = 0; i < 8; i++) o[i] = (unsigned char)(v >> (8 * i));
}

bool xf_checkpoint_save(XfRuntime *rt, const char *path, const XfMeta *extra, int nextra, char *err, size_t errlen) {
  if (!little_endian()) return fail(err, errlen, "checkpoints are little-endian; this machine is not");
  int n = 3 * xf_nparams(rt);
  const XfOptions *o = xf_options(rt);
  JsonBuf h = {0};
  json_put_cstr(&h, "{\"__metadata__\":{");
  const char *fixed[][2] = {{"format", "xf-checkpoint/1"}, {"model", xf_model(rt)->name}};
  for (int i = 0; i < 2; i++) {
    json_put_string(&h, fixed[i][0], strlen(fixed[i][0])), json_put_raw(&h, ":", 1);
    json_put_string(&h, fixed[i][1], strlen(fixed[i][1])), json_put_raw(&h, ",", 1);
  }
  json_put_printf(&h, "\"step\":\"%u\",\"seed\":\"%llu\",", xf_step_count(rt), (unsigned long long)o->seed);
  json_put_printf(&h, "\"rng\":\"philox4x32-10 seed=%llu counter=%u\",", (unsigned long long)o->seed,
                  xf_step_count(rt));
  json_put_printf(&h, "\"optimizer\":\"AdamW\",\"lr\":\"%.17g\",\"beta1\":\"%.17g\",\"beta2\":\"%.17g\",\"eps\":\"%.17g\","
                  "\"weight_decay\":\"%.17g\",", o->lr, o->beta1, o->beta2, o->eps, o->weight_decay);
  json_put_printf(&h, "\"batch\":\"%lld\",\"seq\":\"%lld\"", (long long)(o->global_batch ? o->global_batch : o->batch),
                  (long long)o->seq);
  // the model's configuration: "context", then "config.<name>" per config value
  const XfModel *m = xf_model(rt);
  json_put_printf(&h, ",\"context\":\"%lld\"", (long long)m->context);
  for (int i = 0; i < m->nconfig; i++) {
    char key[300];
    snprintf(key, sizeof key, "config.%s", m->config[i].name);
    json_put_raw(&h, ",", 1), json_put_string(&h, key, strlen(key));
    if (m->config[i].is_float) json_put_printf(&h, ":\"%.17g\"", m->config[i].value);
    else json_put_printf(&h, ":\"%lld\"", (long long)m->config[i].value);
  }
  for (int i = 0; i < nextra; i++) {
    json_put_raw(&h, ",", 1);
    json_put_string(&h, extra[i].key, strlen(extra[i].key)), json_put_raw(&h, ":", 1);
    json_put_string(&h, extra[i].value, strlen(extra[i].value));
  }
  json_put_raw(&h, "}", 1);
  uint64_t off = 0;
  Entry e;
  for (int k = 0; k < n; k++) {
    entry(rt, k, &e);
    json_put_raw(&h, ",", 1);
    json_put_string(&h, e.name, strlen(e.name));
    json_put_cstr(&h, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < e.rank; d++) json_put_printf(&h, "%s%lld", d ? "," : "", (long long)e.dims[d]);
    uint64_t bytes = (uint64_t)e.numel * 4;
    json_put_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + bytes));
    off += bytes;
  }
  json_put_raw(&h, "}", 1);
  while (!h.oom && (8 + h.len) % 8) json_put_raw(&h, " ", 1);
  if (h.oom) return json_buf_free(&h), fail(err, errlen, "out of memory writing checkpoint %s", path);
  if (h.len > MAX_HEADER) return json_buf_free(&h), fail(err, errlen, "checkpoint header of %s is too large", path);

  // The file: 8-byte header length, header, the tensors in entry order.
  XfSpan *parts = malloc(sizeof(XfSpan) * ((size_t)n + 2));
  if (!parts) return json_buf_free(&h), fail(err, errlen, "out of memory writing checkpoint %s", path);
  unsigned char len8[8];
  put_u64le(len8, h.len);
  parts[0] = (XfSpan){len8, 8}, parts[1] = (XfSpan){h.buf, h.len};
  for (int k = 0; k < n; k++) entry(rt, k, &e), parts[k + 2] = (XfSpan){e.data, (size_t)e.numel * 4};
  bool ok = xf_write_atomic(path, parts, n + 2, err, errlen);
  free(parts);
  json_buf_free(&h);
  return ok;
}

// ---- reading ------------------------------------------------------------------------

typedef struct {
  const char *name;
  int rank;
  int64_t dims[8];
  uint64_t begin, end;
} Tensor;

struct XfCheckpoint {
  char *path;
  unsigned char *data;  // the tensor bytes
  uint64_t ndata;
  Json *header;
  const Json *meta;     // __metadata__, or NULL
  Tensor *tensors;
  int ntensors;
};

void xf_checkpoint_close(XfCheckpoint *c) {
  if (!c) return;
  free(c->path), free(c->data), free(c->tensors);
  json_free(c->header);
  free(c);
}

static XfCheckpoint *open_fail(XfCheckpoint *c, FILE *f) {
  if (f) fclose(f);
  xf_checkpoint_close(c);
  return NULL;
}

static int cmp_begin(const void *a, const void *b) {
  const Tensor *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

XfCheckpoint *xf_checkpoint_open(const char *path, char *err, size_t errlen) {
  XfCheckpoint *c = calloc(1, sizeof *c);
  if (!c || !(c->path = strdup(path))) return fail(err, errlen, "out of memory"), open_fail(c, NULL);
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, "cannot open checkpoint %s: %s", path, strerror(errno)), open_fail(c, NULL);
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(err, errlen, "checkpoint %s is not a regular file", path), open_fail(c, f);
  unsigned char len8[8];
  if (st.st_size < 8 || fread(len8, 1, 8, f) != 8)
    return fail(err, errlen, "checkpoint %s is too short to be a safetensors file", path), open_fail(c, f);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (hlen > MAX_HEADER || hlen > (uint64_t)st.st_size - 8)
    return fail(err, errlen, "checkpoint %s: header length %llu does not fit the file of %lld bytes (not safetensors, "
                "or truncated)", path, (unsigned long long)hlen, (long long)st.st_size), open_fail(c, f);
  char *text = malloc(hlen + 1);
  c->ndata = (uint64_t)st.st_size - 8 - hlen;
  c->data = malloc(c->ndata ? c->ndata : 1);
  if (!text || !c->data) return free(text), fail(err, errlen, "out of memory reading %s", path), open_fail(c, f);
  if (fread(text, 1, hlen, f) != hlen || fread(c->data, 1, c->ndata, f) != c->ndata)
    return free(text), fail(err, errlen, "cannot read checkpoint %s", path), open_fail(c, f);
  fclose(f);
  char jerr[256];
  c->header = json_parse(text, hlen, jerr, sizeof jerr);
  free(text);
  if (!c->header) return fail(err, errlen, "checkpoint %s: header is not JSON: %s", path, jerr), open_fail(c, NULL);
  if (c->header->kind != JSON_OBJECT)
    return fail(err, errlen, "checkpoint %s: header is not a JSON object", path), open_fail(c, NULL);
  c->tensors = calloc(c->header->n + 1, sizeof *c->tensors);
  if (!c->tensors) return fail(err, errlen, "out of memory"), open_fail(c, NULL);
  for (size_t i = 0; i < c->header->n; i++) {
    const char *name = c->header->keys[i];
    const Json *t = c->header->items[i];
    if (!strcmp(name, "__metadata__")) {
      if (t->kind != JSON_OBJECT)
        return fail(err, errlen, "checkpoint %s: __metadata__ is not an object", path), open_fail(c, NULL);
      c->meta = t;
      continue;
    }
    const char *dtype = json_get_str(t, "dtype");
    const Json *shape = json_get(t, "shape"), *offs = json_get(t, "data_offsets");
    if (!dtype || !shape || shape->kind != JSON_ARRAY || !offs || offs->kind != JSON_ARRAY || offs->n != 2)
      return fail(err, errlen, "checkpoint %s: tensor '%s' lacks dtype, shape or data_offsets", path, name),
             open_fail(c, NULL);
    if (strcmp(dtype, "F32"))
      return fail(err, errlen, "checkpoint %s: tensor '%s' is %s; xf reads F32", path, name, dtype), open_fail(c, NULL);
    if (shape->n > 8) return fail(err, errlen, "checkpoint %s: tensor '%s' has rank %zu", path, name, shape->n),
                             open_fail(c, NULL);
    Tensor *x = &c->tensors[c->ntensors++];
    x->name = name, x->rank = (int)shape->n;
    uint64_t numel = 1;
    for (size_t d = 0; d < shape->n; d++) {
      const Json *v = shape->items[d];
      if (v->kind != JSON_NUMBER || !v->is_integer || v->integer < 0 || v->integer > ((int64_t)1 << 40) ||
          (numel *= (uint64_t)v->integer) > ((uint64_t)1 << 40))
        return fail(err, errlen, "checkpoint %s: tensor '%s' has a bad shape", path, name), open_fail(c, NULL);
      x->dims[d] = v->integer;
    }
    const Json *a = offs->items[0], *b = offs->items[1];
    if (a->kind != JSON_NUMBER || b->kind != JSON_NUMBER || !a->is_integer || !b->is_integer || a->integer < 0 ||
        b->integer < a->integer || (uint64_t)b->integer > c->ndata || (uint64_t)(b->integer - a->integer) != numel * 4)
      return fail(err, errlen, "checkpoint %s: tensor '%s' has data_offsets that do not fit its shape or the file "
                  "(truncated?)", path, name), open_fail(c, NULL);
    x->begin = (uint64_t)a->integer, x->end = (uint64_t)b->integer;
  }
  // The tensors must tile the data: sorted by offset, each starts where the last ended.
  Tensor *sorted = malloc(sizeof(Tensor) * ((size_t)c->ntensors + 1));
  if (!sorted) return fail(err, errlen, "out of memory"), open_fail(c, NULL);
  memcpy(sorted, c->tensors, sizeof(Tensor) * (size_t)c->ntensors);
  qsort(sorted, (size_t)c->ntensors, sizeof *sorted, cmp_begin);
  uint64_t at = 0;
  bool tiled = true;
  for (int i = 0; i < c->ntensors; i++) tiled = tiled && sorted[i].begin == at, at = sorted[i].end;
  free(sorted);
  if (!tiled || at != c->ndata)
    return fail(err, errlen, "checkpoint %s: tensor data has holes or overlaps, or the file is truncated", path),
           open_fail(c, NULL);
  return c;
}

const char *xf_checkpoint_meta(const XfCheckpoint *c, const char *key) { return json_get_str(c->meta, key); }

const char *xf_checkpoint_meta_at(const XfCheckpoint *c, int i, const char **value) {
  if (!c->meta || i < 0 || (size_t)i >= c->meta->n) return NULL;
  const Json *v = c->meta->items[i];
  if (value) *value = v->kind == JSON_STRING ? v->str : NULL;
  return c->meta->keys[i];
}

int xf_checkpoint_ntensors(const XfCheckpoint *c) { return c->ntensors; }

const char *xf_checkpoint_tensor(const XfCheckpoint *c, int i, int *rank, int64_t dims[8], const unsigned char **data,
                                 int64_t *numel) {
  if (i < 0 || i >= c->ntensors) return NULL;
  const Tensor *t = &c->tensors[i];
  if (rank) *rank = t->rank;
  if (dims) memcpy(dims, t->dims, sizeof t->dims);
  if (data) *data = c->data + t->begin;
  if (numel) *numel = (int64_t)((t->end - t->begin) / 4);
  return t->name;
}

static const Tensor *find_tensor(const XfCheckpoint *c, const char *name) {
  for (int i = 0; i < c->ntensors; i++)
    if (!strcmp(c->tensors[i].name, name)) return &c->tensors[i];
  return NULL;
}

static void shape_str(char *o, size_t n, int rank, const int64_t *dims) {
  size_t at = (size_t)snprintf(o, n, "[");
  for (int d = 0; d < rank && at < n; d++) at += (size_t)snprintf(o + at, n - at, "%s%lld", d ? ", " : "", (long long)dims[d]);
  if (at < n) snprintf(o + at, n - at, "]");
}

// The metadata's 'step' as a uint32 (false: missing or invalid).
static bool checkpoint_step(const XfCheckpoint *c, uint32_t *step) {
  const char *s = xf_checkpoint_meta(c, "step");
  char *end;
  if (!s || *s < '0' || *s > '9') return false;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || errno || v > UINT32_MAX) return false;
  if (step) *step = (uint32_t)v;
  return true;
}

bool xf_checkpoint_check(const XfCheckpoint *c, const XfRuntime *rt, bool optimizer, char *err, size_t errlen) {
  int np = xf_nparams(rt), n = (optimizer ? 3 : 1) * np;
  const char *model = xf_model(rt)->name;
  Entry e;
  for (int k = 0; k < n; k++) {
    entry_of(rt, k, false, &e);
    const Tensor *t = find_tensor(c, e.name);
    if (!t)
      return fail(err, errlen, "checkpoint %s has no tensor '%s' that model '%s' needs%s", c->path, e.name, model,
                  k >= np ? " (saved without optimizer state?)" : " (a checkpoint of another model?)");
    bool same = t->rank == e.rank;
    for (int d = 0; same && d < e.rank; d++) same = t->dims[d] == e.dims[d];
    if (!same) {
      char want[128], got[128];
      shape_str(want, sizeof want, e.rank, e.dims), shape_str(got, sizeof got, t->rank, t->dims);
      return fail(err, errlen, "checkpoint %s: tensor '%s' has shape %s, model '%s' needs %s", c->path, e.name, got,
                  model, want);
    }
  }
  for (int i = 0; i < c->ntensors; i++) {
    const char *name = c->tensors[i].name;
    bool known = false;
    for (int k = 0; k < 3 * np && !known; k++) entry_of(rt, k, false, &e), known = !strcmp(e.name, name);
    if (!known)
      return fail(err, errlen, "checkpoint %s has tensor '%s' that model '%s' does not have (a checkpoint of another "
                  "model?)", c->path, name, model);
  }
  if (optimizer && !checkpoint_step(c, NULL))
    return fail(err, errlen, "checkpoint %s has no valid 'step' in its metadata", c->path);
  return true;
}

bool xf_checkpoint_load(const XfCheckpoint *c, XfRuntime *rt, bool optimizer, char *err, size_t errlen) {
  if (!xf_checkpoint_check(c, rt, optimizer, err, errlen)) return false;
  int n = (optimizer ? 3 : 1) * xf_nparams(rt);
  Entry e;
  for (int k = 0; k < n; k++) {
    entry(rt, k, &e);
    const Tensor *t = find_tensor(c, e.name);
    memcpy((float *)e.data, c->data + t->begin, (size_t)e.numel * 4);
  }
  uint32_t step;
  if (optimizer && checkpoint_step(c, &step)) xf_set_step(rt, step);
  return true;
}
