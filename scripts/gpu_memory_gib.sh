#!/usr/bin/env bash
# Prints $2 when the first GPU holds more than $1 GiB, else $3: a scenario
# sized for the card at hand (scripts/device_all.sh).
#   bash scripts/gpu_memory_gib.sh 100 big-scenario small-scenario
set -uo pipefail
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
if [ -n "$mib" ] && [ "$mib" -gt $(( $1 * 1024 )) ]; then echo "$2"; else echo "$3"; fi
