#!/usr/bin/env bash
# Checks come before allocation: every refusal of xfrun train (tokenizer
# vocabulary, checkpoint against the model, corpus size against --seq,
# output paths, option ranges, the machine's memory) happens before the
# memory plan is allocated and before the corpus is encoded. Each refused
# run exits 1 with one line; its peak RSS stays small and does not grow with
# --batch, although the plan it refuses is gigabytes.
# Usage (from the repo root): tests/runtime/run_checks_first.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache

# peak RSS (KiB) of a command, its exit status and its stderr in $tmp/err
rss() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
open(sys.argv[0] if False else __import__('os').environ['ERRFILE'], 'w').write(p.stderr)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
}
export ERRFILE=$tmp/err
# the limit: what xfrun takes doing nothing (its libraries loaded) + 64 MiB
read -r _ base_kb < <(rss "$xfrun" --help)
limit_mb=$((base_kb / 1024 + 64))
echo "xfrun --help peaks at $((base_kb / 1024)) MiB; a refused run may take $limit_mb MiB"

# SHE at seed 001 Table 1 width (vocab 5000, d 128, context 128), 4 layers
"$xfc" -o "$tmp/she.so" examples/she.xf -D layers=4 || bad "compile she"
"$xfc" -o "$tmp/small.so" examples/she.xf -D layers=1 -D d=16 -D ffn=32 -D context=16 -D vocab=256 || bad "compile small"
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. ' * 40)" > "$tmp/tiny.txt"
python3 -c "import sys; sys.stdout.write(''.join(chr(97 + (i * 7) % 26) for i in range(4000)))" > "$tmp/text.txt"
# a checkpoint of the small model, which she.so refuses by shape
"$xfrun" train "$tmp/small.so" --tokenizer bytes --data "$tmp/text.txt" --steps 2 --batch 2 --seq 16 --threads 1 \
  --save "$tmp/small.st" 2> /dev/null || bad "train small"

# the plan refused: at --batch 128 the model needs 4.2 GiB
big=(--batch 128 --threads 1)
check() {  # check LABEL FRAGMENT ARGS...: refused with FRAGMENT, small RSS at --batch 128 and 1
  local label=$1 frag=$2
  shift 2
  read -r rc kb < <(rss "$xfrun" train "$tmp/she.so" "$@" "${big[@]}")
  local msg lines
  msg=$(cat "$tmp/err")
  lines=$(printf '%s\n' "$msg" | wc -l)
  read -r rc1 kb1 < <(rss "$xfrun" train "$tmp/she.so" "$@" --batch 1 --threads 1)
  if [ "$rc" = 1 ] && [ "$lines" = 1 ] && printf '%s' "$msg" | grep -qE -- "$frag" &&
     [ $((kb / 1024)) -lt "$limit_mb" ] && [ $(((kb - kb1) / 1024)) -lt 32 ]; then
    ok "$label: peak RSS $((kb / 1024)) MiB at --batch 128, $((kb1 / 1024)) MiB at --batch 1: $msg"
  else
    bad "$label: exit $rc, peak RSS $((kb / 1024)) MiB (--batch 1: $((kb1 / 1024)) MiB, limit $limit_mb): $msg"
  fi
}
check "tokenizer vocabulary" "tokenizer bytes has a vocabulary of 256, model .* has 5000" --tokenizer bytes
check "checkpoint shapes" "tensor '.*' has shape .*, model '.*' needs" --resume "$tmp/small.st" --tokenizer bytes
check "corpus against --seq" "too few for --seq 128" --data "$tmp/tiny.txt"
check "--save folder" "cannot write --save .*/gone/ck.st: folder .*/gone: No such file" --save "$tmp/gone/ck.st"
check "--save is a folder" "--save .* is a folder" --save "$tmp"
check "--log folder" "cannot write --log" --log "$tmp/missing/log.csv"
check "--seq range" "--seq 4096 is outside 1..128" --seq 4096
check "AdamW range" "AdamW needs" --lr 5000
# the plan itself refused: more memory than the machine has
read -r rc kb < <(rss "$xfrun" train "$tmp/she.so" --batch 100000 --threads 1)
msg=$(cat "$tmp/err")
if [ "$rc" = 1 ] && printf '%s' "$msg" | grep -qE "needs .* GiB, more than this machine has" && [ $((kb / 1024)) -lt "$limit_mb" ]; then
  ok "memory plan beyond the machine: peak RSS $((kb / 1024)) MiB: $msg"
else
  bad "memory plan beyond the machine: exit $rc, peak RSS $((kb / 1024)) MiB: $msg"
fi
# and a run that is not refused does allocate the plan: the RSS check can fail
read -r rc kb < <(rss "$xfrun" train "$tmp/small.so" --tokenizer bytes --data "$tmp/text.txt" --steps 1 --batch 4096 --seq 16 --threads 1 --eval-batches 1)
if [ "$rc" = 0 ] && [ $((kb / 1024)) -gt "$limit_mb" ]; then
  ok "an accepted run at --batch 4096 peaks at $((kb / 1024)) MiB"
else
  bad "an accepted run at --batch 4096: exit $rc, peak RSS $((kb / 1024)) MiB: $(tail -1 "$tmp/err")"
fi
finish
