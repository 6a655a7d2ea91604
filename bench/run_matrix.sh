#!/usr/bin/env bash
# Issue 7's matrix on the GPU machine, one model and sequence length per call:
# Stratum (bench_engine, ZeRO 0-3) against the PyTorch peers (single GPU, DDP,
# FSDP2, eager and compiled; DeepSpeed ZeRO-1/2/3 without compiled ops), the
# systems alternating round by round; then the table (bench/peers/table.py).
# With GPUS=1 on a machine of two GPUs, Stratum's rows run on GPU 0 while the
# peers' run on GPU 1 (separate chips; halves the time).
# Usage (after scripts/device_build.sh --only-build --targets bench_engine, with
# .whl carried; scripts/device_wheels.sh fills it here):
#   bash bench/run_matrix.sh MODEL SEQ MICRO GPUS [build-dir] [out-dir]
# Knobs (environment): ROUNDS (1), STEPS (10), WARMUP (3), STAGES ("0 1 2 3"),
#   PEERS ("ddp ddp-compile fsdp2 fsdp2-compile ds1 ds2 ds3"; with GPUS=1:
#   "single single-compile"), STRATUM_FLAGS (more bench_engine flags); NCCL_*
#   variables pass to Stratum's ranks (torch.distributed.run passes them itself).
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2-350m} seq=${2:-1024} micro=${3:-8} gpus=${4:-2}
build=${5:-build-device}
out=${6:-${OUT:-/tmp}}
rounds=${ROUNDS:-1} steps=${STEPS:-10} warmup=${WARMUP:-3} stages=${STAGES-0 1 2 3}
if [ "$gpus" = 1 ]; then peers=${PEERS-single single-compile}
else peers=${PEERS-ddp ddp-compile fsdp2 fsdp2-compile ds1 ds2 ds3}; fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
if [[ "$peers" == *ds* ]] && ! python3 -c "import deepspeed" 2>/dev/null; then
  # DeepSpeed and the dependencies the image lacks travel as wheels (.whl, carried).
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} DS_BUILD_OPS=0 ||
    echo "run_matrix: DeepSpeed not installed (carry .whl): its rows will fail"
fi
log=$out/matrix_${model}_${seq}_${gpus}.jsonl
common=(--model "$model" --seq "$seq" --micro "$micro" --steps "$steps" --warmup "$warmup")
peer() {  # NAME (single, single-compile, ddp, ddp-compile, fsdp2, fsdp2-compile, ds1..ds3)
  local args=()
  case "$1" in
    ds*) args=(--system deepspeed --zero "${1#ds}") ;;
    *-compile) args=(--system "${1%-compile}" --compile) ;;
    *) args=(--system "$1") ;;
  esac
  if [ "$gpus" = 1 ]; then python3 bench/peers/gpt_peers.py "${args[@]}" "${common[@]}"
  else python3 -m torch.distributed.run --nproc_per_node "$gpus" bench/peers/gpt_peers.py "${args[@]}" "${common[@]}"
  fi 2>&1 | grep -E '^\{"system"|Error|error:' | tail -2 | tee -a "$log"
}
stratum() {  # STAGE
  local pass=(-x CUDA_VISIBLE_DEVICES) v
  [ -n "${CUDA_VISIBLE_DEVICES:-}" ] || pass=()
  # Every NCCL_* and STRATUM_* setting reaches the ranks (e.g. NCCL_MAX_CTAS to leave compute more SMs).
  for v in $(env | grep -oE '^(NCCL|STRATUM)_[A-Z_0-9]*'); do pass+=(-x "$v"); done
  mpirun --bind-to none -np "$gpus" "${pass[@]}" "$build/bin/bench_engine" \
    "${common[@]}" --stage "$1" ${STRATUM_FLAGS:-} 2>&1 | grep -E '^\{"system"|rror' | tail -2 | tee -a "$log"
}
two_chips=$(nvidia-smi -L 2>/dev/null | wc -l)
for round in $(seq "$rounds"); do
  echo "=== $model seq $seq micro $micro on $gpus GPU(s), round $round"
  if [ "$gpus" = 1 ] && [ "$two_chips" -ge 2 ]; then
    (export CUDA_VISIBLE_DEVICES=0; for stage in $stages; do stratum "$stage"; done) &
    (export CUDA_VISIBLE_DEVICES=1; for p in $peers; do peer "$p"; done)
    wait
  else
    for stage in $stages; do stratum "$stage"; done
    for p in $peers; do peer "$p"; done
  fi
done
python3 bench/peers/table.py "$log"
