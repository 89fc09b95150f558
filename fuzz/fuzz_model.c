// fuzz_model.c: libFuzzer target for the model descriptor checks
// (xf_model_check, runtime/model_check.c) and everything the runtime does
// with a descriptor it accepted. The input is decoded into an XfModel:
// counts, names from a fixed list, roles, shapes, aliases, lifetimes,
// configuration, step-program buffers and CUDA launch tables (the programs
// do nothing). A descriptor that passes the checks must load at any batch
// and sequence length the input picks within range, then allocate,
// initialise, run a training and an evaluation step, save and reload a
// checkpoint to the same state, and feed a sampler.
// A bug: a crash, a sanitizer report or leak, a time-out, an out-of-memory
// (the decoded sizes are small), or an accepted descriptor that fails
// later (abort()).
#include "fuzz_util.h"

typedef struct {
  const uint8_t *p;
  size_t n, at;
} Bytes;

static unsigned next(Bytes *b) { return b->at < b->n ? b->p[b->at++] : 0; }

static const char *const NAMES[] = {"tokens", "targets", "loss", "logits", "emb", "grad.emb", "w", "grad.w", "", "x"};
enum { NNAMES = sizeof NAMES / sizeof *NAMES, MAXB = 16 };

typedef struct {
  XfModel m;
  XfBuffer bufs[MAXB];
  XfConfigEntry config[2];
  int32_t step_bufs[MAXB];
  XfCuda cuda;
  const char *names[2];
  XfLaunch launch[3][4];
} Model;

static int64_t dim_of(unsigned v) { return v % 10 == 0 ? 0 : v % 10 == 1 ? -1 : (int64_t)(v % 10 - 1); }

static void decode(Bytes *in, Model *x) {
  memset(x, 0, sizeof *x);
  XfModel *m = &x->m;
  unsigned flags = next(in);
  m->abi_version = XF_ABI_VERSION;
  m->name = "fuzz";
  m->context = (int64_t)(next(in) % 12) - 1;
  m->nbuffers = (int32_t)(next(in) % (MAXB + 1));
  m->nkernels = (int32_t)(next(in) % 6);
  // labels for up to 5 kernels; now and then none, or one missing: the check refuses them
  static const char *const labels[5] = {"k0 embed fuzz:1", "k1 matmul fuzz:2", "k1 matmul fuzz:3", "k3 sum fuzz:4", "k4 map fuzz:5"};
  static const char *const holed[5] = {"k0 embed fuzz:1", NULL, "k2 add fuzz:3", "k3 sum fuzz:4", "k4 map fuzz:5"};
  m->kernel_labels = flags % 89 == 0 ? NULL : flags % 83 == 0 ? holed : labels;
  m->buffers = x->bufs;
  m->programs[0] = m->programs[1] = m->programs[2] = fuzz_nop;
  m->adamw = flags % 97 == 0 ? NULL : fuzz_adamw;  // now and then none: the check refuses it
  m->config = x->config;
  x->config[0] = (XfConfigEntry){"vocab", (int32_t)(next(in) % 2), (double)(next(in) % 20)};
  x->config[1] = (XfConfigEntry){"d", 0, 8};
  m->nconfig = flags & 1 ? 2 : 1;
  for (int i = 0; i < m->nbuffers; i++) {
    XfBuffer *b = &x->bufs[i];
    b->name = NAMES[next(in) % NNAMES];
    b->role = (int32_t)(next(in) % 7);
    unsigned twin = next(in);  // mostly consistent with the role: -1, or a parameter's twin
    b->twin_of = twin % 8 == 0 ? (int32_t)(twin / 8 % (unsigned)(m->nbuffers + 2)) - 1
                 : b->role == XF_BUF_TWIN ? (int32_t)(twin / 8 % (unsigned)m->nbuffers) : -1;
    b->bf16 = b->role == XF_BUF_TWIN && twin % 8 != 1;
    b->is_int = (int32_t)(next(in) % 3 == 1);
    b->rank = (int32_t)(next(in) % 5);
    for (int d = 0; d < b->rank; d++) b->dims[d] = dim_of(next(in));
    b->coef = 1;
    for (int d = 0; d < b->rank; d++) {
      if (b->dims[d] == 0) b->pow_b++;
      else if (b->dims[d] == -1) b->pow_t++;
      else b->coef *= b->dims[d];
    }
    unsigned damage = next(in);
    if (damage % 8 == 0) b->coef = (int64_t)(next(in) % 40) - 1;
    if (damage % 8 == 1) b->pow_b = (int32_t)(next(in) % 5) - 1, b->pow_t = (int32_t)(next(in) % 5) - 1;
    unsigned alias = next(in);
    b->alias_of = alias < 224 ? -1 : (int32_t)(alias % (unsigned)(m->nbuffers + 1)) - 1;
    b->init = (int32_t)(next(in) % 6);
    b->init_a = 0, b->init_b = next(in) == 255 ? 1.0 / 0.0 : 0.02;
    b->first = (int32_t)(next(in) % (unsigned)(m->nkernels + 3)) - 1;
    b->last = (int32_t)(next(in) % (unsigned)(m->nkernels + 3)) - 1;
  }
  if (flags & 2) {
    m->step = fuzz_nop;
    m->nstep_bufs = (int32_t)(next(in) % 5);
    m->step_bufs = x->step_bufs;
    for (int i = 0; i < m->nstep_bufs; i++) x->step_bufs[i] = (int32_t)(next(in) % (unsigned)(m->nbuffers + 2)) - 1;
    m->step_note = NULL;
  } else {
    m->step_note = "not causal";
  }
  if (flags & 4) {
    XfCuda *c = &x->cuda;
    m->cuda = c;
    c->source = "", c->ptx = "", c->arch = "compute_80";
    x->names[0] = "xf_k0", x->names[1] = "xf_adamw";
    c->names = x->names, c->nnames = 2, c->adamw = (int32_t)(next(in) % 3);
    for (int p = 0; p < 3; p++) {
      c->nlaunch[p] = (int32_t)(next(in) % 5);
      c->launch[p] = x->launch[p];
      for (int j = 0; j < c->nlaunch[p]; j++) {
        XfLaunch *l = &x->launch[p][j];
        l->kind = (int32_t)(next(in) % 3);
        l->kernel = (int32_t)(next(in) % (unsigned)(m->nkernels + 1));
        l->last = (int32_t)(next(in) % 2);
        for (int s = 0; s < XF_NSLOTS; s++) l->slots[s] = (int32_t)(next(in) % (unsigned)(m->nbuffers + 2)) - 2;
        l->fn = (int32_t)(next(in) % 3), l->items = (XfSym){next(in), 1, 0, 1};
        l->per_block = (int32_t)next(in) % 4, l->threads = (int32_t)next(in) * 8, l->shmem = 0;
        l->sa = (int32_t)(next(in) % 11), l->sb = (int32_t)(next(in) % 11), l->sc = (int32_t)(next(in) % 11);
        l->m = l->n = l->k = l->lda = l->ldb = l->ldc = l->count = (XfSym){1, 0, 0, 1};
      }
    }
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  // XF_FUZZ_SEEDS=DIR: the bytes that decode to the model of fuzz_util.h
  const char *dir = getenv("XF_FUZZ_SEEDS");
  if (dir) {
    // flags (two config entries), context 8, 8 buffers, 1 kernel, vocab 8;
    // per buffer: name, role, is_int, rank, dims (v % 10: 0 B, 1 T, else
    // v % 10 - 1), no damage, no alias, init, init_b, first + 1, last + 1;
    // then batch 2, seq 4, incremental sampler
    static const uint8_t seed[] = {
        1, 9, 8, 1, 0, 8,
        4, 0, 0, 2, 9, 5, 2, 0, 1, 0, 0, 0,     // emb [8, 4]
        6, 0, 0, 1, 5, 2, 0, 4, 0, 0, 0,        // w [4], ones
        5, 1, 0, 2, 9, 5, 2, 0, 0, 0, 1, 1,     // grad.emb
        7, 1, 0, 1, 5, 2, 0, 0, 0, 1, 1,        // grad.w
        0, 2, 1, 2, 0, 1, 2, 0, 0, 0, 1, 1,     // tokens [B, T]
        1, 2, 1, 2, 0, 1, 2, 0, 0, 0, 1, 1,     // targets [B, T]
        2, 4, 0, 0, 2, 0, 0, 0, 1, 2,           // loss
        3, 4, 0, 3, 0, 1, 9, 2, 0, 0, 0, 1, 2,  // logits [B, T, 8]
        1, 3, 1,
    };
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-model-small", dir);
    fuzz_write(path, seed, sizeof seed);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static Model x;
  Bytes in = {data, size, 0};
  decode(&in, &x);
  char err[1024];
  if (!xf_model_check(&x.m, err, sizeof err)) return 0;
  int64_t batch = 1 + next(&in) % 3, seq = 1 + (int64_t)next(&in) % (unsigned)x.m.context;
  XfOptions o = {.batch = batch, .seq = seq, .threads = 1, .device = XF_DEVICE_CPU, .seed = 3};
  XfRuntime *rt = xf_load_model(&x.m, "fuzz", &o, err, sizeof err);
  if (!rt) {
    if (strstr(err, "no 'tokens' input")) return 0;  // a refusal xf_load adds to the descriptor checks
    fuzz_bug("a descriptor that passed the checks does not load: %s", err);
  }
  if (!xf_allocate(rt, err, sizeof err)) fuzz_bug("a loaded descriptor does not allocate: %s", err);
  xf_init_params(rt, 5);
  for (int64_t i = 0; i < batch * seq; i++) xf_tokens(rt)[i] = 0;
  (void)xf_train_step(rt);
  (void)xf_eval_step(rt);
  if (xf_nparams(rt) > 0) fuzz_resave(rt, rt);
  XfSampler *s = xf_sampler_open(rt, 1, (next(&in) & 1) != 0, err, sizeof err);
  if (s) {
    int32_t t = 0;
    (void)xf_sampler_feed(s, &t, 1);
    (void)xf_sampler_feed(s, &t, 1);
    xf_sampler_close(s);
  }
  xf_close(rt);
  return 0;
}
