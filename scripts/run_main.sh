#!/usr/bin/env bash
# The main job (`make run`): trains the default small model (gpt2-tiny-bytes,
# byte-level) on the default corpus with every local device: all GPUs (bf16,
# ZeRO-2) when there are any, else 2 CPU ranks (fp32, ZeRO-1). Progress on the
# terminal, metrics (and summary.json, loss_curve.svg) in runs/default/,
# checkpoints in runs/default/checkpoints,
# a sample of generated text at the end. Extra arguments go to stratum-train.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
bin=$build_dir/bin
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true); fi
if [ "$gpus" -gt 0 ]; then
  launch=(--num_gpus "$gpus"); config=configs/default_gpu.json
else
  launch=(--num_procs 2); config=configs/default.json
fi
exec "$bin/stratum-run" "${launch[@]}" "$bin/stratum-train" --config "$config" --model gpt2-tiny-bytes \
  --data default --cache-dir .stratum-cache --steps 300 --eval-every 100 \
  --save-dir runs/default/checkpoints "$@"
