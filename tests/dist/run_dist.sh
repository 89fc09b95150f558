#!/usr/bin/env bash
# Data-parallel training under mpirun (Open MPI), on this machine:
#   - 2 and 3 ranks reproduce the single-process loss curve of she and the
#     transformer (small, dropout on) within 1e-5 per step over 20 steps;
#   - 2 ranks with --accum 2 reproduce one process with the whole batch;
#   - two runs with 2 ranks are bit-identical;
#   - a run stopped at step 10 and resumed with 2 ranks ends with the same
#     checkpoint, byte for byte, as an uninterrupted one;
#   - --batch not divisible by the ranks is one xfrun error line;
#   - a rank killed mid-run stops the job with a message naming it, and the
#     last checkpoint stays loadable.
# Usage (from the repo root): tests/dist/run_dist.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
. tests/dist/lib.sh
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. the dog ran to the tree. ' * 300)" > "$tmp/text.txt"
train=(--data "$tmp/text.txt" --tokenizer bytes --batch 6 --seq 8 --seed 5 --threads 1)
small=(-D layers=2 -D d=16 -D context=8 -D ffn=24 -D vocab=256)

for ex in she transformer; do
  defs=("${small[@]}")
  [ $ex = transformer ] && defs+=(-D heads=2)
  "$xfc" -o "$tmp/$ex.so" examples/$ex.xf "${defs[@]}" || bad "compile $ex"
  "$xfrun" train "$tmp/$ex.so" "${train[@]}" --steps 20 --log "$tmp/$ex.1.csv" > /dev/null 2>&1 || bad "$ex: one process"
  for n in 2 3; do
    # 2 ranks: small buckets (many, reduced while the backward goes on); 3: the default
    [ $n = 2 ] && export XF_BUCKET_BYTES=2000 || unset XF_BUCKET_BYTES
    "${mpi[@]}" $n "$xfrun" train "$tmp/$ex.so" "${train[@]}" --steps 20 --log "$tmp/$ex.$n.csv" > "$tmp/$ex.$n.out" 2>&1 ||
      bad "$ex: $n ranks: $(tail -3 "$tmp/$ex.$n.out")"
    buckets=$(grep -o 'in [0-9]* buckets' "$tmp/$ex.$n.out")
    out=$(curve_close "$tmp/$ex.1.csv" "$tmp/$ex.$n.csv") && ok "$ex, $n ranks ($buckets) = one process: $out" ||
      bad "$ex, $n ranks: $out"
  done
  unset XF_BUCKET_BYTES
done

# gradient accumulation composes with the ranks: 2 ranks x 2 micro-batches of
# 3 sequences each = one process with a batch of 12 (dropout on)
"$xfrun" train "$tmp/transformer.so" "${train[@]}" --batch 12 --steps 20 --log "$tmp/b12.csv" > /dev/null 2>&1 ||
  bad "transformer: one process, batch 12"
"${mpi[@]}" 2 "$xfrun" train "$tmp/transformer.so" "${train[@]}" --batch 6 --accum 2 --steps 20 --log "$tmp/acc2.csv" \
  > "$tmp/acc2.out" 2>&1 || bad "transformer: 2 ranks, --accum 2: $(tail -3 "$tmp/acc2.out")"
out=$(curve_close "$tmp/b12.csv" "$tmp/acc2.csv") && ok "2 ranks x --accum 2 x --batch 6 = one process, batch 12: $out" ||
  bad "2 ranks x --accum 2: $out"

# bit for bit: two runs with 2 ranks (small buckets); resume across a stop
export XF_BUCKET_BYTES=2000
for run in a b; do
  "${mpi[@]}" 2 "$xfrun" train "$tmp/she.so" "${train[@]}" --steps 20 --log "$tmp/two.$run.csv" --save "$tmp/two.$run.st" > /dev/null 2>&1
done
cmp -s <(cut -d, -f1,2 "$tmp/two.a.csv") <(cut -d, -f1,2 "$tmp/two.b.csv") && same_checkpoint "$tmp/two.a.st" "$tmp/two.b.st" &&
  ok "two runs with 2 ranks: the same losses and checkpoint, bit for bit" || bad "two runs with 2 ranks differ"
"${mpi[@]}" 2 "$xfrun" train "$tmp/she.so" "${train[@]}" --steps 10 --save "$tmp/half.st" > /dev/null 2>&1
"${mpi[@]}" 2 "$xfrun" train "$tmp/she.so" "${train[@]}" --steps 20 --resume "$tmp/half.st" --save "$tmp/resumed.st" > /dev/null 2>&1
same_checkpoint "$tmp/resumed.st" "$tmp/two.a.st" && ok "2 ranks, stopped at 10 and resumed to 20: the same checkpoint, byte for byte" ||
  bad "resumed checkpoint differs from the uninterrupted one"
"${mpi[@]}" 3 "$xfrun" train "$tmp/she.so" "${train[@]}" --steps 14 --resume "$tmp/half.st" > "$tmp/r3.out" 2>&1 &&
  ok "a 2-rank checkpoint resumes with 3 ranks" || bad "resume with 3 ranks: $(tail -2 "$tmp/r3.out")"

unset XF_BUCKET_BYTES

# the device path: gradients in (emulated) device memory reduced through the
# same bucket interface, the MPI ring standing in for NCCL
if "$xfc" --target=cuda -o "$tmp/she_cuda.so" examples/she.xf "${small[@]}" 2> "$tmp/cuda.err"; then
  XF_CUDA_EMULATE=1 XF_BUCKET_BYTES=2000 "${mpi[@]}" 2 -x XF_CUDA_EMULATE -x XF_BUCKET_BYTES "$xfrun" train "$tmp/she_cuda.so" \
    --device cuda "${train[@]}" --steps 20 --log "$tmp/emu2.csv" > "$tmp/emu2.out" 2>&1 || bad "2 ranks on the emulated device: $(tail -3 "$tmp/emu2.out")"
  out=$(curve_close "$tmp/she.1.csv" "$tmp/emu2.csv") && ok "2 ranks on the emulated CUDA device = one CPU process: $out" ||
    bad "2 ranks on the emulated device: $out"
else
  echo "skipped: no CUDA toolkit (the device path of data-parallel training)"
fi
readelf -d "$xfrun" 2>/dev/null | grep -q 'libnccl' && ok "xfrun links NCCL for gradients on CUDA devices (not run: no GPU here)" ||
  echo "skipped: xfrun was built without NCCL"

# errors
out=$("${mpi[@]}" 2 "$xfrun" train "$tmp/she.so" "${train[@]}" --batch 5 --steps 2 2>&1)
lines=$(printf '%s\n' "$out" | grep -c '^xfrun: error')
[ "$lines" = 1 ] && printf '%s' "$out" | grep -q "^xfrun: error: --batch 5 does not divide over 2 processes" &&
  ok "--batch 5 over 2 ranks: $(printf '%s' "$out" | grep '^xfrun: error')" || bad "--batch 5 over 2 ranks: $out"

# a rank dies: every rank stops, the job says which, the checkpoint of step 10 loads
out=$(XF_TEST_KILL_RANK=1:13 timeout 120 "${mpi[@]}" 2 "$xfrun" train "$tmp/she.so" "${train[@]}" --steps 20 --save-every 5 \
  --save "$tmp/killed.st" 2>&1)
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -qiE "rank 1|process rank 1|rank=1"; then
  ok "rank 1 killed at step 13: the job stops (exit $rc) naming it"
else
  bad "killed rank (exit $rc): $(printf '%s' "$out" | tail -5)"
fi
"$xfrun" eval "$tmp/she.so" --checkpoint "$tmp/killed.st" --data "$tmp/text.txt" --tokenizer bytes --batch 6 --seq 8 \
  --eval-batches 2 > "$tmp/ev.out" 2>&1 && ok "the last checkpoint (step 10) loads: $(cat "$tmp/ev.out")" ||
  bad "checkpoint after the kill: $(cat "$tmp/ev.out")"
finish
