// model_so.h: for the C tests of generated code. Elaborates a model file,
// adds its backward pass and compiles its schedule through LLVM into a
// shared object, as xfc -o does (with fuse: after fuse_attention and fuse_scan).
#ifndef XF_MODEL_SO_H
#define XF_MODEL_SO_H

#include <setjmp.h>
#include <stdio.h>
#include <unistd.h>

#include "frontend.h"
#include "kernel.h"
#include "llvm.h"
#include "loops.h"
#include "passes.h"

// Set to apply passes/remat.c after autodiff (the xfc --remat pipeline).
static bool model_so_remat;
// The forms of codegen/lower.c the CPU code prints (LlvmOptions.module):
// LTARGET_GPU runs the GPU's descriptions on the CPU.
static LTarget model_so_forms = LTARGET_CPU;
// >= 0: the chunk of scan_read's chunked form (xfc --scan-chunk; 0 the
// sequential form); -1 the schedule's choice.
static int model_so_scan_chunk = -1;
// Set to store activations in bf16 where every access converts
// (codegen/storage.c, xfc --precision=bf16 on the CPU).
static bool model_so_bf16;

// Returns the graph (with its schedule in *sched and the library's path in
// so, which the caller unlinks), or NULL with a message in err.
static Graph *build_model_so(Arena *a, const char *path, const Define *defs, int ndefs, bool fuse, Schedule **sched,
                             char so[64], char *err, size_t errlen) {
  jmp_buf on_error;
  Diag d = {.arena = a, .out = stderr, .on_error = &on_error};
  SearchPath sp = {NULL, 0, XF_STDLIB_DIR};
  if (setjmp(on_error)) {
    snprintf(err, errlen, "%s does not compile", path);
    return NULL;
  }
  Graph *g = elaborate(&d, load_program(&d, path, &sp), defs, ndefs);
  if (fuse) fuse_attention(g, NULL, 0, NULL), fuse_scan(g);
  if (!autodiff(g, err, errlen)) return NULL;
  if (model_so_remat) remat(g);
  if (model_so_scan_chunk >= 0) ir_config_add(g, "scan_chunk", false, model_so_scan_chunk);
  *sched = schedule_build(a, g, fuse, model_so_forms == LTARGET_GPU);
  if (model_so_bf16) schedule_storage(a, *sched, model_so_forms == LTARGET_GPU);
  char obj[] = "/tmp/xf-test-XXXXXX.o";
  int fd = mkstemps(obj, 2);
  if (fd < 0) return snprintf(err, errlen, "cannot create a temporary object"), NULL;
  close(fd);
  snprintf(so, 64, "%s.so", obj);
  LlvmOptions lo = {.opt_level = 2, .object_path = obj, .module = lower_module(a, *sched, model_so_forms, NULL)};
  bool built = llvm_compile(*sched, &lo, err, errlen) && link_shared(obj, so, err, errlen);
  unlink(obj);
  return built ? g : NULL;
}

#endif
