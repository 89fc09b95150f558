// xfrun export: a checkpoint's weights alone, as a safetensors file that
// travels (docs/interop.md).
//
//   xfrun export CHECKPOINT -o weights.safetensors [--dtype bf16|fp32]
//
// Writes every tensor of CHECKPOINT but AdamW's moments ("optimizer.*"),
// under the checkpoint's names and in its order, as F32 or BF16 (round to
// nearest even from float32, NaN kept NaN), with metadata
//   format "xf-export/1", dtype "F32" | "BF16",
//   and of the checkpoint's: model, step, context, config.<name>, tokenizer,
//   tokenizer.json (the keys it has).
// Needs no model.so. The output is written atomically (xf_write_atomic).
// Options as driver/cli.h: --dtype bf16 or --dtype=bf16, -o FILE or -oFILE;
// exit 0 done, 1 a file that cannot be read or written, 2 a usage error.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/json.h"
#include "../runtime/xf.h"
#include "cli.h"
#include "xfrun.h"

#define PROG "xfrun export"

static void usage(FILE *f) {
  fputs("usage: xfrun export CHECKPOINT -o FILE.safetensors [--dtype bf16|fp32]\n"
        "\n"
        "The weights of an xf checkpoint (xfrun train --save) without the optimizer's\n"
        "moments, under the same names, with the model's name, step and config in the\n"
        "metadata: the file to load into xfc --emit=pytorch's module (load_xf) or any\n"
        "safetensors reader. An fp32 export is also a checkpoint xfrun eval and sample read.\n"
        "\n"
        "options:\n"
        "  -o, --output FILE   the safetensors file to write (atomically)\n"
        "  --dtype fp32|bf16   element type of the tensors (default fp32; bf16 rounds to nearest even)\n"
        "  -h, --help          this help\n",
        f);
}

static int io_error(const char *what) {
  fprintf(stderr, PROG ": error: %s\n", what);
  return XF_EXIT_ERROR;
}

static uint32_t u32le(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool is_moment(const char *name) { return !strncmp(name, "optimizer.", 10); }

// The metadata an export keeps: these keys and every "config.*".
static bool kept(const char *key) {
  static const char *keys[] = {"model", "step", "context", "tokenizer", "tokenizer.json"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
    if (!strcmp(key, keys[i])) return true;
  return !strncmp(key, "config.", 7);
}

static int export_file(const char *in, const char *out, bool bf16) {
  char err[1024];
  XfCheckpoint *c = xf_checkpoint_open(in, err, sizeof err);
  if (!c) return io_error(err);
  int nt = xf_checkpoint_ntensors(c), nout = 0;
  JsonBuf h = {0};
  json_put_cstr(&h, "{\"__metadata__\":{\"format\":\"xf-export/1\",\"dtype\":");
  json_put_cstr(&h, bf16 ? "\"BF16\"" : "\"F32\"");
  const char *key, *value;
  for (int i = 0; (key = xf_checkpoint_meta_at(c, i, &value)); i++)
    if (value && kept(key)) {
      json_put_raw(&h, ",", 1), json_put_string(&h, key, strlen(key)), json_put_raw(&h, ":", 1);
      json_put_string(&h, value, strlen(value));
    }
  json_put_raw(&h, "}", 1);
  // tensors: the kept ones in file order, tiling the data
  uint64_t off = 0, esize = bf16 ? 2 : 4;
  for (int i = 0; i < nt; i++) {
    int rank;
    int64_t dims[8], numel;
    const char *name = xf_checkpoint_tensor(c, i, &rank, dims, NULL, &numel);
    if (is_moment(name)) continue;
    json_put_raw(&h, ",", 1), json_put_string(&h, name, strlen(name));
    json_put_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", bf16 ? "BF16" : "F32");
    for (int d = 0; d < rank; d++) json_put_printf(&h, "%s%lld", d ? "," : "", (long long)dims[d]);
    uint64_t bytes = (uint64_t)numel * esize;
    json_put_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + bytes));
    off += bytes, nout++;
  }
  json_put_raw(&h, "}", 1);
  while (!h.oom && (8 + h.len) % 8) json_put_raw(&h, " ", 1);
  // the bytes: [8-byte header length | header | tensors]
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
  XfSpan *parts = malloc(sizeof(XfSpan) * ((size_t)nt + 2));
  unsigned char *conv = bf16 ? malloc(off ? off : 1) : NULL;
  if (h.oom || !parts || (bf16 && !conv)) {
    snprintf(err, sizeof err, "out of memory exporting %s", in);
    free(parts), free(conv), json_buf_free(&h), xf_checkpoint_close(c);
    return io_error(err);
  }
  int np = 0;
  parts[np++] = (XfSpan){len8, 8}, parts[np++] = (XfSpan){h.buf, h.len};
  uint64_t at = 0;
  for (int i = 0; i < nt; i++) {
    const unsigned char *data;
    int64_t numel;
    const char *name = xf_checkpoint_tensor(c, i, NULL, NULL, &data, &numel);
    if (is_moment(name)) continue;
    if (!bf16) {
      parts[np++] = (XfSpan){data, (size_t)numel * 4};
      continue;
    }
    for (int64_t k = 0; k < numel; k++) {  // little-endian bf16, element k of the tensor at conv + at
      uint32_t u = u32le(data + 4 * k);
      float f;
      memcpy(&f, &u, sizeof f);
      uint16_t b = xf_bf16_bits(f);
      conv[at + 2 * (uint64_t)k] = (unsigned char)b, conv[at + 2 * (uint64_t)k + 1] = (unsigned char)(b >> 8);
    }
    at += (uint64_t)numel * 2;
  }
  if (bf16) parts[np++] = (XfSpan){conv, (size_t)off};
  bool ok = xf_write_atomic(out, parts, np, err, sizeof err);
  if (ok)
    fprintf(stderr, "xfrun export: wrote %s: %llu bytes, %d tensors (%s, from %s at step %s)\n", out,
            (unsigned long long)(8 + h.len + off), nout, bf16 ? "bf16" : "fp32", in,
            xf_checkpoint_meta(c, "step") ? xf_checkpoint_meta(c, "step") : "?");
  free(parts), free(conv), json_buf_free(&h), xf_checkpoint_close(c);
  return ok ? 0 : io_error(err);
}

enum { E_O, E_OUTPUT, E_DTYPE, E_H, E_HELP, E_COUNT };
static const CliOption opts[E_COUNT] = {
    [E_O] = {"o", true}, [E_OUTPUT] = {"output", true}, [E_DTYPE] = {"dtype", true},
    [E_H] = {"h", false}, [E_HELP] = {"help", false},
};

int xfrun_export(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *dtype = "fp32";
  Cli c = cli_start(PROG, opts, E_COUNT, argc, argv, 1);
  for (int k; (k = cli_next(&c)) != CLI_END;) {
    switch (k) {
    case CLI_BAD: return XF_EXIT_USAGE;
    case CLI_ARG:
      if (in) return cli_usage_error(PROG, "one checkpoint at a time: '%s' is a second", c.value);
      in = c.value;
      break;
    case E_H:
    case E_HELP: return usage(stdout), XF_EXIT_OK;
    case E_O:
    case E_OUTPUT: out = c.value; break;
    case E_DTYPE: dtype = c.value; break;
    }
  }
  if (!in) return cli_usage_error(PROG, "no CHECKPOINT to export");
  if (!out || !*out) return cli_usage_error(PROG, "-o FILE is required (the safetensors file to write)");
  if (strcmp(dtype, "fp32") && strcmp(dtype, "bf16")) return cli_usage_error(PROG, "--dtype %s: expected bf16 or fp32", dtype);
  return export_file(in, out, !strcmp(dtype, "bf16"));
}
