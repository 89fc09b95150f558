#!/usr/bin/env bash
# Fusion and memory planning, from the outside (xfc --emit=schedule, --stats,
# xfrun): the attention pattern fires on a user-written block and on the
# standard library's, and not on near misses; so does the scan_read pattern; attention's gradient writes
# dq, dk, dv as three outputs, no slice kernels; kernels are generated once per
# class, so the number of functions does not grow with depth; the 18-layer
# Table 1 transformer plans well under PyTorch eager's 6.6 GB; a training run
# whose dead buffers are poisoned with NaN (XF_DEBUG_POISON=1) logs the same
# losses, bit for bit, as a normal run, and so does one with --remat, which
# plans less memory; --no-fuse agrees with the fused code.
# Usage (from the repo root): tests/fusion/run_fusion.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh

count() { grep -cE "$1" || true; }
n=$("$xfc" --emit=schedule --batch=2 tests/fusion/attn_user.xf | count '^  k[0-9]+ +attention(_grad)? ')
[ "$n" = 2 ] && ok "user-written attention fused (attention + attention_grad kernels)" || bad "attn_user: $n attention kernels, want 2"
n=$("$xfc" --emit=schedule --batch=2 tests/fusion/attn_near.xf | count '^  k[0-9]+ +attention')
[ "$n" = 0 ] && ok "near misses not fused" || bad "attn_near: $n attention kernels, want 0"
# score biases fuse whatever they broadcast over and whatever they depend on:
# positions (a -1e30 mask), parameters (a learned slope or per-key bias: the
# gradient attention_dbias), data (a key-padding row per batch entry)
notes=$("$xfc" --emit=fused tests/fusion/attn_variants.xf 2>&1 >/dev/null | grep ': note: attention not fused')
notes+=$("$xfc" --emit=fused tests/fusion/attn_bias.xf 2>&1 >/dev/null | grep ': note: attention not fused')
notes+=$("$xfc" --emit=fused tests/fusion/attn_padding.xf 2>&1 >/dev/null | grep ': note: attention not fused')
[ -z "$notes" ] && ok "attn_variants, attn_bias, attn_padding: no note" || bad "attn_variants, attn_bias, attn_padding: notes: $notes"
sites() { sed -n 's/^%[0-9]* = attention .*# \([a-z0-9]*\) @ .*/\1/p' | sort -u | tr '\n' ' '; }
n=$("$xfc" --emit=fused tests/fusion/attn_bias.xf 2>/dev/null | sites)
[ "$n" = "m1 m2 m3 " ] && ok "attn_bias: local + global mask, learned slope, block-sparse: one attention op each" ||
  bad "attn_bias: attention ops in '$n', want m1 m2 m3"
n=$("$xfc" --emit=fused tests/fusion/attn_padding.xf 2>/dev/null | sites)
[ "$n" = "m1 " ] && ok "attn_padding: a key-padding bias [B, 1, 1, T] of the tokens: one attention op" ||
  bad "attn_padding: attention ops in '$n', want m1"
n=$("$xfc" --emit=schedule --batch=2 tests/fusion/attn_bias.xf | count '^  k[0-9]+ +attention_dbias ')
[ "$n" = 1 ] && ok "attn_bias: the learned slope's gradient from one attention_dbias kernel" || bad "attn_bias: $n attention_dbias kernels, want 1"
n=$("$xfc" --emit=fused tests/fusion/attn_variants.xf 2>/dev/null | sites)
[ "$n" = "m1 m2 m3 " ] && ok "attn_variants: a per-head temperature, a learned bias per key [2, 1, T], multi-query attention: fused" ||
  bad "attn_variants: attention ops in '$n', want m1 m2 m3"
n=$("$xfc" --emit=schedule tests/fusion/attn_temp_bias.xf 2>/dev/null | count '^  k[0-9]+ +attention ')
t=$("$xfc" --emit=fused tests/fusion/attn_temp_bias.xf 2>/dev/null | count '^%[0-9]+ = attention .* heads=time_major ')
[ "$n $t" = "1 1" ] && ok "attn_temp_bias: a per-head temperature and a subtracted bias: one time-major attention kernel" ||
  bad "attn_temp_bias: $n attention kernels ($t time-major), want 1 (1)"
n=$("$xfc" --emit=schedule tests/grad/attention_variants.xf 2>/dev/null | count '^  k[0-9]+ +attention ')
[ "$n" = 6 ] && ok "stdlib ALiBi, temperature, GQA with 2 and 1 key heads, sliding window, relative bias: one attention kernel each" ||
  bad "attention_variants: $n attention kernels, want 6"
n=$("$xfc" --emit=fused tests/grad/attention_variants.xf 2>&1 >/dev/null | grep -c 'note: attention not fused' || true)
[ "$n" = 0 ] && ok "stdlib attention variants: no note" || bad "attention_variants: $n notes, want 0"
declare -A cache
for kv in 32 4 1; do  # the decoding cache scales with the key and value heads
  printf 'import "std"\nmodel g {\n  config vocab = 64, context = 128, d = 256, heads = 32\n  let e = TokenEmbedding(vocab, d)\n  let a = GroupedQueryAttention(d, heads, %s)\n  let h = LMHead(d, vocab)\n  forward(tokens [B, T], targets [B, T]) {\n    x = e(tokens)\n    output logits = h(x + a(x))\n    output loss = cross_entropy(logits, targets)\n  }\n}\n' $kv > "$tmp/gqa$kv.xf"
  cache[$kv]=$("$xfc" --stats "$tmp/gqa$kv.xf" 2>/dev/null | sed -n 's/^  caches (what later positions read) *[0-9.]* KiB *(\([0-9]*\) bytes)/\1/p')
done
# k and v: 128 positions x (kv_heads x 8) floats each, and the 128 token ids
[ "${cache[32]} ${cache[4]} ${cache[1]}" = "$((2 * 128 * 256 * 4 + 512)) $((2 * 128 * 32 * 4 + 512)) $((2 * 128 * 8 * 4 + 512))" ] &&
  ok "GQA decoding caches: 32, 4, 1 key heads of 32: ${cache[32]}, ${cache[4]}, ${cache[1]} bytes (k and v at their own size)" ||
  bad "GQA decoding caches: ${cache[32]} ${cache[4]} ${cache[1]} bytes"
n=$("$xfc" --emit=fused tests/fusion/attn_near.xf 2>&1 >/dev/null | grep -c ': note: attention not fused' || true)
[ "$n" = 2 ] && ok "attn_near: 2 notes (no mask; probabilities read twice)" || bad "attn_near: $n notes, want 2"
n=$("$xfc" --emit=fused -D layers=2 examples/transformer.xf 2>&1 >/dev/null | grep -c 'note' || true)
[ "$n" = 0 ] && ok "transformer: no note (every attention fused)" || bad "transformer: $n notes"
n=$("$xfc" --emit=fused --no-fuse tests/fusion/attn_variants.xf 2>&1 >/dev/null | grep -c 'note' || true)
[ "$n" = 0 ] && ok "--no-fuse: no notes (fusion off on purpose)" || bad "--no-fuse: $n notes"
n=$("$xfc" --emit=schedule --batch=2 --no-fuse tests/fusion/attn_user.xf | count '^  k[0-9]+ +attention')
[ "$n" = 0 ] && ok "--no-fuse keeps attention unfused" || bad "--no-fuse: $n attention kernels"
for ex in transformer macaron postnorm rk4; do
  n=$("$xfc" --emit=fused -D layers=2 examples/$ex.xf | count " = attention ")
  [ "$n" -ge 2 ] && ok "$ex: $n attention ops fused" || bad "$ex: $n attention ops fused"
done

# a scan of outer products read out by its rows (passes/fuse_scan.c): the
# library's mixers and a user-written one fused, the near misses not, and
# scan_read_grad writing dq, dk, dv as three outputs
for pair in linear_attention:2 gla:2 retnet:2 ssm:0; do
  ex=${pair%:*} want=${pair#*:}
  n=$("$xfc" --emit=fused -D layers=2 examples/$ex.xf | count " = scan_read ")
  [ "$n" = "$want" ] && ok "$ex: $n scan_read ops fused" || bad "$ex: $n scan_read ops fused, want $want"
done
n=$("$xfc" --emit=fused tests/fusion/scan_near.xf | count " = scan_read ")
m=$("$xfc" --emit=fused tests/fusion/scan_near.xf | count " = scan ")
[ "$n $m" = "1 4" ] && ok "scan_near: the exp decay fused; a raw parameter decay, a column readout, shared states not" ||
  bad "scan_near: $n scan_read, $m scans in the graph, want 1 and 4 (the fused one's scan stays, dead)"
n=$("$xfc" --emit=schedule --batch=2 --no-fuse -D layers=2 examples/linear_attention.xf | count '^  k[0-9]+ +scan_read')
[ "$n" = 0 ] && ok "--no-fuse keeps the scans" || bad "--no-fuse: $n scan_read kernels"
n=$("$xfc" --emit=schedule -D layers=2 examples/linear_attention.xf | awk '$2 == "scan_read_grad" { for (i = 3; i <= NF; i++) if ($i ~ /^out=/) c += split(substr($i, 5), b, ",") == 3 } END { print c + 0 }')
[ "$n" = 2 ] && ok "linear_attention: 2 scan_read_grad kernels write dq, dk, dv" || bad "linear_attention: $n split scan_read_grads, want 2"
mib=$("$xfc" --stats examples/linear_attention.xf | sed -n 's/^  total *\([0-9.]*\) MiB/\1/p')
mib_nf=$("$xfc" --stats --no-fuse examples/linear_attention.xf | sed -n 's/^  total *\([0-9.]*\) MiB/\1/p')
awk -v a="$mib" -v b="$mib_nf" 'BEGIN { exit !(a + 1000 < b) }' && ok "linear_attention plans $mib MiB, --no-fuse $mib_nf (the states stored)" ||
  bad "linear_attention: fused $mib MiB, unfused $mib_nf MiB"

# attention_grad writes dq, dk, dv as three outputs when each is read whole by
# one slice (the slices get no kernel); attn_fixed_v's values need no gradient,
# so its two slices keep their kernels and read the combined output
split_counts() {  # schedule on stdin -> "kernels, attention_grad kernels with 3 outputs, slice kernels reading one"
  awk '/^schedule / { n = $3 }
       $2 == "attention_grad" { for (i = 3; i <= NF; i++) if ($i ~ /^out=/) { m = split(substr($i, 5), b, ",");
                                  for (j in b) ag[b[j]] = 1; three += m == 3 } }
       $2 == "slice" { for (i = 3; i <= NF; i++) if ($i ~ /^in=/ && ag[substr($i, 4)]) reads++ }
       END { printf "%d %d %d\n", n, three, reads }'
}
got=$("$xfc" --emit=schedule examples/transformer.xf | split_counts)
[ "$got" = "524 18 0" ] && ok "transformer: 18 attention_grad kernels write dq, dk, dv; no slice kernel reads them ($got)" ||
  bad "transformer: kernels, split attention_grads, slices of them: '$got', want '524 18 0'"
got=$("$xfc" --emit=schedule --batch=2 tests/fusion/attn_fixed_v.xf | split_counts)
[ "$got" = "30 0 2" ] && ok "attn_fixed_v: dv unused, the combined output and its 2 slice kernels stay" ||
  bad "attn_fixed_v: kernels, split attention_grads, slices of them: '$got', want '30 0 2'"

# the gain gradients' row terms dy o xhat come from the layernorm_dx kernels
# (terms=), no kernel of their own (their sums run after those kernels: the
# codegen test runs the fused schedule in poisoned storage); the attention
# gradient's row statistics (attention_lse) from the attention kernels, the
# cross-entropy gradient's (cross_entropy_lse) from the cross_entropy kernel
terms_counts() {  # schedule on stdin -> "norm, attention and cross_entropy kernels writing terms, dy_xhat and *_lse kernels"
  awk '$1 ~ /^k[0-9]+$/ { for (i = 3; i <= NF; i++) if ($i ~ /^terms=/) { if ($2 == "attention") a++; else if ($2 == "cross_entropy") c++; else t++ }
                          if ($2 ~ /_dy_xhat$/ || $2 ~ /_lse$/) d++ }
       END { printf "%d %d %d %d\n", t, a, c, d }'
}
got=$("$xfc" --emit=schedule examples/transformer.xf | terms_counts)
[ "$got" = "37 18 1 0" ] &&
  ok "transformer: 37 layernorm_dx kernels write the gain gradients' terms, 18 attention kernels and the cross_entropy kernel their rows' log-sum-exp ($got)" ||
  bad "transformer: kernels writing terms (norm, attention, cross_entropy), dy_xhat and *_lse kernels: '$got', want '37 18 1 0'"
got=$("$xfc" --emit=schedule --no-fuse examples/transformer.xf | terms_counts)
[ "$got" = "0 0 0 38" ] && ok "--no-fuse: 37 layernorm_dy_xhat kernels and a cross_entropy_lse kernel of their own" ||
  bad "--no-fuse: kernels writing terms (norm, attention, cross_entropy), dy_xhat and *_lse kernels: '$got', want '0 0 0 38'"

# one function per kernel class: the same count at 2 and 18 layers
for ex in transformer she rk4; do
  f2=$("$xfc" --emit=schedule -D layers=2 examples/$ex.xf | sed -n 's/.* \([0-9]*\) distinct functions.*/\1/p')
  f18=$("$xfc" --emit=schedule -D layers=18 examples/$ex.xf | sed -n 's/.* \([0-9]*\) distinct functions.*/\1/p')
  [ -n "$f2" ] && [ "$f2" = "$f18" ] && ok "$ex: $f2 kernel functions at 2 and at 18 layers" || bad "$ex: $f2 vs $f18 functions"
done

# the planned memory of the Table 1 transformer (18 layers, batch 64, context 128)
mib=$("$xfc" --stats examples/transformer.xf | sed -n 's/^  total *\([0-9.]*\) MiB/\1/p')
awk -v m="$mib" 'BEGIN { exit !(m > 100 && m < 3072) }' && ok "transformer at Table 1 sizes plans $mib MiB (< 3 GiB)" ||
  bad "transformer plans '$mib' MiB"
mib_nf=$("$xfc" --stats --no-fuse examples/transformer.xf | sed -n 's/^  total *\([0-9.]*\) MiB/\1/p')
awk -v a="$mib" -v b="$mib_nf" 'BEGIN { exit !(a < b) }' && ok "fusion plans less than --no-fuse ($mib < $mib_nf MiB)" ||
  bad "fused $mib MiB, unfused $mib_nf MiB"

# rematerialisation: less memory, the same training
mib_rm=$("$xfc" --stats --remat examples/transformer.xf | sed -n 's/^  total *\([0-9.]*\) MiB/\1/p')
awk -v a="$mib_rm" -v b="$mib" 'BEGIN { exit !(a < b) }' && ok "--remat plans less ($mib_rm < $mib MiB)" ||
  bad "--remat plans $mib_rm MiB, without $mib MiB"

# poisoned dead storage changes nothing; --no-fuse trains to the same losses
printf 'Once upon a time there was a little princess who lived in a castle by the sea. %.0s' $(seq 60) > "$tmp/text.txt"
small="-D layers=2 -D d=16 -D context=16 -D vocab=256 -D ffn=32"
for ex in transformer she; do
  heads=; [ $ex = transformer ] && heads="-D heads=4"
  "$xfc" $small $heads examples/$ex.xf -o "$tmp/$ex.so" && "$xfc" $small $heads --no-fuse examples/$ex.xf -o "$tmp/$ex-nf.so" &&
    "$xfc" $small $heads --remat examples/$ex.xf -o "$tmp/$ex-rm.so" || { bad "$ex: compile"; continue; }
  run() {  # so, log, env...
    local so=$1 log=$2
    shift 2
    env "$@" "$xfrun" train "$so" --data "$tmp/text.txt" --tokenizer bytes --steps 6 --batch 4 --threads 2 \
      --eval-batches 1 --cache "$tmp/cache" --log "$log" > /dev/null 2>&1
  }
  run "$tmp/$ex.so" "$tmp/a.csv" XF_DEBUG_POISON=0 && run "$tmp/$ex.so" "$tmp/b.csv" XF_DEBUG_POISON=1 &&
    run "$tmp/$ex-nf.so" "$tmp/c.csv" XF_DEBUG_POISON=1 && run "$tmp/$ex-rm.so" "$tmp/d.csv" XF_DEBUG_POISON=1 ||
    { bad "$ex: xfrun train failed"; continue; }
  if cmp -s <(cut -d, -f1,2 "$tmp/a.csv") <(cut -d, -f1,2 "$tmp/d.csv"); then
    ok "$ex: --remat (poisoned) trains to the same losses bit for bit"
  else bad "$ex: --remat losses differ"; fi
  if cmp -s <(cut -d, -f1,2 "$tmp/a.csv") <(cut -d, -f1,2 "$tmp/b.csv"); then
    ok "$ex: losses with poisoned dead buffers equal bit for bit ($(tail -1 "$tmp/b.csv" | cut -d, -f2))"
  else bad "$ex: poisoned run differs"; fi
  if paste -d, <(cut -d, -f2 "$tmp/a.csv" | tail -n +2) <(cut -d, -f2 "$tmp/c.csv" | tail -n +2) |
     awk -F, '{ d = $1 - $2; if (d < 0) d = -d; if (!(d <= 1e-4 * ($2 < 0 ? -$2 : $2))) bad = 1 } END { exit bad }'; then
    ok "$ex: fused and --no-fuse losses agree within 1e-4 relative"
  else bad "$ex: fused and --no-fuse losses differ"; fi
done
finish
