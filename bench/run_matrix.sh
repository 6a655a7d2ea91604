#!/usr/bin/env bash
# Issue 7's matrix on the GPU machine, one model and sequence length per call:
# Stratum (bench_engine, ZeRO 0-3) against the PyTorch peers (single GPU, DDP,
# FSDP2, eager and compiled; DeepSpeed ZeRO-1/2/3 without compiled ops), the
# systems alternating over two rounds; then the table (bench/peers/table.py).
# Usage (after scripts/device_build.sh --only-build --targets bench_engine, with
# .whl carried; scripts/device_wheels.sh fills it here):
#   bash bench/run_matrix.sh MODEL SEQ MICRO GPUS [build-dir] [out-dir]
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2-350m} seq=${2:-1024} micro=${3:-8} gpus=${4:-2}
build=${5:-build-device}
out=${6:-${OUT:-/tmp}}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
python3 -c "import deepspeed" 2>/dev/null || python3 -m pip install -q --no-index --find-links .whl deepspeed ||
  echo "run_matrix: DeepSpeed not installed (carry .whl): its rows are skipped"
log=$out/matrix_${model}_${seq}_${gpus}.jsonl
peer() {  # SYSTEM-ARGS...
  if [ "$gpus" = 1 ]; then python3 bench/peers/gpt_peers.py "$@" --model "$model" --seq "$seq" --micro "$micro"
  else python3 -m torch.distributed.run --nproc_per_node "$gpus" bench/peers/gpt_peers.py "$@" --model "$model" \
         --seq "$seq" --micro "$micro"; fi 2>&1 | grep -E '^\{"system"|Error' | tail -2 | tee -a "$log"
}
stratum() {  # STAGE
  mpirun --bind-to none -np "$gpus" -x NCCL_NVLS_ENABLE "$build/bin/bench_engine" --model "$model" --seq "$seq" \
    --micro "$micro" --stage "$1" 2>&1 | grep -E '^\{"system"|rror' | tail -2 | tee -a "$log"
}
for round in 1 2; do
  echo "=== round $round"
  for stage in 0 1 2 3; do stratum "$stage"; done
  if [ "$gpus" = 1 ]; then peer --system single; peer --system single --compile
  else
    peer --system ddp; peer --system ddp --compile
    peer --system fsdp2; peer --system fsdp2 --compile
    for z in 1 2 3; do peer --system deepspeed --zero "$z"; done
  fi
done
python3 bench/peers/table.py "$log"
