#!/usr/bin/env bash
# llama-1b training one step at 1,048,576 tokens on one GPU (ZeRO-3, the
# optimizer and the activation checkpoints on the host, MLP and loss tiled by
# 8192: scripts/device_long_context.sh's part 2), ON THE GPU MACHINE after the
# build. The step takes about 14 minutes on an H100, past one device call's
# 10, so the run goes on in the background between calls on the still-warm
# machine (its own session, setsid, so that the end of a call does not end it;
# nothing else should use the GPU meanwhile: it takes ~70 GiB):
#   bash scripts/device_long_1m.sh start   starts it (returns at once);
#   bash scripts/device_long_1m.sh wait    waits until QUEUE_DEADLINE_AT (or
#                                          DEADLINE_AT), then exits 124 if the
#                                          run goes on (scripts/device_queue.sh
#                                          calls the step again in the next
#                                          call), else prints its line and logs.
set -uo pipefail
cd "$(dirname "$0")/.."
state=build-device/long-1m
mkdir -p "$state"
case "${1:-}" in
  start)
    if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then echo "already running"; exit 0; fi
    rm -rf "$state"/*
    mkdir -p "$state/out"
    OUT=$PWD/$state/out PARTS=2 LONG_MODELS=llama-1b FIRST_1B=1048576 MAX_SEQ=1048576 \
      setsid nohup bash scripts/device_long_context.sh > "$state/log.txt" 2>&1 &
    echo $! > "$state/pid"
    echo "started llama-1b at 1,048,576 tokens (pid $!) at $(date -u +%H:%M:%S)"
    ;;
  wait)
    [ -f "$state/pid" ] || { echo "not started: run 'start' first"; exit 1; }
    deadline=${QUEUE_DEADLINE_AT:-${DEADLINE_AT:-$(( $(date +%s) + 540 ))}}
    while kill -0 "$(cat "$state/pid")" 2>/dev/null; do
      if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "still running at $(date -u +%H:%M:%S); the next call waits on"
        tail -3 "$state"/out/*.log 2>/dev/null | cut -c1-200
        exit 124
      fi
      sleep 5
    done
    cat "$state/log.txt"
    cp "$state"/out/*.log "${OUT:-/tmp}"/ 2>/dev/null || true
    ;;
  *) echo "usage: $0 start|wait" >&2; exit 2 ;;
esac
