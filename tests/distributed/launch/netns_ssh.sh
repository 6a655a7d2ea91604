#!/bin/sh
# Test-only stand-in for ssh that makes network namespaces into hosts: Open
# MPI calls it as `agent [options] HOST COMMAND...`; it finds HOST's namespace
# in $STRATUM_NETNS_HOSTS ("10.201.7.2=ns-a 10.201.7.3=ns-b") and runs the
# command there, in a UTS namespace of its own whose host name is the
# namespace's name (so Open MPI's per-host shared-memory files do not collide).
# Like ssh's remote side, it runs the command through sh; only tests use it.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-l|-p|-i|-F|-J) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"
shift
ns=""
for pair in ${STRATUM_NETNS_HOSTS:-}; do
  case "$pair" in
    "$host="*) ns="${pair#*=}" ;;
  esac
done
if [ -z "$ns" ]; then
  echo "netns_ssh.sh: no network namespace for host '$host' in STRATUM_NETNS_HOSTS" >&2
  exit 255
fi
exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname '$ns' && $*"
