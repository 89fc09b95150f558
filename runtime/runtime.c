// runtime.c: loading a model.so, planning its memory, parameter
// initialisation, AdamW, the CUDA device and the training step (see xf.h);
// the thread pool is pool.c, the incremental decoder sampler.c.
#include <dlfcn.h>
#include <elf.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "plan.h"
#include "gemm.h"
#include "gpu.h"
#include "rng.h"
#include "xf.h"

#include "runtime_impl.h"

// XfApi.sgemm: the GEMM provider of gemm.h, on the calling thread.
static void api_sgemm(const XfApi *api, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  (void)api;
  xf_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// XfApi.sgemm under xfc --precision=bf16: bf16 products into the calling
// thread's scratch (one per pool thread, XfRuntime.bf16).
static void api_sgemm_bf16(const XfApi *api, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  const Pool *p = api->ctx;
  xf_sgemm_bf16(&p->rt->bf16[xf_pool_index()], ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// XfApi.gemm_ex: products with bf16 operands (a model with bf16 storage),
// into the calling thread's scratch.
static void api_gemm_ex(const XfApi *api, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                        int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc, int32_t types) {
  const Pool *p = api->ctx;
  xf_gemm_ex(&p->rt->bf16[xf_pool_index()], ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, types);
}

// ---- the runtime ------------------------------------------------------------------


bool xf_errorf(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return false;
}

static void close_device(XfRuntime *rt) {
  if (!rt->gpu) return;
  if (rt->graph) rt->gpu->graph_free(rt->gpu, rt->graph);
  if (rt->pinned) rt->gpu->host_free(rt->gpu, rt->pinned);
  if (rt->darena) rt->gpu->release(rt->gpu, rt->darena);
  rt->gpu->close(rt->gpu);
  rt->gpu = NULL;
  free(rt->dbufs);
}

int64_t xf_buf_numel(const XfBuffer *b, int64_t B, int64_t T) {
  int64_t n = b->coef;
  for (int i = 0; i < b->pow_b; i++) n *= B;
  for (int i = 0; i < b->pow_t; i++) n *= T;
  return b->tdiv > 1 ? n / b->tdiv : n;
}

static int find_buffer(const XfModel *m, int role, const char *name) {
  for (int i = 0; i < m->nbuffers; i++)
    if (m->buffers[i].role == role && !strcmp(m->buffers[i].name, name)) return i;
  return -1;
}

const XfModel *xf_model(const XfRuntime *rt) { return rt->m; }
const XfOptions *xf_options(const XfRuntime *rt) { return &rt->opt; }
const char *xf_device(const XfRuntime *rt) { return rt->gpu ? rt->gpu->name : "cpu"; }
const char *xf_device_desc(const XfRuntime *rt) { return rt->gpu ? rt->gpu->desc : "the CPU"; }
void *xf_device_stream(const XfRuntime *rt) { return rt->gpu ? rt->gpu->stream : NULL; }
const char *xf_device_note(const XfRuntime *rt) { return rt->note[0] ? rt->note : NULL; }
const char *xf_cpu_gemms(const XfRuntime *rt) { return rt->gemms[0] ? rt->gemms : "float32"; }
int xf_nparams(const XfRuntime *rt) { return rt->nparams; }
int32_t *xf_tokens(XfRuntime *rt) { return rt->bufs[rt->tokens]; }
int32_t *xf_targets(XfRuntime *rt) { return rt->targets >= 0 ? rt->bufs[rt->targets] : NULL; }
uint32_t xf_step_count(const XfRuntime *rt) { return rt->step; }
size_t xf_memory_bytes(const XfRuntime *rt) { return rt->bytes; }

// The bf16 GEMM operands: XF_BF16_SCRATCH per pool thread and the
// parameters' copies, or none.
static size_t bf16_bytes(const XfRuntime *rt) {
  if (!rt->bf16) return 0;
  return (size_t)rt->opt.threads * (size_t)xf_bf16_thread_bytes(rt->bf16[0].ccap > 0) + rt->copy_bytes;
}

// The parameters' bf16 copies: per parameter, its elements [lo, hi) (slot
// 0 the float32 values, slot 1 the copy).
static void convert_chunk(void **slot, int64_t B, int64_t T, uint64_t seed, uint32_t step, int64_t lo, int64_t hi,
                          const XfApi *api) {
  (void)B, (void)T, (void)seed, (void)step, (void)api;
  xf_bf16_convert((uint16_t *)slot[1] + lo, (const float *)slot[0] + lo, hi - lo);
}

void xf_bf16_current(XfRuntime *rt) {
  if (!rt->copies_stale) return;
  for (int i = 0; i < rt->copies.n; i++) {
    void *slot[2] = {(void *)rt->copies.src[i], (void *)rt->copies.copy[i]};
    int64_t n = rt->copies.len[i];
    if (n < 65536) convert_chunk(slot, 0, 0, 0, 0, 0, n, &rt->api);
    else xf_pool_for(&rt->api, convert_chunk, slot, 0, 0, 0, 0, n);
  }
  rt->copies_stale = false;
}

// The copies of every parameter, in address order (the order of rt->params:
// load_descriptor places them ascending), allocated at once.
static bool alloc_copies(XfRuntime *rt, char *err, size_t errlen) {
  int n = rt->nparams;
  rt->copies.src = calloc((size_t)n + 1, sizeof *rt->copies.src);
  int64_t *len = calloc((size_t)n + 1, sizeof *len);
  rt->copies.len = len;
  rt->copies.copy = calloc((size_t)n + 1, sizeof *rt->copies.copy);
  if (!rt->copies.src || !len || !rt->copies.copy) return fail(err, errlen, "out of memory");
  size_t bytes = 0;
  for (int p = 0; p < n; p++) bytes += (size_t)xf_bf16_copy_bytes(rt->numel[rt->params[p]]);
  rt->copy_mem = aligned_alloc(64, bytes ? bytes : 64);
  if (!rt->copy_mem) return fail(err, errlen, "cannot allocate %.1f MiB for the parameters' bf16 copies", (double)bytes / (1 << 20));
  char *at = (char *)rt->copy_mem;
  for (int p = 0; p < n; p++) {
    const float *w = rt->bufs[rt->params[p]];
    if (p > 0 && w <= rt->copies.src[p - 1]) return fail(err, errlen, "internal error: parameters out of address order");
    rt->copies.src[p] = w, len[p] = rt->numel[rt->params[p]], rt->copies.copy[p] = (const uint16_t *)at;
    at += xf_bf16_copy_bytes(len[p]);
  }
  rt->copies.n = n, rt->copy_bytes = bytes, rt->copies_stale = true;
  for (int t = 0; t < rt->opt.threads; t++) rt->bf16[t].copies = &rt->copies;
  return true;
}
XfMemory xf_memory(const XfRuntime *rt) {
  return (XfMemory){.planned = rt->moments_at - rt->persist, .persistent = rt->persist, .moments = rt->accum_at - rt->moments_at,
                    .accum = rt->bytes - rt->accum_at, .gemm = bf16_bytes(rt), .total = rt->bytes + bf16_bytes(rt)};
}
double xf_grad_norm(const XfRuntime *rt) { return rt->grad_norm; }
void xf_set_row0(XfRuntime *rt, int64_t row0) { rt->api.row0 = row0; }

static void host_sync(XfRuntime *rt, bool write);

float *xf_param(XfRuntime *rt, int i, const char **name, int64_t *numel) {
  host_sync(rt, true);
  rt->copies_stale = true;  // the caller may write it
  int b = rt->params[i];
  if (name) *name = rt->m->buffers[b].name;
  if (numel) *numel = rt->numel[b];
  return rt->bufs[b];
}

const char *xf_param_name(const XfRuntime *rt, int i) { return rt->m->buffers[rt->params[i]].name; }

float *xf_moment(XfRuntime *rt, int i, int which) {
  host_sync(rt, true);
  return which ? rt->adam_v[i] : rt->adam_m[i];
}
void xf_set_step(XfRuntime *rt, uint32_t step) { rt->step = step; }

int xf_param_shape(const XfRuntime *rt, int i, int64_t dims[6]) {
  const XfBuffer *b = &rt->m->buffers[rt->params[i]];
  for (int k = 0; k < b->rank; k++) dims[k] = b->dims[k];
  return b->rank;
}

const float *xf_grad(XfRuntime *rt, int i) {
  host_sync(rt, false);
  return rt->grads[i] >= 0 ? rt->bufs[rt->grads[i]] : NULL;
}

int64_t xf_vocab(const XfRuntime *rt) {
  for (int i = 0; i < rt->m->nconfig; i++)
    if (!strcmp(rt->m->config[i].name, "vocab") && !rt->m->config[i].is_float) return (int64_t)rt->m->config[i].value;
  return INT32_MAX;
}

// dlopen maps a file's segments without checking them against its size, so a
// truncated model.so would fault on first touch: check the ELF headers first.
static bool check_elf(const char *path, off_t size, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, "cannot open model %s", path);
  Elf64_Ehdr eh;
  bool ok = fread(&eh, sizeof eh, 1, f) == 1 && !memcmp(eh.e_ident, ELFMAG, SELFMAG) && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
            eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phoff + (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) <= (uint64_t)size &&
            eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize <= (uint64_t)size;
  for (int i = 0; ok && i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    ok = fseek(f, (long)(eh.e_phoff + (uint64_t)i * sizeof ph), SEEK_SET) == 0 && fread(&ph, sizeof ph, 1, f) == 1 &&
         ph.p_offset + ph.p_filesz <= (uint64_t)size;
  }
  fclose(f);
  return ok ? true : fail(err, errlen, "cannot load model %s: not a complete shared object (truncated or corrupt)", path);
}

// The debug hook of XF_DEBUG_POISON (kernel_done): a read of a dead buffer's
// storage before it is written again sees NaN, and the loss shows it.
static void poison_dead(const XfApi *api, int32_t kernel) {
  XfRuntime *rt = ((Pool *)api->ctx)->rt;
  for (int j = rt->dead_at[kernel]; j < rt->dead_at[kernel + 1]; j++) {
    int b = rt->dead[j];
    if (rt->m->buffers[b].bf16) {  // bf16 NaN: 0x7fc0
      uint16_t *h = rt->bufs[b];
      for (int64_t i = 0; i < rt->numel[b]; i++) h[i] = 0x7fc0;
      continue;
    }
    float *p = rt->bufs[b];
    for (int64_t i = 0; i < rt->numel[b]; i++) p[i] = NAN;
  }
}

// Picks the device (XfOptions.device) before anything is allocated.
static bool open_device(XfRuntime *rt, const char *path, char *err, size_t errlen) {
  int want = rt->opt.device;
  if (want == XF_DEVICE_CPU) return true;
  if (!rt->m->cuda) {
    if (want == XF_DEVICE_CUDA)
      return fail(err, errlen, "%s has no CUDA code: compile it with xfc --target=cuda", path);
    return true;
  }
  const char *emu = getenv("XF_CUDA_EMULATE");
  char why[900];
  rt->gpu = emu && *emu && strcmp(emu, "0") ? xf_gpu_emu_open(rt->opt.cuda_device, why, sizeof why) : xf_gpu_cuda_open(rt->opt.cuda_device, why, sizeof why);
  const char *graph = getenv("XF_CUDA_GRAPH");
  rt->graph_on = !graph || !*graph || strcmp(graph, "0");
  if (rt->gpu) return true;
  if (want == XF_DEVICE_CUDA) return fail(err, errlen, "--device cuda: %s", why);
  snprintf(rt->note, sizeof rt->note, "%s: running on the CPU", why);
  return true;
}

static bool decays(const XfRuntime *rt, int p);

// Device storage mirroring the host layout, then the optimizer's doubles,
// its segment table, the step's XfStepVars and the norm's partial sums (one
// allocation, planned here: no step allocates); the kernels loaded, the
// optimizer's hyper-parameters uploaded.
static bool attach_device(XfRuntime *rt, char *err, size_t errlen) {
  XfGpu *g = rt->gpu;
  const XfOptions *o = &rt->opt;
  double hyper[XF_NHP] = {[XF_HP_LR] = o->lr, [XF_HP_BETA1] = o->beta1, [XF_HP_BETA2] = o->beta2, [XF_HP_EPS] = o->eps,
                          [XF_HP_DECAY] = o->weight_decay, [XF_HP_CLIP] = o->clip, [XF_HP_NORM] = 0, [XF_HP_SCALE] = 1};
  rt->nsegs = 0, rt->nchunks = 0;
  for (int p = 0; p < rt->nparams; p++)
    if (rt->grads[p] >= 0) rt->nchunks += (rt->numel[rt->params[p]] + XF_ADAM_CHUNK - 1) / XF_ADAM_CHUNK;
  size_t hyper_bytes = (sizeof hyper + 63) & ~(size_t)63;
  size_t segs_bytes = (sizeof(XfAdamSeg) * (size_t)(rt->nparams + 1) + 63) & ~(size_t)63;
  size_t vars_at = rt->bytes + hyper_bytes + segs_bytes, part_at = vars_at + ((sizeof(XfStepVars) + 63) & ~(size_t)63);
  size_t bytes = part_at + sizeof(double) * (size_t)(rt->nchunks + 1);
  // T <= seq <= context; the step program runs at the sampler's (nseq <= batch, context)
  if (!g->alloc(g, (void **)&rt->darena, bytes) || !g->load(g, rt->m->cuda, rt->opt.batch, rt->m->context))
    return fail(err, errlen, "%s", g->err);
  bool storage = false;
  for (int i = 0; i < rt->m->nbuffers; i++) storage |= rt->m->buffers[i].bf16 != 0 && rt->m->buffers[i].role == XF_BUF_ACT;
  size_t dl = strlen(g->desc);
  if (storage) snprintf(g->desc + dl, sizeof g->desc - dl, "; activations stored in bf16");
  size_t tok_bytes = rt->tokens >= 0 ? (size_t)xf_buf_numel(&rt->m->buffers[rt->tokens], rt->opt.batch, rt->opt.seq) * 4 : 0;
  size_t tgt_bytes = rt->targets >= 0 ? (size_t)xf_buf_numel(&rt->m->buffers[rt->targets], rt->opt.batch, rt->opt.seq) * 4 : 0;
  rt->pin_tokens = 64, rt->pin_targets = 64 + ((tok_bytes + 63) & ~(size_t)63);
  if (!g->host_alloc(g, (void **)&rt->pinned, rt->pin_targets + tgt_bytes)) return fail(err, errlen, "%s", g->err);
  rt->dhyper = (double *)(rt->darena + rt->bytes);
  rt->dsegs = (XfAdamSeg *)(rt->darena + rt->bytes + hyper_bytes);
  rt->dvars = (XfStepVars *)(rt->darena + vars_at);
  rt->dpart = (double *)(rt->darena + part_at);
  rt->dbufs = calloc((size_t)rt->m->nbuffers + 1, sizeof *rt->dbufs);
  XfAdamSeg *segs = calloc((size_t)rt->nparams + 1, sizeof *segs);
  if (!rt->dbufs || !segs) return free(segs), fail(err, errlen, "out of memory");
  for (int i = 0; i < rt->m->nbuffers; i++)
    rt->dbufs[i] = rt->bufs[i] ? rt->darena + ((char *)rt->bufs[i] - (char *)rt->arena) : NULL;
  // the optimizer's segments: every parameter with a gradient, in order
  int64_t chunks = 0;
  for (int p = 0; p < rt->nparams; p++) {
    if (rt->grads[p] < 0) continue;
    int64_t n = rt->numel[rt->params[p]];
    int twin = 0;  // the parameter's bf16 twin (XF_BUF_TWIN), rewritten by AdamW with it
    while (twin < rt->m->nbuffers && rt->m->buffers[twin].twin_of != rt->params[p]) twin++;
    segs[rt->nsegs++] = (XfAdamSeg){.w = rt->dbufs[rt->params[p]], .m = rt->darena + ((char *)rt->adam_m[p] - (char *)rt->arena),
                                    .v = rt->darena + ((char *)rt->adam_v[p] - (char *)rt->arena),
                                    .g = rt->dbufs[rt->grads[p]],
                                    .s = rt->acc[p] ? rt->darena + ((char *)rt->acc[p] - (char *)rt->arena) : NULL,
                                    .h = twin < rt->m->nbuffers ? rt->dbufs[twin] : NULL,
                                    .n = n, .block0 = chunks, .decay = decays(rt, p)};
    chunks += (n + XF_ADAM_CHUNK - 1) / XF_ADAM_CHUNK;
  }
  bool ok = g->fill(g, rt->darena, 0, rt->bytes) && g->upload(g, rt->dhyper, hyper, sizeof hyper) &&
            g->upload(g, rt->dsegs, segs, sizeof(XfAdamSeg) * (size_t)(rt->nsegs + 1));
  free(segs);
  if (!ok) return fail(err, errlen, "%s", g->err);
  rt->host_dirty = true;
  return true;
}

// XF_DEBUG_POISON: dead[] lists the planned activations (items: memplan's
// input) by the kernel that last reads them.
static bool poison_lists(XfRuntime *rt, const PlanItem *items, char *err, size_t errlen) {
  const char *poison = getenv("XF_DEBUG_POISON");
  if (!poison || !*poison || !strcmp(poison, "0")) return true;
  const XfModel *m = rt->m;
  rt->dead_at = calloc((size_t)m->nkernels + 2, sizeof(int));
  rt->dead = calloc((size_t)m->nbuffers + 1, sizeof(int));
  int *fill = calloc((size_t)m->nkernels + 1, sizeof(int));
  bool ok = rt->dead_at && rt->dead && fill;
  for (int pass = 0; ok && pass < 2; pass++) {
    for (int i = 0; i < m->nbuffers; i++) {
      int last = m->buffers[i].last;
      if (items[i].bytes == 0 || items[i].first < 0 || m->buffers[i].role != XF_BUF_ACT || last >= m->nkernels) continue;
      if (pass == 0) rt->dead_at[last + 1]++;
      else rt->dead[rt->dead_at[last] + fill[last]++] = i;
    }
    for (int k = 0; pass == 0 && k < m->nkernels; k++) rt->dead_at[k + 1] += rt->dead_at[k];
  }
  free(fill);
  return ok || fail(err, errlen, "out of memory");
}

// The options' defaults and ranges, the descriptor's buffer sizes at (batch,
// seq), the parameter list and the memory plan: arithmetic only, nothing
// allocated that grows with batch, seq or the model's size (xf_allocate does).
static bool load_descriptor(XfRuntime *rt, const char *label, char *err, size_t errlen) {
  const XfModel *m = rt->m;
  XfOptions *o = &rt->opt;
  if (o->lr == 0) o->lr = 1e-3;
  if (o->beta1 == 0) o->beta1 = 0.9;
  if (o->beta2 == 0) o->beta2 = 0.999;
  if (o->eps == 0) o->eps = 1e-8;
  if (o->threads <= 0) o->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (o->threads < 1) o->threads = 1;
  if (o->seq == 0) o->seq = m->context;
  if (o->seq < 1 || o->seq > m->context)
    return fail(err, errlen, "--seq %lld is outside 1..%lld, the context length of model '%s'", (long long)o->seq,
                (long long)m->context, m->name);
  if (m->t_multiple > 1 && o->seq % m->t_multiple)
    return fail(err, errlen, "--seq %lld is not a multiple of %lld: model '%s' groups positions along time (T / %lld)",
                (long long)o->seq, (long long)m->t_multiple, m->name, (long long)m->t_multiple);
  rt->step_b = o->batch, rt->step_t = o->seq;
  if (o->batch < 1 || o->batch > (1 << 24))
    return fail(err, errlen, "--batch %lld is outside 1..%d", (long long)o->batch, 1 << 24);
  if (!(o->lr > 0 && o->lr < 1e3) || !(o->weight_decay >= 0 && o->weight_decay < 1e3) || !(o->beta1 >= 0 && o->beta1 < 1) ||
      !(o->beta2 >= 0 && o->beta2 < 1) || !(o->eps > 0))
    return fail(err, errlen, "AdamW needs 0 < lr < 1000, 0 <= weight decay < 1000, betas in [0, 1) and eps > 0");
  if (o->accum == 0) o->accum = 1;
  if (o->accum < 1 || o->accum > 65536) return fail(err, errlen, "--accum %d is outside 1..65536", o->accum);
  if (!(o->clip >= 0 && o->clip < 1e30)) return fail(err, errlen, "--clip %g: expected a norm >= 0 (0: no clipping)", o->clip);
  rt->lr_now = o->lr, rt->grad_norm = NAN;
  // the GEMM provider; each GEMM runs on the thread that calls it:
  // parallelism comes from the pool, which splits a GEMM's rows or columns
  if (!xf_gemm_select((XfGemmKind)o->gemm, NULL, err, errlen)) return false;
  if (!open_device(rt, label, err, errlen)) return false;
  int n = m->nbuffers;
  rt->numel = calloc((size_t)n, sizeof *rt->numel);
  rt->offset = calloc((size_t)n, sizeof *rt->offset);
  rt->params = calloc((size_t)n, sizeof(int));
  rt->grads = calloc((size_t)n, sizeof(int));
  PlanItem *items = calloc((size_t)n + 1, sizeof *items);
  int64_t *planned = calloc((size_t)n + 1, sizeof *planned);
  bool ok = rt->numel && rt->offset && rt->params && rt->grads && items && planned;
  if (!ok) fail(err, errlen, "out of memory");
  // storage roots the runtime itself reads or writes: those of every
  // buffer that is not an activation (offset 1 marks them until placed)
  for (int i = 0; ok && i < n; i++) {
    int r = i;
    while (m->buffers[r].alias_of >= 0) r = m->buffers[r].alias_of;
    if (m->buffers[i].role != XF_BUF_ACT) rt->offset[r] = 1;
  }
  // persistent storage first (params, gradients, inputs), then the planned
  // arena (activations, outputs: memplan over their lifetimes), then moments
  size_t total = 0;
  for (int i = 0; ok && i < n; i++) {
    const XfBuffer *b = &m->buffers[i];
    rt->numel[i] = xf_buf_numel(b, o->batch, o->seq);
    if (b->alias_of >= 0) continue;
    if (rt->numel[i] > ((int64_t)1 << 40) / 4) {
      ok = fail(err, errlen, "--batch %lld --seq %lld: %s%s%s alone needs more memory than exists",
                (long long)o->batch, (long long)o->seq, *b->name ? "buffer '" : "an intermediate buffer",
                b->name, *b->name ? "'" : "");
      break;
    }
    // planned: activations and outputs, placed by memplan over their
    // lifetimes; activations no kernel touches (values computed inside a
    // fused kernel) get no storage at all, as in xfc's plan (schedule_plan).
    // An output, or an activation an output aliases, always has a lifetime
    // in xfc's descriptors; one without is kept persistent, since the
    // runtime reads it.
    if ((b->role == XF_BUF_ACT || b->role == XF_BUF_OUTPUT) && b->first >= 0) {
      items[i] = (PlanItem){rt->numel[i] * xf_buf_esize(b), b->first, b->last};
      continue;
    }
    if (b->role == XF_BUF_ACT && rt->offset[i] != 1) {
      rt->offset[i] = SIZE_MAX;
      continue;
    }
    rt->offset[i] = total;
    total += ((size_t)(rt->numel[i] * xf_buf_esize(b)) + 63) & ~(size_t)63;
    if (b->role == XF_BUF_PARAM) {
      rt->params[rt->nparams] = i;
      char gname[1100];
      snprintf(gname, sizeof gname, "grad.%s", b->name);
      rt->grads[rt->nparams++] = find_buffer(m, XF_BUF_GRAD, gname);
    }
  }
  rt->persist = total;
  if (ok) {
    int64_t arena = memplan(items, n, planned);
    if (arena < 0) ok = fail(err, errlen, "out of memory");
    for (int i = 0; ok && i < n; i++)
      if (items[i].bytes > 0) rt->offset[i] = total + (size_t)planned[i];
    if (ok) total += (size_t)arena;
  }
  if (ok) ok = poison_lists(rt, items, err, errlen);
  free(items);
  free(planned);
  size_t moments = 0, acc = 0;
  for (int p = 0; ok && p < rt->nparams; p++) {
    size_t sz = ((size_t)rt->numel[rt->params[p]] * 4 + 63) & ~(size_t)63;
    moments += 2 * sz;
    if (o->accum > 1 && rt->grads[p] >= 0) acc += sz;
  }
  rt->moments_at = total, rt->accum_at = total + moments;
  rt->tokens = find_buffer(m, XF_BUF_INPUT, "tokens");
  rt->targets = find_buffer(m, XF_BUF_INPUT, "targets");
  rt->loss = find_buffer(m, XF_BUF_OUTPUT, "loss");
  rt->logits = find_buffer(m, XF_BUF_OUTPUT, "logits");
  if (ok && (rt->tokens < 0 || rt->loss < 0))
    ok = fail(err, errlen, "model %s has no 'tokens' input or no 'loss' output", m->name);
  // what the machine can hold: its physical memory (an allocation beyond it
  // would be granted by overcommit and fail only when touched)
  double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  double need = (double)total + (double)moments + (double)acc;
  if (ok && (need > (double)((size_t)1 << 40) || (have > 0 && need > have)))
    ok = fail(err, errlen, "--batch %lld --seq %lld needs %.1f GiB, more than this machine has (%.1f GiB)",
              (long long)o->batch, (long long)o->seq, need / (1 << 30), have / (1 << 30));
  rt->bytes = total + moments + acc;
  return ok;
}

// Loads a model.so: its ELF headers, the xf_model symbol, the ABI version,
// the descriptor (xf_model_check) and the options against it. Runs no code
// of the model beyond its constructors.
XfRuntime *xf_load(const char *path, const XfOptions *opt, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) return fail(err, errlen, "cannot open model %s: no such file", path), NULL;
  if (!S_ISREG(st.st_mode)) return fail(err, errlen, "cannot open model %s: not a file", path), NULL;
  if (!check_elf(path, st.st_size, err, errlen)) return NULL;
  char full[4096];
  snprintf(full, sizeof full, "%s%s", strchr(path, '/') ? "" : "./", path);
  void *lib = dlopen(full, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fail(err, errlen, "cannot load model %s: %s", path, dlerror()), NULL;
  const XfModel *m = dlsym(lib, "xf_model");
  if (!m) {
    dlclose(lib);
    return fail(err, errlen, "%s is not an xf model (no xf_model symbol)", path), NULL;
  }
  XfRuntime *rt = xf_load_model(m, path, opt, err, errlen);
  if (!rt) return dlclose(lib), NULL;
  rt->lib = lib;
  return rt;
}

XfRuntime *xf_load_model(const XfModel *m, const char *label, const XfOptions *opt, char *err, size_t errlen) {
  if (m->abi_version != XF_ABI_VERSION)
    return fail(err, errlen, "%s was compiled for model ABI %u, this runtime reads ABI %u: recompile it with this xfc",
                label, m->abi_version, XF_ABI_VERSION), NULL;
  char why[900];
  if (!xf_model_check(m, why, sizeof why))
    return fail(err, errlen, "%s: invalid model descriptor: %s (not made by this xfc?)", label, why), NULL;
  XfRuntime *rt = calloc(1, sizeof *rt);
  if (!rt) return fail(err, errlen, "out of memory"), NULL;
  rt->m = m, rt->opt = *opt;
  if (!load_descriptor(rt, label, err, errlen)) {
    xf_close(rt);
    return NULL;
  }
  return rt;
}

bool xf_allocate(XfRuntime *rt, char *err, size_t errlen) {
  if (rt->arena) return true;
  const XfModel *m = rt->m;
  rt->bufs = calloc((size_t)m->nbuffers, sizeof *rt->bufs);
  rt->adam_m = calloc((size_t)rt->nparams + 1, sizeof(float *));
  rt->adam_v = calloc((size_t)rt->nparams + 1, sizeof(float *));
  rt->acc = calloc((size_t)rt->nparams + 1, sizeof(float *));
  if (!rt->bufs || !rt->adam_m || !rt->adam_v || !rt->acc) return fail(err, errlen, "out of memory");
  rt->arena = aligned_alloc(64, rt->bytes ? (rt->bytes + 63) & ~(size_t)63 : 64);
  if (!rt->arena)
    return fail(err, errlen, "cannot allocate %.1f MiB for batch %lld, seq %lld", (double)rt->bytes / (1 << 20),
                (long long)rt->opt.batch, (long long)rt->opt.seq);
  memset(rt->arena, 0, rt->bytes);
  for (int i = 0; i < m->nbuffers; i++) {
    int k = i;
    while (m->buffers[k].alias_of >= 0) k = m->buffers[k].alias_of;
    rt->bufs[i] = rt->offset[k] == SIZE_MAX ? NULL : (char *)rt->arena + rt->offset[k];
  }
  char *mp = (char *)rt->arena + rt->moments_at;
  for (int p = 0; p < rt->nparams; p++) {
    size_t sz = ((size_t)rt->numel[rt->params[p]] * 4 + 63) & ~(size_t)63;
    rt->adam_m[p] = (float *)mp, mp += sz;
    rt->adam_v[p] = (float *)mp, mp += sz;
  }
  for (int p = 0; rt->opt.accum > 1 && p < rt->nparams; p++)
    if (rt->grads[p] >= 0) rt->acc[p] = (float *)mp, mp += ((size_t)rt->numel[rt->params[p]] * 4 + 63) & ~(size_t)63;
  if (rt->gpu && !attach_device(rt, err, errlen)) return false;
  bool bf16 = !rt->gpu && m->precision == XF_PRECISION_BF16 && !rt->opt.fp32_gemms, storage = false;
  for (int i = 0; !rt->gpu && i < m->nbuffers; i++) storage |= m->buffers[i].bf16 != 0 && m->buffers[i].role == XF_BUF_ACT;
  char why[160] = "";
  if (bf16 && !xf_gemm_bf16_ready(why, sizeof why)) {
    snprintf(rt->gemms, sizeof rt->gemms, "float32 (model.so asks for bf16 products, but %s)%s", why,
             storage ? "; activations stored in bf16" : "");
    bf16 = false;
  } else if (bf16) {
    snprintf(rt->gemms, sizeof rt->gemms, "%s", storage ? "bf16 (activations stored in bf16; parameters, moments and sums in float32)"
                                                        : xf_precision_name(XF_PRECISION_BF16));
  }
  if (bf16 || storage) {  // scratch for the products' staged panels (and a bf16 C's rows)
    int nt = rt->opt.threads;
    rt->bf16 = calloc((size_t)nt, sizeof *rt->bf16);
    if (!rt->bf16) return fail(err, errlen, "out of memory");
    for (int t = 0; t < nt; t++) {
      rt->bf16[t] = (XfBf16Scratch){.buf = aligned_alloc(64, XF_BF16_SCRATCH * sizeof(uint16_t)), .cap = XF_BF16_SCRATCH,
                                    .products = bf16, .ccap = storage ? XF_BF16_CSCRATCH : 0};
      if (storage) rt->bf16[t].cbuf = aligned_alloc(64, XF_BF16_CSCRATCH * sizeof(float));
      if (!rt->bf16[t].buf || (storage && !rt->bf16[t].cbuf))
        return fail(err, errlen, "cannot allocate %.1f MiB for the bf16 GEMM operands", (double)bf16_bytes(rt) / (1 << 20));
    }
    if (bf16 && !alloc_copies(rt, err, errlen)) return false;
  }
  xf_gemm_thread_init();
  if (!xf_pool_start(&rt->pool, rt->opt.threads)) return fail(err, errlen, "cannot start %d threads", rt->opt.threads);
  rt->api = (XfApi){.ctx = &rt->pool, .parallel_for = xf_pool_for, .sgemm = rt->bf16 ? api_sgemm_bf16 : api_sgemm,
                    .gemm_ex = rt->bf16 ? api_gemm_ex : NULL,
                    .kernel_done = rt->dead_at ? poison_dead : NULL};
  rt->pool.rt = rt;
  return true;
}

XfRuntime *xf_open(const char *path, const XfOptions *opt, char *err, size_t errlen) {
  XfRuntime *rt = xf_load(path, opt, err, errlen);
  if (rt && !xf_allocate(rt, err, errlen)) {
    xf_close(rt);
    return NULL;
  }
  return rt;
}

void xf_close(XfRuntime *rt) {
  if (!rt) return;
  if (rt->pool.threads) xf_pool_stop(&rt->pool);
  close_device(rt);
  free(rt->arena), free(rt->bufs), free(rt->numel), free(rt->offset), free(rt->params), free(rt->grads);
  free(rt->adam_m), free(rt->adam_v), free(rt->acc), free(rt->dead_at), free(rt->dead);
  free(rt->prof_s), free(rt->prof_n), free(rt->prof_at), free(rt->prof_dt);
  for (int t = 0; rt->bf16 && t < rt->opt.threads; t++) free(rt->bf16[t].buf), free(rt->bf16[t].cbuf);
  free(rt->bf16);
  free(rt->copies.src), free((void *)rt->copies.len), free(rt->copies.copy), free(rt->copy_mem);
  free(rt->grad_ptrs), free(rt->grad_numel), free(rt->bucket_at), free(rt->bucket_ready);
  if (rt->lib) dlclose(rt->lib);
  free(rt);
}

_Static_assert(XF_INIT_NORMAL == 1 && XF_INIT_UNIFORM == 2 && XF_INIT_ZEROS == 3 && XF_INIT_ONES == 4 &&
                   XF_INIT_CONSTANT == 5 && XF_INIT_TRUNC_NORMAL == 6,
               "xf_init_draw (rng.h) numbers the initialisers as XF_INIT_*");
void xf_init_params(XfRuntime *rt, uint64_t seed) {
  for (int p = 0; p < rt->nparams; p++) {
    const XfBuffer *b = &rt->m->buffers[rt->params[p]];
    float *w = rt->bufs[rt->params[p]];
    uint32_t stream = xf_stream_of(b->name);
    for (int64_t k = 0; k < rt->numel[rt->params[p]]; k++) {
      w[k] = (float)xf_init_draw(b->init, b->init_a, b->init_b, seed, stream, (uint64_t)k);
    }
    memset(rt->adam_m[p], 0, sizeof(float) * (size_t)rt->numel[rt->params[p]]);
    memset(rt->adam_v[p], 0, sizeof(float) * (size_t)rt->numel[rt->params[p]]);
  }
  rt->step = 0;
  rt->host_dirty = true, rt->dev_newer = false, rt->copies_stale = true;
}

// Whether parameter p takes weight decay: every one, or with
// XfOptions.decay_matrices those of rank >= 2 (weights, embeddings; not
// biases and gains).
static bool decays(const XfRuntime *rt, int p) {
  return !rt->opt.decay_matrices || rt->m->buffers[rt->params[p]].rank >= 2;
}

// The global L2 norm of the gradients, summed in double in parameter order
// (the same in every run and thread count).
static double grad_norm(const XfRuntime *rt) {
  double s = 0;
  for (int p = 0; p < rt->nparams; p++) {
    if (rt->grads[p] < 0) continue;
    const float *g = rt->bufs[rt->grads[p]];
    for (int64_t i = 0; i < rt->numel[rt->params[p]]; i++) s += (double)g[i] * g[i];
  }
  return sqrt(s);
}

// AdamW as torch.optim.AdamW: p <- p (1 - lr wd); m, v moments; bias-corrected
// step, at the rate of xf_set_lr; gradients scaled by min(1, clip / (norm +
// 1e-6)) first with XfOptions.clip (torch.nn.utils.clip_grad_norm_). The
// update is the model's (XfModel.adamw, codegen/lower_optim.c), given the
// step's constants; large parameters are split over the thread pool
// (elementwise, so the split changes no bit).
static void adamw(XfRuntime *rt) {
  const XfOptions *o = &rt->opt;
  double t = (double)rt->step;
  rt->grad_norm = grad_norm(rt);
  double scale = o->clip > 0 && rt->grad_norm > o->clip ? o->clip / (rt->grad_norm + 1e-6) : 1;
  float st[XF_ADAM_NSTATE] = {[XF_ADAM_BC1] = (float)(1 - pow(o->beta1, t)), [XF_ADAM_SQRT_BC2] = sqrtf((float)(1 - pow(o->beta2, t))),
                              [XF_ADAM_LR] = (float)rt->lr_now, [XF_ADAM_B1] = (float)o->beta1, [XF_ADAM_B2] = (float)o->beta2,
                              [XF_ADAM_EPS] = (float)o->eps, [XF_ADAM_SCALE] = (float)scale};
  float nd[XF_ADAM_NSTATE];
  memcpy(nd, st, sizeof st);
  st[XF_ADAM_DECAY] = (float)(1 - rt->lr_now * o->weight_decay), nd[XF_ADAM_DECAY] = 1;
  // with the parameters' bf16 copies, the update rewrites each copy with its
  // parameter (adamw_twin), so they stay current as the step left them
  XfKernelFn update = rt->copies.n && rt->m->adamw_twin ? rt->m->adamw_twin : rt->m->adamw;
  for (int p = 0; p < rt->nparams; p++) {
    if (rt->grads[p] < 0) continue;
    void *slot[XF_NSLOTS] = {[XF_ADAM_SLOT_W] = rt->bufs[rt->params[p]], [XF_ADAM_SLOT_G] = rt->bufs[rt->grads[p]],
                             [XF_ADAM_SLOT_STATE] = decays(rt, p) ? st : nd, [XF_ADAM_SLOT_M] = rt->adam_m[p],
                             [XF_ADAM_SLOT_V] = rt->adam_v[p],
                             [XF_ADAM_SLOT_H] = rt->copies.n ? (void *)rt->copies.copy[p] : NULL};
    int64_t n = rt->numel[rt->params[p]];
    if (n < 65536) update(slot, 0, 0, 0, 0, 0, n, &rt->api);
    else xf_pool_for(&rt->api, update, slot, 0, 0, 0, 0, n);
  }
  if (update == rt->m->adamw) rt->copies_stale = true;
}

// ---- the CUDA device ---------------------------------------------------------------
// A failing device call mid-run cannot be recovered from: the message names
// the call, and the process stops (checkpoints already written stay intact).

void xf_device_fail(XfRuntime *rt) {
  fprintf(stderr, "xf: error: %s\n", rt->gpu->err);
  exit(1);
}

// The host mirror of params, gradients and moments made current (write: the
// caller may change it, so it is uploaded before the next launch).
static void host_sync(XfRuntime *rt, bool write) {
  if (!rt->gpu) return;
  XfGpu *g = rt->gpu;
  if (rt->dev_newer) {
    if (!g->download(g, rt->arena, rt->darena, rt->persist) ||
        !g->download(g, (char *)rt->arena + rt->moments_at, rt->darena + rt->moments_at, rt->bytes - rt->moments_at))
      xf_device_fail(rt);
    for (int p = 0; p < rt->nparams; p++) {  // a gradient may alias planned storage (a reshape of an activation)
      int b = rt->grads[p];
      if (b >= 0 && (size_t)((char *)rt->bufs[b] - (char *)rt->arena) >= rt->persist &&
          !g->download(g, rt->bufs[b], rt->dbufs[b], (size_t)rt->numel[b] * 4))
        xf_device_fail(rt);
    }
    rt->dev_newer = false;
  }
  if (write) rt->host_dirty = true;
}

// The parameters' bf16 twins (XF_BUF_TWIN) in the host mirror made from
// the parameters, rounded to nearest even as the device's AdamW rounds them.
static void host_twins(XfRuntime *rt) {
  const XfModel *m = rt->m;
  for (int i = 0; i < m->nbuffers; i++) {
    if (m->buffers[i].role != XF_BUF_TWIN) continue;
    const float *w = rt->bufs[m->buffers[i].twin_of];
    uint16_t *h = rt->bufs[i];
    int64_t n = rt->numel[i];
    if (xf_gemm_bf16_ready(NULL, 0)) xf_bf16_convert(h, w, n);
    else
      for (int64_t k = 0; k < n; k++) h[k] = xf_bf16_bits(w[k]);
  }
}

void xf_device_push(XfRuntime *rt) {
  XfGpu *g = rt->gpu;
  if (rt->host_dirty) {
    host_twins(rt);
    if (!g->upload(g, rt->darena, rt->arena, rt->persist) ||
        !g->upload(g, rt->darena + rt->moments_at, (char *)rt->arena + rt->moments_at, rt->bytes - rt->moments_at))
      xf_device_fail(rt);
    rt->host_dirty = false;
  }
}

// The step's XfStepVars, tokens and (targets) targets at [B, T] copied to the
// device through the pinned staging, without waiting.
static void stage_inputs(XfRuntime *rt, bool targets, int64_t B, int64_t T) {
  XfGpu *g = rt->gpu;
  XfStepVars *v = (XfStepVars *)rt->pinned;
  *v = (XfStepVars){.step = rt->step, .micro = (uint32_t)rt->micro, .accum = (uint32_t)rt->opt.accum, .row0 = rt->api.row0};
  bool ok = g->upload_async(g, rt->dvars, v, sizeof *v);
  int buf[2] = {rt->tokens, targets ? rt->targets : -1};
  size_t at[2] = {rt->pin_tokens, rt->pin_targets};
  for (int i = 0; i < 2 && ok; i++) {
    if (buf[i] < 0) continue;
    size_t n = (size_t)xf_buf_numel(&rt->m->buffers[buf[i]], B, T) * 4;
    memcpy(rt->pinned + at[i], rt->bufs[buf[i]], n);
    ok = g->upload_async(g, rt->dbufs[buf[i]], rt->pinned + at[i], n);
  }
  if (!ok) xf_device_fail(rt);
}

static void start_buckets(XfRuntime *rt, int32_t kernel);
static void finish_reduction(XfRuntime *rt, float *loss, bool every);

static void device_poison(void *ctx, int32_t kernel) {
  XfRuntime *rt = ctx;
  xf_profile_gpu_mark(rt, kernel);
  if (rt->in_train) start_buckets(rt, kernel);
  if (!rt->dead_at) return;
  for (int j = rt->dead_at[kernel]; j < rt->dead_at[kernel + 1]; j++)
    if (!rt->gpu->fill(rt->gpu, rt->dbufs[rt->dead[j]], 0xff,  // a NaN in float32 and in bf16
                       (size_t)(rt->numel[rt->dead[j]] * xf_buf_esize(&rt->m->buffers[rt->dead[j]]))))
      xf_device_fail(rt);
}

static void device_run(XfRuntime *rt, int prog, int64_t B, int64_t T) {
  xf_device_push(rt);
  stage_inputs(rt, prog != XF_PROG_SAMPLE, B, T);
  if (prog == XF_PROG_TRAIN) xf_profile_gpu_begin(rt);
  if (!xf_cuda_program(rt->gpu, rt->m, prog, rt->dbufs, B, T, 0, T, 0, 0, rt->opt.seed, rt->dvars,
                       rt->dead_at || rt->parallel || rt->prof_marks ? device_poison : NULL, rt))
    xf_device_fail(rt);
}

static void device_read(XfRuntime *rt, int b, size_t bytes) {
  if (!rt->gpu->download(rt->gpu, rt->bufs[b], rt->dbufs[b], bytes)) xf_device_fail(rt);
}

// The optimizer's device storage (cuda_host.c). Its launches' arguments are
// the same every step (what changes: dvars).
static XfCudaOptimizer device_optimizer(const XfRuntime *rt) {
  return (XfCudaOptimizer){.segs = rt->dsegs, .hyper = rt->dhyper, .partials = rt->dpart, .vars = rt->dvars,
                           .nsegs = rt->nsegs, .nchunks = rt->nchunks};
}

// On a device the rate is the optimizer's XF_HP_LR in device memory, which
// the launch (and a captured graph) reads when it runs.
void xf_set_lr(XfRuntime *rt, double lr) {
  if (rt->gpu && rt->dhyper && lr != rt->lr_now && !rt->gpu->upload(rt->gpu, rt->dhyper, &lr, sizeof lr)) xf_device_fail(rt);
  rt->lr_now = lr;
}

// The graph replaces the eager launches unless something must happen on the
// host between them: the gradient buckets' reduction (data-parallel), the
// dead buffers' poisoning (XF_DEBUG_POISON), a wait after every launch
// (XF_CUDA_SYNC), the kernel profile's marks; or XF_CUDA_GRAPH=0.
static bool graph_step(const XfRuntime *rt) {
  return rt->graph_on && !rt->parallel && !rt->dead_at && !rt->gpu->sync_each && !rt->prof_s;
}

// The training program and the optimizer (the micro-batches' sums with
// XfOptions.accum > 1; the norm, its sum, AdamW) at (B, T) as the step's
// graph: captured when there is none at (B, T), then replayed for every
// micro-batch (the norm and AdamW act on the last only: XfStepVars). Issues
// the same launches with the same arguments as the eager path.
static void device_train_graph(XfRuntime *rt, int64_t B, int64_t T) {
  XfGpu *g = rt->gpu;
  xf_device_push(rt);
  stage_inputs(rt, true, B, T);
  if (rt->graph && (rt->graph_b != B || rt->graph_t != T)) g->graph_free(g, rt->graph), rt->graph = NULL;
  if (!rt->graph) {
    if (!g->capture_begin(g)) xf_device_fail(rt);
    XfCudaOptimizer o = device_optimizer(rt);
    bool ok = xf_cuda_program(g, rt->m, XF_PROG_TRAIN, rt->dbufs, B, T, 0, T, 0, 0, rt->opt.seed, rt->dvars, NULL, NULL) &&
              (rt->opt.accum == 1 || xf_cuda_accumulate(g, rt->m->cuda, &o)) && xf_cuda_update(g, rt->m->cuda, &o);
    char why[sizeof g->err];
    memcpy(why, g->err, sizeof why);
    bool ended = g->capture_end(g, &rt->graph);  // always: the stream leaves capture mode
    if (!ok) {  // the first failure's message
      if (rt->graph) g->graph_free(g, rt->graph), rt->graph = NULL;
      memcpy(g->err, why, sizeof why);
    }
    if (!ok || !ended) xf_device_fail(rt);
    rt->graph_b = B, rt->graph_t = T;
  }
  if (!g->replay(g, rt->graph)) xf_device_fail(rt);
  rt->dev_newer = true;
}

// One training program on the device: micro-batch rt->micro of the step's
// XfOptions.accum = N, as train_micro on the CPU (the same sums, in the
// same order, by xf_grad_accum). Without data-parallel training the
// optimizer runs before the loss read, and the norm comes back with it (one
// wait); data-parallel, the loss is read first (the reduction averages it
// over processes), the gradients reduced after the last micro-batch (every
// bucket) or as the backward finishes them (N = 1), then the optimizer, and
// the norm is read with a second wait. Returns the micro-batch's loss, or
// the step's mean after the last.
static float device_train_step(XfRuntime *rt) {
  XfGpu *g = rt->gpu;
  int n = rt->opt.accum;
  bool last = rt->micro == n - 1;
  float *loss = rt->bufs[rt->loss];
  XfCudaOptimizer o = device_optimizer(rt);
  if (graph_step(rt)) device_train_graph(rt, rt->step_b, rt->step_t);
  else {
    rt->in_train = n == 1;  // data-parallel with N > 1: every bucket after the last micro-batch
    device_run(rt, XF_PROG_TRAIN, rt->step_b, rt->step_t);
    rt->in_train = false;
    if ((n > 1 && !xf_cuda_accumulate(g, rt->m->cuda, &o)) || (!rt->parallel && last && !xf_cuda_update(g, rt->m->cuda, &o)))
      xf_device_fail(rt);
    if (!rt->parallel) xf_profile_gpu_mark(rt, rt->m->nkernels);  // the optimizer's launches
    rt->dev_newer = true;
  }
  char *norm = rt->pinned + PIN_NORM;
  if (last && !rt->parallel && !g->download_async(g, norm, rt->dhyper + XF_HP_NORM, sizeof(double))) xf_device_fail(rt);
  device_read(rt, rt->loss, 4);
  xf_profile_gpu_collect(rt);
  float mine = loss[0];
  rt->acc_loss = rt->micro == 0 ? mine : rt->acc_loss + mine;
  if (!last) {
    rt->micro++;
    return mine;
  }
  rt->micro = 0;
  loss[0] = rt->acc_loss / (float)n;
  if (rt->parallel) {
    finish_reduction(rt, loss, n > 1);
    if (!xf_cuda_update(g, rt->m->cuda, &o) || !g->download(g, norm, rt->dhyper + XF_HP_NORM, sizeof(double))) xf_device_fail(rt);
  }
  memcpy(&rt->grad_norm, norm, sizeof(double));
  return loss[0];
}

// ---- steps ---------------------------------------------------------------------------

// kernel_done during the training program: poisons dead buffers (debug) and
// starts the gradient buckets whose last gradient kernel just finished.
// Starts the buckets whose last gradient kernel is `kernel` (-1: those no
// kernel writes, after the program).
static void start_bucket(XfRuntime *rt, int b) {
  rt->reducer.start(rt->reducer.ctx, b, rt->grad_ptrs + rt->bucket_at[b], rt->grad_numel + rt->bucket_at[b],
                    rt->bucket_at[b + 1] - rt->bucket_at[b]);
}
static void start_buckets(XfRuntime *rt, int32_t kernel) {
  for (int b = 0; b < rt->nbuckets; b++)
    if (rt->bucket_ready[b] == kernel) start_bucket(rt, b);
}

static void train_kernel_done(const XfApi *api, int32_t kernel) {
  XfRuntime *rt = ((Pool *)api->ctx)->rt;
  if (rt->dead_at) poison_dead(api, kernel);
  if (rt->in_train) start_buckets(rt, kernel);
}

// The kernel after which gradient g (an index into rt->grads) is final.
static int grad_final(const XfRuntime *rt, int p) {
  int b = rt->grads[p];
  while (rt->m->buffers[b].alias_of >= 0) b = rt->m->buffers[b].alias_of;
  return rt->m->buffers[b].first;
}

int xf_grad_buckets(const XfRuntime *rt) { return rt->parallel ? rt->nbuckets : 0; }

void xf_set_data_parallel(XfRuntime *rt, int64_t row0, const XfReducer *r, int64_t bucket_bytes) {
  rt->api.row0 = row0;
  rt->reducer = *r, rt->parallel = true;
  int n = rt->nparams;
  free(rt->grad_ptrs), free(rt->grad_numel), free(rt->bucket_at), free(rt->bucket_ready);
  rt->grad_ptrs = calloc((size_t)n + 1, sizeof *rt->grad_ptrs);
  rt->grad_numel = calloc((size_t)n + 1, sizeof *rt->grad_numel);
  rt->bucket_at = calloc((size_t)n + 2, sizeof(int));
  rt->bucket_ready = calloc((size_t)n + 1, sizeof(int));
  int *order = calloc((size_t)n + 1, sizeof(int));
  if (!rt->grad_ptrs || !rt->grad_numel || !rt->bucket_at || !rt->bucket_ready || !order) {
    fprintf(stderr, "xf: error: out of memory\n");
    exit(1);
  }
  // gradients in the order they become final (stable: then parameter order)
  rt->ngrads = 0;
  for (int p = 0; p < n; p++)
    if (rt->grads[p] >= 0) order[rt->ngrads++] = p;
  for (int i = 1; i < rt->ngrads; i++)
    for (int j = i; j > 0 && grad_final(rt, order[j - 1]) > grad_final(rt, order[j]); j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  rt->nbuckets = 0;
  int64_t bytes = 0;
  for (int i = 0; i < rt->ngrads; i++) {
    int p = order[i];
    if (i == 0 || bytes >= bucket_bytes) rt->bucket_at[rt->nbuckets++] = i, bytes = 0;
    // on a device the buckets hold device pointers (the reducer is NCCL's there)
    rt->grad_ptrs[i] = rt->gpu ? rt->dbufs[rt->grads[p]] : rt->bufs[rt->grads[p]];
    rt->grad_numel[i] = rt->numel[rt->params[p]];
    bytes += 4 * rt->grad_numel[i];
    int f = grad_final(rt, p);
    rt->bucket_ready[rt->nbuckets - 1] = f;  // ascending: the last one is the latest
  }
  rt->bucket_at[rt->nbuckets] = rt->ngrads;
  free(order);
  if (rt->prof_s) rt->prof_next = train_kernel_done;  // the profile's hook calls it
  else rt->api.kernel_done = train_kernel_done;
}

// After the training program: the buckets no kernel wrote (every one: those
// of the micro-batches' sums, which no kernel wrote whole), then the wait for
// every bucket and the mean loss.
static void finish_reduction(XfRuntime *rt, float *loss, bool every) {
  if (!rt->parallel) return;
  for (int b = 0; b < rt->nbuckets; b++)
    if (every || rt->bucket_ready[b] == -1) start_bucket(rt, b);
  if (!rt->reducer.finish(rt->reducer.ctx, loss)) {
    fprintf(stderr, "xf: error: the gradient reduction across processes failed\n");
    exit(1);
  }
}

// One micro-batch of a step of XfOptions.accum = N (CPU): the program at
// the step's number (dropout masks as one batch of N micro-batches, rows
// from xf_set_row0); micro-batch 0 copies its gradients into the sums,
// later ones add theirs in order; the N-th makes each gradient the sum
// times 1/N, then the reduction over processes (every bucket after the
// program), AdamW.
static float train_micro(XfRuntime *rt) {
  xf_profile_mark(rt);
  xf_bf16_current(rt);
  rt->m->programs[XF_PROG_TRAIN](&rt->api, rt->bufs, rt->step_b, rt->step_t, rt->opt.seed, rt->step);
  float *loss = rt->bufs[rt->loss], mine = loss[0];
  int n = rt->opt.accum;
  bool last = rt->micro == n - 1;
  for (int p = 0; p < rt->nparams; p++) {
    if (rt->grads[p] < 0) continue;
    float *g = rt->bufs[rt->grads[p]], *s = rt->acc[p];
    int64_t k = rt->numel[rt->params[p]];
    if (rt->micro == 0) memcpy(s, g, sizeof(float) * (size_t)k);
    else if (!last)
      for (int64_t i = 0; i < k; i++) s[i] += g[i];
    else
      for (int64_t i = 0; i < k; i++) g[i] = (s[i] + g[i]) * (1.0f / (float)n);
  }
  rt->acc_loss = rt->micro == 0 ? mine : rt->acc_loss + mine;
  if (!last) {
    rt->micro++;
    return mine;
  }
  loss[0] = rt->acc_loss / (float)n;
  finish_reduction(rt, loss, true);
  rt->micro = 0;
  adamw(rt);
  return loss[0];
}

float xf_train_step(XfRuntime *rt) {
  if (rt->micro == 0) rt->step++;
  if (rt->gpu) return device_train_step(rt);
  if (rt->opt.accum > 1) return train_micro(rt);
  rt->in_train = true;
  xf_profile_mark(rt);
  xf_bf16_current(rt);
  rt->m->programs[XF_PROG_TRAIN](&rt->api, rt->bufs, rt->step_b, rt->step_t, rt->opt.seed, rt->step);
  rt->in_train = false;
  float *loss = rt->bufs[rt->loss];
  finish_reduction(rt, loss, false);
  adamw(rt);
  return loss[0];
}

// ---- scalar outputs ------------------------------------------------------------------

// Buffer of the i-th output of one element that is not the loss, or -1.
static int scalar_output(const XfRuntime *rt, int i) {
  const XfModel *m = rt->m;
  for (int b = 0; b < m->nbuffers; b++) {
    const XfBuffer *x = &m->buffers[b];
    if (x->role == XF_BUF_OUTPUT && b != rt->loss && x->coef == 1 && !x->pow_b && !x->pow_t && i-- == 0)
      return b;
  }
  return -1;
}

int xf_scalar_outputs(const XfRuntime *rt) {
  int n = 0;
  while (scalar_output(rt, n) >= 0) n++;
  return n;
}

const char *xf_scalar_output_name(const XfRuntime *rt, int i) {
  int b = scalar_output(rt, i);
  return b < 0 ? NULL : rt->m->buffers[b].name;
}

double xf_scalar_output(XfRuntime *rt, int i) {
  int b = scalar_output(rt, i);
  if (b < 0) return NAN;
  if (rt->gpu) device_read(rt, b, 4);
  return ((const float *)rt->bufs[b])[0];
}

// The GEMM rate (xf_gemm_rate): GR_N x GR_N x GR_N products, `reps` per
// pool index, one index per thread; slot 0 holds A, B and C of each thread.
enum { GR_N = 512 };
static void gemm_rate_chunk(void **slot, int64_t B, int64_t T, uint64_t seed, uint32_t reps, int64_t lo, int64_t hi,
                            const XfApi *api) {
  (void)B, (void)T, (void)seed, (void)api;
  float *m = slot[0];
  for (int64_t i = lo; i < hi; i++)
    for (uint32_t r = 0; r < reps; r++) {
      float *a = m + (size_t)i * 3 * GR_N * GR_N;
      xf_sgemm(0, 0, GR_N, GR_N, GR_N, 1, a, GR_N, a + GR_N * GR_N, GR_N, 0, a + 2 * GR_N * GR_N, GR_N);
    }
}

double xf_gemm_rate(XfRuntime *rt) {
  if (rt->gpu || !rt->arena) return 0;
  int n = rt->opt.threads;
  float *m = malloc(sizeof(float) * 3 * GR_N * GR_N * (size_t)n);
  if (!m) return 0;
  for (size_t i = 0; i < (size_t)3 * GR_N * GR_N * (size_t)n; i++) m[i] = (float)(i % 7) * 0.25f;
  void *slot[1] = {m};
  uint32_t reps = 1;
  double rate = 0;
  for (int round = 0; round < 8; round++) {  // one warm-up call, then until a round lasts 0.2 s
    int64_t t0 = xf_now_ns();
    xf_pool_for(&rt->api, gemm_rate_chunk, slot, 0, 0, 0, reps, n);
    double s = (double)(xf_now_ns() - t0) * 1e-9;
    if (round > 0) rate = 2.0 * GR_N * GR_N * GR_N * (double)reps * n / s * 1e-9;
    if (round > 0 && s >= 0.2) break;
    if (round > 0) reps = (uint32_t)(reps * (s > 0.001 ? 0.25 / s : 16) + 1);
  }
  free(m);
  return rate;
}

float xf_eval_step(XfRuntime *rt) {
  if (rt->gpu) {
    device_run(rt, XF_PROG_EVAL, rt->step_b, rt->step_t);
    device_read(rt, rt->loss, 4);
    return ((float *)rt->bufs[rt->loss])[0];
  }
  xf_profile_mark(rt);
  xf_bf16_current(rt);
  rt->m->programs[XF_PROG_EVAL](&rt->api, rt->bufs, rt->step_b, rt->step_t, rt->opt.seed, rt->step);
  return ((float *)rt->bufs[rt->loss])[0];
}

bool xf_set_shape(XfRuntime *rt, int64_t batch, int64_t seq) {
  if (batch < 1 || seq < 1 || batch > rt->opt.batch || seq > rt->opt.seq) return false;
  rt->step_b = batch, rt->step_t = seq;
  return true;
}

XfDeviceCounts xf_device_counts(const XfRuntime *rt) {
  const XfGpu *g = rt->gpu;
  return g ? (XfDeviceCounts){.syncs = g->syncs, .captures = g->captures, .replays = g->replays} : (XfDeviceCounts){0};
}

const float *xf_forward(XfRuntime *rt, int64_t batch, int64_t seq) {
  if (rt->logits < 0 || batch < 1 || seq < 1 || batch > rt->opt.batch || seq > rt->opt.seq) return NULL;
  if (rt->m->t_multiple > 1 && seq % rt->m->t_multiple) return NULL;  // a time axis T / s
  if (rt->gpu) {
    device_run(rt, XF_PROG_SAMPLE, batch, seq);
    device_read(rt, rt->logits, (size_t)xf_buf_numel(&rt->m->buffers[rt->logits], batch, seq) * 4);
    return rt->bufs[rt->logits];
  }
  xf_profile_mark(rt);
  xf_bf16_current(rt);
  rt->m->programs[XF_PROG_SAMPLE](&rt->api, rt->bufs, batch, seq, rt->opt.seed, rt->step);
  return rt->bufs[rt->logits];
}
