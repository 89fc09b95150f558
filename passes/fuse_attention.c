// fuse_attention.c: causal self-attention found as a graph pattern and
// replaced by one ATTENTION node, whatever block wrote it.
//
// Requires: a verified forward graph (no backward yet: autodiff then derives
// ATTENTION_GRAD, which recomputes the scores instead of storing them).
// Guarantees: every match of
//     o = softmax(causal_mask(q @ transpose(k) [* s | / s] [+ b | - b]), last axis) @ v
// with q, k [..., T, h], v [..., T, e] (equal leading axes, or k and v
// [..., 1, T, .] against q [..., G, T, h]: grouped queries; h and e fixed),
// s a scalar constant expression (and besides it, at most one tensor t of
// one value per sequence, a learned or per-head temperature: the node
// scaling the scores by t is rewritten to scale q, s (q k^T) = (s q) k^T,
// or, when the op goes time-major, the dead mask and softmax nodes become
// t's transpose and q's untransposed rows times it (time_major_temperature);
// autodiff differentiates it as written), a -inf mask, and each intermediate (the
// scores, the scaled and masked scores, the probabilities) used only by the
// next op of the pattern and not an output, has o rewritten in place to
// ATTENTION(q, k, v[, b]) with fval = the scale (1/s for a division). The
// score bias b (ALiBi's slopes times distances, a window or block mask as
// -1e30, a learned table read per distance, a key-padding row per batch
// entry, a learned bias per key) broadcasts against the scores
// (ir_attention_bias); autodiff gives it ATTENTION_DBIAS's gradient when it
// depends on parameters; a subtracted b becomes -b
// (the difference node, dead, rewritten to NEG(b)). The
// intermediates lose their last user and drop out of every program. Seed 001
// eqs. (13)-(15): A = softmax(mask(Q K^T / sqrt(h))), O = A V.
// A softmax without the causal mask, a mask with another fill, or scores used
// elsewhere (say, as an output) are not matched; for a candidate (a softmax
// over the last axis of [..., T, T] scores, times values) the pass records
// the first reason (FuseNote, at the softmax), which xfc prints as a note. When q, k and v are each a
// transpose of the head and position axes of [..., T, H, c] and o's one user
// transposes it back (split and merged heads, seed 001 eqs. 10-16), that
// user becomes ATTENTION(q', k', v') with axis 1 (time-major heads) over the
// untransposed tensors, and the four transposes drop out. The graph verifies.
#include <math.h>
#include <stdlib.h>

#include "passes.h"

// The value of a scalar constant expression (CONST, and unary or binary
// elementwise ops of such), or false.
static bool const_value(const Graph *g, int id, double *v) {
  const Node *n = &g->nodes[id];
  if (n->shape.rank != 0) return false;
  double x, y;
  switch (ir_op_info[n->op].cat) {
  case OPC_LEAF:
    if (n->op != OP_CONST) return false;
    *v = n->fval;
    return true;
  case OPC_UNARY:
    if (!const_value(g, n->in[0], &x)) return false;
    *v = ir_eval_unary(n->op, x);
    return isfinite(*v);
  case OPC_BINARY:
    if (!const_value(g, n->in[0], &x) || !const_value(g, n->in[1], &y)) return false;
    *v = n->op == OP_ADD ? x + y : n->op == OP_SUB ? x - y : n->op == OP_MUL ? x * y : n->op == OP_DIV ? x / y : NAN;
    return isfinite(*v);
  default: return false;
  }
}

static bool same_lead(const Shape *a, const Shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank - 2; i++)
    if (!dim_eq(a->d[i], b->d[i])) return false;
  return true;
}

// Grouped-query attention: k and v [..., 1, T, h] against q [..., G, T, h]
// (G > 1 a constant), the other leading axes equal (ir_attention_group).
static bool grouped_lead(const Shape *q, const Shape *k, const Shape *v) {
  int r = q->rank;
  if (r < 3 || k->rank != r || v->rank != r) return false;
  if (!(q->d[r - 3].kind == DIM_CONST && q->d[r - 3].n > 1)) return false;
  for (const Shape *s = k; s; s = s == k ? v : NULL)
    if (!(s->d[r - 3].kind == DIM_CONST && s->d[r - 3].n == 1)) return false;
  for (int i = 0; i < r - 3; i++)
    if (!dim_eq(q->d[i], k->d[i]) || !dim_eq(q->d[i], v->d[i])) return false;
  return true;
}

// A transpose swapping the position and head axes [..., H, T, c] <-> [..., T, H, c].
static bool heads_swap(const Node *t) {
  int r = t->shape.rank;
  return t->op == OP_TRANSPOSE && r >= 3 && t->axis + t->axis2 == 2 * r - 5 && (t->axis == r - 3 || t->axis2 == r - 3);
}

// The operands of a match: q, k, v and the constant scale; temp >= 0: the
// node that scales the scores by a tensor t of one value per sequence (a
// learned or per-head temperature), MUL or DIV with t its input tin, which
// the rewrite turns into q * t (q / t): s (q k^T) = (s q) k^T.
typedef struct {
  int q, k, v;
  double scale;
  int temp, tin, above;  // above: the node that reads temp (the mask, the bias's sum or a constant scaling)
  int bias, bsub;        // the score bias b, or -1; bsub: the node computing scores - b (b subtracted)
  int mask;              // the causal mask
} Match;

// Whether node id is a product q @ k' under at most depth scalings (MUL by
// anything, DIV of it by anything).
static bool scores_below(const Graph *g, int id, int depth) {
  const Node *y = &g->nodes[id];
  if (y->op == OP_MATMUL) return true;
  if (depth == 0) return false;
  if (y->op == OP_DIV) return scores_below(g, y->in[0], depth - 1);
  return y->op == OP_MUL && (scores_below(g, y->in[0], depth - 1) || scores_below(g, y->in[1], depth - 1));
}

// Whether t holds one value per sequence of scores [..., T, T] whose q is
// qs: constant along the last two axes, and q o t has q's shape.
static bool per_sequence(const Shape *t, const Shape *qs) {
  int r = qs->rank, lead = r - t->rank;
  if (lead < 0) return false;
  for (int i = 0; i < t->rank; i++) {
    Dim d = t->d[i];
    bool one = d.kind == DIM_CONST && d.n == 1;
    if (i + lead >= r - 2 ? !one : !(one || dim_eq(d, qs->d[i + lead]))) return false;
  }
  return true;
}

// ---- the key window of a score bias ------------------------------------------------
//
// A bias of positions and constants is a function b(c, i, j) of its leading
// coordinates c, query i and key j alone, evaluated here at t_max positions
// by its elementwise tree: iota, constants, unary and binary elementwise ops
// (comparisons too), broadcasts, and reshapes that only add or drop axes of
// size 1. A key is masked where b <= ATT_MASKED (exp(b + score) is 0 in
// float32 for any score a model reaches). The window W: the least W with
// every key j <= i - W masked in every row; the kernels never read those
// keys (tiles skipped, not masked). t_max when the bias masks no such band.
#define ATT_MASKED (-1e20)

typedef struct {
  const Graph *g;
  int rb;                      // the bias's rank: its axes rb - 2 (i) and rb - 1 (j)
  int64_t n;                   // t_max, the row length
  int64_t lead[IR_MAX_RANK];   // the leading coordinates of the row
  int64_t i;
} Probe;

// x[j] = node id's value at (lead, i, j) for j < n; amap[k]: the bias axis
// of node axis k (-1 for an axis of size 1). False: not a position
// expression this evaluates.
static bool probe_row(const Probe *p, int id, const int *amap, double *x) {
  const Node *nd = &p->g->nodes[id];
  int rn = nd->shape.rank;
  if (nd->op == OP_CONST && rn == 0) {
    for (int64_t j = 0; j < p->n; j++) x[j] = nd->fval;
    return true;
  }
  if (nd->op == OP_IOTA) {
    int a = amap[0];
    for (int64_t j = 0; j < p->n; j++) x[j] = a == p->rb - 1 ? (double)j : a == p->rb - 2 ? (double)p->i : a >= 0 ? (double)p->lead[a] : 0;
    return true;
  }
  OpCategory cat = ir_op_info[nd->op].cat;
  bool elementwise = cat == OPC_UNARY || cat == OPC_BINARY || nd->op == OP_EXPAND;
  if (!elementwise && nd->op != OP_RESHAPE) return false;
  if (cat == OPC_BINARY && nd->op != OP_ADD && nd->op != OP_SUB && nd->op != OP_MUL && nd->op != OP_DIV && nd->op != OP_EQ &&
      nd->op != OP_LT && nd->op != OP_LE)
    return false;
  double *y[2] = {NULL, NULL};
  bool ok = true;
  for (int k = 0; k < nd->nin && ok; k++) {
    const Shape *cs = &p->g->nodes[nd->in[k]].shape;
    int cm[IR_MAX_RANK];
    if (nd->op == OP_RESHAPE) {  // only axes of size 1 added or dropped: the others in order
      int map[IR_MAX_RANK];
      ok = ir_reshape_unit_map(cs, &nd->shape, map);
      for (int a = 0; a < cs->rank && ok; a++) cm[a] = map[a] >= 0 ? amap[map[a]] : -1;
    } else {
      if (cs->rank > rn) ok = false;
      for (int a = 0; a < cs->rank && ok; a++)
        cm[a] = cs->d[a].kind == DIM_CONST && cs->d[a].n == 1 ? -1 : amap[a + rn - cs->rank];
    }
    y[k] = ok ? malloc(sizeof(double) * (size_t)p->n) : NULL;
    ok = ok && y[k] && probe_row(p, nd->in[k], cm, y[k]);
  }
  for (int64_t j = 0; ok && j < p->n; j++) {
    double a = y[0][j], b = y[1] ? y[1][j] : 0;
    switch (nd->op) {
    case OP_RESHAPE: case OP_EXPAND: x[j] = a; break;
    case OP_ADD: x[j] = a + b; break;
    case OP_SUB: x[j] = a - b; break;
    case OP_MUL: x[j] = a * b; break;
    case OP_DIV: x[j] = a / b; break;
    case OP_EQ: x[j] = a == b; break;
    case OP_LT: x[j] = a < b; break;
    case OP_LE: x[j] = a <= b; break;
    default: x[j] = ir_eval_unary(nd->op, a); break;
    }
  }
  free(y[0]), free(y[1]);
  return ok;
}

// Whether the tree below id holds a constant of magnitude >= |ATT_MASKED|
// (else no key can be masked; probe_row then rejects any op but positions
// and constants).
static bool masks_keys(const Graph *g, int id) {
  const Node *n = &g->nodes[id];
  if (n->op == OP_CONST) return !(fabs(n->fval) < -ATT_MASKED);
  bool any = false;
  for (int k = 0; k < n->nin; k++) any = masks_keys(g, n->in[k]) || any;
  return any;
}

// The key window of bias b (ATT_MASKED, above), or 0 when it masks no band.
// *pure: b is the window alone, 0 at keys i - W < j <= i and masked at every
// j <= i - W, so the op's window W replaces it.
static int64_t bias_window(const Graph *g, int b, bool *pure) {
  const Shape *bs = &g->nodes[b].shape;
  int64_t n = g->t_max, blocks = 1, W = 0;
  *pure = false;
  if (n <= 0 || n > 65536 || !masks_keys(g, b)) return 0;
  for (int a = 0; a < bs->rank - 2; a++) blocks *= bs->d[a].n;
  double *x = malloc(sizeof(double) * (size_t)n);
  Probe p = {.g = g, .rb = bs->rank, .n = n};
  int amap[IR_MAX_RANK];
  for (int a = 0; a < bs->rank; a++) amap[a] = bs->d[a].kind == DIM_CONST && bs->d[a].n == 1 ? -1 : a;
  bool ok = x != NULL, band = true;  // band: every row 0 from its first unmasked key to the diagonal
  int64_t first0 = -1;                // that first key's distance from the diagonal, where the rows agree
  for (int64_t c = 0; c < blocks && ok; c++) {
    for (int64_t r = c, a = bs->rank - 3; a >= 0; a--) p.lead[a] = r % bs->d[a].n, r /= bs->d[a].n;
    for (p.i = 0; p.i < n && ok && W < n; p.i++) {
      ok = probe_row(&p, b, amap, x);
      int64_t k = 0;
      while (k < p.i && x[k] <= ATT_MASKED) k++;  // the first key not masked (the query's own if every earlier one is)
      if (p.i - k + 1 > W) W = p.i - k + 1;
      for (int64_t j = k; j <= p.i && band; j++) band = x[j] == 0;
      if (k > 0 && band) {
        band = first0 < 0 || first0 == p.i - k;
        first0 = p.i - k;
      }
    }
  }
  free(x);
  if (!(ok && W < n)) return 0;
  // rows short of the window start at key 0; the others at i - W + 1
  *pure = band && (first0 < 0 || first0 == W - 1);
  return W;
}

// Why node o (a product of probabilities and values) is not causal attention
// the op can take, in the words of a note; NULL for a match (into *mt).
// users[]: each node's readers (outputs count twice).
static const char *why_not(const Graph *g, const int *users, const Node *o, Match *mt, char *buf, size_t n) {
  char s1[96], s2[96], s3[96];
  const Node *a = &g->nodes[o->in[0]], *v = &g->nodes[o->in[1]];
  int r = o->shape.rank;
  if (users[a->id] != 1) return "the probabilities are read elsewhere too (or are an output), so they must be stored";
  const Node *m = &g->nodes[a->in[0]];
  if (m->op != OP_CAUSAL_MASK) {
    snprintf(buf, n, "the softmax reads '%s', not causal_mask(...): only causal attention fuses (write another mask as a "
                     "score bias of -1e30 added under the causal mask)", ir_op_info[m->op].name);
    return buf;
  }
  if (!(isinf(m->fval) && m->fval < 0)) return "the causal mask does not fill with -inf";
  if (users[m->id] != 1) return "the masked scores are read elsewhere too";
  const Node *z = &g->nodes[m->in[0]];
  double scale = 1;
  int temp = -1, tin = -1, above = m->id, prev = m->id, bias = -1, bsub = -1;
  // a score bias: scores + b, b + scores or scores - b, the scores below
  // through at most two scalings to the product
  if ((z->op == OP_ADD || z->op == OP_SUB) && users[z->id] == 1) {
    int side = -1;
    for (int t = 0; t < (z->op == OP_ADD ? 2 : 1) && side < 0; t++)
      if (scores_below(g, z->in[t], 2)) side = t;
    if (side >= 0) {
      const Node *b = &g->nodes[z->in[1 - side]];
      int ns = z->shape.rank - 2;
      if (!ir_attention_bias_fits(z->shape.d, ns, z->shape.d[ns + 1], &b->shape)) {
        shape_fmt(s1, sizeof s1, &b->shape), shape_fmt(s2, sizeof s2, &z->shape);
        snprintf(buf, n, "the score bias %s does not broadcast against the scores %s", s1, s2);
        return buf;
      }
      bias = b->id, bsub = z->op == OP_SUB ? z->id : -1;
      above = prev = z->id;
      z = &g->nodes[z->in[side]];
    }
  }
  // at most two scalings of the scores: by a scalar constant, and by a tensor
  // of one value per sequence (its shape is checked once q is known)
  for (int layer = 0; layer < 2 && (z->op == OP_MUL || z->op == OP_DIV) && users[z->id] == 1; layer++) {
    double c;
    int other = -1;
    if (const_value(g, z->in[1], &c)) other = z->in[0];
    else if (z->op == OP_MUL && const_value(g, z->in[0], &c)) other = z->in[1];
    if (other >= 0) {
      if (!(c != 0)) return "the scores are scaled by 0";
      scale *= z->op == OP_MUL ? c : 1 / c;
      prev = z->id;
      z = &g->nodes[other];
      continue;
    }
    if (temp >= 0) break;
    bool left = g->nodes[z->in[0]].op == OP_MATMUL;  // which side the scores are
    if (!left && !(z->op == OP_MUL && g->nodes[z->in[1]].op == OP_MATMUL)) break;
    temp = z->id, tin = left ? 1 : 0, above = prev;
    prev = z->id;
    z = &g->nodes[z->in[left ? 0 : 1]];
  }
  if (z->op != OP_MATMUL) {
    snprintf(buf, n, "the scores under the mask come from '%s', not from q @ transpose(k) times constants, a temperature "
                     "and a score bias added last", ir_op_info[z->op].name);
    return buf;
  }
  if (users[z->id] != 1) return "the scores q @ transpose(k) are read elsewhere too";
  const Node *q = &g->nodes[z->in[0]], *t = &g->nodes[z->in[1]];
  if (t->op != OP_TRANSPOSE || t->shape.rank != r || t->axis + t->axis2 != 2 * r - 3 || t->axis == t->axis2)
    return "the keys are not transpose(k) of their last two axes";
  const Node *k = &g->nodes[t->in[0]];
  bool lead = (same_lead(&q->shape, &k->shape) && same_lead(&q->shape, &v->shape)) || grouped_lead(&q->shape, &k->shape, &v->shape);
  if (q->shape.rank != r || k->shape.rank != r || v->shape.rank != r || !lead || !dim_eq(q->shape.d[r - 2], k->shape.d[r - 2]) ||
      !dim_eq(q->shape.d[r - 2], v->shape.d[r - 2]) || !dim_eq(q->shape.d[r - 1], k->shape.d[r - 1])) {
    shape_fmt(s1, sizeof s1, &q->shape), shape_fmt(s2, sizeof s2, &k->shape), shape_fmt(s3, sizeof s3, &v->shape);
    snprintf(buf, n, "q %s, k %s and v %s are not [..., T, h], [..., T, h] and [..., T, e] with the same leading axes, "
                     "nor k and v [..., 1, T, .] against q [..., G, T, h] (grouped queries)", s1, s2, s3);
    return buf;
  }
  if (q->shape.d[r - 1].kind != DIM_CONST || v->shape.d[r - 1].kind != DIM_CONST) return "the head size is not a constant";
  if (g->t_max > 65536) return "the context is over 65536 positions";
  if (temp >= 0 && !per_sequence(&g->nodes[g->nodes[temp].in[tin]].shape, &q->shape)) {
    shape_fmt(s1, sizeof s1, &g->nodes[g->nodes[temp].in[tin]].shape), shape_fmt(s2, sizeof s2, &q->shape);
    snprintf(buf, n, "the scores are scaled by a tensor %s that is not one value per sequence of q %s (it varies along "
                     "the query or key axis; a bias added after the scaling fuses)", s1, s2);
    return buf;
  }
  *mt = (Match){q->id, k->id, v->id, scale, temp, tin, above, bias, bsub, m->id};
  return NULL;
}

// A temperature t [.., H, 1, 1] (one value per sequence) of attention that
// goes time-major, q = swap(qu) of rows qu [.., T, H, c]: the mask (mk)
// and the softmax (sm), dead after the rewrite, become
//   mask node:    t' = swap(t) [.., 1, H, 1]  (t itself without a head axis)
//   softmax node: qu o t' [.., T, H, c], the rows the time-major op reads
// (ids in order: t < mask < softmax); the scores' scaling stays as it was,
// dead. Returns the softmax node's id, or -1 (nothing changed).
static int time_major_temperature(Graph *g, const Match *mt, int sm) {
  Node *zt = &g->nodes[mt->temp], *mk = &g->nodes[mt->mask], *sx = &g->nodes[sm];
  const Node *q = &g->nodes[mt->q], *t = &g->nodes[zt->in[mt->tin]];
  int rt = t->shape.rank, qu = q->in[0];
  if (zt->op != OP_MUL || !(t->id < mk->id && mk->id < sx->id)) return -1;
  Node tt = {.id = mk->id, .op = OP_TRANSPOSE, .nin = 1, .in = {t->id}, .axis = rt - 3, .axis2 = rt - 2, .scope = mk->scope,
             .loc = mk->loc};
  Node sc = {.id = sx->id, .op = OP_MUL, .nin = 2, .in = {qu, rt >= 3 ? mk->id : t->id}, .scope = zt->scope, .loc = zt->loc};
  char err[256];
  Node keep = *mk;
  if (rt >= 3) {  // the shape rules read the inputs' shapes: in order
    if (!ir_infer(g, &tt, &tt.shape, &tt.dtype, err, sizeof err)) return -1;
    *mk = tt;
  }
  if (!ir_infer(g, &sc, &sc.shape, &sc.dtype, err, sizeof err) || !shape_eq(&sc.shape, &g->nodes[qu].shape)) {
    *mk = keep;
    return -1;
  }
  *sx = sc;
  return sx->id;
}

// Whether product o is probabilities times values: a softmax over the last
// axis as its left operand (a candidate); with scores [..., T, T] the pass
// says why one it leaves alone is not attention.
static bool candidate(const Graph *g, const Node *o) {
  if (o->op != OP_MATMUL) return false;
  const Node *a = &g->nodes[o->in[0]];
  return a->op == OP_SOFTMAX && a->axis == o->shape.rank - 1;
}
static bool square_in_time(const Graph *g, const Node *o) {
  const Shape *s = &g->nodes[o->in[0]].shape;
  return s->rank >= 2 && s->d[s->rank - 1].kind == DIM_T && s->d[s->rank - 2].kind == DIM_T;
}

int fuse_attention(Graph *g, FuseNote *notes, int cap, int *nnotes) {
  if (nnotes) *nnotes = 0;
  int *users = calloc((size_t)g->nnodes + 1, sizeof(int)), *user = calloc((size_t)g->nnodes + 1, sizeof(int));
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nin; k++) users[g->nodes[i].in[k]]++, user[g->nodes[i].in[k]] = i;
  for (int o = 0; o < g->noutputs; o++) users[g->outputs[o].node] += 2;  // an output is never internal
  int fused = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *o = &g->nodes[i];
    if (!candidate(g, o)) continue;
    Match mt;
    char buf[sizeof notes->why];
    const char *why = why_not(g, users, o, &mt, buf, sizeof buf);
    if (why) {
      bool seen = false;  // a softmax read by several products: one note
      for (int j = 0; notes && nnotes && j < *nnotes; j++) seen = seen || notes[j].node == o->in[0];
      if (notes && nnotes && *nnotes < cap && square_in_time(g, o) && !seen) {
        notes[*nnotes].node = g->nodes[o->in[0]].id;  // at the softmax
        snprintf(notes[*nnotes].why, sizeof notes->why, "%s", why);
        ++*nnotes;
      }
      continue;
    }
    const Node *a = &g->nodes[o->in[0]], *q = &g->nodes[mt.q], *k = &g->nodes[mt.k], *v = &g->nodes[mt.v];
    int r = o->shape.rank;
    // time-major, the kernels (codegen/lower.c) keep a query row's scores
    // and the gradient's dP for all heads in local arrays, [t_max, heads]
    // each, and per-head statistics: at most 512 KiB of them
    int64_t ee = v->shape.d[r - 1].n;
    Dim nh = r >= 3 ? q->shape.d[r - 3] : (Dim){DIM_CONST, 1};
    bool small = nh.kind == DIM_CONST && (2 * g->t_max * nh.n + nh.n * (3 + ee)) * 4 <= 512 * 1024;
    int u = users[i] == 1 ? user[i] : -1;
    bool group = grouped_lead(&q->shape, &k->shape, &v->shape);
    bool major = u >= 0 && small && !group && heads_swap(&g->nodes[u]) && heads_swap(q) && heads_swap(k) && heads_swap(v);
    int qrows = mt.temp >= 0 && major ? time_major_temperature(g, &mt, a->id) : -1;  // q's rows, scaled
    if (mt.temp >= 0 && qrows < 0) {
      // s (q k^T) = (q s) k^T: the scaling node now scales q, which is then no transpose
      major = false;
      Node *zt = &g->nodes[mt.temp];
      // the node that read it (the mask, or a constant scaling), now dead, reads what it read
      Node *up = &g->nodes[mt.above];
      for (int k = 0; k < up->nin; k++)
        if (up->in[k] == zt->id) up->in[k] = zt->in[1 - mt.tin];
      zt->in[1 - mt.tin] = mt.q;
      zt->shape = q->shape;
      users[mt.q]++, mt.q = zt->id;
      q = zt;
    }
    if (mt.bsub >= 0) {  // scores - b: the difference, now dead, becomes the bias -b
      Node *d = &g->nodes[mt.bsub];
      const Node *b = &g->nodes[mt.bias];
      if (qrows < 0) g->nodes[mt.mask].in[0] = d->in[0];  // the dead mask reads the scores, which keep its shape (else it is t')
      *d = (Node){.id = d->id, .op = OP_NEG, .dtype = DT_F32, .shape = b->shape, .nin = 1, .in = {b->id}, .scope = d->scope,
                  .loc = d->loc};
      mt.bias = d->id;
    }
    int qi = mt.q, ki = mt.k, vi = mt.v, bi = mt.bias;
    double scale = mt.scale;
    o->op = OP_ATTENTION;
    o->nin = bi >= 0 ? 4 : 3;
    o->in[0] = qi, o->in[1] = ki, o->in[2] = vi, o->in[3] = bi >= 0 ? bi : 0;
    o->fval = scale;
    bool pure = false;
    o->start = bi >= 0 ? bias_window(g, bi, &pure) : 0;
    if (pure) o->nin = 3, o->in[3] = 0;  // the window is the op's own mask
    users[a->id]--;
    fused++;
    if (major) {
      Node *t = &g->nodes[u];
      int qs = qrows >= 0 ? qrows : q->in[0], ks = k->in[0], vs = v->in[0];
      *t = (Node){.id = t->id, .op = OP_ATTENTION, .dtype = DT_F32, .shape = t->shape, .nin = o->nin, .in = {qs, ks, vs, o->in[3]},
                  .axis = 1, .fval = scale, .start = o->start, .scope = o->scope, .loc = o->loc};
      users[i]--, users[qi]--, users[ki]--, users[vi]--;
    }
  }
  free(users);
  free(user);
  return fused;
}
