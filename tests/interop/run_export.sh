#!/usr/bin/env bash
# xfrun export without torch (issue 34): the file a checkpoint exports to,
# read back with python3's json and struct:
#   - fp32 and bf16: the checkpoint's parameters alone (no "optimizer."
#     tensor), under its names, in its order, tiling the data; metadata with
#     the model, step, context and config values; fp32 bytes equal the
#     checkpoint's, bf16 the float32 values rounded to nearest even (NaN kept);
#   - xfrun eval reads the fp32 export as a checkpoint;
#   - usage errors exit 2, unreadable or unwritable files exit 1, and a
#     failed export leaves no file behind.
# Usage (from the repo root): tests/interop/run_export.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. the dog ran to the tree. ' * 300)" > "$tmp/text.txt"
"$xfc" -o "$tmp/m.so" examples/transformer.xf -D layers=2 -D d=16 -D ffn=24 -D heads=2 -D context=8 -D vocab=256 \
  2> /dev/null || bad "compile"
data=(--data "$tmp/text.txt" --tokenizer bytes --threads 1)
"$xfrun" train "$tmp/m.so" "${data[@]}" --steps 3 --batch 4 --lr 0.01 --save "$tmp/ck.st" > /dev/null 2>&1 ||
  bad "train 3 steps"

# check_export CHECKPOINT EXPORT F32|BF16 [config]: the header and bytes of EXPORT against CHECKPOINT
# (config: the model's context and config values must be in both)
check_export() {
  python3 - "$@" <<'PY'
import json, math, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:], b
ck, ck_data, _ = load(sys.argv[1])
ex, ex_data, raw = load(sys.argv[2])
dtype = sys.argv[3]
meta = ex.pop('__metadata__')
ck_meta = ck.pop('__metadata__')
params = [k for k in sorted(ck, key=lambda k: ck[k]['data_offsets'][0]) if not k.startswith('optimizer.')]
order = sorted(ex, key=lambda k: ex[k]['data_offsets'][0])
problems = []
if [k for k in ex if k.startswith('optimizer.')]:
    problems.append('optimizer tensors exported')
if order != params:
    problems.append(f'tensors {order[:3]}... are not the checkpoint parameters {params[:3]}...')
at = 0
for k in order:
    t = ex[k]
    a, b = t['data_offsets']
    if t['dtype'] != dtype or t['shape'] != ck[k]['shape'] or a != at:
        problems.append(f'{k}: {t}')
    at = b
    src = ck_data[ck[k]['data_offsets'][0]:ck[k]['data_offsets'][1]]
    got = ex_data[a:b]
    if dtype == 'F32':
        if got != src:
            problems.append(f'{k}: bytes differ')
        continue
    for i, (u,) in enumerate(struct.iter_unpack('<I', src)):
        (h,) = struct.unpack_from('<H', got, 2 * i)
        if math.isnan(struct.unpack('<f', struct.pack('<I', u))[0]):
            want_nan = (h & 0x7f80) == 0x7f80 and (h & 0x7f)
            if not want_nan:
                problems.append(f'{k}[{i}]: NaN not kept')
        elif h != ((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff:
            problems.append(f'{k}[{i}]: {u:08x} -> {h:04x}, not round to nearest even')
            break
if at != len(ex_data):
    problems.append(f'data of {len(ex_data)} bytes, tensors cover {at}')
for key in ('model', 'step', 'context', 'config.d', 'config.layers', 'config.vocab'):
    if meta.get(key) != ck_meta.get(key) or (len(sys.argv) > 4 and key not in meta):
        problems.append(f'metadata {key}: {meta.get(key)} (checkpoint: {ck_meta.get(key)})')
if meta.get('format') != 'xf-export/1' or meta.get('dtype') != dtype:
    problems.append(f'metadata format/dtype: {meta}')
for key in ('optimizer', 'lr', 'rng', 'data'):
    if key in meta:
        problems.append(f'metadata keeps {key}')
print(f'{len(order)} tensors of {len(ck)} in the checkpoint, {len(raw)} bytes, '
      f'model {meta.get("model")} step {meta.get("step")} d {meta.get("config.d")}: '
      + ('; '.join(problems[:3]) if problems else 'as the checkpoint'))
sys.exit(1 if problems else 0)
PY
}

out=$("$xfrun" export "$tmp/ck.st" -o "$tmp/w32.st" 2>&1)
rc=$?
[ $rc = 0 ] && grep -q "^xfrun export: wrote $tmp/w32.st: [0-9]* bytes, 30 tensors" <<<"$out" &&
  ok "export fp32: exit 0; $out" || bad "export fp32 (exit $rc): $out"
res=$(check_export "$tmp/ck.st" "$tmp/w32.st" F32 config) && ok "fp32 export: $res" || bad "fp32 export: $res"
"$xfrun" export "$tmp/ck.st" --dtype bf16 --output "$tmp/w16.st" 2> /dev/null || bad "export bf16"
res=$(check_export "$tmp/ck.st" "$tmp/w16.st" BF16 config) && ok "bf16 export: $res" || bad "bf16 export: $res"
"$xfrun" export "$tmp/ck.st" --dtype=bf16 -o"$tmp/w16b.st" 2> /dev/null
cmp -s "$tmp/w16.st" "$tmp/w16b.st" && ok "--dtype=bf16 -oFILE writes the same file" || bad "--dtype=bf16 -oFILE differs"
size=$(stat -c %s "$tmp/w32.st") cksize=$(stat -c %s "$tmp/ck.st")
[ $((3 * size)) -lt $((cksize + 4096)) ] && [ $((3 * size)) -gt $((cksize - 4096)) ] &&
  ok "the fp32 export is a third of the checkpoint ($size of $cksize bytes)" || bad "sizes $size and $cksize"
out=$("$xfrun" eval "$tmp/m.so" --checkpoint "$tmp/w32.st" "${data[@]}" 2>&1) &&
  ok "xfrun eval reads the fp32 export: $(tail -1 <<<"$out")" || bad "xfrun eval of the export: $out"

# bf16 rounding at the edges: ties to even, NaN (quiet and signalling) kept NaN, infinities, the largest
# finite values (rounding up to infinity), subnormals; a file of any F32 tensors exports (no model needed)
python3 - "$tmp/edge.st" <<'PY'
import json, struct, sys
bits = [0x3f808000, 0x3f818000, 0x3f80ffff, 0x7fc00000, 0x7f800001, 0xffa00000, 0x7f800000, 0xff800000, 0x7f7fffff,
        0x7f7f7fff, 0x00000001, 0x80008000, 0x00018000, 0x00000000, 0x80000000, 0x12345678]
data = b''.join(struct.pack('<I', u) for u in bits)
h = json.dumps({'__metadata__': {'model': 'edge', 'step': '0'},
                'x': {'dtype': 'F32', 'shape': [len(bits)], 'data_offsets': [0, len(data)]}}).encode()
h += b' ' * (-(8 + len(h)) % 8)
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + data)
PY
"$xfrun" export "$tmp/edge.st" --dtype bf16 -o "$tmp/edge16.st" 2> /dev/null || bad "export of an F32 file"
res=$(check_export "$tmp/edge.st" "$tmp/edge16.st" BF16 2>&1) &&
  ok "bf16 edge values (ties, NaN, infinities, overflow, subnormals): $(python3 -c "
import struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
print(' '.join(f'{h:04x}' for (h,) in struct.iter_unpack('<H', b[8 + n:])))" "$tmp/edge16.st")" || bad "bf16 edges: $res"

# errors
expect_usage "no -o" "-o FILE is required" "$xfrun" export "$tmp/ck.st"
expect_usage "no checkpoint" "no CHECKPOINT" "$xfrun" export -o "$tmp/x.st"
expect_usage "--dtype fp16" "--dtype fp16: expected bf16 or fp32" "$xfrun" export "$tmp/ck.st" -o "$tmp/x.st" --dtype fp16
expect_usage "an unknown option" "unknown option --fast" "$xfrun" export "$tmp/ck.st" -o "$tmp/x.st" --fast
expect_usage "--dtype without a value" "--dtype needs a value" "$xfrun" export "$tmp/ck.st" -o "$tmp/x.st" --dtype
expect_usage "two checkpoints" "one checkpoint at a time" "$xfrun" export "$tmp/ck.st" "$tmp/ck.st" -o "$tmp/x.st"
[ ! -e "$tmp/x.st" ] && ok "usage errors write nothing" || bad "a usage error wrote $tmp/x.st"
expect_error "a missing checkpoint" "cannot open checkpoint .*nope.st" "$xfrun" export "$tmp/nope.st" -o "$tmp/x.st"
head -c 100 "$tmp/ck.st" > "$tmp/cut.st"
expect_error "a truncated checkpoint" "cut.st" "$xfrun" export "$tmp/cut.st" -o "$tmp/x.st"
expect_error "an unwritable output" "$tmp/no/such/dir" "$xfrun" export "$tmp/ck.st" -o "$tmp/no/such/dir/w.st"
[ ! -e "$tmp/x.st" ] && [ -z "$(ls -A "$tmp" | grep -v -E '^(cache|text.txt|m.so|ck.st|w32.st|w16.st|w16b.st|cut.st|edge.st|edge16.st)$')" ] &&
  ok "failed exports leave no file, not even a temporary one" || bad "files left: $(ls -A "$tmp")"
out=$("$xfrun" export --help) && grep -q "^usage: xfrun export CHECKPOINT -o" <<<"$out" && ok "--help: exit 0, the usage" ||
  bad "--help: $out"
finish
