#!/usr/bin/env bash
# Runs a list of device steps in order ON THE GPU MACHINE, each at most once
# per machine, so that one command line serves a chain of 10-minute device
# calls: a step that finished is skipped by a later call on the still-warm
# machine, and a step is started only when its estimated seconds fit before
# the call's budget. The build step (a command starting with "build:") may be
# cut by the budget and goes on, incrementally, in the next call.
#
#   bash scripts/device_queue.sh [--budget S] STEP...
#   STEP is NAME=EST_SECONDS=COMMAND, e.g.
#     'goodput=300=bash scripts/device_goodput.sh'
#
# Each step runs with QUEUE_DEADLINE_AT (epoch seconds: the call's budget, less
# 20 s to pack) for steps that stop early themselves, and with OUT set to its own folder, so a step's result files
# never compete for the device tool's eight returned files: at the end every
# step's log and files are packed into one $OUT/queue-results.tar.gz (results
# of earlier calls on the same machine included). Prints, per step, its
# status, seconds and the tail of its log, then which steps are left.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

budget=570
if [ "${1:-}" = --budget ]; then budget=$2; shift 2; fi
start=$(date +%s)
state=build-device/queue
mkdir -p "$state/done" "$state/out"
tail_lines=${TAIL_LINES:-15}

# Files over 4 MB (traces) stay on the machine, named: the tarball must stay
# under the tool's 16 MiB a file.
pack() {
  [ -n "${OUT:-}" ] || return 0
  (cd "$state" && find out -type f -size -4M -print0 | tar -czf "$OUT/queue-results.tar.gz" --null -T -) || true
  find "$state/out" -type f -size +4M -printf "not returned (over 4 MB): %p\n"
}
trap pack EXIT

left=()
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}
  est=${rest%%=*}; cmd=${rest#*=}
  if [ -f "$state/done/$name" ]; then echo "=== $name: done in an earlier call ($(cat "$state/done/$name"))"; continue; fi
  if [ ${#left[@]} -gt 0 ]; then left+=("$name"); continue; fi
  now=$(date +%s); remaining=$((start + budget - now))
  resumable=0; [ "${cmd#build:}" != "$cmd" ] && { resumable=1; cmd=${cmd#build:}; }
  if [ "$est" -gt "$remaining" ] && [ "$resumable" = 0 ]; then
    echo "=== $name: estimated ${est}s, ${remaining}s left in this call: left for the next call"
    left+=("$name"); continue
  fi
  dir=$state/out/$name; mkdir -p "$dir"
  echo "=== $name: starting at $(date -u +%H:%M:%S) (est ${est}s, ${remaining}s left)"
  t0=$(date +%s)
  OUT=$PWD/$dir QUEUE_DEADLINE_AT=$((start + budget - 20)) timeout --signal=TERM --kill-after=10 "$remaining" bash -c "$cmd" > "$dir/log.txt" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  tail -n "$tail_lines" "$dir/log.txt" | cut -c1-300
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    echo "=== $name: CUT after ${secs}s by the call's budget"; left+=("$name")
  else
    echo "rc=$rc ${secs}s" > "$state/done/$name"
    echo "=== $name: rc=$rc in ${secs}s"
  fi
done
if [ ${#left[@]} -gt 0 ]; then echo "QUEUE LEFT: ${left[*]}"; else echo "QUEUE EMPTY"; fi
