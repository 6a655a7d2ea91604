#!/usr/bin/env bash
# The collective benchmark on a GPU machine: Stratum and torch.distributed,
# alternating, two rounds each, 2 GPUs, bf16, 4 KiB .. 1 GiB (x4 steps: 1 MiB, 4, 16, 64, 256 MiB, 1 GiB); prints the table.
# Usage (on the device, after scripts/device_build.sh): bash bench/run_collectives.sh [build-dir] [out-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
out=${2:-${OUT:-/tmp}}
np=${NP:-2}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --bind-to none -np "$np" -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS)
for round in 1 2; do
  "${mpi[@]}" "$build/bin/bench_collectives" > "$out/coll_stratum_$round.csv"
  "${mpi[@]}" -x MASTER_PORT=$((29500 + round)) python3 bench/collectives_torch.py > "$out/coll_torch_$round.csv"
done
python3 bench/compare_collectives.py "$out"/coll_stratum_*.csv "$out"/coll_torch_*.csv | tee "$out/collectives.md"
