#!/bin/sh
# Test-only stand-in for ssh, given to mpirun as its launch agent
# (stratum-run --launcher_agent): Open MPI calls it as `agent [options] HOST
# COMMAND...` to start its daemon on HOST. There is no sshd on the test
# machine, so this drops the options and the host and runs the command here,
# through sh as ssh would on the remote side. It records each HOST in
# $STRATUM_FAKE_SSH_LOG when that is set, so tests can see which "hosts" were
# reached this way.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-l|-p|-i|-F|-J) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"
shift
if [ -n "${STRATUM_FAKE_SSH_LOG:-}" ]; then
  echo "$host" >> "$STRATUM_FAKE_SSH_LOG"
fi
exec /bin/sh -c "$*"
