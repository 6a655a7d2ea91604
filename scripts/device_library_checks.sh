#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "stratum-config stratum-report stratum-run stratum-train stratum-ckpt stratum-estimate test_engine test_tensor_parallel"`
# (build-device/): Stratum as a library on CUDA torch and NCCL.
#   1. cmake --install into a fresh prefix; both examples built from there
#      alone and run on the GPU (1 rank, NCCL) without calling finalize
#   2. the data-parallel engine's tests and the tensor-parallel layers on NCCL
#      (MPI now finalizes when the last communicator goes)
#   3. the main job through stratum-run for 30 steps
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_COMM_TIMEOUT=120
bin=build-device/bin
summary() { sed 's/\x1b\[[0-9;]*m//g' | grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|Expected|actual" | head -20; }
work=$(mktemp -d)
echo "=== install and the examples on the GPU ==="
cmake --install build-device --prefix "$work/prefix" > "$work/install.log" 2>&1 || tail -20 "$work/install.log"
for ex in train_module train_layer_stack; do
  cmake -S "examples/$ex" -B "$work/$ex" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/$ex.log" 2>&1 &&
    cmake --build "$work/$ex" >> "$work/$ex.log" 2>&1 || { tail -30 "$work/$ex.log"; continue; }
  mpirun --oversubscribe --bind-to none -np 1 "$work/$ex/$ex" 40 2>&1 | grep -v -e "^---" -e "^$" | tail -8
  echo "$ex exit status: ${PIPESTATUS[0]}"
done
echo "=== data-parallel engine on CUDA, tensor-parallel layers on NCCL ==="
mpirun --oversubscribe --bind-to none -np 1 "$bin/test_engine" 2>&1 | summary
mpirun --oversubscribe --bind-to none -np 1 "$bin/test_tensor_parallel" 2>&1 | summary
echo "=== the main job: 30 steps ==="
rm -rf runs/device-check
"$bin/stratum-run" --num_gpus 1 "$bin/stratum-train" --config configs/default_gpu.json --model gpt2-tiny-bytes \
  --data default --cache-dir .stratum-cache --steps 30 --eval-every 30 --print-every 10 --sample-tokens 20 \
  --save-dir runs/device-check/checkpoints 2>&1 | tail -6
echo "main job exit status: ${PIPESTATUS[0]}"
