#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "bench_engine stratum-run stratum-train test_tensor_parallel test_tensor_parallel_engine test_engine"`
# (build-device/): what of tensor parallelism one GPU can show.
#   1. the sharded layers and models (a group of one on NCCL: the identity,
#      the whole model's kernels) and the TP x DP engine (CPU ranks: NCCL cannot
#      put two ranks on one GPU)
#   2. the data-parallel engine on CUDA after the engine's model-parallel
#      changes: its tests, and the main job (stratum-train, bf16, ZeRO-2)
#      for 30 steps with its progress line
# Prints the test summaries, every failure, and the training's last lines.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_COMM_TIMEOUT=120
bin=build-device/bin
summary() { sed 's/\x1b\[[0-9;]*m//g' | grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure|Expected|actual" | head -20; }

echo "=== tensor-parallel layers and models, NCCL, 1 rank ==="
mpirun --oversubscribe --bind-to none -np 1 "$bin/test_tensor_parallel" 2>&1 | summary
echo "=== tensor-parallel engine, CPU ranks: 2 and 4 ==="
for np in 2 4; do
  mpirun --oversubscribe --bind-to none -np "$np" -x STRATUM_DISABLE_NCCL=1 "$bin/test_tensor_parallel_engine" 2>&1 |
    summary
done
echo "=== data-parallel engine on CUDA, 1 rank ==="
mpirun --oversubscribe --bind-to none -np 1 "$bin/test_engine" 2>&1 | summary
echo "=== the main job on the GPU: 30 steps ==="
rm -rf runs/device-check
"$bin/stratum-run" --num_gpus 1 "$bin/stratum-train" --config configs/default_gpu.json --model gpt2-tiny-bytes \
  --data default --cache-dir .stratum-cache --steps 30 --eval-every 30 --print-every 10 --sample-tokens 40 \
  --save-dir runs/device-check/checkpoints 2>&1 | tail -12
