// pytorch.h: xfc --emit=pytorch (pytorch.c), the graph as written as a
// self-contained PyTorch module.
#ifndef XF_PYTORCH_H
#define XF_PYTORCH_H

#include <stdio.h>

#include "../ir/ir.h"

// Writes the module of g's forward graph to f. Returns 0, or 1 with a
// located message in err for an op that has no PyTorch form.
int pytorch_emit(FILE *f, const Graph *g, char *err, size_t errlen);

#endif
