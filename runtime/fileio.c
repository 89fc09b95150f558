// fileio.c: atomic whole-file writes and whole-file reads (see xf.h).
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xf.h"

#define fail xf_errorf

static bool write_all(int fd, const char *p, size_t n, size_t *budget) {
  while (n) {
    size_t chunk = budget && n > *budget ? *budget : n;
    ssize_t w = write(fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= (size_t)w;
    if (budget && (*budget -= (size_t)w) == 0) _exit(70);
  }
  return true;
}

bool xf_write_atomic(const char *path, const XfSpan *parts, int nparts, char *err, size_t errlen) {
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 32);
  if (!tmp) return fail(err, errlen, "out of memory writing %s", path);
  snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    free(tmp);
    return false;
  }
  size_t budget = 0, *bp = NULL;
  const char *crash = getenv("XF_TEST_CRASH_SAVE");
  if (crash && *crash && (budget = (size_t)strtoull(crash, NULL, 10)) > 0) bp = &budget;
  bool ok = true;
  for (int i = 0; ok && i < nparts; i++) ok = write_all(fd, parts[i].data, parts[i].len, bp);
  if (ok && fsync(fd) != 0) ok = false;
  int saved = errno;
  if (close(fd) != 0 && ok) ok = false, saved = errno;
  if (!ok) {
    fail(err, errlen, "cannot write %s: %s", tmp, strerror(saved));
    unlink(tmp), free(tmp);
    return false;
  }
  if (rename(tmp, path) != 0) {
    fail(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    unlink(tmp), free(tmp);
    return false;
  }
  // The rename is durable once the folder is synced.
  char *dir = strdup(path);
  int dfd = dir ? open(dirname(dir), O_RDONLY | O_DIRECTORY) : -1;
  if (dfd >= 0) fsync(dfd), close(dfd);
  free(dir), free(tmp);
  return true;
}

char *xf_read_file(const char *path, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, "cannot open %s: %s", path, strerror(errno)), NULL;
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return fail(err, errlen, "%s is not a regular file", path), NULL;
  }
  char *buf = malloc((size_t)st.st_size + 1);
  if (!buf) {
    fclose(f);
    return fail(err, errlen, "out of memory reading %s (%lld bytes)", path, (long long)st.st_size), NULL;
  }
  size_t got = fread(buf, 1, (size_t)st.st_size, f);
  bool bad = ferror(f) || got != (size_t)st.st_size;
  fclose(f);
  if (bad) {
    free(buf);
    return fail(err, errlen, "cannot read %s", path), NULL;
  }
  buf[got] = 0;
  *len = got;
  return buf;
}
