// interp.c: the reference interpreter (see interp.h). One function per op
// family, plain loops over row-major arrays, double accumulation.
#include "interp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/rng.h"
#include "../runtime/xf_abi.h"

struct Interp {
  const Graph *g;
  InterpConfig cfg;
  double **val;    // val[i]: the value of node i (params: their storage)
  int64_t *numel;  // numel[i]
};

enum { MAX_ELEMS_TOTAL = 1 << 28 };  // 2 GiB of doubles across all nodes

#define fail ir_errorf

static int64_t dimv(const Interp *in, Dim d) {
  return dim_size(d, in->cfg.B, in->cfg.T);
}

// Resolved sizes of a shape; returns the element count.
static int64_t dims(const Interp *in, const Shape *s, int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= d[i] = dimv(in, s->d[i]);
  return n;
}

static int64_t prod(const int64_t *d, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= d[i];
  return n;
}

Interp *interp_new(const Graph *g, InterpConfig cfg, char *err, size_t errlen) {
  int64_t tm = ir_t_multiple(g);
  if (cfg.B < 1 || cfg.T < 1 || cfg.T > g->t_max) {
    fail(err, errlen, "bad sizes B = %lld, T = %lld (need B >= 1, 1 <= T <= %lld)", (long long)cfg.B,
         (long long)cfg.T, (long long)g->t_max);
    return NULL;
  }
  if (cfg.T % tm) {  // a time axis T / s
    fail(err, errlen, "T = %lld is not a multiple of %lld (the model groups positions along time)", (long long)cfg.T, (long long)tm);
    return NULL;
  }
  Interp *in = calloc(1, sizeof *in);
  if (!in) return fail(err, errlen, "out of memory"), NULL;
  in->g = g;
  in->cfg = cfg;
  in->val = calloc((size_t)g->nnodes, sizeof *in->val);
  in->numel = calloc((size_t)g->nnodes, sizeof *in->numel);
  int64_t total = 0;
  bool ok = in->val && in->numel;
  for (int i = 0; ok && i < g->nnodes; i++) {
    int64_t d[IR_MAX_RANK];
    in->numel[i] = dims(in, &g->nodes[i].shape, d);
    total += in->numel[i];
    ok = total <= MAX_ELEMS_TOTAL;
    if (ok) ok = (in->val[i] = calloc((size_t)in->numel[i] + 1, sizeof(double))) != NULL;
  }
  if (!ok) {
    interp_free(in);
    fail(err, errlen, "the graph needs more memory than the interpreter allows at B = %lld, T = %lld",
         (long long)cfg.B, (long long)cfg.T);
    return NULL;
  }
  return in;
}

void interp_free(Interp *in) {
  if (!in) return;
  for (int i = 0; in->val && i < in->g->nnodes; i++) free(in->val[i]);
  free(in->val);
  free(in->numel);
  free(in);
}

double *interp_param(Interp *in, int node) { return in->val[node]; }
const double *interp_value(const Interp *in, int node) { return in->val[node]; }
int64_t interp_numel(const Interp *in, int node) { return in->numel[node]; }
void interp_set_step(Interp *in, uint32_t step) { in->cfg.step = step; }
void interp_set_training(Interp *in, bool training) { in->cfg.training = training; }

void interp_init_params(Interp *in, uint64_t seed) {
  for (int i = 0; i < in->g->nnodes; i++) {
    const Node *n = &in->g->nodes[i];
    if (n->op != OP_PARAM) continue;
    uint32_t stream = xf_stream_of(n->name);
    double *p = in->val[i];
    for (int64_t k = 0; k < in->numel[i]; k++) {
      double v = xf_init_draw((int)n->init.kind, n->init.a, n->init.b, seed, stream, (uint64_t)k);  // InitKind is XF_INIT_*
      p[k] = in->cfg.f32 ? (double)(float)v : v;
    }
  }
}

int interp_output_node(const Graph *g, const char *name) {
  for (int o = 0; o < g->noutputs; o++)
    if (!strcmp(g->outputs[o].name, name)) return g->outputs[o].node;
  return -1;
}

double interp_output_scalar(const Interp *in, const char *name) {
  int node = interp_output_node(in->g, name);
  return node < 0 ? NAN : in->val[node][0];
}

int64_t interp_input_limit(const Graph *g, int input) {
  int64_t lim = INT32_MAX;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = &g->nodes[i];
    int64_t v = -1;
    if ((n->op == OP_EMBED || n->op == OP_SCATTER_ADD || n->op == OP_CROSS_ENTROPY) && n->in[1] == input)
      v = n->op == OP_EMBED ? g->nodes[n->in[0]].shape.d[0].n
          : n->op == OP_SCATTER_ADD ? n->len.n
          : g->nodes[n->in[0]].shape.d[g->nodes[n->in[0]].shape.rank - 1].n;
    if (n->op == OP_ONEHOT && n->in[0] == input) v = n->len.n;
    if (v > 0 && v < lim) lim = v;
  }
  return lim;
}

bool interp_set_input(Interp *in, const char *name, const int32_t *ids, char *err, size_t errlen) {
  for (int i = 0; i < in->g->nnodes; i++) {
    const Node *n = &in->g->nodes[i];
    if (n->op != OP_INPUT || strcmp(n->name, name)) continue;
    for (int64_t k = 0; k < in->numel[i]; k++) in->val[i][k] = ids[k];
    return true;
  }
  return fail(err, errlen, "the graph has no input named '%s'", name);
}

// ---- ops ---------------------------------------------------------------------

// Per output axis: the stride of a broadcast input (0 where it broadcasts).
static void bstrides(const int64_t *xd, int xr, const int64_t *od, int orank, int64_t *st) {
  int64_t stride = 1;
  for (int k = orank - 1; k >= 0; k--) {
    int i = k - (orank - xr);
    st[k] = i >= 0 && xd[i] != 1 ? stride : 0;
    if (i >= 0) stride *= xd[i];
  }
  (void)od;
}

static int64_t offset(int64_t o, const int64_t *od, int rank, const int64_t *st) {
  int64_t off = 0;
  for (int k = rank - 1; k >= 0; k--) {
    off += (o % od[k]) * st[k];
    o /= od[k];
  }
  return off;
}

static double binary(OpKind op, double x, double y) { return ir_eval_binary(op, x, y); }

// Layer norm's row statistics (seed 001 eq. 8): mu, and sigma = sqrt(biased
// variance + eps), of the d entries at row.
static void ln_stats(const double *row, int64_t d, double eps, double *mu, double *sigma) {
  double m = 0, var = 0;
  for (int64_t c = 0; c < d; c++) m += row[c];
  m /= (double)d;
  for (int64_t c = 0; c < d; c++) var += (row[c] - m) * (row[c] - m);
  *mu = m, *sigma = sqrt(var / (double)d + eps);
}

// log sum_c e^(row_c) over row [V], as m + log sum_c e^(row_c - m), m its maximum
static double row_lse(const double *row, int64_t V) {
  double mx = -INFINITY, s = 0;
  for (int64_t c = 0; c < V; c++) mx = row[c] > mx ? row[c] : mx;
  for (int64_t c = 0; c < V; c++) s += exp(row[c] - mx);
  return mx + log(s);
}

static bool run_node(Interp *in, int id, char *err, size_t errlen) {
  const Graph *g = in->g;
  const Node *n = &g->nodes[id];
  double *out = in->val[id];
  int64_t od[IR_MAX_RANK], xd[IR_MAX_RANK], yd[IR_MAX_RANK];
  int64_t N = dims(in, &n->shape, od);
  const Shape *xs = n->nin > 0 ? &g->nodes[n->in[0]].shape : NULL;
  const Shape *ys = n->nin > 1 ? &g->nodes[n->in[1]].shape : NULL;
  const double *x = n->nin > 0 ? in->val[n->in[0]] : NULL;
  const double *y = n->nin > 1 ? in->val[n->in[1]] : NULL;
  if (xs) dims(in, xs, xd);
  if (ys) dims(in, ys, yd);
  int r = n->shape.rank;
  switch (n->op) {
  case OP_PARAM:
  case OP_INPUT: return true;
  case OP_CONST: out[0] = n->fval; return true;
  case OP_SIZE: out[0] = (double)dimv(in, n->len); return true;
  case OP_IOTA:
    for (int64_t i = 0; i < N; i++) out[i] = (double)i;
    return true;
  IR_CASES_UNARY
    for (int64_t i = 0; i < N; i++) out[i] = ir_eval_unary(n->op, x[i]);
    return true;
  IR_CASES_BINARY {
    int64_t sx[IR_MAX_RANK], sy[IR_MAX_RANK];
    bstrides(xd, xs->rank, od, r, sx);
    bstrides(yd, ys->rank, od, r, sy);
    for (int64_t i = 0; i < N; i++) out[i] = binary(n->op, x[offset(i, od, r, sx)], y[offset(i, od, r, sy)]);
    return true;
  }
  case OP_SUM: case OP_MEAN: case OP_MAX: {
    int end = ir_reduce_end(n);
    int64_t outer = prod(xd, 0, n->axis), k = prod(xd, n->axis, end + 1), inner = prod(xd, end + 1, xs->rank);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < inner; j++) {
        double acc = n->op == OP_MAX ? -INFINITY : 0;
        for (int64_t t = 0; t < k; t++) {
          double v = x[(o * k + t) * inner + j];
          acc = n->op == OP_MAX ? (v > acc ? v : acc) : acc + v;
        }
        out[o * inner + j] = n->op == OP_MEAN ? acc / (double)k : acc;
      }
    return true;
  }
  case OP_MATMUL: {
    int64_t m = xd[xs->rank - 2], k = xd[xs->rank - 1], nn = yd[ys->rank - 1];
    int br = r - 2;
    int64_t sx[IR_MAX_RANK], sy[IR_MAX_RANK];
    bstrides(xd, xs->rank - 2, od, br, sx);
    bstrides(yd, ys->rank - 2, od, br, sy);
    int64_t batches = prod(od, 0, br);
    for (int64_t b = 0; b < batches; b++) {
      const double *xb = x + offset(b, od, br, sx) * m * k;
      const double *yb = y + offset(b, od, br, sy) * k * nn;
      double *ob = out + b * m * nn;
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < nn; j++) {
          double acc = 0;
          for (int64_t t = 0; t < k; t++) acc += xb[i * k + t] * yb[t * nn + j];
          ob[i * nn + j] = acc;
        }
    }
    return true;
  }
  case OP_TRANSPOSE: {
    int64_t st[IR_MAX_RANK], s = 1;
    for (int k = xs->rank - 1; k >= 0; k--) st[k] = s, s *= xd[k];
    int64_t t = st[n->axis];
    st[n->axis] = st[n->axis2];
    st[n->axis2] = t;
    for (int64_t i = 0; i < N; i++) out[i] = x[offset(i, od, r, st)];
    return true;
  }
  case OP_RESHAPE:
    memcpy(out, x, sizeof(double) * (size_t)N);
    return true;
  case OP_SLICE:
  case OP_PAD: {  // SLICE: out = x[start:start+len]; PAD: out[start:start+len] = x, zeros elsewhere
    const int64_t *full = n->op == OP_SLICE ? xd : od, *part = n->op == OP_SLICE ? od : xd;
    int64_t outer = prod(full, 0, n->axis), inner = prod(full, n->axis + 1, r);
    int64_t fk = full[n->axis], pk = part[n->axis];
    if (n->op == OP_PAD) memset(out, 0, sizeof(double) * (size_t)N);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < pk; j++) {
        int64_t fo = (o * fk + n->start + j) * inner, po = (o * pk + j) * inner;
        if (n->op == OP_SLICE) memcpy(out + po, x + fo, sizeof(double) * (size_t)inner);
        else memcpy(out + fo, x + po, sizeof(double) * (size_t)inner);
      }
    return true;
  }
  case OP_SHIFT: {  // out_t = x_{t - by} along axis, 0 outside
    int64_t outer = prod(od, 0, n->axis), K = od[n->axis], inner = prod(od, n->axis + 1, r);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t t = 0; t < K; t++) {
        int64_t src = t - n->start;
        for (int64_t j = 0; j < inner; j++)
          out[(o * K + t) * inner + j] = src >= 0 && src < K ? x[(o * K + src) * inner + j] : 0;
      }
    return true;
  }
  case OP_CONCAT: {
    int64_t outer = prod(od, 0, n->axis), inner = prod(od, n->axis + 1, r);
    int64_t a = xd[n->axis], b = yd[n->axis];
    for (int64_t o = 0; o < outer; o++) {
      memcpy(out + o * (a + b) * inner, x + o * a * inner, sizeof(double) * (size_t)(a * inner));
      memcpy(out + (o * (a + b) + a) * inner, y + o * b * inner, sizeof(double) * (size_t)(b * inner));
    }
    return true;
  }
  case OP_EXPAND: {
    int64_t sx[IR_MAX_RANK];
    bstrides(xd, xs->rank, od, r, sx);
    for (int64_t i = 0; i < N; i++) out[i] = x[offset(i, od, r, sx)];
    return true;
  }
  case OP_EMBED:
  case OP_SCATTER_ADD:
  case OP_ONEHOT:
  case OP_CROSS_ENTROPY: {
    // the token ids and the size of what they index
    const double *ids = n->op == OP_ONEHOT ? x : y;
    int64_t nids = n->op == OP_ONEHOT ? in->numel[n->in[0]] : in->numel[n->in[1]];
    int64_t V = n->op == OP_EMBED ? xd[0] : n->op == OP_CROSS_ENTROPY ? xd[xs->rank - 1] : n->len.n;
    for (int64_t i = 0; i < nids; i++)
      if (!(ids[i] >= 0 && ids[i] < (double)V))
        return fail(err, errlen, "token id %.0f at position %lld is outside the vocabulary of %lld", ids[i],
                    (long long)i, (long long)V);
    if (n->op == OP_EMBED) {
      int64_t d = xd[1];
      for (int64_t i = 0; i < nids; i++) memcpy(out + i * d, x + (int64_t)ids[i] * d, sizeof(double) * (size_t)d);
    } else if (n->op == OP_SCATTER_ADD) {
      int64_t d = od[1];
      memset(out, 0, sizeof(double) * (size_t)N);
      for (int64_t i = 0; i < nids; i++)
        for (int64_t c = 0; c < d; c++) out[(int64_t)ids[i] * d + c] += x[i * d + c];
    } else if (n->op == OP_ONEHOT) {
      memset(out, 0, sizeof(double) * (size_t)N);
      for (int64_t i = 0; i < nids; i++) out[i * V + (int64_t)ids[i]] = 1;
    } else {  // mean over rows of logsumexp(row) - row[id]
      double total = 0;
      for (int64_t i = 0; i < nids; i++) {
        total += row_lse(x + i * V, V) - x[i * V + (int64_t)ids[i]];
      }
      out[0] = total / (double)nids;
    }
    return true;
  }
  case OP_CROSS_ENTROPY_LSE: {
    int64_t V = xd[xs->rank - 1], rows = V ? in->numel[n->in[0]] / V : 0;
    for (int64_t i = 0; i < rows; i++) out[i] = row_lse(x + i * V, V);
    return true;
  }
  case OP_SOFTMAX: {
    int64_t outer = prod(xd, 0, n->axis), k = xd[n->axis], inner = prod(xd, n->axis + 1, r);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < inner; j++) {
        double mx = -INFINITY, s = 0;
        for (int64_t t = 0; t < k; t++) {
          double v = x[(o * k + t) * inner + j];
          mx = v > mx ? v : mx;
        }
        for (int64_t t = 0; t < k; t++) s += exp(x[(o * k + t) * inner + j] - mx);
        for (int64_t t = 0; t < k; t++) out[(o * k + t) * inner + j] = exp(x[(o * k + t) * inner + j] - mx) / s;
      }
    return true;
  }
  case OP_LAYERNORM: {  // seed 001 eq. (8) with sigma = sqrt(var + eps), biased variance
    const double *gain = y, *bias = in->val[n->in[2]];
    int64_t d = xd[xs->rank - 1], rows = N / d;
    for (int64_t i = 0; i < rows; i++) {
      const double *row = x + i * d;
      double mu, sigma;
      ln_stats(row, d, n->fval, &mu, &sigma);
      for (int64_t c = 0; c < d; c++) out[i * d + c] = gain[c] * (row[c] - mu) / sigma + bias[c];
    }
    return true;
  }
  case OP_LAYERNORM_DX:
  case OP_LAYERNORM_DYXH: {
    // xhat = (x - mu) / sigma per row; DYXH: dy o xhat; DX with
    // dxhat = dy o g: dx = (dxhat - mean(dxhat) - xhat o mean(dxhat o xhat)) / sigma
    const double *dy = in->val[n->in[n->nin - 1]];
    int64_t d = xd[xs->rank - 1], rows = in->numel[n->in[0]] / d;
    for (int64_t i = 0; i < rows; i++) {
      const double *row = x + i * d, *dyr = dy + i * d;
      double mu, sigma;
      ln_stats(row, d, n->fval, &mu, &sigma);
      if (n->op == OP_LAYERNORM_DYXH) {
        for (int64_t c = 0; c < d; c++) out[i * d + c] = dyr[c] * (row[c] - mu) / sigma;
        continue;
      }
      double m1 = 0, m2 = 0;
      for (int64_t c = 0; c < d; c++) {
        double dxh = dyr[c] * y[c];
        m1 += dxh, m2 += dxh * (row[c] - mu) / sigma;
      }
      m1 /= (double)d, m2 /= (double)d;
      for (int64_t c = 0; c < d; c++)
        out[i * d + c] = (dyr[c] * y[c] - m1 - (row[c] - mu) / sigma * m2) / sigma;
    }
    return true;
  }
  case OP_RMSNORM:
  case OP_RMSNORM_DX:
  case OP_RMSNORM_DYXH: {
    // sigma = sqrt(mean(x^2) + eps) per row, xhat = x / sigma; y = g o xhat;
    // DYXH: dy o xhat; DX with dxhat = dy o g:
    // dx = (dxhat - xhat o mean(dxhat o xhat)) / sigma
    const double *dy = in->val[n->in[n->nin - 1]];
    int64_t d = xd[xs->rank - 1], rows = in->numel[n->in[0]] / d;
    for (int64_t i = 0; i < rows; i++) {
      const double *row = x + i * d, *dyr = dy + i * d;
      double sq = 0;
      for (int64_t c = 0; c < d; c++) sq += row[c] * row[c];
      double sigma = sqrt(sq / (double)d + n->fval), m2 = 0;
      switch (n->op) {
      case OP_RMSNORM:
        for (int64_t c = 0; c < d; c++) out[i * d + c] = y[c] * row[c] / sigma;
        break;
      case OP_RMSNORM_DYXH:
        for (int64_t c = 0; c < d; c++) out[i * d + c] = dyr[c] * row[c] / sigma;
        break;
      default:
        for (int64_t c = 0; c < d; c++) m2 += dyr[c] * y[c] * row[c] / sigma;
        m2 /= (double)d;
        for (int64_t c = 0; c < d; c++) out[i * d + c] = (dyr[c] * y[c] - row[c] / sigma * m2) / sigma;
        break;
      }
    }
    return true;
  }
  case OP_ROUTED_MATMUL:
  case OP_ROUTED_MATMUL_DW: {
    // row r with expert e = trunc(ids_r) in [0, E): out_r = x_r w[e] (0 for
    // any other id); DW: out[e] = sum over the rows with expert e of x_r^T dy_r
    const double *ids = in->val[n->in[2]];
    int64_t d = xd[xs->rank - 1], f = yd[ys->rank - 1], R = in->numel[n->in[2]];
    int64_t E = n->op == OP_ROUTED_MATMUL ? yd[0] : n->len.n;
    memset(out, 0, sizeof(double) * (size_t)N);
    for (int64_t i = 0; i < R; i++) {
      if (!(ids[i] >= 0 && ids[i] < (double)E)) continue;
      int64_t e = (int64_t)ids[i];
      const double *xr = x + i * d;
      if (n->op == OP_ROUTED_MATMUL) {
        const double *w = y + e * d * f;
        for (int64_t c = 0; c < d; c++)
          for (int64_t j = 0; j < f; j++) out[i * f + j] += xr[c] * w[c * f + j];
      } else {
        const double *dy = y + i * f;
        for (int64_t c = 0; c < d; c++)
          for (int64_t j = 0; j < f; j++) out[(e * d + c) * f + j] += xr[c] * dy[j];
      }
    }
    return true;
  }
  case OP_TOPK: {
    // output j of a row: the largest x_i after (v_{j-1}, i_{j-1}) in the order
    // (value descending, index ascending); a row of fewer than k non-NaN
    // values ends in index +inf (as the kernels: a maximum over nothing)
    int64_t nx = xd[xs->rank - 1], k = n->len.n, rows = N / k;
    for (int64_t o = 0; o < rows; o++) {
      const double *row = x + o * nx;
      double pv = INFINITY, pi = -1;
      for (int64_t j = 0; j < k; j++) {
        double m = -INFINITY, best = -INFINITY;
        for (int64_t i = 0; i < nx; i++)
          if (row[i] < pv || (row[i] == pv && (double)i > pi)) m = row[i] > m ? row[i] : m;
        for (int64_t i = 0; i < nx; i++)
          if ((row[i] < pv || (row[i] == pv && (double)i > pi)) && row[i] == m) best = -(double)i > best ? -(double)i : best;
        out[o * k + j] = -best;
        pv = m, pi = -best;
      }
    }
    return true;
  }
  case OP_ATTENTION:
  case OP_ATTENTION_LSE:
  case OP_ATTENTION_GRAD:
  case OP_ATTENTION_DBIAS: {
    // P_ij = softmax_{i-W<j<=i}(s q_i . k_j + b_ij) (W: Node.start, 0 none); ATTENTION: o_i = sum_j P_ij v_j.
    // ATTENTION_GRAD with dy = do: dP_ij = do_i . v_j, D_i = sum_j P_ij dP_ij,
    // dS_ij = s P_ij (dP_ij - D_i); dq_i = sum_j dS_ij k_j, dk_j = sum_i dS_ij q_i,
    // dv_j = sum_i P_ij do_i; out row i = dq_i | dk_i | dv_i. ATTENTION_DBIAS:
    // db[c(m), i, j] += P_ij (dP_ij - D_i) over the sequences m. b: the score
    // bias, b_ij at boff[m] + i bi + j bj (ir_attention_bias), or 0.
    // ATTENTION_LSE: L_i = max_j s_ij + log sum_j e^(s_ij - max_j s_ij). The
    // gradient recomputes P here rather than reading its L and o inputs.
    int bi = ir_attention_bias(n);
    bool dbias = n->op == OP_ATTENTION_DBIAS, lse = n->op == OP_ATTENTION_LSE;
    r = xs->rank;  // q's (ATTENTION_DBIAS's output is b's shape)
    const double *v = in->val[n->in[2]], *dy = n->op != OP_ATTENTION && !lse ? in->val[n->in[3]] : NULL;
    const double *q = x, *k = y, *bias = bi >= 0 ? in->val[n->in[bi]] : NULL;
    dims(in, &g->nodes[n->in[2]].shape, yd);
    // axis 1 (time-major heads): q [..., T, H, h], sequence m = (lead, head),
    // row i of it at ((lead T + i) H + head) h; axis 0: H = 1.
    int64_t heads = n->axis ? xd[r - 2] : 1, T = xd[r - 2 - (n->axis != 0)], h = xd[r - 1], e = yd[r - 1];
    int64_t seqs = prod(xd, 0, r - 1) / T, w = dbias || lse ? 0 : od[r - 1], group = ir_attention_group(g, n);
    int64_t *boff = calloc((size_t)seqs, sizeof *boff), bsi = 0, bsj = 0;
    if (bias) {  // the bias's offsets by numpy broadcasting against the scores [seq..., T, T]
      Dim seq[IR_MAX_RANK + 1], td;
      const Shape *bs = &g->nodes[n->in[bi]].shape;
      int ns = ir_attention_seq(g, n, seq, &td);
      int64_t bd[IR_MAX_RANK], st[IR_MAX_RANK + 1];
      dims(in, bs, bd);
      st[bs->rank] = 1;
      for (int a = bs->rank - 1; a >= 0; a--) st[a] = st[a + 1] * bd[a];
      int ai = ir_attention_bias_axis(bs, ns, ns), aj = ir_attention_bias_axis(bs, ns, ns + 1);
      bsi = ai >= 0 ? st[ai + 1] : 0, bsj = aj >= 0 ? 1 : 0;
      for (int64_t m = 0; m < seqs; m++) {
        int64_t rest = m;
        for (int s = ns - 1; s >= 0; s--) {
          int64_t ns_ = dimv(in, seq[s]), c = rest % ns_;
          rest /= ns_;
          int a = ir_attention_bias_axis(bs, ns, s);
          if (a >= 0) boff[m] += c * st[a + 1];
        }
      }
    }
    double *p = malloc(sizeof(double) * (size_t)T), *dp = malloc(sizeof(double) * (size_t)T);
    memset(out, 0, sizeof(double) * (size_t)N);
    for (int64_t m = 0; m < seqs; m++) {
      int64_t first = (m / heads) * T * heads + m % heads;  // row 0 of sequence m, in rows of the layout
      int64_t kfirst = group > 1 ? (m / group) * T : first;  // of its key and value sequence
      const double *qm = q + first * h, *km = k + kfirst * h, *vm = v + kfirst * e, *dym = dy ? dy + first * e : NULL;
      double *om = out + first * w;
      const int64_t hs = h * heads, es = e * heads, ws = w * heads;  // row strides
      for (int64_t i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; j++) {
          double sc = 0;
          for (int64_t c = 0; c < h; c++) sc += qm[i * hs + c] * km[j * hs + c];
          p[j] = sc * n->fval + (bias ? bias[boff[m] + i * bsi + j * bsj] : 0);
          if (n->start && j <= i - n->start) p[j] = -INFINITY;  // the key window W: keys j <= i - W masked
          mx = p[j] > mx ? p[j] : mx;
        }
        for (int64_t j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
        if (lse) {  // row i of sequence m: element first + i heads of [..., T, H]
          out[first + i * heads] = mx + log(sum);
          continue;
        }
        for (int64_t j = 0; j <= i; j++) p[j] /= sum;
        if (!dym) {
          for (int64_t j = 0; j <= i; j++)
            for (int64_t c = 0; c < e; c++) om[i * ws + c] += p[j] * vm[j * es + c];
          continue;
        }
        double D = 0;
        for (int64_t j = 0; j <= i; j++) {
          dp[j] = 0;
          for (int64_t c = 0; c < e; c++) dp[j] += dym[i * es + c] * vm[j * es + c];
          D += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= i; j++) {
          if (dbias) {
            out[boff[m] + i * bsi + j * bsj] += p[j] * (dp[j] - D);
            continue;
          }
          double ds = n->fval * p[j] * (dp[j] - D);
          for (int64_t c = 0; c < h; c++) {
            om[i * ws + c] += ds * km[j * hs + c];
            om[j * ws + h + c] += ds * qm[i * hs + c];
          }
          for (int64_t c = 0; c < e; c++) om[j * ws + 2 * h + c] += p[j] * dym[i * es + c];
        }
      }
    }
    free(p), free(dp), free(boff);
    return true;
  }
  case OP_CAUSAL_MASK: {
    int64_t R = od[r - 2], C = od[r - 1], mats = N / (R * C);
    for (int64_t m = 0; m < mats; m++)
      for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) out[(m * R + i) * C + j] = j > i ? n->fval : x[(m * R + i) * C + j];
    return true;
  }
  case OP_CAUSAL_CONV:
  case OP_CONV_DX: {
    // CAUSAL_CONV: out_i = sum_{i-L<j<=i} x_j (.) w_{i-j};  CONV_DX: out_j = sum_{j<=i<j+L} x_i (.)^T w_{i-j}
    bool fwd = n->op == OP_CAUSAL_CONV;
    int64_t T = xd[xs->rank - 2], din = xd[xs->rank - 1], dout = od[r - 1], lead = N / (T * dout), lags = yd[0];
    const double *w = y;
    memset(out, 0, sizeof(double) * (size_t)N);
    for (int64_t b = 0; b < lead; b++)
      for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) {
          int64_t lag = fwd ? i - j : j - i;  // fwd: output i reads input j <= i; dx: output i reads j >= i
          if (lag < 0 || lag >= lags) continue;
          const double *xj = x + (b * T + j) * din;
          double *oi = out + (b * T + i) * dout;
          if (n->conv == CONV_SCALAR)
            for (int64_t c = 0; c < dout; c++) oi[c] += xj[c] * w[lag];
          else if (n->conv == CONV_VECTOR)
            for (int64_t c = 0; c < dout; c++) oi[c] += xj[c] * w[lag * dout + c];
          else if (fwd)  // W_lag [din, dout]
            for (int64_t c = 0; c < din; c++)
              for (int64_t f = 0; f < dout; f++) oi[f] += xj[c] * w[(lag * din + c) * dout + f];
          else  // dx_c = sum_f dy_f W[lag, c, f]: here din = e (dy's width), dout = d
            for (int64_t c = 0; c < dout; c++)
              for (int64_t f = 0; f < din; f++) oi[c] += xj[f] * w[(lag * dout + c) * din + f];
        }
    return true;
  }
  case OP_SCAN:
  case OP_SCAN_REV: {
    // SCAN: h_t = a_t h_{t-1} + b_t, step by step from t = 0;
    // SCAN_REV: g_t = dy_t + a_{t+1} g_{t+1}, from t = T - 1 down; a broadcast
    int64_t outer = prod(od, 0, n->axis), K = od[n->axis], inner = prod(od, n->axis + 1, r), sa[IR_MAX_RANK];
    bstrides(xd, xs->rank, od, r, sa);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < inner; j++)
        for (int64_t s = 0; s < K; s++) {
          bool fwd = n->op == OP_SCAN;
          int64_t t = fwd ? s : K - 1 - s, i = (o * K + t) * inner + j;
          if (fwd) out[i] = (t > 0 ? x[offset(i, od, r, sa)] * out[i - inner] : 0) + y[i];
          else out[i] = y[i] + (t < K - 1 ? x[offset(i + inner, od, r, sa)] * out[i + inner] : 0);
        }
    return true;
  }
  case OP_SCAN_READ:
  case OP_SCAN_READ_GRAD: {
    // S_t = a_t o S_{t-1} + k_t v_t, out_t = q_t S_t, step by step; the
    // gradient: dq_t = S_t dy_t^T in order, then from t = K - 1 down,
    // G_t = a_{t+1} o G_{t+1} + q_t^T dy_t, dk_t = G_t v_t^T, dv_t = k_t^T G_t.
    // Sequence (p, m): row (p K + t) M + m of q, k [.., dk], v, dy [.., dv].
    const double *q = x, *k = y, *v = in->val[n->in[2]], *a = in->val[n->in[3]];
    const double *dy = n->nin > 4 ? in->val[n->in[4]] : NULL;
    int64_t kr = ys->rank, vd[IR_MAX_RANK], ad[IR_MAX_RANK], sa[IR_MAX_RANK];
    dims(in, &g->nodes[n->in[2]].shape, vd);
    const Shape *as = &g->nodes[n->in[3]].shape;
    dims(in, as, ad);
    bstrides(ad, as->rank, yd, (int)kr, sa);
    int64_t P = prod(yd, 0, n->axis), K = yd[n->axis], M = prod(yd, n->axis + 1, (int)kr - 2), dk = yd[kr - 2], dv = vd[kr - 1];
    int64_t w = dy ? 2 * dk + dv : dv;
    double *S = calloc((size_t)(dk * dv), sizeof(double)), *G = calloc((size_t)(dk * dv), sizeof(double));
    memset(out, 0, sizeof(double) * (size_t)N);
    for (int64_t p = 0; p < P; p++)
      for (int64_t m = 0; m < M; m++) {
        memset(S, 0, sizeof(double) * (size_t)(dk * dv));
        memset(G, 0, sizeof(double) * (size_t)(dk * dv));
        for (int64_t t = 0; t < K; t++) {
          int64_t row = (p * K + t) * M + m;
          for (int64_t i = 0; i < dk; i++) {
            double at = a[offset(row * dk + i, yd, (int)kr, sa)];
            for (int64_t j = 0; j < dv; j++) S[i * dv + j] = at * S[i * dv + j] + k[row * dk + i] * v[row * dv + j];
          }
          for (int64_t i = 0; i < dk; i++)
            for (int64_t j = 0; j < dv; j++) {
              if (dy) out[row * w + i] += S[i * dv + j] * dy[row * dv + j];
              else out[row * w + j] += q[row * dk + i] * S[i * dv + j];
            }
        }
        for (int64_t t = K - 1; dy && t >= 0; t--) {
          int64_t row = (p * K + t) * M + m, next = (p * K + t + 1) * M + m;
          for (int64_t i = 0; i < dk; i++) {
            double an = t + 1 < K ? a[offset(next * dk + i, yd, (int)kr, sa)] : 0;
            for (int64_t j = 0; j < dv; j++) G[i * dv + j] = an * G[i * dv + j] + q[row * dk + i] * dy[row * dv + j];
          }
          for (int64_t i = 0; i < dk; i++)
            for (int64_t j = 0; j < dv; j++) {
              out[row * w + dk + i] += G[i * dv + j] * v[row * dv + j];
              out[row * w + 2 * dk + j] += k[row * dk + i] * G[i * dv + j];
            }
        }
      }
    free(S), free(G);
    return true;
  }
  case OP_CONV_DW: {  // dw_k = sum_b sum_{i>=k} x_{i-k} (.) dy_i, k < L
    int64_t T = xd[xs->rank - 2], d = xd[xs->rank - 1], e = yd[ys->rank - 1], lead = in->numel[n->in[0]] / (T * d);
    memset(out, 0, sizeof(double) * (size_t)N);
    for (int64_t b = 0; b < lead; b++)
      for (int64_t i = 0; i < T; i++)
        for (int64_t k = 0; k <= i && k < od[0]; k++) {
          const double *xj = x + (b * T + i - k) * d, *dyi = y + (b * T + i) * e;
          if (n->conv == CONV_SCALAR)
            for (int64_t c = 0; c < d; c++) out[k] += xj[c] * dyi[c];
          else if (n->conv == CONV_VECTOR)
            for (int64_t c = 0; c < d; c++) out[k * d + c] += xj[c] * dyi[c];
          else
            for (int64_t c = 0; c < d; c++)
              for (int64_t f = 0; f < e; f++) out[(k * d + c) * e + f] += xj[c] * dyi[f];
        }
    return true;
  }
  case OP_DROPOUT: {  // seed 001 eq. (6): keep with probability 1 - p, scaled by 1/(1-p)
    if (!in->cfg.training || n->fval == 0) {
      memcpy(out, x, sizeof(double) * (size_t)N);
      return true;
    }
    double scale = 1 / (1 - n->fval);
    for (int64_t i = 0; i < N; i++)
      out[i] = xf_rand_uniform(in->cfg.seed, n->seed, (uint64_t)i, in->cfg.step) >= n->fval ? x[i] * scale : 0;
    return true;
  }
  case OP_COUNT: break;
  }
  return fail(err, errlen, "the interpreter has no rule for op %d", (int)n->op);
}

bool interp_run(Interp *in, int upto, char *err, size_t errlen) {
  int end = upto > 0 && upto < in->g->nnodes ? upto : in->g->nnodes;
  for (int i = 0; i < end; i++) {
    if (!run_node(in, i, err, errlen)) return false;
    if (in->cfg.f32 && in->g->nodes[i].op != OP_PARAM && in->g->nodes[i].op != OP_INPUT)
      for (int64_t k = 0; k < in->numel[i]; k++) in->val[i][k] = (double)(float)in->val[i][k];
    if (in->cfg.bf16 && in->cfg.bf16[i])
      for (int64_t k = 0; k < in->numel[i]; k++) in->val[i][k] = xf_bf16_float(xf_bf16_bits((float)in->val[i][k]));
  }
  return true;
}
