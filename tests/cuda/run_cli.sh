#!/usr/bin/env bash
# The CUDA target from the command line, on a machine without a GPU:
#   - every example and every op model compiles through NVRTC (xfc
#     --target=cuda --emit=ptx) and ptxas accepts the PTX for sm_80 and sm_90;
#   - xfc's options and xfrun --device's error paths: one line, exit 1;
#   - the emulation (XF_CUDA_EMULATE=1) trains as the CPU does (the step's
#     graph as its eager launches, XF_CUDA_GRAPH=0, byte for byte), its
#     checkpoint resumes on the CPU, greedy sampling (incremental) gives the
#     same text;
#   - the GPU index from --gpu or the launcher's local rank.
# Usage (from the repo root): tests/cuda/run_cli.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
ptxas=${CUDA_BIN_DIR:-/usr/local/cuda/bin}/ptxas
small=(-D layers=2 -D d=16 -D context=8 -D ffn=24 -D vocab=256)

if ! "$xfc" --target=cuda --emit=ptx examples/me.xf "${small[@]}" > "$tmp/probe.ptx" 2> "$tmp/probe.err"; then
  if grep -q "without the CUDA toolkit" "$tmp/probe.err"; then echo "skipped: no CUDA toolkit"; exit 77; fi
  bad "xfc --emit=ptx: $(cat "$tmp/probe.err")"
fi
[ -x "$ptxas" ] || { echo "skipped: no ptxas at $ptxas (set CUDA_BIN_DIR)"; exit 77; }

# NVRTC and ptxas on every kernel of every example and op model
for f in examples/*.xf tests/grad/op_*.xf tests/fusion/attn_user.xf tests/golden/sinusoidal.xf; do
  defs=()
  case $f in examples/*) defs=("${small[@]}"); grep -q heads "$f" && defs+=(-D heads=2); grep -q kv_heads "$f" && defs+=(-D kv_heads=1);; esac
  name=$(basename "$f" .xf)
  if ! "$xfc" --target=cuda --emit=ptx "$f" "${defs[@]}" > "$tmp/$name.ptx" 2> "$tmp/$name.err"; then
    bad "NVRTC on $f: $(head -3 "$tmp/$name.err")"
    continue
  fi
  entries=$(grep -c '^\.visible \.entry' "$tmp/$name.ptx")
  # xfc's summary of the SASS: every kernel, no register spills, on both
  for sm in sm_80 sm_90; do
    grep -qE "^xfc: $sm: $entries kernels, [0-9]+ bytes of SASS, .* spills 0 bytes stored and 0 loaded" "$tmp/$name.err" ||
      bad "$f: xfc's $sm summary: $(grep $sm "$tmp/$name.err" || echo none)"
  done
  for sm in sm_80 sm_90; do
    if "$ptxas" -arch=$sm "$tmp/$name.ptx" -o "$tmp/$name.$sm.cubin" 2> "$tmp/$name.ptxas"; then
      ok "$f: $entries kernels, ptxas -arch=$sm accepts the PTX"
    else
      bad "$f: ptxas -arch=$sm: $(head -3 "$tmp/$name.ptxas")"
    fi
  done
done
# the seed 001 Table 1 sizes (d 128, context 128, 32 heads), two layers: no
# spills on sm_80 and sm_90
for f in examples/*.xf; do
  "$xfc" --target=cuda --emit=ptx -D layers=2 "$f" > "$tmp/full.ptx" 2> "$tmp/full.err" &&
    "$ptxas" -arch=sm_80 "$tmp/full.ptx" -o "$tmp/full.cubin" 2>> "$tmp/full.err" &&
    grep -q '^xfc: sm_80: .* spills 0 bytes stored and 0 loaded' "$tmp/full.err" &&
    grep -q '^xfc: sm_90: .* spills 0 bytes stored and 0 loaded' "$tmp/full.err" &&
    ok "$f at Table 1 sizes: NVRTC and ptxas, no spills; $(grep -m1 '^xfc: sm_90' "$tmp/full.err" | cut -c6-)" ||
    bad "$f at Table 1 sizes: $(head -3 "$tmp/full.err")"
done
# the blocked attention's team GEMMs: bf16 mma (m16n8k16 on cvt.rn.bf16x2
# pairs) under --precision=bf16, TF32 mma (m16n8k8) under tf32; ptxas
# accepts both, with no spills
for pr in bf16:m16n8k16.row.col.f32.bf16.bf16.f32 tf32:m16n8k8.row.col.f32.tf32.tf32.f32; do
  "$xfc" --target=cuda --emit=ptx --precision="${pr%%:*}" examples/gpt2_small.xf -D layers=1 > "$tmp/mma.ptx" 2> "$tmp/mma.err" &&
    grep -q "mma.sync.aligned.${pr#*:}" "$tmp/mma.ptx" && "$ptxas" -arch=sm_80 "$tmp/mma.ptx" -o "$tmp/mma.cubin" 2>> "$tmp/mma.err" &&
    grep -q '^xfc: sm_90: .* spills 0 bytes stored and 0 loaded' "$tmp/mma.err" &&
    ok "--precision=${pr%%:*}: the attention's team GEMMs through mma.sync.${pr#*:}, ptxas accepts them" ||
    bad "--precision=${pr%%:*}: no mma.sync.${pr#*:} in the PTX, or ptxas: $(head -3 "$tmp/mma.err")"
done
"$xfc" --target=cuda --emit=ptx --gpu-arch=compute_90 examples/she.xf "${small[@]}" | grep -q '^\.target sm_90' &&
  ok "--gpu-arch=compute_90: PTX for sm_90" || bad "--gpu-arch=compute_90"
# the GPU operations of a training step: 2 layers of the transformer at small
# sizes have 2 attention launches per layer among them
ops=$("$xfc" --target=cuda --emit=schedule examples/transformer.xf "${small[@]}" -D heads=2 | grep '^cuda: a training step:')
[[ $ops =~ ^cuda:\ a\ training\ step:\ ([0-9]+)\ kernel\ launches,\ ([0-9]+)\ GEMMs,\ 3\ optimizer\ launches\ .*:\ ([0-9]+)\ GPU ]] &&
  (( BASH_REMATCH[3] == BASH_REMATCH[1] + BASH_REMATCH[2] + 3 && BASH_REMATCH[1] >= 4 )) &&
  ok "--emit=schedule --target=cuda: ${ops#cuda: }" || bad "--emit=schedule --target=cuda: '$ops'"
# at Table 1 sizes, 18 layers: the transformer's attention gradients write dq,
# dk, dv themselves (54 slice launches fewer than 342); SHE's convolutions are
# chunked GEMMs, per layer the forward 2 kernels and a GEMM, dx 3 and a GEMM,
# dW 2 and a GEMM (one launch each before: 360 launches, 219 GEMMs); the
# embedding gradient is 4 launches (sorted by first occurrence, linked by
# next occurrence; 1 before); the gain and bias gradients' sums over rows
# are two launches each (partials over slices of the rows, then their
# totals: 73 more, schedule_red_split)
for want in "transformer 364 327 694" "she 508 273 784"; do
  read -r ex nk ng nop <<< "$want"
  ops=$("$xfc" --target=cuda --emit=schedule examples/$ex.xf | grep '^cuda: a training step:')
  [ "$ops" = "cuda: a training step: $nk kernel launches, $ng GEMMs, 3 optimizer launches (the gradient norm, its sum, AdamW; with --accum a fourth, the gradient sums): $nop GPU operations, replayed as one CUDA graph (1 launch from the host)" ] &&
    ok "$ex at 18 layers: ${ops#cuda: }" || bad "$ex at 18 layers: '$ops', want $nk launches, $ng GEMMs"
done
"$xfc" --target=cuda --emit=cuda examples/she.xf "${small[@]}" | grep -q '^extern "C" __global__' &&
  ok "--emit=cuda prints the kernels" || bad "--emit=cuda"
# usage errors: exit 2, the message first, then the pointer to --help (expect_usage)
expect_usage "--gpu-arch=sm_80" "expected a virtual architecture" "$xfc" --target=cuda --gpu-arch=sm_80 examples/she.xf
expect_usage "--target=metal" "expected cpu or cuda" "$xfc" --target=metal examples/she.xf
expect_usage "--precision=fp16" "expected tf32, bf16 or fp32" "$xfc" --target=cuda --precision=fp16 examples/she.xf
expect_usage "--emit=cost without --target=cuda" "the GPU's cost model: add --target=cuda" "$xfc" --emit=cost examples/she.xf
# --emit=cost at another batch and length: the items of a row kernel scale with B T
c1=$("$xfc" --target=cuda --emit=cost examples/me.xf "${small[@]}" --batch=4 --seq=8 | awk '$2 == "layernorm" { print $6; exit }')
c2=$("$xfc" --target=cuda --emit=cost examples/me.xf "${small[@]}" --batch=8 --seq=8 | awk '$2 == "layernorm" { print $6; exit }')
[ -n "$c1" ] && [ "$c2" = $((2 * c1)) ] && ok "--emit=cost follows --batch: layernorm rows $c1 -> $c2" || bad "--emit=cost --batch: '$c1' '$c2'"

# an NVRTC error is an internal error naming the kernel and its IR node with the source location
k=$("$xfc" --emit=schedule examples/she.xf "${small[@]}" | awk '/layernorm/ {print $1; exit}' | tr -dc '0-9')
out=$(XF_TEST_CUDA_BREAK=$k "$xfc" --target=cuda -o "$tmp/broken.so" examples/she.xf "${small[@]}" 2>&1)
rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -qE "internal error: NVRTC rejected kernel xf_k$k \(node %[0-9]+ layernorm, from [^)]*\.xf:[0-9]+:[0-9]+\)" &&
  [ ! -e "$tmp/broken.so" ] && ok "NVRTC error on kernel $k: $(printf '%s' "$out" | grep 'internal error' | head -1)" ||
  bad "NVRTC error path (exit $rc, kernel '$k'): $out"

# xfrun --device
python3 -c "import sys; sys.stdout.write(('the cat sat on the mat. ' * 800))" > "$tmp/text.txt"
# d 32: parameters of several XF_ADAM_CHUNKs (the device's AdamW works in chunks)
"$xfc" --target=cuda -o "$tmp/she_cuda.so" examples/she.xf "${small[@]}" -D d=32 || bad "xfc --target=cuda -o"
"$xfc" -o "$tmp/she_cpu.so" examples/she.xf "${small[@]}" -D d=32 || bad "xfc -o"
train=(--data "$tmp/text.txt" --tokenizer bytes --batch 4 --seq 8 --seed 5 --threads 1)
if out=$("$xfrun" train "$tmp/she_cuda.so" --device cuda --steps 1 "${train[@]}" 2>&1); then
  ok "a GPU is present: trained on it"
else
  # no GPU or no driver (cudaErrorNoDevice, cudaErrorInsufficientDriver): said as such, in one line
  expect_error "--device cuda without a GPU" \
    "^xfrun: error: --device cuda: no NVIDIA GPU or driver on this machine \(cudaGetDeviceCount: [^)]+\)$" \
    "$xfrun" train "$tmp/she_cuda.so" --device cuda --steps 1 "${train[@]}"
  "$xfrun" train "$tmp/she_cuda.so" --steps 2 "${train[@]}" > "$tmp/auto.out" 2> "$tmp/auto.err" &&
    grep -q "no NVIDIA GPU or driver on this machine (.*): running on the CPU" "$tmp/auto.err" &&
    ok "default device: the CPU, saying why ($(head -1 "$tmp/auto.err"))" || bad "default device: $(cat "$tmp/auto.err")"
fi
expect_error "--device cuda on a CPU-only model.so" "has no CUDA code: compile it with xfc --target=cuda" \
  "$xfrun" train "$tmp/she_cpu.so" --device cuda --steps 1 "${train[@]}"
expect_usage "--device tpu" "expected cpu or cuda" "$xfrun" train "$tmp/she_cuda.so" --device tpu

# the model.so carries SASS for sm_80 and sm_90 beside the PTX
out=$("$xfrun" info "$tmp/she_cuda.so" 2>&1)
printf '%s' "$out" | grep -qE "CUDA code: PTX for compute_80 \([0-9]+ KiB\), SASS for sm_80 \([0-9]+ KiB\), SASS for sm_90" &&
  ok "xfrun info: $(printf '%s' "$out" | grep 'CUDA code' | cut -d: -f2-)" || bad "xfrun info model.so: $out"
printf '%s' "$out" | grep -q "GEMMs in TF32" && ok "the GEMMs default to TF32" || bad "default precision: $out"
"$xfc" --target=cuda --precision=fp32 -o "$tmp/she_fp32.so" examples/she.xf "${small[@]}" &&
  "$xfrun" info "$tmp/she_fp32.so" | grep -q "GEMMs in float32" && ok "--precision=fp32: float32 GEMMs" ||
  bad "--precision=fp32: $("$xfrun" info "$tmp/she_fp32.so" 2>&1)"
"$xfc" --target=cuda --precision=bf16 -o "$tmp/she_bf16.so" examples/she.xf "${small[@]}" &&
  "$xfrun" info "$tmp/she_bf16.so" | grep -qE "GEMMs in bf16 \(float32 sums\), 3 optimizer launches; [0-9]+ activations stored in bf16; [0-9]+ weights read as bf16 twins" &&
  ok "--precision=bf16: bf16 GEMMs and storage, weights read as bf16 twins" ||
  bad "--precision=bf16: $("$xfrun" info "$tmp/she_bf16.so" 2>&1)"
# the emulated device says what its GEMMs compute
out=$(XF_CUDA_EMULATE=1 "$xfrun" train "$tmp/she_bf16.so" --device cuda --steps 1 "${train[@]}" 2>&1)
printf '%s' "$out" | grep -q "device: GPU 0 emulated .*, GEMMs in bf16 (float32 sums); activations stored in bf16$" &&
  ok "the emulation's device line: $(printf '%s' "$out" | grep -m1 'device:' | cut -d: -f3-)" || bad "bf16 emulated device line: $out"
out=$("$xfrun" info "$tmp/she_cpu.so" 2>&1)
printf '%s' "$out" | grep -q "CPU code only" && ok "xfrun info on a CPU-only model.so" || bad "xfrun info CPU model: $out"
expect_error "xfrun info on a missing model.so" "no-such.so" "$xfrun" info "$tmp/no-such.so"

# the emulation trains as the CPU does; checkpoints move between devices
XF_CUDA_EMULATE=1 "$xfrun" train "$tmp/she_cuda.so" --device cuda --steps 30 --log "$tmp/emu.csv" --save "$tmp/emu.safetensors" \
  "${train[@]}" > "$tmp/emu.out" 2>&1 || bad "emulated training: $(tail -3 "$tmp/emu.out")"
"$xfrun" train "$tmp/she_cuda.so" --device cpu --steps 30 --log "$tmp/cpu.csv" --save "$tmp/cpu.safetensors" \
  "${train[@]}" > "$tmp/cpu.out" 2>&1 || bad "CPU training: $(tail -3 "$tmp/cpu.out")"
# the training step's graph against its eager launches (XF_CUDA_GRAPH=0), dropout on: the same checkpoint
XF_CUDA_EMULATE=1 XF_CUDA_GRAPH=0 "$xfrun" train "$tmp/she_cuda.so" --device cuda --steps 30 --save "$tmp/eager.safetensors" \
  "${train[@]}" > "$tmp/eager.out" 2>&1 || bad "emulated training, XF_CUDA_GRAPH=0: $(tail -3 "$tmp/eager.out")"
same_checkpoint "$tmp/emu.safetensors" "$tmp/eager.safetensors" && ok "30 emulated steps: the graph's checkpoint is the eager one, byte for byte" ||
  bad "30 emulated steps: the graph's checkpoint differs from XF_CUDA_GRAPH=0's"
# --profile on the device: the marks after each kernel and after the
# optimizer split the steps' time; it leaves the results as they are
XF_CUDA_EMULATE=1 "$xfrun" train "$tmp/she_cuda.so" --device cuda --steps 30 --save "$tmp/prof.safetensors" --profile \
  "${train[@]}" > "$tmp/prof.out" 2> "$tmp/prof.err" || bad "emulated training, --profile: $(tail -3 "$tmp/prof.err")"
same_checkpoint "$tmp/emu.safetensors" "$tmp/prof.safetensors" && ok "30 emulated steps with --profile: the graph's checkpoint, byte for byte" ||
  bad "30 emulated steps: --profile changes the checkpoint"
python3 tests/check_profile.py "$tmp/prof.out" 29 " \\([0-9.]+%; the device's time" \
  '^optimizer: the gradient norm and AdamW$' "cross_entropy" '^k[0-9]+ causal_conv \S+:[0-9]+$' &&
  ok "--profile on the device: $(head -1 "$tmp/prof.out" | cut -c1-90)" || bad "device --profile output: $(head -5 "$tmp/prof.out")"
XF_CUDA_EMULATE=1 "$xfrun" train "$tmp/she_cuda.so" --device cuda --steps 40 --resume "$tmp/cpu.safetensors" --log "$tmp/cpu.csv" \
  "${train[@]}" > "$tmp/resume1.out" 2>&1 || bad "resume a CPU checkpoint on the emulated GPU: $(tail -3 "$tmp/resume1.out")"
"$xfrun" train "$tmp/she_cuda.so" --device cpu --steps 40 --resume "$tmp/emu.safetensors" --log "$tmp/emu.csv" \
  "${train[@]}" > "$tmp/resume2.out" 2>&1 || bad "resume an emulated-GPU checkpoint on the CPU: $(tail -3 "$tmp/resume2.out")"
python3 - "$tmp/cpu.csv" "$tmp/emu.csv" <<'PY' && ok "40 steps (30, then resumed on the other device): the curves agree within 1e-4" || bad "loss curves differ"
import csv, sys
a = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
b = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))]
assert len(a) == len(b) == 40, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"  steps {len(a)}, loss {a[0]:.4f} -> {a[-1]:.4f}, worst relative difference {worst:.2e}")
assert a[-1] < a[0] and worst < 1e-4
PY
sample=(--checkpoint "$tmp/cpu.safetensors" --prompt "the cat" --max-tokens 20 --temperature 0 --threads 1)
s_cpu=$("$xfrun" sample "$tmp/she_cuda.so" --device cpu "${sample[@]}" 2>"$tmp/s_cpu.err") && rc_cpu=0 || rc_cpu=$?
s_emu=$(XF_CUDA_EMULATE=1 "$xfrun" sample "$tmp/she_cuda.so" --device cuda "${sample[@]}" 2>"$tmp/s_emu.err") && rc_emu=0 || rc_emu=$?
[ $rc_cpu -eq 0 ] && [ $rc_emu -eq 0 ] && [ -n "$s_cpu" ] && [ "$s_cpu" = "$s_emu" ] && ok "greedy sampling: the same text on both devices" ||
  bad "sampling differs: cpu '$s_cpu' emulation '$s_emu'"
[ $rc_emu -eq 0 ] && ! grep -q "recomputing" "$tmp/s_emu.err" &&
  ok "sampling on the emulated GPU runs the step program (no 'recomputing' note)" ||
  bad "sampling on the emulated GPU is not incremental: $(cat "$tmp/s_emu.err")"

# which GPU: --gpu, else the launcher's local rank (Open MPI, MPICH, Slurm, PMI), else 0
gpu_of() {  # one environment assignment, then xfrun options: prints the device line
  local var=$1
  shift
  env "$var" XF_CUDA_EMULATE=1 "$xfrun" train "$tmp/she_cuda.so" --device cuda --steps 1 "${train[@]}" "$@" 2>&1 >/dev/null |
    grep -m1 'device: GPU' | sed 's/.*device: //'
}
for spec in "OMPI_COMM_WORLD_LOCAL_RANK=1:1" "MPI_LOCALRANKID=3:3" "SLURM_LOCALID=2:2" "PMI_LOCAL_RANK=5:5" "SLURM_LOCALID=x:0"; do
  var=${spec%:*} want=${spec##*:}
  got=$(gpu_of "$var")
  case $got in "GPU $want "*) ok "$var: $got";; *) bad "$var: expected GPU $want, got '$got'";; esac
done
got=$(gpu_of MPI_LOCALRANKID=3 --gpu 6)
case $got in "GPU 6 "*) ok "--gpu 6 over the local rank: $got";; *) bad "--gpu 6: got '$got'";; esac
expect_usage "--gpu -1" "^xfrun train: error: --gpu" "$xfrun" train "$tmp/she_cuda.so" --gpu -1
finish
