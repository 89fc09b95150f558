// replay.c: runs a libFuzzer target's inputs without libFuzzer, so the
// regression inputs (fuzz/regress/<target>/) run in every test build:
//   replay_<target> FILE|DIR ...
// Each file goes through LLVMFuzzerTestOneInput once; a target reports a
// bug by aborting (or through the sanitizers of the build).
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return perror(path), 1;
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap && !(buf = realloc(buf, cap = cap ? 2 * cap : 4096))) return fclose(f), 1;
    size_t got = fread(buf + n, 1, cap - n, f);
    if (got == 0) break;
    n += got;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) return free(buf), perror(path), 1;
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  printf("ok %s (%zu bytes)\n", path, n);
  return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  int status = 0, files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) return perror(argv[i]), 1;
    if (!S_ISDIR(st.st_mode)) {
      status |= run_file(argv[i]), files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) return perror(argv[i]), 1;
    char *names[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;)
      if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp);
    for (int k = 0; k < n; k++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
      status |= run_file(path), files++;
      free(names[k]);
    }
  }
  printf("replay: %d input%s\n", files, files == 1 ? "" : "s");
  return status || files == 0;
}
