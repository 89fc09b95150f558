// nearest.h: "did you mean": the candidate closest to a misspelt word, for
// the command lines (driver/cli.c: options, subcommands) and the language
// (frontend/elaborate.c: names). Header-only so that xfc's library and
// xfrun, which share no library, use the same rule.
//
// The distance is the optimal string alignment distance (insertions,
// deletions, substitutions, transpositions of neighbours: "stpes" is 1 from
// "steps"), case-insensitive. A candidate is suggested when its distance is
// at most 1 for words of up to 4 characters, 2 up to 8, else 3, and it is
// the unique closest one (ties: the first in the list).
#ifndef XF_NEAREST_H
#define XF_NEAREST_H

#include <ctype.h>
#include <stddef.h>
#include <string.h>

enum { XF_NEAREST_MAX = 64 };  // longer words are compared on their first 64 characters

static inline int xf_edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > XF_NEAREST_MAX) n = XF_NEAREST_MAX;
  if (m > XF_NEAREST_MAX) m = XF_NEAREST_MAX;
  int d[XF_NEAREST_MAX + 1][XF_NEAREST_MAX + 1];  // d[i][j]: a[0, i) against b[0, j)
  for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
      int best = d[i - 1][j - 1] + (ca != cb);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[n][m];
}

// The closest of names[0, n) to word within the bound above, or NULL.
// NULL entries and word itself are skipped.
static inline const char *xf_nearest(const char *word, const char *const *names, int n) {
  size_t len = strlen(word);
  int bound = len <= 4 ? 1 : len <= 8 ? 2 : 3, best = bound + 1;
  const char *pick = NULL;
  for (int i = 0; i < n; i++) {
    if (!names[i] || !strcmp(names[i], word)) continue;
    int dist = xf_edit_distance(word, names[i]);
    if (dist < best) best = dist, pick = names[i];
  }
  return pick;
}

#endif
