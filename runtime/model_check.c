// model_check.c: the structural invariants of a model descriptor (XfModel,
// xf_abi.h) that the runtime relies on before it sizes, plans or indexes
// anything by it (see xf_model_check in xf.h).
//
// What it cannot check: that pointers point at what they claim, and that the
// programs compute what the descriptor says. A model.so is native code that
// runs in the process; it is trusted like any other executable.
#include <math.h>
#include <string.h>

#include "xf.h"

#define fail xf_errorf

enum {
  MAX_NAME = 1000,        // a buffer's name, "grad." + name must fit 1100 bytes
  MAX_BUFFERS = 1 << 20,
  MAX_KERNELS = 1 << 24,
  MAX_CONTEXT = 1 << 24,
  MAX_POW = 3,            // B^pow_b T^pow_t
  MAX_LAUNCH = 1 << 22,
};
static const int64_t MAX_COEF = (int64_t)1 << 40;

static bool name_ok(const char *s) { return s && strnlen(s, MAX_NAME + 1) <= MAX_NAME; }

static bool sym_ok(XfSym s) {
  return s.coef >= 0 && s.coef <= MAX_COEF && s.pb >= 0 && s.pb <= MAX_POW && s.pt >= 0 && s.pt <= MAX_POW && s.tdiv >= 0 &&
         s.tdiv <= MAX_COEF;
}

static bool buffer_ok(const XfModel *m, int i, char *err, size_t errlen) {
  const XfBuffer *b = &m->buffers[i];
  if (!name_ok(b->name)) return fail(err, errlen, "buffer %d has no name or one over %d bytes", i, MAX_NAME);
  if (b->role < XF_BUF_PARAM || b->role > XF_BUF_TWIN)
    return fail(err, errlen, "buffer %d '%s' has role %d", i, b->name, b->role);
  if (b->is_int != 0 && b->is_int != 1) return fail(err, errlen, "buffer %d '%s' has is_int %d", i, b->name, b->is_int);
  if (b->coef < 0 || b->coef > MAX_COEF || b->pow_b < 0 || b->pow_b > MAX_POW || b->pow_t < 0 || b->pow_t > MAX_POW ||
      b->tdiv < 0 || b->tdiv > MAX_COEF || (b->tdiv > 1 && (m->t_multiple < 1 || m->t_multiple % b->tdiv)))
    return fail(err, errlen, "buffer %d '%s' has size %lld B^%d T^%d / %lld", i, b->name, (long long)b->coef, b->pow_b, b->pow_t,
                (long long)b->tdiv);
  if (b->rank < 0 || b->rank > 6) return fail(err, errlen, "buffer %d '%s' has rank %d", i, b->name, b->rank);
  if (b->rank > 0) {
    // the shape is the size: dims 0 are B, -1 are T, -s are T / s, the rest
    // multiply to coef (coef / tdiv in lowest terms: compared crosswise)
    int64_t coef = 1, td = 1;
    int pb = 0, pt = 0;
    for (int d = 0; d < b->rank; d++) {
      int64_t v = b->dims[d];
      if (v == 0) pb++;
      else if (v < 0 && v >= -MAX_COEF && (td *= -v) <= MAX_COEF) pt++;
      else if (v < 1 || v > MAX_COEF || (coef *= v) > MAX_COEF)
        return fail(err, errlen, "buffer %d '%s' has dimension %d of %lld", i, b->name, d, (long long)v);
    }
    if (coef * (b->tdiv > 1 ? b->tdiv : 1) != b->coef * td || pb != b->pow_b || pt != b->pow_t)
      return fail(err, errlen, "buffer %d '%s': its shape does not give its size", i, b->name);
  }
  if (b->alias_of < -1 || b->alias_of >= m->nbuffers || b->alias_of == i)
    return fail(err, errlen, "buffer %d '%s' aliases buffer %d of %d", i, b->name, b->alias_of, m->nbuffers);
  if (b->alias_of >= 0) {
    // storage is the root's: one hop, at most as large
    const XfBuffer *r = &m->buffers[b->alias_of];
    if (r->alias_of != -1) return fail(err, errlen, "buffer %d '%s' aliases an alias", i, b->name);
    if (b->coef * (r->tdiv > 1 ? r->tdiv : 1) > r->coef * (b->tdiv > 1 ? b->tdiv : 1) || b->pow_b != r->pow_b || b->pow_t != r->pow_t)
      return fail(err, errlen, "buffer %d '%s' is larger than the buffer whose storage it shares", i, b->name);
    if (b->role == XF_BUF_PARAM) return fail(err, errlen, "parameter %d '%s' has no storage of its own", i, b->name);
  }
  if (b->first < -1 || b->last < -1 || b->first > m->nkernels || b->last > m->nkernels || (b->first < 0) != (b->last < 0) ||
      b->first > b->last)
    return fail(err, errlen, "buffer %d '%s' has lifetime [%d, %d] outside the %d kernels", i, b->name, b->first, b->last,
                m->nkernels);
  if ((b->role == XF_BUF_TWIN) != (b->twin_of != -1))
    return fail(err, errlen, "buffer %d '%s' of role %d copies buffer %d", i, b->name, b->role, b->twin_of);
  if (b->role == XF_BUF_TWIN) {  // a parameter's bf16 copy: its size, storage of its own
    const XfBuffer *p = b->twin_of >= 0 && b->twin_of < m->nbuffers ? &m->buffers[b->twin_of] : NULL;
    if (!p || p->role != XF_BUF_PARAM || b->bf16 != 1 || b->alias_of != -1 || b->coef != p->coef || b->pow_b || b->pow_t ||
        p->tdiv != b->tdiv)
      return fail(err, errlen, "buffer %d '%s' is not the bf16 twin of a parameter (buffer %d)", i, b->name, b->twin_of);
  }
  if (b->role == XF_BUF_PARAM) {
    if (b->pow_b || b->pow_t || b->is_int)
      return fail(err, errlen, "parameter '%s' depends on the batch or sequence length, or is not float", b->name);
    if (b->rank == 0 && b->coef != 1)  // checkpoints store a parameter by its shape
      return fail(err, errlen, "parameter '%s' of rank 0 has %lld elements", b->name, (long long)b->coef);
    if (b->init < XF_INIT_NORMAL || b->init > XF_INIT_TRUNC_NORMAL || !isfinite(b->init_a) || !isfinite(b->init_b))
      return fail(err, errlen, "parameter '%s' has initialiser %d (%g, %g)", b->name, b->init, b->init_a, b->init_b);
  }
  return true;
}

static bool cuda_ok(const XfModel *m, char *err, size_t errlen) {
  const XfCuda *c = m->cuda;
  if (!c->source || !c->ptx || !name_ok(c->arch)) return fail(err, errlen, "CUDA code without source, PTX or architecture");
  if (c->nnames < 1 || c->nnames > MAX_KERNELS || !c->names) return fail(err, errlen, "CUDA code with %d kernels", c->nnames);
  for (int i = 0; i < c->nnames; i++)
    if (!name_ok(c->names[i])) return fail(err, errlen, "CUDA kernel %d has no name", i);
  const int32_t opt[4] = {c->adamw, c->grad_accum, c->grad_norm, c->grad_norm_sum};
  for (int i = 0; i < 4; i++)
    if (opt[i] < 0 || opt[i] >= c->nnames) return fail(err, errlen, "CUDA optimizer kernel %d of %d", opt[i], c->nnames);
  if (c->precision < 0 || c->precision >= XF_NPRECISIONS)
    return fail(err, errlen, "CUDA GEMM precision %d", c->precision);
  for (int i = 0; i < 2; i++)
    if (c->sass_size[i] < 0 || c->sass_size[i] > (1LL << 30) || (c->sass_size[i] && (!c->sass[i] || c->sass_sm[i] < 50)))
      return fail(err, errlen, "CUDA SASS %d: %lld bytes for sm_%d", i, (long long)c->sass_size[i], c->sass_sm[i]);
  for (int p = 0; p <= XF_PROG_STEP; p++) {
    if (c->nlaunch[p] < 0 || c->nlaunch[p] > MAX_LAUNCH || (c->nlaunch[p] && !c->launch[p]))
      return fail(err, errlen, "CUDA program %d has %d launches", p, c->nlaunch[p]);
    for (int j = 0; j < c->nlaunch[p]; j++) {
      const XfLaunch *l = &c->launch[p][j];
      bool ok = (l->kind == XF_LAUNCH_KERNEL || l->kind == XF_LAUNCH_GEMM) && l->kernel >= 0 && l->kernel < m->nkernels &&
                (l->last == 0 || l->last == 1);
      for (int s = 0; ok && s < XF_NSLOTS; s++)
        ok = l->slots[s] >= -1 && l->slots[s] < m->nbuffers &&
             (l->slots[s] < 0 || (m->buffers[l->slots[s]].alias_of < 0 &&
                                  // an activation no kernel touches has no storage (runtime.c)
                                  (m->buffers[l->slots[s]].role != XF_BUF_ACT || m->buffers[l->slots[s]].first >= 0)));
      ok = ok && sym_ok(l->win_stride) && sym_ok(l->win_extent) && (p == XF_PROG_STEP || l->win_extent.coef == 0);
      if (ok && l->kind == XF_LAUNCH_KERNEL)
        ok = l->fn >= 0 && l->fn < c->nnames && sym_ok(l->items) && l->per_block >= 1 && l->threads >= 1 &&
             l->threads <= 1024 && l->shmem >= 0 && l->shmem <= (1 << 20);
      if (ok && l->kind == XF_LAUNCH_GEMM) {
        const XfSym *sy[] = {&l->m, &l->n, &l->k, &l->lda, &l->ldb, &l->ldc, &l->stride_a, &l->stride_b, &l->stride_c, &l->count};
        for (size_t k = 0; ok && k < sizeof sy / sizeof *sy; k++) ok = sym_ok(*sy[k]);
        ok = ok && l->sa >= 0 && l->sa < XF_NSLOTS && l->sb >= 0 && l->sb < XF_NSLOTS && l->sc >= 0 && l->sc < XF_NSLOTS &&
             l->slots[l->sa] >= 0 && l->slots[l->sb] >= 0 && l->slots[l->sc] >= 0;
      }
      if (!ok) return fail(err, errlen, "CUDA program %d: launch %d is out of range", p, j);
    }
  }
  return true;
}

bool xf_model_check(const XfModel *m, char *err, size_t errlen) {
  if (!name_ok(m->name)) return fail(err, errlen, "no model name, or one over %d bytes", MAX_NAME);
  if (m->context < 1 || m->context > MAX_CONTEXT) return fail(err, errlen, "context length %lld", (long long)m->context);
  if (m->t_multiple < 0 || (m->t_multiple > 1 && m->context % m->t_multiple))
    return fail(err, errlen, "context length %lld is not a multiple of %lld", (long long)m->context, (long long)m->t_multiple);
  if (m->nconfig < 0 || m->nconfig > 4096 || (m->nconfig && !m->config))
    return fail(err, errlen, "%d configuration entries", m->nconfig);
  for (int i = 0; i < m->nconfig; i++)
    if (!name_ok(m->config[i].name)) return fail(err, errlen, "configuration entry %d has no name", i);
  if (m->nbuffers < 1 || m->nbuffers > MAX_BUFFERS || !m->buffers) return fail(err, errlen, "%d buffers", m->nbuffers);
  if (m->nkernels < 0 || m->nkernels > MAX_KERNELS) return fail(err, errlen, "%d kernels", m->nkernels);
  if (m->nkernels && !m->kernel_labels) return fail(err, errlen, "the kernels have no labels");
  for (int k = 0; k < m->nkernels; k++)
    if (!m->kernel_labels[k] || strnlen(m->kernel_labels[k], 1024) == 1024)
      return fail(err, errlen, "kernel %d has no label, or one over 1023 bytes", k);
  for (int p = 0; p < 3; p++)
    if (!m->programs[p]) return fail(err, errlen, "program %d is missing", p);
  if (!m->adamw) return fail(err, errlen, "the optimizer's update (adamw) is missing");
  for (int i = 0; i < m->nbuffers; i++)
    if (!buffer_ok(m, i, err, errlen)) return false;
  // parameter names: unique (checkpoints address tensors by name)
  for (int i = 0; i < m->nbuffers; i++) {
    if (m->buffers[i].role != XF_BUF_PARAM) continue;
    for (int j = 0; j < i; j++)
      if (m->buffers[j].role == XF_BUF_PARAM && !strcmp(m->buffers[i].name, m->buffers[j].name))
        return fail(err, errlen, "two parameters are named '%s'", m->buffers[i].name);
  }
  // the vocabulary: an int in 1..2^24; the logits [B, T, vocab] floats
  int64_t vocab = -1;
  for (int i = 0; i < m->nconfig; i++)
    if (!strcmp(m->config[i].name, "vocab") && !m->config[i].is_float) {
      double v = m->config[i].value;
      if (!(v >= 1 && v <= (1 << 24)) || v != (double)(int64_t)v) return fail(err, errlen, "vocabulary of %g", v);
      vocab = (int64_t)v;
    }
  for (int i = 0; i < m->nbuffers; i++) {
    const XfBuffer *b = &m->buffers[i];
    if (b->role != XF_BUF_OUTPUT) continue;
    if (!strcmp(b->name, "logits") && (vocab < 0 || b->is_int || b->coef != vocab || b->pow_b != 1 || b->pow_t != 1))
      return fail(err, errlen, "output 'logits' is not float [B, T, vocab] with a vocabulary in the configuration");
    if (!strcmp(b->name, "loss") && (b->is_int || b->coef < 1 || b->pow_b || b->pow_t))
      return fail(err, errlen, "output 'loss' is not a float");
  }
  // the token input: int32 [B, T]; a gradient has its parameter's size
  for (int i = 0; i < m->nbuffers; i++) {
    const XfBuffer *b = &m->buffers[i];
    bool token = b->role == XF_BUF_INPUT && (!strcmp(b->name, "tokens") || !strcmp(b->name, "targets"));
    if (token && (!b->is_int || b->coef != 1 || b->pow_b != 1 || b->pow_t != 1))
      return fail(err, errlen, "input '%s' is not int32 [B, T]", b->name);
    if (b->role == XF_BUF_GRAD && !strncmp(b->name, "grad.", 5))
      for (int j = 0; j < m->nbuffers; j++)
        if (m->buffers[j].role == XF_BUF_PARAM && !strcmp(m->buffers[j].name, b->name + 5) &&
            (m->buffers[j].coef != b->coef || b->pow_b || b->pow_t))
          return fail(err, errlen, "gradient '%s' has another size than its parameter", b->name);
  }
  if (m->step) {
    if (m->nstep_bufs < 0 || m->nstep_bufs > m->nbuffers ||
        (m->nstep_bufs && (!m->step_bufs || !m->step_cache || !m->step_first || !m->step_last)))
      return fail(err, errlen, "%d buffers of the step program", m->nstep_bufs);
    for (int i = 0; i < m->nstep_bufs; i++) {
      if (m->step_bufs[i] < 0 || m->step_bufs[i] >= m->nbuffers)
        return fail(err, errlen, "step program buffer %d is %d of %d", i, m->step_bufs[i], m->nbuffers);
      int role = m->buffers[m->step_bufs[i]].role;  // the sampler keeps the runtime's parameters and twins
      if (role == XF_BUF_PARAM || role == XF_BUF_TWIN)
        return fail(err, errlen, "step program buffer %d is parameter or twin %d", i, m->step_bufs[i]);
      if ((m->step_cache[i] != 0 && m->step_cache[i] != 1) || m->step_first[i] < 0 || m->step_first[i] > m->step_last[i] ||
          m->step_last[i] > m->nkernels)
        return fail(err, errlen, "step program buffer %d: cache %d, lifetime %d..%d of %d kernels", i, m->step_cache[i],
                    m->step_first[i], m->step_last[i], m->nkernels);
    }
  }
  if (m->cuda && m->cuda->nlaunch[XF_PROG_STEP] && !m->step) return fail(err, errlen, "a CUDA step program without a CPU one");
  if (m->step_note && strnlen(m->step_note, 65536) > 65535)
    return fail(err, errlen, "the step note is over 64 KiB");
  return !m->cuda || cuda_ok(m, err, errlen);
}
