// check.h: the assertion of the C unit tests. Each test binary counts and
// ends with the line "N passed, M failed" (exit status 1 on any failure).
#ifndef XF_CHECK_H
#define XF_CHECK_H

#include <stdio.h>

static int passed, failed;
#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (cond) passed++;                                                              \
    else failed++, fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
  } while (0)

#endif
