#!/usr/bin/env bash
# Engine throughput on a GPU machine: ZeRO 0/1/2/3 on 1 and 2 GPUs, bf16, a
# built-in preset (default gpt2-350m), seq 1024. Usage (after scripts/device_build.sh):
#   bash bench/run_engine.sh [build-dir] [out-dir] [extra bench_engine flags...]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
out=${2:-${OUT:-/tmp}}
shift 2 2>/dev/null || true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for np in 1 2; do
  for stage in 0 1 2 3; do
    mpirun --bind-to none -np "$np" -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
      "$build/bin/bench_engine" --stage "$stage" "$@" 2>&1 | grep -E '^\{"system"|rror' | tee -a "$out/engine.txt"
  done
done
