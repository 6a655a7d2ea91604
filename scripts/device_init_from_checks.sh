#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "stratum-run stratum-train stratum-ckpt"` (build-device/): --init-from on CUDA.
#   1. the test fixtures (GPT-2 tied; Llama-3 sharded, GQA, RoPE scaling) at
#      ZeRO-3 on the GPU, fp32, lr 0: the export equals the directory bit for bit
#   2. gpt2-124m written by stratum-ckpt export, fine-tuned from at ZeRO-3 and
#      ZeRO-2 in bf16: the load's time and what the rank copied
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_COMM_TIMEOUT=120
bin=build-device/bin
work=$(mktemp -d)
cat > "$work/z3.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0, "weight_decay": 0.0}}, "zero_optimization": {"stage": 3}}
JSON
train() { "$bin/stratum-run" --num_gpus 1 "$bin/stratum-train" --data default --cache-dir "$work/cache" --eval-every 0 \
  --sample-tokens 0 "$@" 2>&1; }
echo "=== fixtures at ZeRO-3 on the GPU, fp32 ==="
for f in gpt2 llama3; do
  extra=(); [ $f = llama3 ] && extra=(--set max_seq_len=32)
  train --config "$work/z3.json" --init-from tests/data/hf/$f "${extra[@]}" --steps 1 --save-dir "$work/$f" \
    | grep -E "initialized from|step 1/1|error" | sed 's/^\[rank 0\] //'
  "$bin/stratum-ckpt" export "$work/$f" "$work/${f}_hf" --dtype fp32 | tail -1
  echo -n "$f: "; python3 scripts/compare_safetensors.py tests/data/hf/$f "$work/${f}_hf"
done
echo "=== gpt2-124m: export, then --init-from at ZeRO-3 and ZeRO-2, bf16 ==="
train --config configs/default_gpu.json --model gpt2-124m --steps 2 --save-dir "$work/base" | grep -E "step 2/2|error" | sed 's/^\[rank 0\] //'
"$bin/stratum-ckpt" export "$work/base" "$work/base_hf" --dtype bf16 | tail -1
sed 's/"stage": 2, "overlap_comm": true/"stage": 3/' configs/default_gpu.json > "$work/gpu_z3.json"
for cfg in "$work/gpu_z3.json" configs/default_gpu.json; do
  start=$(date +%s%N)
  train --config "$cfg" --init-from "$work/base_hf" --steps 20 --print-every 10 --save-dir "$work/ft" \
    | grep -E "initialized from|start-up peak|step (10|20)/20|error" | sed 's/^\[rank 0\] //'
  echo "$(basename "$cfg"): whole run $(( ($(date +%s%N) - start) / 1000000 )) ms"
  rm -rf "$work/ft"
done
rm -rf "$work"
