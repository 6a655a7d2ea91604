#!/usr/bin/env bash
# The main job (`make run`): trains a byte-level GPT-2 on the default corpus
# with every local device: on all GPUs (bf16, ZeRO-2) gpt2-38m-bytes for 3000
# steps, else on 2 CPU ranks (fp32, ZeRO-1) gpt2-tiny-bytes (0.9M) for 300. Progress on the
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
if [ "$gpus" -gt 0 ]; then  # a model worth the GPUs: 38M parameters for a minute or two
  launch=(--num_gpus "$gpus"); config=configs/default_gpu.json; model=gpt2-38m-bytes; steps=3000; every=500
else
  launch=(--num_procs 2); config=configs/default.json; model=gpt2-tiny-bytes; steps=300; every=100
fi
exec "$bin/stratum-run" "${launch[@]}" "$bin/stratum-train" --config "$config" --model "$model" \
  --data default --cache-dir .stratum-cache --steps "$steps" --eval-every "$every" \
  --save-dir runs/default/checkpoints "$@"
