#!/bin/sh
# Open MPI's plm_rsh_agent for tests/dist/run_netns.sh, in place of ssh:
# called as "agent [options] HOST COMMAND...", it runs COMMAND in the network
# namespace that XF_NETNS_MAP ("ip=namespace ...") gives for HOST.
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
host=$1
shift
ns=
for pair in $XF_NETNS_MAP; do [ "${pair%%=*}" = "$host" ] && ns=${pair#*=}; done
[ -n "$ns" ] || { echo "netns_agent: no namespace for host $host" >&2; exit 1; }
[ -n "$XF_NETNS_LOG" ] && echo "$host -> $ns: $*" >> "$XF_NETNS_LOG"
exec ip netns exec "$ns" sh -c "$*"
