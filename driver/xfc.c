// xfc: the xf compiler driver. The whole pipeline is the table `stages`:
// parse, elaborate, fuse, autodiff, remat, schedule, causal analysis,
// stats, check-grad, lower, CUDA, cost, PTX, SASS, LLVM, link; results pass
// between stages in the Pipeline. --emit=NAME prints the result of the stage
// that names it and xfc stops; --help's --emit lines come from the table.
// The IR verifier runs after every stage that produces IR.
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
#include "../runtime/gemm.h"

#ifndef XF_STDLIB_DIR
#define XF_STDLIB_DIR "stdlib"
#endif

static void print_emit_help(FILE *f);

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
        "  --scan-chunk=C  the chunk of scan_read's chunked form (linear attention, GLA,\n"
        "                  retention: the products within a chunk as GEMMs, the state carried\n"
        "                  across chunks) on every target, 0 the sequential form; also a config\n"
        "                  value scan_chunk (halved until its arrays fit). Default: on a GPU the\n"
        "                  largest of 64 down to 4 whose arrays fit 44 KiB of shared memory (at\n"
        "                  most 16 for a decay per key row), sequential on a CPU\n"
        "  --target=cpu    CPU code through LLVM (the default)\n"
        "  --target=cuda   also CUDA kernels: CUDA C compiled by NVRTC to PTX, embedded with\n"
        "                  the source in model.so beside the CPU code (xfrun --device picks)\n"
        "  --gpu-arch=A    the virtual architecture of the PTX (default compute_80)\n"
        "  --precision=P   tf32 (default: float32 storage, TF32 tensor-core products on a\n"
        "                  GPU, float32 on the CPU), bf16 (bf16 products: tensor cores on a\n"
        "                  GPU, AVX512_BF16 on the CPU, else float32 and xfrun says why;\n"
        "                  on the CPU activations stored in bf16 too, parameters, moments,\n"
        "                  statistics and sums float32; float32 storage on a GPU) or fp32\n"
        "                  (float32 throughout: the oracle the tests use)\n"
        "  -D name=value   override a config value of the model (repeatable)\n"
        "  -I dir          also look for imports in dir (repeatable)\n"
        "  --stdlib=dir    the standard library (default: $XF_STDLIB, else the built-in path)\n"
        , f);
  print_emit_help(f);
  fputs(
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
  int64_t scan_chunk;     // --scan-chunk: -1 the schedule's choice
  bool stats;
  int64_t batch, seq;
  CheckOptions check;
  Define *defs;
  int ndefs;
  const char **incs;
  int ninc;
};

// The memory of incremental decoding per sequence of `context` positions
// (--stats): the caches later positions read and the workspace planned by
// lifetimes (codegen/stepmem.c, memplan; the runtime's xf_sampler_open
// computes the same), at T = the step program's frame where it has one. ta: the causal analysis's
// time axes, NULL when the model has no incremental decoder.
static void print_step_memory(const Graph *g, const Schedule *s, const int *ta) {
  StepBuf *sb = malloc(sizeof *sb * ((size_t)s->nbufs + 1));
  PlanItem *items = calloc((size_t)s->nbufs + 1, sizeof *items);
  bool *cached = calloc((size_t)s->nbufs + 1, sizeof *cached);
  int64_t *ofs = calloc((size_t)s->nbufs + 1, sizeof *ofs), T = g->t_max, cache = 0, total = -1, state = 0;
  int n = ta && sb ? step_buffers(s, ta, sb) : 0;
  int64_t frame = n > 0 ? step_frame(s, sb, n) : 0;
  if (frame) T = frame;
  if (n > 0 && items && cached && ofs) {
    for (int i = 0; i < n; i++) {
      items[i] = (PlanItem){.bytes = buffer_esize(&s->bufs[sb[i].buf]) * symsize_eval(s->bufs[sb[i].buf].size, 1, T),
                            .first = sb[i].first, .last = sb[i].last};
      cached[i] = sb[i].cache;
    }
    total = memplan_after_caches(items, cached, n, ofs, &cache);
    for (int i = 0; i < n; i++)
      if (sb[i].state) state += (items[i].bytes + 63) / 64 * 64;  // as memplan_after_caches packs a cache
  }
  if (total >= 0) {
    if (frame)
      printf("\nmemory of incremental decoding per sequence, at any position (a frame of %lld positions: every read\n"
             "of an earlier position looks back at most %lld):\n",
             (long long)frame, (long long)frame - 1);
    else printf("\nmemory of incremental decoding per sequence of %lld positions:\n", (long long)T);
    printf("  caches (what later positions read)   %10.1f KiB  (%lld bytes)\n", (double)cache / 1024, (long long)cache);
    printf("    of which recurrent states          %10.1f KiB  (%lld bytes, the same at every position)\n",
           (double)state / 1024, (long long)state);
    printf("  workspace (planned, every step)      %10.1f KiB  (%lld bytes)\n", (double)(total - cache) / 1024,
           (long long)(total - cache));
  }
  free(sb), free(items), free(cached), free(ofs);
}

// The planned memory of a training step (--stats) of schedule s.
static void print_memory(const Schedule *s, const int *ta, const Options *o) {
  Arena a = {0};
  const Graph *g = s->g;
  int64_t B = o->batch, T = o->seq ? o->seq : g->t_max, pers = 0;
  int64_t *off = arena_alloc(&a, sizeof(int64_t) * (size_t)(s->nbufs + 1));
  int64_t top = schedule_plan(s, B, T, off, &pers);
  double params = 0, twins = 0, copies = 0;  // AdamW keeps two moments per parameter, each rounded up to 64 bytes as in the runtime
  bool storage = false;  // some activation stored in bf16
  for (int b = 0; b < s->nbufs; b++) {
    if (s->bufs[b].role == BUF_PARAM && s->bufs[b].alias_of < 0) {
      params += (double)((4 * symsize_eval(s->bufs[b].size, B, T) + 63) / 64 * 64);
      copies += (double)xf_bf16_copy_bytes(symsize_eval(s->bufs[b].size, B, T));
    }
    if (s->bufs[b].role == BUF_TWIN) twins += (double)xf_bf16_copy_bytes(symsize_eval(s->bufs[b].size, B, T));
    storage |= s->bufs[b].role == BUF_ACT && s->bufs[b].bf16;
  }
  printf("\nmemory of a training step at batch %lld, seq %lld (%s schedule: %d kernels, %d functions):\n",
         (long long)B, (long long)T, o->no_fuse ? "unfused" : "fused", s->nkernels, s->nclasses);
  printf("  activations and outputs (planned)  %10.1f MiB\n", (double)top / (1 << 20));
  printf("  parameters, gradients, inputs      %10.1f MiB\n", (double)pers / (1 << 20));
  if (twins > 0) printf("    of which the GPU's bf16 weights  %10.1f MiB (parameters' twins, rewritten by AdamW)\n", twins / (1 << 20));
  printf("  AdamW moments                      %10.1f MiB\n", 2 * params / (1 << 20));
  printf("  total                              %10.1f MiB\n", ((double)top + (double)pers + 2 * params) / (1 << 20));
  if (o->precision == XF_PRECISION_BF16) {  // runtime.c's bf16_bytes, where the CPU runs the step
    printf("  beside the plan, the CPU's bf16 GEMM operands%s (xfrun: \"bf16 GEMM operands\"):\n",
           o->cuda ? " (run on the CPU only)" : "");
    printf("    the parameters' bf16 copies      %10.1f MiB (with bf16 products)\n", copies / (1 << 20));
    printf("    staged operands, per pool thread %10.1f MiB\n", (double)xf_bf16_thread_bytes(storage) / (1 << 20));
  }
  print_step_memory(g, s, ta);
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

// ---- the pipeline: a table of stages ----------------------------------------------

typedef struct {
  const Options *o;
  Arena arena;
  Diag diag;
  Program *prog;
  Graph *g;     // the graph as written: --stats, --emit=ir, --emit=grad
  Graph *code;  // the graph compiled: fused unless --no-fuse, rematerialised with --remat
  double train_ops;     // per token, of the graph as written (fused ops have no counts of their own): XfModel.train_ops
  Schedule *s;          // kernels, classes and buffers of `code` (codegen/schedule.c)
  int *time_axis;       // the causal analysis (passes/causal.c): NULL when there is no incremental decoder
  const char *step_note;  // why there is none, located, when the model has logits
  LModule *cpu, *gpu;   // the schedule lowered for the CPU and (--target=cuda) a GPU (codegen/lower.c)
  CudaModule *cuda;     // --target=cuda: the CUDA source and launch tables (codegen/cuda.c)
  char *ptx;            // its PTX (NVRTC)
  unsigned char *sass[2];
  size_t sass_size[2];
  char obj[4096];       // -o: the temporary object beside the output, removed at the end
  const char *emit_here;  // while a stage runs: its --emit value when that is the one asked for, else NULL
  int status;           // the exit status when a stage stops the pipeline
} Pipeline;

typedef struct {
  const char *name;            // the stage, in IR verifier messages
  const char *emit;            // the --emit= value that prints its result, or NULL
  const char *help;            // --help's text for that value
  bool (*run)(Pipeline *p);    // false: the pipeline stops with p->status
  void (*print)(Pipeline *p);  // prints what --emit= asked for, then the pipeline stops
} Stage;

// What the stages after check-grad serve: --emit of one of theirs, or -o.
static bool wants_codegen(const Options *o);
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
  int64_t m = ir_t_multiple(p->g);
  if (p->o->seq > 0 && p->o->seq % m) {
    fprintf(stderr, "xfc: error: --seq=%lld is not a multiple of %lld: model '%s' groups positions along time (T / %lld)\n",
            (long long)p->o->seq, (long long)m, p->g->name, (long long)m);
    p->status = 1;
    return false;
  }
  return true;
}
static void pr_ir(Pipeline *p) { ir_print(stdout, p->g); }
static bool st_nothing(Pipeline *p) { (void)p; return true; }
static void pr_pytorch(Pipeline *p) {
  char err[512];
  if (pytorch_emit(stdout, p->g, err, sizeof err)) fprintf(stderr, "%s\n", err), p->status = 1;
}

// A note per source place and reason of attention the pass left alone (the
// same block in every layer is one place), at its softmax.
static void note_unfused(Pipeline *p, const FuseNote *notes, int n) {
  for (int i = 0; i < n; i++) {
    Loc at = p->code->nodes[notes[i].node].loc;
    int same = 0, first = 1;
    for (int j = 0; j < n; j++) {
      Loc b = p->code->nodes[notes[j].node].loc;
      bool eq = b.line == at.line && b.col == at.col && !strcmp(notes[i].why, notes[j].why) &&
                ((!b.file && !at.file) || (b.file && at.file && !strcmp(b.file, at.file)));
      if (eq) same++;
      if (eq && j < i) first = 0;
    }
    if (!first) continue;
    char times[32] = "";
    if (same > 1) snprintf(times, sizeof times, " (%d times)", same);
    diag_print(&p->diag, "note", at, "attention not fused%s: %s", times, notes[i].why);
  }
}

// Code, memory and --check-grad come from the fused graph (unless --no-fuse).
static bool st_fuse(Pipeline *p) {
  if (!wants_code(p->o)) return false;  // a check only: the model is well formed
  p->code = p->g;
  if (!p->o->no_fuse) {
    p->code = ir_graph_clone(&p->arena, p->g);
    enum { MAX_NOTES = 256 };
    FuseNote *notes = arena_alloc(&p->arena, sizeof *notes * MAX_NOTES);
    int nnotes = 0;
    fuse_attention(p->code, notes, MAX_NOTES, &nnotes);
    note_unfused(p, notes, nnotes);
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
  p->train_ops = stats_train_ops_per_token(p->g);
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

// The kernels of the compiled graph, for --stats' memory and the code.
static bool st_schedule(Pipeline *p) {
  if (p->o->scan_chunk >= 0) {  // the config value schedule_scan_chunk reads
    if (p->code == p->g) p->code = ir_graph_clone(&p->arena, p->g);
    ir_config_add(p->code, "scan_chunk", false, (double)p->o->scan_chunk);
  }
  if (p->o->stats || wants_codegen(p->o)) p->s = schedule_build(&p->arena, p->code, !p->o->no_fuse, p->o->cuda);
  return true;
}

// The incremental decoder: the time axis of every value the logits need,
// once, for --stats' decoding memory, the step program and the CUDA code.
static bool st_causal(Pipeline *p) {
  const Graph *g = p->code;
  bool has_logits = false;
  for (int i = 0; i < g->noutputs; i++) has_logits = has_logits || !strcmp(g->outputs[i].name, "logits");
  if (!p->s || !has_logits) return true;
  int *ta = arena_alloc(&p->arena, sizeof(int) * (size_t)(g->nnodes + 1)), bad;
  char why[256];
  if (causal_analyze(g, ta, &bad, why, sizeof why)) {
    p->time_axis = ta;
    return true;
  }
  const Node *n = bad >= 0 ? &g->nodes[bad] : NULL;
  if (!g->noncausal) {  // a language model that reads later positions would train on the future
    int64_t T, pos;
    double diff;
    char err[256];
    int r = interp_causal_probe(p->g, "logits", &T, &pos, &diff, err, sizeof err);
    if (r < 0) {
      fprintf(stderr, "xfc: error: the causality check of model '%s' could not run: %s\n", g->name, err);
      p->status = 1;
      return false;
    }
    if (r == 0) {
      Loc at = n ? n->loc : (Loc){0};
      int64_t m = ir_t_multiple(p->g);
      if (m > 1) {  // the probe's two runs at T, the last token changed (causal_probe.c)
        diag_print(&p->diag, "error", at,
                   "model '%s' reads later positions (%s %s): its logits at position %lld change by %.3g when the "
                   "token at position %lld changes (the interpreter at T = %lld), so training would see the future; "
                   "shift the sequence by s - 1 positions before grouping s of them (shift(x, 1, s - 1)), or declare "
                   "`noncausal model %s` for an encoder",
                   g->name, n ? ir_op_info[n->op].name : "", why, (long long)pos, diff, (long long)T - 1, (long long)T, g->name);
        p->status = 1;
        return false;
      }
      diag_print(&p->diag, "error", at,
                 "model '%s' reads later positions (%s %s): its logits at position %lld change by %.3g when a token "
                 "follows (the interpreter at T = %lld and %lld), so training would see the future; mask the scores "
                 "with causal_mask, or declare `noncausal model %s` for an encoder",
                 g->name, n ? ir_op_info[n->op].name : "", why, (long long)pos, diff, (long long)T, (long long)T - 1, g->name);
      p->status = 1;
      return false;
    }
  }
  p->step_note = n && n->loc.file
                     ? arena_printf(&p->arena, "%s:%d:%d: %s %s", n->loc.file, n->loc.line, n->loc.col, ir_op_info[n->op].name, why)
                     : arena_printf(&p->arena, "%s", why);
  if (p->o->output)
    fprintf(stderr, "xfc: note: no incremental decoder for model '%s': %s; xfrun sample recomputes the whole context "
                    "for every token\n", g->name, p->step_note);
  return true;
}

// --precision=bf16: the activations whose every access converts, on the CPU
// and with --target=cuda also on a GPU, are stored in bf16
// (codegen/storage.c), before --stats plans them.
static bool st_storage(Pipeline *p) {
  if (p->s && p->o->precision == XF_PRECISION_BF16) schedule_storage(&p->arena, p->s, p->o->cuda);
  return true;
}

static bool st_stats(Pipeline *p) {
  if (p->o->stats) stats_print(stdout, p->g), print_memory(p->s, p->time_axis, p->o);
  return true;
}

static bool st_check_grad(Pipeline *p) {
  if (p->o->check.enabled) p->status = check_grad(p->code, &p->o->check);
  return p->status == 0 && wants_codegen(p->o);
}

// The schedule lowered once per target: per class its form, variants,
// outer extent and windows; the backends print these.
static bool st_lower(Pipeline *p) {
  p->cpu = lower_module(&p->arena, p->s, LTARGET_CPU, p->time_axis);
  p->s->fast_exp = p->o->precision != XF_PRECISION_FP32;
  if (p->o->cuda) p->gpu = lower_module(&p->arena, p->s, LTARGET_GPU, p->time_axis);
  return true;
}

static void pr_loops(Pipeline *p) { p->status = lower_print(stdout, &p->arena, p->s, p->o->cuda ? LTARGET_GPU : LTARGET_CPU); }

// --target=cuda: the CUDA source and launch tables.
static bool st_cuda(Pipeline *p) {
  if (!p->o->cuda) return true;
  p->cuda = cuda_render(&p->arena, p->s, p->gpu);
  if (!p->cuda->error) return true;
  fprintf(stderr, "%s\n", p->cuda->error);
  p->status = 1;
  return false;
}

// The kernels in order and the buffers' plan; with --target=cuda the GPU
// operations of a training step.
static void pr_schedule(Pipeline *p) {
  schedule_print(stdout, p->s, p->o->batch, p->o->seq ? p->o->seq : p->code->t_max);
  if (!p->cuda) return;
  int kernels = 0, gemms = 0;
  for (int j = 0; j < p->cuda->nlaunch[PROG_TRAIN]; j++) p->cuda->launch[PROG_TRAIN][j].kind == XF_LAUNCH_GEMM ? gemms++ : kernels++;
  printf("cuda: a training step: %d kernel launches, %d GEMMs, 3 optimizer launches (the gradient norm, its sum, "
         "AdamW; with --accum a fourth, the gradient sums): %d GPU operations, replayed as one CUDA graph (1 launch from "
         "the host)\n", kernels, gemms, kernels + gemms + 3);
}

static void pr_cost(Pipeline *p) {  // codegen/cuda_cost.c
  char err[1024];
  CudaCost *c = cuda_cost(&p->arena, p->s, p->cuda, p->o->batch, p->o->seq ? p->o->seq : p->code->t_max, p->o->precision,
                          err, sizeof err);
  if (c) cuda_cost_print(stdout, c);
  else fprintf(stderr, "xfc: %s\n", err), p->status = 1;
}

static void pr_cuda(Pipeline *p) { fputs(p->cuda->source, stdout); }

// The PTX of the CUDA source (NVRTC): for --emit=ptx and model.so.
static bool st_ptx(Pipeline *p) {
  if (!p->cuda || (!p->o->output && !p->emit_here)) return true;
  if ((p->ptx = cuda_ptx(p->s, p->cuda, p->o->gpu_arch))) return true;
  p->status = 1;  // cuda_ptx said why
  return false;
}

// The PTX, then ptxas's resources of the SASS model.so would carry.
static void pr_ptx(Pipeline *p) {
  fputs(p->ptx, stdout);
  for (int i = 0; i < 2; i++) {
    size_t n;
    unsigned char *bin = cuda_sass(p->cuda, sass_sm[i], true, &n);
    if (!bin) p->status = 1;
    free(bin);
  }
}

// The SASS for sass_sm[] (NVRTC, ptxas) that model.so carries.
static bool st_sass(Pipeline *p) {
  for (int i = 0; p->cuda && p->o->output && i < 2; i++)
    if (!(p->sass[i] = cuda_sass(p->cuda, sass_sm[i], false, &p->sass_size[i]))) {
      p->status = 1;
      return false;
    }
  return true;
}

// The CPU code and the model descriptor (LLVM): --emit=llvm prints the
// optimised module; -o writes an object beside the output.
static bool st_llvm(Pipeline *p) {
  const Options *o = p->o;
  char err[1024];
  if (o->output) {
    snprintf(p->obj, sizeof p->obj, "%s.o.XXXXXX", o->output);
    int fd = mkstemp(p->obj);
    if (fd < 0) {
      fprintf(stderr, "xfc: error: cannot create a temporary object next to %s: %s\n", o->output, strerror(errno));
      *p->obj = 0, p->status = 1;
      return false;
    }
    close(fd);
  }
  LlvmOptions lo = {.opt_level = o->opt_level, .llvm_ir = o->emit ? stdout : NULL, .object_path = o->output ? p->obj : NULL,
                    .train_ops = p->train_ops, .time_axis = p->time_axis, .step_note = p->step_note, .module = p->cpu,
                    .precision = o->precision};
  if (p->cuda) {
    lo.cuda = p->cuda, lo.ptx = p->ptx, lo.gpu_arch = o->gpu_arch;
    for (int i = 0; i < 2; i++) lo.sass_sm[i] = sass_sm[i], lo.sass[i] = p->sass[i], lo.sass_size[i] = p->sass_size[i];
  }
  if (llvm_compile(p->s, &lo, err, sizeof err)) return true;
  if (strstr(err, ": error: ")) fprintf(stderr, "%s\n", err);  // located already
  else fprintf(stderr, "xfc: error: %s\n", err);
  p->status = 1;
  return false;
}
static void pr_nothing(Pipeline *p) { (void)p; }  // st_llvm printed it

// -o: the shared object xfrun loads.
static bool st_link(Pipeline *p) {
  char err[1024];
  const Options *o = p->o;
  if (!o->output) return true;
  if (!link_shared(p->obj, o->output, err, sizeof err)) {
    fprintf(stderr, "xfc: error: %s\n", err);
    p->status = 1;
    return false;
  }
  struct stat st;
  if (stat(o->output, &st) == 0)
    fprintf(stderr, "xfc: wrote %s (%.0f KiB: CPU code%s%s)\n", o->output, (double)st.st_size / 1024,
            o->cuda ? ", CUDA kernels for " : "", o->cuda ? o->gpu_arch : "");
  return true;
}

static const Stage stages[] = {
    {"parse", "ast", "print the syntax tree of the model file", st_parse, pr_ast},  // frontend/lexer.l, parser.y, source.c
    {"elaboration", "ir", "print the graph IR after elaboration", st_elaborate, pr_ir},  // frontend/elaborate.c
    {"pytorch", "pytorch",
     "print the model as a self-contained PyTorch module (one nn.Module per\n"
     "block, parameters named as in xf's checkpoints, load_xf to load one;\n"
     "docs/interop.md)", st_nothing, pr_pytorch},  // codegen/pytorch.c (the graph as written)
    {"fuse", "fused", "print the graph IR after the graph rewrites of fusion (attention)", st_fuse, pr_fused},
    {"autodiff", "grad", "print the graph IR with its backward pass (autodiff)", st_autodiff, pr_ir},  // passes/autodiff.c
    {"remat", NULL, NULL, st_remat, NULL},                       // passes/remat.c
    {"schedule", NULL, NULL, st_schedule, NULL},                 // codegen/schedule.c, passes/fuse_groups.c
    {"causal", NULL, NULL, st_causal, NULL},                     // passes/causal.c
    {"storage", NULL, NULL, st_storage, NULL},                   // codegen/storage.c
    {"stats", NULL, NULL, st_stats, NULL},                       // passes/stats.c, runtime/plan.c, codegen/stepmem.c
    {"check-grad", NULL, NULL, st_check_grad, NULL},             // interp/gradcheck.c
    {"lower", "loops",
     "print the loop description of every kernel class (codegen/loops.h);\n"
     "with --target=cuda the forms chosen for a GPU", st_lower, pr_loops},  // codegen/lower.c
    {"cuda", "schedule",
     "print the kernels in order (fusion, class) and every buffer's\n"
     "lifetime and planned offset at --batch, --seq; with\n"
     "--target=cuda also the GPU operations of a training step", st_cuda, pr_schedule},  // codegen/cuda.c
    {"cost", "cost",
     "print, with --target=cuda, the estimated time of a training step on an\n"
     "H100 per kernel class (launches, grid, chain, bytes, FLOPs, cliffs; at\n"
     "--batch, --seq)", st_nothing, pr_cost},
    {"cuda-source", "cuda", "print the CUDA C source model.so carries (implies --target=cuda)", st_nothing, pr_cuda},
    {"ptx", "ptx", "print the PTX NVRTC makes of it (for --gpu-arch; implies --target=cuda)", st_ptx, pr_ptx},  // codegen/cuda_nvrtc.c
    {"sass", NULL, NULL, st_sass, NULL},
    {"llvm", "llvm", "print the generated (optimised) LLVM IR", st_llvm, pr_nothing},  // codegen/llvm.c
    {"link", NULL, NULL, st_link, NULL},
};
enum { NSTAGES = sizeof stages / sizeof *stages };

// --help's lines for --emit: every stage that prints, in pipeline order.
static void print_emit_help(FILE *f) {
  for (int i = 0; i < NSTAGES; i++) {
    if (!stages[i].emit) continue;
    char left[32];
    snprintf(left, sizeof left, "--emit=%s", stages[i].emit);
    fprintf(f, "  %-15s ", left);
    for (const char *h = stages[i].help; *h;) {
      const char *nl = strchr(h, '\n');
      int len = nl ? (int)(nl - h) : (int)strlen(h);
      fprintf(f, "%.*s%s\n", len, h, nl ? "" : " and stop");
      if (!nl) break;
      h = nl + 1;
      fprintf(f, "  %-15s ", "");
    }
  }
}

static int stage_of_emit(const char *emit) {
  for (int i = 0; i < NSTAGES; i++)
    if (stages[i].emit && !strcmp(stages[i].emit, emit)) return i;
  return -1;
}

static bool wants_codegen(const Options *o) {
  int check = 0;
  while (strcmp(stages[check].name, "check-grad")) check++;
  return o->output || (o->emit && stage_of_emit(o->emit) > check);
}

// Runs the stages in order. Returns the exit status: 0, or 1 after a user error.
static int compile(const Options *o) {
  jmp_buf on_error;
  Pipeline p = {.o = o};
  p.diag = (Diag){.arena = &p.arena, .out = stderr, .on_error = &on_error};
  if (!setjmp(on_error)) {
    for (int i = 0; i < NSTAGES; i++) {
      const Stage *st = &stages[i];
      p.emit_here = o->emit && st->emit && !strcmp(st->emit, o->emit) ? st->emit : NULL;
      if (!st->run(&p)) break;
      if (st->print && p.emit_here) {
        st->print(&p);
        break;
      }
    }
  } else {
    p.status = 1;
  }
  if (*p.obj) unlink(p.obj);
  free(p.ptx), free(p.sass[0]), free(p.sass[1]);
  arena_free(&p.arena);
  return p.status;
}

// The options of xfc, in the order of --help.
enum {
  O_OUTPUT, O_OPT, O_NO_FUSE, O_REMAT, O_SCAN_CHUNK, O_TARGET, O_GPU_ARCH, O_PRECISION, O_DEFINE, O_INCLUDE, O_STDLIB, O_EMIT,
  O_BATCH, O_SEQ, O_STATS, O_CHECK_GRAD, O_CHECK_BATCH, O_CHECK_SEQ, O_CHECK_DROPOUT, O_SEED, O_H, O_HELP, O_VERSION,
  O_COUNT
};
static const CliOption xfc_options[O_COUNT] = {
    [O_OUTPUT] = {"o", true},          [O_OPT] = {"O", true},           [O_NO_FUSE] = {"no-fuse", false},
    [O_REMAT] = {"remat", false},      [O_SCAN_CHUNK] = {"scan-chunk", true}, [O_TARGET] = {"target", true},   [O_GPU_ARCH] = {"gpu-arch", true},
    [O_PRECISION] = {"precision", true}, [O_DEFINE] = {"D", true},      [O_INCLUDE] = {"I", true},
    [O_STDLIB] = {"stdlib", true},     [O_EMIT] = {"emit", true},       [O_BATCH] = {"batch", true},
    [O_SEQ] = {"seq", true},           [O_STATS] = {"stats", false},    [O_CHECK_GRAD] = {"check-grad", false},
    [O_CHECK_BATCH] = {"check-batch", true}, [O_CHECK_SEQ] = {"check-seq", true},
    [O_CHECK_DROPOUT] = {"check-dropout", false}, [O_SEED] = {"seed", true}, [O_H] = {"h", false},
    [O_HELP] = {"help", false},        [O_VERSION] = {"version", false},
};

// Fills o from argv; returns -1 to go on compiling, else the exit status.
static int parse_args(int argc, char **argv, Arena *a, Options *o) {
  o->defs = arena_alloc(a, sizeof *o->defs * (size_t)argc);
  o->incs = arena_alloc(a, sizeof *o->incs * (size_t)argc);
  o->check = (CheckOptions){.batch = 2, .seed = 1};
  o->opt_level = 2;
  o->batch = 64;
  o->scan_chunk = -1;
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
      const char *names[NSTAGES];
      char list[256] = "";
      int n = 0;
      for (int i = 0; i < NSTAGES; i++)
        if (stages[i].emit) {
          names[n++] = stages[i].emit;
          snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? ", " : "", stages[i].emit);
        }
      const char *near = cli_nearest(v, names, n);
      if (stage_of_emit(v) < 0)
        return die_usage("--emit=%s: expected one of %s%s%s%s", v, list, near ? " (did you mean " : "", near ? near : "",
                         near ? "?)" : "");
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
    case O_SCAN_CHUNK:
      if (!parse_count(v, &o->scan_chunk) || o->scan_chunk > 128) return die_usage("--scan-chunk=%s: expected a chunk of 0 to 128 positions", v);
      break;
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
  if (o->emit && (!strcmp(o->emit, "cuda") || !strcmp(o->emit, "ptx"))) o->cuda = true;  // the CUDA code model.so carries
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
