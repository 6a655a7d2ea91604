#!/usr/bin/env bash
# Issue "ZeRO-3, CPU offload, activation checkpointing": stratum-train on 2 GPUs.
#   part A: gpt2-1.3b, bf16, seq 1024, micro 8: ZeRO-2 vs ZeRO-3 throughput, and
#           the step-time cost of offload_optimizer at stages 2 and 3;
#   part B: the largest LLaMA (llama-8b's shape, more layers) that trains at
#           ZeRO-3, without and with CPU offload, activation checkpointing on.
# For every run the estimate of stratum-estimate is printed next to the
# measured peak. Usage (on the device, after scripts/device_build.sh):
#   bash bench/run_zero3_gpu.sh [build-dir] [out-dir] [A|B|AB]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
out=${2:-${OUT:-/tmp}}
parts=${3:-AB}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# config FILE STAGE MICRO EXTRA-ZERO-KEYS [EXTRA-TOP-LEVEL]
config() {
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": $3, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_max_lr": 3e-4}},
 "gradient_clipping": 1.0, ${5:-}
 "zero_optimization": {"stage": $2, "overlap_comm": true, "reduce_bucket_size": 5e7 $4},
 "steps_per_print": 1}
JSON
}

# run NAME MODEL STEPS CONFIG [--set k=v ...]: prints the last step's metrics line
run() {
  local name=$1 model=$2 steps=$3 cfg=$4; shift 4
  local log=/tmp/run_$name
  local t0=$(date +%s)
  timeout "${RUN_TIMEOUT:-300}" "$build/bin/stratum-run" --num_gpus 2 "$build/bin/stratum-train" --config "$cfg" --model "$model" "$@" \
    --data default --cache-dir /tmp/stratum-cache --steps "$steps" --eval-every 0 --print-every 1 \
    --sample-tokens 0 --log-dir "$log" 2>&1 | while IFS= read -r line; do echo "+$(( $(date +%s) - t0 ))s $line"; done > "$log.txt"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: rc $rc, $(( $(date +%s) - t0 )) s wall"
  grep -E "error|rror|Killed|start-up|step 1/|step 3/" "$log.txt" | head -6
  tail -n 3 "$log/metrics.jsonl" 2>/dev/null
}

estimate() {  # MODEL MICRO [--checkpointing] [--set ...]
  local model=$1 micro=$2; shift 2
  "$build/bin/stratum-estimate" --model "$model" --num_gpus 2 --micro-batch "$micro" --seq 1024 "$@"
}

if [[ $parts == *A* ]]; then
  echo "##### A: gpt2-1.3b, 2 GPUs, bf16, seq 1024, micro 8"
  estimate gpt2-1.3b 8
  config "$out/z2.json" 2 8 ""
  config "$out/z3.json" 3 8 ""
  config "$out/z2off.json" 2 8 ', "offload_optimizer": {"device": "cpu", "pin_memory": true, "cpuadam_cores_perc": 0.45}'
  config "$out/z3off.json" 3 8 ', "offload_optimizer": {"device": "cpu", "pin_memory": true, "cpuadam_cores_perc": 0.45}'
  run z2_1.3b gpt2-1.3b 10 "$out/z2.json"
  run z3_1.3b gpt2-1.3b 10 "$out/z3.json"
  run z2off_1.3b gpt2-1.3b 6 "$out/z2off.json"
  run z3off_1.3b gpt2-1.3b 6 "$out/z3off.json"
fi

if [[ $parts == *B* ]]; then
  layers_plain=${LAYERS_PLAIN:-72}
  layers_off=${LAYERS_OFF:-60}
  ac='"activation_checkpointing": {},'
  knobs=', "stage3_max_live_parameters": 1e9, "stage3_prefetch_bucket_size": 5e8, "stage3_max_reuse_distance": 0'
  echo "##### B: largest LLaMA at ZeRO-3, micro 1, seq 1024, activation checkpointing"
  free -g | head -2
  nvidia-smi --query-gpu=memory.total --format=csv
  estimate llama-8b 1 --checkpointing --set layers=$layers_plain
  config "$out/big.json" 3 1 "$knobs" "$ac"
  run z3_llama_${layers_plain}l llama-8b 3 "$out/big.json" --set layers=$layers_plain --set max_seq_len=1024
  estimate llama-8b 1 --checkpointing --set layers=$layers_off
  config "$out/bigoff.json" 3 1 "$knobs"', "offload_optimizer": {"device": "cpu", "pin_memory": true, "cpuadam_cores_perc": 0.45}' "$ac"
  free -g | head -2
  run z3off_llama_${layers_off}l llama-8b 3 "$out/bigoff.json" --set layers=$layers_off --set max_seq_len=1024
fi
free -g | head -2
