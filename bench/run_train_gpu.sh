#!/usr/bin/env bash
# stratum-train on GPUs (issue "The main job"): gpt2-124m and gpt2-350m, bf16,
# ZeRO-2, seq 1024, on 1 and 2 GPUs, default corpus; then the exported
# gpt2-124m checkpoint loaded by Hugging Face transformers, logits compared.
# Usage (on the device, after scripts/device_build.sh): bash bench/run_train_gpu.sh [build-dir] [out-dir]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
out=${2:-${OUT:-/tmp}}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cfg=$out/train_gpu.json
cat > "$cfg" <<JSON
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 6e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 40, "warmup_num_steps": 5}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": 5e7},
 "steps_per_print": 10}
JSON
for model in gpt2-124m gpt2-350m; do
  for gpus in 1 2; do
    echo "=== $model on $gpus GPU(s)"
    "$build/bin/stratum-run" --num_gpus "$gpus" "$build/bin/stratum-train" --config "$cfg" --model "$model" \
      --data default --cache-dir /tmp/stratum-cache --steps 40 --eval-every 40 --eval-batches 2 --print-every 10 \
      --sample-tokens 0 --log-dir "$out/log_${model}_${gpus}" \
      $([ "$model" = gpt2-124m ] && [ "$gpus" = 2 ] && echo --save-dir /tmp/ckpt124) 2>&1 |
      grep -E "step (10|20|30|40)/|eval loss|error|rror" | tail -6
  done
done
"$build/bin/stratum-ckpt" info /tmp/ckpt124 | head -8
"$build/bin/stratum-ckpt" export /tmp/ckpt124 /tmp/hf124 --dtype fp32
"$build/bin/dump_logits" /tmp/hf124 /tmp/stratum_logits.safetensors
python3 bench/hf_compare.py /tmp/hf124 /tmp/stratum_logits.safetensors
