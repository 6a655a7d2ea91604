#!/usr/bin/env bash
# Stop the private SLURM started by start_slurm.sh STATE_DIR.
# Kills only the daemons whose pid files live in STATE_DIR. Exit 0 always.
set -u
STATE=${1:?usage: $0 STATE_DIR}
[ -d "$STATE" ] || exit 0

stop_pidfile() {  # pidfile name
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    # make sure it is one of ours (cmdline mentions the state dir)
    if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$STATE\|slurm\|munge"; then
      kill -TERM "$pid" 2>/dev/null
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$f"
}

# slurmd first (it also kills running job steps), then controller, then munge
stop_pidfile "$STATE/slurmd.pid"
stop_pidfile "$STATE/slurmctld.pid"
stop_pidfile "$STATE/munge/munged.pid"
rm -f "$STATE/munge/munge.socket" "$STATE/munge/munge.socket.lock"
exit 0
