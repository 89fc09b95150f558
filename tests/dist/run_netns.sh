#!/usr/bin/env bash
# Two "machines" on one host: two network namespaces joined by a veth pair,
# one rank in each, MPI over TCP between them (Open MPI starts the remote
# rank through tests/dist/netns_agent.sh in place of ssh). The loss curve
# must equal the one-process curve within 1e-5 per step, as on loopback.
# Usage (from the repo root): tests/dist/run_netns.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
. tests/dist/lib.sh
a=xfA$$ b=xfB$$ va=xfa$$ vb=xfb$$
if ! ip netns add "$a" 2>/dev/null; then echo "skipped: cannot create network namespaces"; exit 77; fi
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
ip netns add "$b" && ip link add "$va" type veth peer name "$vb" && ip link set "$va" netns "$a" && ip link set "$vb" netns "$b" &&
  ip netns exec "$a" ip addr add 10.77.0.1/24 dev "$va" && ip netns exec "$b" ip addr add 10.77.0.2/24 dev "$vb" &&
  ip netns exec "$a" ip link set "$va" up && ip netns exec "$b" ip link set "$vb" up &&
  ip netns exec "$a" ip link set lo up && ip netns exec "$b" ip link set lo up ||
  { echo "skipped: cannot create network namespaces (veth)"; exit 77; }
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. the dog ran to the tree. ' * 300)" > "$tmp/text.txt"
"$xfc" -o "$tmp/she.so" examples/she.xf -D layers=2 -D d=16 -D context=8 -D ffn=24 -D vocab=256 || bad "compile"
train=(--data "$tmp/text.txt" --tokenizer bytes --batch 6 --seq 8 --seed 5 --threads 1 --steps 20)
"$xfrun" train "$tmp/she.so" "${train[@]}" --log "$tmp/one.csv" > /dev/null 2>&1 || bad "one process"
export XF_NETNS_MAP="10.77.0.1=$a 10.77.0.2=$b" XF_NETNS_LOG=$tmp/agent.log
ip netns exec "$a" timeout 120 "${mpi[@]}" 2 --host 10.77.0.1,10.77.0.2 \
  -x XF_CACHE_DIR --mca plm_rsh_agent "$PWD/tests/dist/netns_agent.sh" --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24 \
  --mca oob_tcp_if_include 10.77.0.0/24 "$xfrun" train "$tmp/she.so" "${train[@]}" --log "$tmp/two.csv" > "$tmp/two.out" 2>&1 ||
  bad "two namespaces: $(tail -5 "$tmp/two.out")"
grep -q "$b" "$tmp/agent.log" 2>/dev/null && ok "rank 1 was started in namespace $b (10.77.0.2) over the veth pair" ||
  bad "the remote rank was not started through the namespace agent"
out=$(curve_close "$tmp/one.csv" "$tmp/two.csv") && ok "two ranks in two namespaces = one process: $out" || bad "curves differ: $out"
finish
