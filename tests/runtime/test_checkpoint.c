// test_checkpoint.c: safetensors checkpoints (runtime/checkpoint.c).
//
//   test_checkpoint             round trip, resume state, wrong-model and
//                               corrupt files, atomic save under a crash
//   test_checkpoint write FILE  a checkpoint whose every value is known:
//                               tensor k (entry order), element i holds
//                               value(k, i); for tests/runtime/test_safetensors.py
//   test_checkpoint check FILE  loads FILE (written by Python's safetensors)
//                               and checks every value is 2 value(k, i)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "../model_so.h"
#include "xf.h"

#define SMALL(d) {{"layers", "1"}, {"d", d}, {"context", "8"}, {"vocab", "40"}, {"ffn", "24"}}

static double value(int k, int64_t i) { return sin(0.37 * k + 0.011 * (double)i) * (1 + k % 3); }

// Compiles examples/she.xf at width d and opens it (batch 2, seq 8).
static XfRuntime *open_model(const char *d) {
  char err[1024], so[64];
  Arena a = {0};
  Schedule *s;
  Define defs[] = SMALL(d);
  XfRuntime *rt = NULL;
  if (build_model_so(&a, "examples/she.xf", defs, 5, true, &s, so, err, sizeof err)) {
    rt = xf_open(so, &(XfOptions){.batch = 2, .seq = 8, .threads = 1, .seed = 5}, err, sizeof err);
    unlink(so);
  }
  if (!rt) fprintf(stderr, "cannot build the test model: %s\n", err);
  arena_free(&a);
  return rt;
}

// Tensor k of the checkpoint order: parameters, exp_avg, exp_avg_sq.
static float *tensor(XfRuntime *rt, int k, int64_t *n) {
  int np = xf_nparams(rt);
  float *w = xf_param(rt, k % np, NULL, n);
  return k < np ? w : xf_moment(rt, k % np, k / np - 1);
}

static void fill(XfRuntime *rt, double scale) {
  for (int k = 0; k < 3 * xf_nparams(rt); k++) {
    int64_t n;
    float *x = tensor(rt, k, &n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * value(k, i));
  }
}

// Elements of rt's tensors equal to scale * value(k, i) (as float), and in all.
static int64_t count_equal(XfRuntime *rt, double scale, int64_t *total) {
  int64_t same = 0;
  *total = 0;
  for (int k = 0; k < 3 * xf_nparams(rt); k++) {
    int64_t n;
    float *x = tensor(rt, k, &n);
    for (int64_t i = 0; i < n; i++) same += x[i] == (float)(scale * value(k, i));
    *total += n;
  }
  return same;
}

static bool same_file(const char *a, const char *b) {
  char err[256];
  size_t na, nb;
  char *x = xf_read_file(a, &na, err, sizeof err), *y = xf_read_file(b, &nb, err, sizeof err);
  bool same = x && y && na == nb && !memcmp(x, y, na);
  free(x), free(y);
  return same;
}

static void expect_load_error(XfRuntime *rt, const char *path, const char *frag) {
  char err[1024] = "";
  XfCheckpoint *c = xf_checkpoint_open(path, err, sizeof err);
  bool loaded = c && xf_checkpoint_load(c, rt, true, err, sizeof err);
  xf_checkpoint_close(c);
  CHECK(!loaded);
  if (!strstr(err, frag)) fprintf(stderr, "  %s: got '%s', want '%s'\n", path, err, frag);
  CHECK(strstr(err, frag) != NULL);
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(p, 1, n, f);
  fclose(f);
}

static int tool(const char *mode, const char *path) {
  char err[1024];
  XfRuntime *rt = open_model("16");
  if (!rt) return 1;
  int status = 0;
  if (!strcmp(mode, "write")) {
    fill(rt, 1);
    xf_set_step(rt, 1234);
    XfMeta meta[] = {{"note", "written by test_checkpoint"}};
    if (!xf_checkpoint_save(rt, path, meta, 1, err, sizeof err)) status = 1, fprintf(stderr, "%s\n", err);
  } else {
    XfCheckpoint *c = xf_checkpoint_open(path, err, sizeof err);
    if (!c || !xf_checkpoint_load(c, rt, true, err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      status = 1;
    } else {
      int64_t total, same = count_equal(rt, 2, &total);
      printf("%lld of %lld values are 2 value(k, i); step %u\n", (long long)same, (long long)total, xf_step_count(rt));
      status = same != total || xf_step_count(rt) != 1234;
    }
    xf_checkpoint_close(c);
  }
  xf_close(rt);
  return status;
}

int main(int argc, char **argv) {
  if (argc == 3) return tool(argv[1], argv[2]);
  char err[1024], dir[] = "/tmp/xf-ckpt-XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  char path[256], path2[256], bad[256];
  snprintf(path, sizeof path, "%s/a.safetensors", dir);
  snprintf(path2, sizeof path2, "%s/b.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
  XfRuntime *rt = open_model("16"), *wide = open_model("24");
  if (!rt || !wide) return 1;

  // Round trip: parameters, both moments and the step come back exactly.
  fill(rt, 1);
  xf_set_step(rt, 77);
  XfMeta meta[] = {{"tokenizer", "bytes"}, {"quote\"key", "line\nbreak"}};
  CHECK(xf_checkpoint_save(rt, path, meta, 2, err, sizeof err));
  fill(rt, -3);
  xf_set_step(rt, 0);
  XfCheckpoint *c = xf_checkpoint_open(path, err, sizeof err);
  CHECK(c && xf_checkpoint_load(c, rt, true, err, sizeof err));
  int64_t total, same = count_equal(rt, 1, &total);
  CHECK(same == total && total > 1000);
  CHECK(xf_step_count(rt) == 77);
  CHECK(c && !strcmp(xf_checkpoint_meta(c, "step"), "77") && !strcmp(xf_checkpoint_meta(c, "format"), "xf-checkpoint/1"));
  CHECK(c && !strcmp(xf_checkpoint_meta(c, "seed"), "5") && !strcmp(xf_checkpoint_meta(c, "model"), "she"));
  CHECK(c && !strcmp(xf_checkpoint_meta(c, "quote\"key"), "line\nbreak") && !xf_checkpoint_meta(c, "absent"));
  xf_checkpoint_close(c);
  // Parameters only (sampling, eval): the moments and the step stay.
  fill(rt, -3);
  xf_set_step(rt, 5);
  c = xf_checkpoint_open(path, err, sizeof err);
  CHECK(c && xf_checkpoint_load(c, rt, false, err, sizeof err));
  xf_checkpoint_close(c);
  int64_t n0;
  float *w0 = xf_param(rt, 0, NULL, &n0), *m0 = xf_moment(rt, 0, 0);
  CHECK(w0[1] == (float)value(0, 1) && m0[1] == (float)(-3 * value(xf_nparams(rt), 1)) && xf_step_count(rt) == 5);
  // Saving the same state twice gives the same bytes.
  fill(rt, 1);
  xf_set_step(rt, 77);
  CHECK(xf_checkpoint_save(rt, path2, meta, 2, err, sizeof err) && same_file(path, path2));

  // Another model: a mis-shaped tensor is named, and nothing is touched.
  fill(wide, 0.5);
  expect_load_error(wide, path, "tensor 'lm.layers.0.mixer.W_ext' has shape [8, 16, 16], model 'she' needs [8, 24, 24]");
  int64_t t2;
  CHECK(count_equal(wide, 0.5, &t2) == t2);
  // A missing tensor (a checkpoint edited by hand).
  {
    size_t n;
    char *file = xf_read_file(path, &n, err, sizeof err);
    const char *name;
    xf_param(rt, 0, &name, NULL);
    char *at = strstr(file + 8, name);  // rename the first parameter in the header, same length
    at[0] = at[0] == 'x' ? 'y' : 'x';
    write_bytes(bad, file, n);
    char want[256];
    snprintf(want, sizeof want, "has no tensor '%s' that model 'she' needs", name);
    expect_load_error(rt, bad, want);
    // Truncated data, an impossible header length, not JSON, an empty file.
    write_bytes(bad, file, n - 4);
    expect_load_error(rt, bad, "truncated");
    write_bytes(bad, "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
    expect_load_error(rt, bad, "header length");
    write_bytes(bad, "\x04\0\0\0\0\0\0\0{{{{", 12);
    expect_load_error(rt, bad, "header is not JSON");
    write_bytes(bad, "", 0);
    expect_load_error(rt, bad, "too short");
    free(file);
    expect_load_error(rt, "/nonexistent/x.safetensors", "cannot open checkpoint");
  }

  // A crash in the middle of a save leaves the previous checkpoint intact.
  fill(rt, 2);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("XF_TEST_CRASH_SAVE", "3000", 1);
    xf_checkpoint_save(rt, path, NULL, 0, err, sizeof err);
    _exit(0);  // not reached: the save dies after 3000 bytes
  }
  int ws;
  waitpid(pid, &ws, 0);
  CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 70);
  CHECK(same_file(path, path2));
  fill(rt, -1);
  c = xf_checkpoint_open(path, err, sizeof err);
  CHECK(c && xf_checkpoint_load(c, rt, true, err, sizeof err) && count_equal(rt, 1, &total) == total);
  xf_checkpoint_close(c);
  // And the next save completes.
  fill(rt, 2);
  CHECK(xf_checkpoint_save(rt, path, NULL, 0, err, sizeof err) && !same_file(path, path2));

  xf_close(rt), xf_close(wide);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
