#!/usr/bin/env bash
# One traced training step of Stratum and of the PyTorch single-GPU peer on the
# same model, side by side on GPUs 0 and 1 of the GPU machine, then the kernel
# summary of each (bench/profile_summary.py); the traces go to the out-dir gzipped.
# Usage: bash bench/run_profiles.sh MODEL SEQ MICRO [stage] [build-dir] [out-dir] [peer flags...]
# STRATUM_FLAGS: more bench_engine flags (e.g. --set max_seq_len=2048).
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2-1.3b} seq=${2:-1024} micro=${3:-8} stage=${4:-0}
build=${5:-build-device}
out=${6:-${OUT:-/tmp}}
shift 6 2>/dev/null || shift $#
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tag=${model}_${seq}_${micro}
CUDA_VISIBLE_DEVICES=0 mpirun --bind-to none -np 1 -x CUDA_VISIBLE_DEVICES -x NCCL_NVLS_ENABLE \
  "$build/bin/bench_engine" --model "$model" --seq "$seq" --micro "$micro" --stage "$stage" --steps 6 --warmup 3 \
  --profile "/tmp/stratum_$tag.json" ${STRATUM_FLAGS:-} 2>&1 | grep -E '^\{"system"|rror' &
CUDA_VISIBLE_DEVICES=1 python3 bench/peers/gpt_peers.py --system single --model "$model" --seq "$seq" \
  --micro "$micro" --steps 6 --warmup 3 --profile "/tmp/torch_$tag.json" "$@" 2>&1 | grep -E '^\{"system"|Error' &
wait
python3 bench/profile_summary.py "/tmp/stratum_$tag.json" "/tmp/torch_$tag.json" --top 30
gzip -c "/tmp/stratum_$tag.json" >"$out/stratum_$tag.json.gz"
gzip -c "/tmp/torch_$tag.json" >"$out/torch_$tag.json.gz"
