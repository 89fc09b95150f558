// xfc: the xf compiler driver. The pipeline is the table `stages` (name,
// function, the --emit= values printed after it); --emit=NAME prints that
// stage's result and xfc stops. The IR verifier runs after every stage that
// produces IR.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../frontend/frontend.h"
#include "../codegen/cuda.h"
#include "../codegen/llvm.h"
#include "../codegen/loops.h"
#include "../codegen/cuda_nvrtc.h"
#include "../codegen/pytorch.h"
#include "cli.h"
#include <llvm/Config/llvm-config.h>
#include "../interp/interp.h"
#include "../passes/passes.h"

#ifndef XF_STDLIB_DIR
#define XF_STDLIB_DIR "stdlib"
#endif

static void usage(FILE *f) {
  fputs("usage: xfc [options] model.xf\n"
        "\n"
        "Compiles an xf model description. Without an action it parses, elaborates\n"
        "and shape-checks the model and prints nothing on success.\n"
        "\n"
        "options:\n"
        "  -o model.so     compile to a shared object for xfrun (CPU code through LLVM)\n"
        "  -O0, -O2        optimisation level of the generated code (default -O2)\n"
        "  --no-fuse       one kernel per IR node: no fused kernels (the reference schedule)\n"
        "  --remat         recompute cheap forward values (elementwise ops, dropout) in the\n"
        "                  backward instead of keeping them: less memory, a little more work;\n"
        "                  also on when the model has a config value remat = 1\n"
        "  --target=cpu    CPU code through LLVM (the default)\n"
        "  --target=cuda   also CUDA kernels: CUDA C compiled by NVRTC to PTX, embedded with\n"
        "                  the source in model.so beside the CPU code (xfrun --device picks)\n"
        "  --gpu-arch=A    the virtual architecture of the PTX (default compute_80)\n"
        "  --precision=P   the CUDA GEMMs: tf32 (default: float32 storage, TF32 tensor-core\n"
        "                  products), bf16 (float32 storage and sums, bf16 tensor-core\n"
        "                  products) or fp32 (float32 throughout: the oracle the tests use)\n"
        "  -D name=value   override a config value of the model (repeatable)\n"
        "  -I dir          also look for imports in dir (repeatable)\n"
        "  --stdlib=dir    the standard library (default: $XF_STDLIB, else the built-in path)\n"
        "  --emit=ast      print the syntax tree of the model file and stop\n"
        "  --emit=ir       print the graph IR after elaboration and stop\n"
        "  --emit=pytorch  print the model as a self-contained PyTorch module (one nn.Module per\n"
        "                  block, parameters named as in xf's checkpoints, load_xf to load one;\n"
        "                  docs/interop.md) and stop\n"
        "  --emit=grad     print the graph IR with its backward pass (autodiff) and stop\n"
        "  --emit=fused    print the graph IR after the graph rewrites of fusion (attention) and stop\n"
        "  --emit=schedule print the kernels in order (fusion, class) and every buffer's\n"
        "                  lifetime and planned offset at --batch, --seq, and stop; with\n"
        "                  --target=cuda also the GPU operations of a training step\n"
        "  --emit=loops    print the loop description of every kernel class (codegen/loops.h) and stop;\n"
        "                  with --target=cuda the forms chosen for a GPU\n"
        "  --emit=cost     with --target=cuda: the estimated time of a training step on an H100, per\n"
        "                  kernel class (launches, grid, chain, bytes, FLOPs, cliffs; at --batch, --seq)\n"
        "  --emit=llvm     print the generated (optimised) LLVM IR and stop\n"
        "  --emit=cuda     print the generated CUDA C source and stop\n"
        "  --emit=ptx      print the PTX NVRTC makes of it (for --gpu-arch) and stop\n"
        "  --batch=N       batch size for --emit=schedule and --stats memory (default 64)\n"
        "  --seq=N         sequence length for them (default: the context)\n"
        "  --stats         print parameters and forward operation counts per block instance,\n"
        "                  the operations per generated token at position t = context\n"
        "                  (incremental decoding: seed 001 Tables 5-6),\n"
        "                  backward and training operations per token, the planned\n"
        "                  memory of a training step at --batch, --seq, and the memory of\n"
        "                  incremental decoding per sequence (caches, workspace)\n"
        "  --check-grad    compare every gradient of the graph that is compiled (fused unless\n"
        "                  --no-fuse) with finite differences (float64, reference\n"
        "                  interpreter, dropout off) and print the relative error per parameter;\n"
        "                  exit status 1 if any is 1e-6 or more. Use small sizes (-D ...)\n"
        "  --check-batch=N batch size of the check (default 2)\n"
        "  --check-seq=N   sequence length of the check (default: the context)\n"
        "  --check-dropout keep dropout on during the check, with fixed masks\n"
        "  --seed=N        seed of the check's parameters and tokens (default 1)\n"
        "  -h, --help      print this help\n"
        "  --version       print the version, commit, build type and targets\n"
        "\n"
        "Options with a value take it as --opt=value or --opt value (-o FILE, -DNAME=VALUE or\n"
        "-D NAME=VALUE). Exit status: 0 done; 1 an error in the model or while compiling\n"
        "(file:line:col, the line, a caret); 2 a usage error (an unknown or malformed option).\n",
        f);
}

#define die_usage(...) cli_usage_error("xfc", __VA_ARGS__)

static void check_ir(const Graph *g, const char *stage) {
  char msg[512];
  if (!ir_verify(g, msg, sizeof msg)) {
    fprintf(stderr, "xfc: internal error: IR verifier failed after %s: %s\n", stage, msg);
    exit(3);
  }
}

// The pipeline. Returns the exit status: 0, or 1 after a user error.
typedef struct {
  bool enabled, dropout;
  int64_t batch, seq;
  uint64_t seed;
} CheckOptions;

static bool parse_count(const char *s, int64_t *v) {
  char *end;
  long long n = strtoll(s, &end, 10);
  if (*s == 0 || *end || n < 0) return false;
  *v = n;
  return true;
}

static int check_grad(Graph *g, const CheckOptions *co) {
  GradCheckConfig c = {.B = co->batch, .T = co->seq > 0 ? co->seq : g->t_max, .seed = co->seed,
                       .dropout = co->dropout, .max_elems = 0, .tol = 1e-6};
  double worst;
  return gradcheck(g, &c, stdout, &worst) ? 0 : 1;
}

typedef struct Options Options;
struct Options {
  const char *input, *emit, *stdlib_dir, *output;
  int opt_level;
  bool cuda;              // --target=cuda
  const char *gpu_arch;   // --gpu-arch
  int precision;          // --precision: XF_PRECISION_*
  bool no_fuse;
  bool remat;
  bool stats;
  int64_t batch, seq;
  double train_ops;  // per token, of the graph as written (st_codegen): XfModel.train_ops
  CheckOptions check;
  Define *defs;
  int ndefs;
  const char **incs;
  int ninc;
};

// The memory of incremental decoding per sequence of `context` positions
// (--stats): the caches later positions read and the workspace planned by
// lifetimes (codegen/stepmem.c, memplan; the runtime's xf_sampler_open
// computes the same).
static void print_step_memory(Graph *g, const Schedule *s) {
  int *ta = malloc(sizeof(int) * ((size_t)g->nnodes + 1)), bad, n = 0, has_logits = 0;
  StepBuf *sb = malloc(sizeof *sb * ((size_t)s->nbufs + 1));
  PlanItem *items = calloc((size_t)s->nbufs + 1, sizeof *items);
  bool *cached = calloc((size_t)s->nbufs + 1, sizeof *cached);
  int64_t *ofs = calloc((size_t)s->nbufs + 1, sizeof *ofs), T = g->t_max, cache = 0, total = -1, state = 0;
  char why[256];
  for (int i = 0; i < g->noutputs; i++) has_logits |= !strcmp(g->outputs[i].name, "logits");
  if (ta && sb && items && cached && ofs && has_logits && causal_analyze(g, ta, &bad, why, sizeof why) &&
      (n = step_buffers(s, ta, sb)) > 0) {
    for (int i = 0; i < n; i++) {
      items[i] = (PlanItem){.bytes = 4 * symsize_eval(s->bufs[sb[i].buf].size, 1, T), .first = sb[i].first, .last = sb[i].last};
      cached[i] = sb[i].cache;
    }
    total = memplan_after_caches(items, cached, n, ofs, &cache);
    for (int i = 0; i < n; i++)
      if (sb[i].state) state += (items[i].bytes + 63) / 64 * 64;  // as memplan_after_caches packs a cache
  }
  if (total >= 0) {
    printf("\nmemory of incremental decoding per sequence of %lld positions:\n", (long long)T);
    printf("  caches (what later positions read)   %10.1f KiB  (%lld bytes)\n", (double)cache / 1024, (long long)cache);
    printf("    of which recurrent states          %10.1f KiB  (%lld bytes, the same at every position)\n",
           (double)state / 1024, (long long)state);
    printf("  workspace (planned, every step)      %10.1f KiB  (%lld bytes)\n", (double)(total - cache) / 1024,
           (long long)(total - cache));
  }
  free(ta), free(sb), free(items), free(cached), free(ofs);
}

// The planned memory of a training step (--stats).
static void print_memory(Graph *g, const Options *o) {
  Arena a = {0};
  Schedule *s = schedule_build(&a, g, !o->no_fuse, o->cuda);
  int64_t B = o->batch, T = o->seq ? o->seq : g->t_max, pers = 0;
  int64_t *off = arena_alloc(&a, sizeof(int64_t) * (size_t)(s->nbufs + 1));
  int64_t top = schedule_plan(s, B, T, off, &pers);
  double params = 0;  // AdamW keeps two moments per parameter, each rounded up to 64 bytes as in the runtime
  for (int b = 0; b < s->nbufs; b++)
    if (s->bufs[b].role == BUF_PARAM && s->bufs[b].alias_of < 0)
      params += (double)((4 * symsize_eval(s->bufs[b].size, B, T) + 63) / 64 * 64);
  printf("\nmemory of a training step at batch %lld, seq %lld (%s schedule: %d kernels, %d functions):\n",
         (long long)B, (long long)T, o->no_fuse ? "unfused" : "fused", s->nkernels, s->nclasses);
  printf("  activations and outputs (planned)  %10.1f MiB\n", (double)top / (1 << 20));
  printf("  parameters, gradients, inputs      %10.1f MiB\n", (double)pers / (1 << 20));
  printf("  AdamW moments                      %10.1f MiB\n", 2 * params / (1 << 20));
  printf("  total                              %10.1f MiB\n", ((double)top + (double)pers + 2 * params) / (1 << 20));
  print_step_memory(g, s);
  arena_free(&a);
}

// The PTX of module m (NVRTC); NULL after printing why. An NVRTC error on
// generated code is an internal compiler error: it names the kernel and the
// IR node with its source location.
static char *cuda_ptx(const Schedule *s, const CudaModule *m, const char *arch) {
  char err[1024], *log = NULL;
  char *ptx = nvrtc_compile(m->source, "xf_kernels.cu", arch, &log, err, sizeof err);
  if (ptx) {
    free(log);
    return ptx;
  }
  fprintf(stderr, "xfc: error: %s\n", err);
  for (const char *p = log; p && *p;) {  // lines "xf_kernels.cu(LINE): error: ..."
    const char *eol = strchr(p, '\n'), *paren = strstr(p, ".cu(");
    int len = eol ? (int)(eol - p) : (int)strlen(p);
    if (paren && paren < p + len && strstr(p, "error")) {
      int k = cuda_kernel_at_line(m, atoi(paren + 4));
      const Node *n = k >= 0 ? &s->g->nodes[s->kernels[k].node] : NULL;
      if (n)
        fprintf(stderr, "xfc: internal error: NVRTC rejected kernel xf_k%d (node %%%d %s, from %s:%d:%d): %.*s\n",
                s->kernels[k].cls, n->id, ir_op_info[n->op].name, n->loc.file ? n->loc.file : "<compiler>", n->loc.line,
                n->loc.col, len, p);
      else fprintf(stderr, "xfc: internal error: NVRTC rejected the CUDA source: %.*s\n", len, p);
    }
    p = eol ? eol + 1 : NULL;
  }
  if (!log && !strstr(err, "without")) fprintf(stderr, "xfc: internal error: NVRTC gave no log\n");
  free(log);
  return NULL;
}

// The real architectures model.so carries SASS for, beside the PTX: the A100
// and H100 generations.
static const int sass_sm[2] = {80, 90};

// The SASS of m for sm_XY (80, 90) from NVRTC, with ptxas's resources: on
// stderr as one summary line when `summary`, else only when registers spill.
// NULL after printing why.
static unsigned char *cuda_sass(const CudaModule *m, int sm, bool summary, size_t *size) {
  char err[1024], arch[16], *log = NULL;
  snprintf(arch, sizeof arch, "sm_%d", sm);
  unsigned char *bin = nvrtc_cubin(m->source, "xf_kernels.cu", arch, size, &log, err, sizeof err);
  if (!bin) {
    fprintf(stderr, "xfc: internal error: %s\n", err);
    free(log);
    return NULL;
  }
  NvrtcResources r = nvrtc_resources(log);
  free(log);
  if (summary || r.spill_stores || r.spill_loads)
    fprintf(stderr, "xfc: %s%s: %d kernels, %zu bytes of SASS, at most %d registers (%s), spills %ld bytes stored and %ld loaded, "
                    "static shared memory at most %ld bytes\n",
            summary ? "" : "warning: ", arch, r.kernels, *size, r.max_regs, r.max_regs_kernel, r.spill_stores, r.spill_loads,
            r.max_smem);
  return bin;
}

// Schedule, LLVM code generation, object, shared object.
static int codegen(Graph *g, const Options *o) {
  Arena a = {0};
  Schedule *s = schedule_build(&a, g, !o->no_fuse, o->cuda);
  if (o->emit && !strcmp(o->emit, "schedule")) {
    schedule_print(stdout, s, o->batch, o->seq ? o->seq : g->t_max);
    if (o->cuda) {  // the GPU operations of a training step (codegen/cuda.c's launch table)
      CudaModule *cm = cuda_render(&a, s, NULL);
      if (cm->error) {
        fprintf(stderr, "%s\n", cm->error);
        arena_free(&a);
        return 1;
      }
      int kernels = 0, gemms = 0;
      for (int j = 0; j < cm->nlaunch[PROG_TRAIN]; j++) cm->launch[PROG_TRAIN][j].kind == XF_LAUNCH_GEMM ? gemms++ : kernels++;
      printf("cuda: a training step: %d kernel launches, %d GEMMs, 1 AdamW launch: %d GPU operations, "
             "replayed as one CUDA graph (1 launch from the host)\n", kernels, gemms, kernels + gemms + 1);
    }
    arena_free(&a);
    return 0;
  }
  if (o->emit && !strcmp(o->emit, "cost")) {  // the GPU cost model (codegen/cuda_cost.c)
    CudaModule *cm = cuda_render(&a, s, NULL);
    char err[1024];
    CudaCost *c = cm->error ? NULL : cuda_cost(&a, s, cm, o->batch, o->seq ? o->seq : g->t_max, o->precision, err, sizeof err);
    if (c) cuda_cost_print(stdout, c);
    else fprintf(stderr, "%s%s\n", cm->error ? "" : "xfc: ", cm->error ? cm->error : err);
    arena_free(&a);
    return c ? 0 : 1;
  }
  if (o->emit && !strcmp(o->emit, "loops")) {
    int status = lower_print(stdout, &a, s, o->cuda ? LTARGET_GPU : LTARGET_CPU);
    arena_free(&a);
    return status;
  }
  // the incremental decoder: positions of every value the logits need
  int *ta = arena_alloc(&a, sizeof(int) * (size_t)(g->nnodes + 1)), bad;
  char why[256];
  bool has_logits = false, causal = false;
  for (int i = 0; i < g->noutputs; i++) has_logits = has_logits || !strcmp(g->outputs[i].name, "logits");
  if (has_logits) causal = causal_analyze(g, ta, &bad, why, sizeof why);
  if (o->emit && (!strcmp(o->emit, "cuda") || !strcmp(o->emit, "ptx"))) {
    CudaModule *cm = cuda_render(&a, s, causal ? ta : NULL);
    if (cm->error) {
      fprintf(stderr, "%s\n", cm->error);
      arena_free(&a);
      return 1;
    }
    char *ptx = NULL;
    if (o->emit[0] == 'c') fputs(cm->source, stdout);
    else if ((ptx = cuda_ptx(s, cm, o->gpu_arch))) fputs(ptx, stdout);
    for (int i = 0; ptx && i < 2; i++) {  // ptxas's resources for the SASS model.so would carry
      size_t n;
      unsigned char *bin = cuda_sass(cm, sass_sm[i], true, &n);
      if (!bin) free(ptx), ptx = NULL;
      free(bin);
    }
    free(ptx);
    arena_free(&a);
    return o->emit[0] == 'c' || ptx ? 0 : 1;
  }
  char err[1024], obj[4096] = "";
  bool ok = true;
  if (o->output) {
    snprintf(obj, sizeof obj, "%s.o.XXXXXX", o->output);
    int fd = mkstemp(obj);
    if (fd < 0) {
      fprintf(stderr, "xfc: error: cannot create a temporary object next to %s: %s\n", o->output, strerror(errno));
      arena_free(&a);
      return 1;
    }
    close(fd);
  }
  LlvmOptions lo = {.opt_level = o->opt_level, .llvm_ir = o->emit ? stdout : NULL, .object_path = o->output ? obj : NULL,
                    .train_ops = o->train_ops};
  if (!has_logits) {
  } else if (causal) {
    lo.time_axis = ta;
  } else {
    const Node *n = bad >= 0 ? &g->nodes[bad] : NULL;
    char *note = n && n->loc.file
                     ? arena_printf(&a, "%s:%d:%d: %s %s", n->loc.file, n->loc.line, n->loc.col, ir_op_info[n->op].name, why)
                     : arena_printf(&a, "%s", why);
    lo.step_note = note;
    if (o->output)
      fprintf(stderr, "xfc: note: no incremental decoder for model '%s': %s; xfrun sample recomputes the whole context "
                      "for every token\n", g->name, note);
  }
  char *ptx = NULL;
  unsigned char *sass[2] = {NULL, NULL};
  if (o->cuda && o->output) {
    lo.cuda = cuda_render(&a, s, lo.time_axis);
    if (lo.cuda->error) fprintf(stderr, "%s\n", lo.cuda->error);
    if (lo.cuda->error || !(ptx = cuda_ptx(s, lo.cuda, o->gpu_arch))) {  // cuda_ptx said why
      if (*obj) unlink(obj);
      arena_free(&a);
      return 1;
    }
    lo.ptx = ptx, lo.gpu_arch = o->gpu_arch, lo.precision = o->precision;
    for (int i = 0; i < 2; i++) {
      lo.sass_sm[i] = sass_sm[i];
      if (!(sass[i] = cuda_sass(lo.cuda, lo.sass_sm[i], false, &lo.sass_size[i]))) {
        free(ptx), free(sass[0]);
        if (*obj) unlink(obj);
        arena_free(&a);
        return 1;
      }
      lo.sass[i] = sass[i];
    }
  }
  ok = llvm_compile(s, &lo, err, sizeof err);
  free(ptx), free(sass[0]), free(sass[1]);
  if (ok && o->output) ok = link_shared(obj, o->output, err, sizeof err);
  if (*obj) unlink(obj);
  struct stat st;
  if (ok && o->output && stat(o->output, &st) == 0)
    fprintf(stderr, "xfc: wrote %s (%.0f KiB: CPU code%s%s)\n", o->output, (double)st.st_size / 1024,
            o->cuda ? ", CUDA kernels for " : "", o->cuda ? o->gpu_arch : "");
  arena_free(&a);
  if (!ok && strstr(err, ": error: ")) fprintf(stderr, "%s\n", err);  // located already
  else if (!ok) fprintf(stderr, "xfc: error: %s\n", err);
  return ok ? 0 : 1;
}


// ---- the pipeline: a table of stages ----------------------------------------------

typedef struct {
  const Options *o;
  Arena arena;
  Diag diag;
  Program *prog;
  Graph *g;     // the graph as written: --stats, --emit=ir, --emit=grad
  Graph *code;  // the graph compiled: fused unless --no-fuse, rematerialised with --remat
  int status;   // the exit status when a stage stops the pipeline
} Pipeline;

typedef struct {
  const char *name;            // the stage, in IR verifier messages
  const char *emit;            // the --emit= values it answers (space-separated), or NULL
  bool (*run)(Pipeline *p);    // false: the pipeline stops with p->status
  void (*print)(Pipeline *p);  // prints what --emit= asked for, then the pipeline stops
} Stage;

static bool wants_code(const Options *o) { return o->emit || o->stats || o->check.enabled || o->output; }

static bool st_parse(Pipeline *p) {
  SearchPath sp = {p->o->incs, p->o->ninc, p->o->stdlib_dir};
  p->prog = load_program(&p->diag, p->o->input, &sp);
  return true;
}
static void pr_ast(Pipeline *p) { ast_dump(stdout, p->prog->modules[0]); }

static bool st_elaborate(Pipeline *p) {
  p->g = elaborate(&p->diag, p->prog, p->o->defs, p->o->ndefs);
  check_ir(p->g, "elaboration");
  if (p->o->seq > p->g->t_max) {
    fprintf(stderr, "xfc: error: --seq=%lld is beyond the context length %lld of model '%s'\n", (long long)p->o->seq,
            (long long)p->g->t_max, p->g->name);
    p->status = 1;
    return false;
  }
  return true;
}
static void pr_ir(Pipeline *p) { ir_print(stdout, p->g); }
static bool st_pytorch(Pipeline *p) { (void)p; return true; }
static void pr_pytorch(Pipeline *p) {
  char err[512];
  if (pytorch_emit(stdout, p->g, err, sizeof err)) fprintf(stderr, "%s\n", err), p->status = 1;
}

// Code, memory and --check-grad come from the fused graph (unless --no-fuse).
static bool st_fuse(Pipeline *p) {
  if (!wants_code(p->o)) return false;  // a check only: the model is well formed
  p->code = p->g;
  if (!p->o->no_fuse) {
    p->code = ir_graph_clone(&p->arena, p->g);
    fuse_attention(p->code);
    check_ir(p->code, "fuse_attention");
    fuse_scan(p->code);
    check_ir(p->code, "fuse_scan");
  }
  return true;
}
static void pr_fused(Pipeline *p) { ir_print(stdout, p->code); }

static bool st_autodiff(Pipeline *p) {
  char msg[512];
  for (int k = 0; k < 2; k++) {
    Graph *g = k == 0 ? p->code : p->g;
    if (k == 1 && g == p->code) break;
    if (!autodiff(g, msg, sizeof msg)) {
      fprintf(stderr, "xfc: %s\n", msg);
      exit(3);
    }
    check_ir(g, "autodiff");
  }
  return true;
}

static bool st_remat(Pipeline *p) {
  bool want = p->o->remat;
  for (int i = 0; i < p->g->nconfig; i++)
    if (!strcmp(p->g->config[i].name, "remat") && p->g->config[i].value != 0) want = true;
  if (!want) return true;
  if (p->code == p->g) p->code = ir_graph_clone(&p->arena, p->g);  // statistics stay those of the graph as written
  remat(p->code);
  check_ir(p->code, "remat");
  return true;
}

static bool st_stats(Pipeline *p) {
  if (p->o->stats) stats_print(stdout, p->g), print_memory(p->code, p->o);
  return true;
}

static bool st_check_grad(Pipeline *p) {
  if (p->o->check.enabled) p->status = check_grad(p->code, &p->o->check);
  return p->status == 0;
}

// Schedule, kernels, object, shared object; codegen() prints --emit=schedule,
// llvm, cuda and ptx itself.
static bool st_codegen(Pipeline *p) {
  const char *e = p->o->emit;
  bool code = p->o->output || (e && (!strcmp(e, "llvm") || !strcmp(e, "schedule") || !strcmp(e, "loops") || !strcmp(e, "cost") || !strcmp(e, "cuda") || !strcmp(e, "ptx")));
  if (code) {
    Options o = *p->o;
    o.train_ops = stats_train_ops_per_token(p->g);  // the graph as written: fused ops have no counts of their own
    p->status = codegen(p->code, &o);
  }
  return false;
}

static const Stage stages[] = {
    {"parse", "ast", st_parse, pr_ast},                // frontend/lexer.l, parser.y, source.c
    {"elaboration", "ir", st_elaborate, pr_ir},        // frontend/elaborate.c
    {"pytorch", "pytorch", st_pytorch, pr_pytorch},    // codegen/pytorch.c (the graph as written)
    {"fuse", "fused", st_fuse, pr_fused},              // passes/fuse_attention.c, fuse_scan.c
    {"autodiff", "grad", st_autodiff, pr_ir},          // passes/autodiff.c (the graph as written)
    {"remat", NULL, st_remat, NULL},                   // passes/remat.c
    {"stats", NULL, st_stats, NULL},                   // passes/stats.c, codegen/schedule.c (memory)
    {"check-grad", NULL, st_check_grad, NULL},         // interp/gradcheck.c
    {"codegen", "schedule loops cost llvm cuda ptx", st_codegen, NULL},  // codegen/schedule.c, lower.c, llvm.c, cuda.c
};

static bool emits(const char *list, const char *want) {
  size_t n = strlen(want);
  for (const char *q = list; q && *q;) {
    const char *end = strchr(q, ' ');
    size_t len = end ? (size_t)(end - q) : strlen(q);
    if (len == n && !strncmp(q, want, n)) return true;
    q = end ? end + 1 : NULL;
  }
  return false;
}

// Runs the stages in order. Returns the exit status: 0, or 1 after a user error.
static int compile(const Options *o) {
  jmp_buf on_error;
  Pipeline p = {.o = o};
  p.diag = (Diag){.arena = &p.arena, .out = stderr, .on_error = &on_error};
  if (setjmp(on_error)) {
    arena_free(&p.arena);
    return 1;
  }
  for (size_t i = 0; i < sizeof stages / sizeof *stages; i++) {
    const Stage *st = &stages[i];
    if (!st->run(&p)) break;
    if (st->print && o->emit && emits(st->emit, o->emit)) {
      st->print(&p);
      break;
    }
  }
  arena_free(&p.arena);
  return p.status;
}

// The options of xfc, in the order of --help.
enum {
  O_OUTPUT, O_OPT, O_NO_FUSE, O_REMAT, O_TARGET, O_GPU_ARCH, O_PRECISION, O_DEFINE, O_INCLUDE, O_STDLIB, O_EMIT,
  O_BATCH, O_SEQ, O_STATS, O_CHECK_GRAD, O_CHECK_BATCH, O_CHECK_SEQ, O_CHECK_DROPOUT, O_SEED, O_H, O_HELP, O_VERSION,
  O_COUNT
};
static const CliOption xfc_options[O_COUNT] = {
    [O_OUTPUT] = {"o", true},          [O_OPT] = {"O", true},           [O_NO_FUSE] = {"no-fuse", false},
    [O_REMAT] = {"remat", false},      [O_TARGET] = {"target", true},   [O_GPU_ARCH] = {"gpu-arch", true},
    [O_PRECISION] = {"precision", true}, [O_DEFINE] = {"D", true},      [O_INCLUDE] = {"I", true},
    [O_STDLIB] = {"stdlib", true},     [O_EMIT] = {"emit", true},       [O_BATCH] = {"batch", true},
    [O_SEQ] = {"seq", true},           [O_STATS] = {"stats", false},    [O_CHECK_GRAD] = {"check-grad", false},
    [O_CHECK_BATCH] = {"check-batch", true}, [O_CHECK_SEQ] = {"check-seq", true},
    [O_CHECK_DROPOUT] = {"check-dropout", false}, [O_SEED] = {"seed", true}, [O_H] = {"h", false},
    [O_HELP] = {"help", false},        [O_VERSION] = {"version", false},
};

static const char *const emit_names[] = {"ast", "ir", "pytorch", "fused", "grad", "schedule", "loops", "cost", "llvm",
                                         "cuda", "ptx"};

// Fills o from argv; returns -1 to go on compiling, else the exit status.
static int parse_args(int argc, char **argv, Arena *a, Options *o) {
  o->defs = arena_alloc(a, sizeof *o->defs * (size_t)argc);
  o->incs = arena_alloc(a, sizeof *o->incs * (size_t)argc);
  o->check = (CheckOptions){.batch = 2, .seed = 1};
  o->opt_level = 2;
  o->batch = 64;
  o->gpu_arch = "compute_80";
  o->precision = XF_PRECISION_TF32;
  o->stdlib_dir = getenv("XF_STDLIB");
  if (!o->stdlib_dir || !*o->stdlib_dir) o->stdlib_dir = XF_STDLIB_DIR;
  Cli c = cli_start("xfc", xfc_options, O_COUNT, argc, argv, 1);
  for (int k; (k = cli_next(&c)) != CLI_END;) {
    const char *v = c.value;
    switch (k) {
    case CLI_BAD: return XF_EXIT_USAGE;
    case CLI_ARG:
      if (o->input) return die_usage("more than one input file (%s and %s)", o->input, v);
      o->input = v;
      break;
    case O_H:
    case O_HELP: return usage(stdout), 0;
    case O_VERSION:
      cli_version(stdout, "xfc");
#ifdef XF_HAVE_CUDA
      printf("targets: cpu (LLVM %d), cuda (NVRTC)\n", LLVM_VERSION_MAJOR);
#else
      printf("targets: cpu (LLVM %d); cuda: not in this build (no CUDA toolkit at build time)\n", LLVM_VERSION_MAJOR);
#endif
      return 0;
    case O_INCLUDE: o->incs[o->ninc++] = v; break;
    case O_DEFINE: {
      const char *eq = strchr(v, '=');
      if (!eq || eq == v) return die_usage("-D %s: expected name=value", v);
      o->defs[o->ndefs++] = (Define){arena_strndup(a, v, (size_t)(eq - v)), eq + 1};
      break;
    }
    case O_EMIT: {
      bool known = false;
      for (size_t e = 0; e < sizeof emit_names / sizeof *emit_names; e++) known = known || !strcmp(v, emit_names[e]);
      const char *near = cli_nearest(v, emit_names, (int)(sizeof emit_names / sizeof *emit_names));
      if (!known && near) return die_usage("--emit=%s: expected ast, ir, pytorch, fused, grad, schedule, loops, cost, llvm, "
                                           "cuda or ptx (did you mean %s?)", v, near);
      if (!known) return die_usage("--emit=%s: expected ast, ir, pytorch, fused, grad, schedule, loops, cost, llvm, cuda "
                                   "or ptx", v);
      o->emit = v;
      break;
    }
    case O_BATCH:
      if (!parse_count(v, &o->batch) || o->batch < 1 || o->batch > (1 << 24))
        return die_usage("--batch=%s: expected a count in 1..16777216", v);
      break;
    case O_SEQ:
      if (!parse_count(v, &o->seq) || o->seq < 1 || o->seq > (1 << 24))
        return die_usage("--seq=%s: expected a count in 1..16777216", v);
      break;
    case O_OUTPUT: o->output = v; break;
    case O_NO_FUSE: o->no_fuse = true; break;
    case O_REMAT: o->remat = true; break;
    case O_OPT:
      if (strcmp(v, "0") && strcmp(v, "2")) return die_usage("-O%s: expected -O0 or -O2", v);
      o->opt_level = v[0] - '0';
      break;
    case O_TARGET:
      if (!strcmp(v, "cuda")) o->cuda = true;
      else if (strcmp(v, "cpu")) return die_usage("--target=%s: expected cpu or cuda", v);
      break;
    case O_GPU_ARCH: {
      char *end = (char *)v;
      long sm = strncmp(v, "compute_", 8) ? 0 : strtol(v + 8, &end, 10);
      if (sm < 50 || sm > 200 || *end) return die_usage("--gpu-arch=%s: expected a virtual architecture such as compute_80", v);
      o->gpu_arch = v;
      break;
    }
    case O_PRECISION:
      if (!strcmp(v, "tf32")) o->precision = XF_PRECISION_TF32;
      else if (!strcmp(v, "fp32")) o->precision = XF_PRECISION_FP32;
      else if (!strcmp(v, "bf16")) o->precision = XF_PRECISION_BF16;
      else return die_usage("--precision=%s: expected tf32, bf16 or fp32", v);
      break;
    case O_STDLIB: o->stdlib_dir = v; break;
    case O_STATS: o->stats = true; break;
    case O_CHECK_GRAD: o->check.enabled = true; break;
    case O_CHECK_DROPOUT: o->check.dropout = true; break;
    case O_CHECK_BATCH:
      if (!parse_count(v, &o->check.batch) || o->check.batch < 1) return die_usage("--check-batch=%s: expected a count >= 1", v);
      break;
    case O_CHECK_SEQ:
      if (!parse_count(v, &o->check.seq) || o->check.seq < 1) return die_usage("--check-seq=%s: expected a count >= 1", v);
      break;
    case O_SEED: {
      int64_t n;
      if (!parse_count(v, &n)) return die_usage("--seed=%s: expected a non-negative integer", v);
      o->check.seed = (uint64_t)n;
      break;
    }
    }
  }
  if (!o->input) return die_usage("no input file");
  if (o->emit && !strcmp(o->emit, "cost") && !o->cuda) return die_usage("--emit=cost is the GPU's cost model: add --target=cuda");
  return -1;
}

int main(int argc, char **argv) {
  Arena args = {0};
  Options o = {0};
  int status = parse_args(argc, argv, &args, &o);
  if (status < 0)
    status = compile(&o);
  arena_free(&args);
  if (fflush(stdout) != 0) {
    perror("xfc: error writing output");
    status = 1;
  }
  return status;
}
