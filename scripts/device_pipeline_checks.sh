#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "bench_engine test_pipeline test_pipeline_engine test_nn"` (build-device/):
# what of pipeline parallelism one GPU can show.
#   1. the schedule, partition and simulator tests; the pipeline engine's tests
#      (CPU ranks: NCCL cannot put two stages on one GPU)
#   2. ZB-H1's split backward on CUDA: gpt2-1.3b (scenario 1gpu-gpt2-1.3b,
#      bf16, ZeRO-0) with the backward's weight-gradient GEMMs deferred and run
#      after it (B then W) against the fused backward, alternating rounds: the
#      backward's time, the step's, peak memory, and the losses (equal: the
#      same GEMMs on the same tensors)
# Prints one line per figure and every failed test; goes on after a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_LOG_LEVEL=warn
bin=build-device/bin
micro=${MICRO:-32}

echo "=== pipeline tests ==="
"$bin/test_pipeline" 2>&1 | grep -E "^\[  (PASSED|FAILED) |FAILED" | head -10
mpirun --oversubscribe --bind-to none -np 2 -x STRATUM_DISABLE_NCCL=1 "$bin/test_pipeline_engine" 2>&1 |
  sed 's/\x1b\[[0-9;]*m//g' | grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure" | head -10

echo "=== split backward (B then W) against the fused backward: gpt2-1.3b, seq 1024, micro $micro, bf16 ==="
for round in 1 2; do
  for split in "" --split-backward; do
    "$bin/bench_engine" --model gpt2-1.3b --seq 1024 --micro "$micro" --steps 8 --warmup 3 --stage 0 $split 2>&1 |
      python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"): print(line[:300]); continue
    r = json.loads(line)
    print("round '"$round"' {:>9}: backward {:.4f} s, step {:.4f} s, {:,.0f} tokens/s, peak {:.1f} GiB, loss {:.6f}, deferred GEMMs {}".format(
        "split" if r.get("split_backward") else "fused", r["backward_s"], r["wall_step_s"], r["tokens_per_s_per_gpu"],
        r["peak_memory_gib"], r["loss"], r.get("deferred_weight_gemms")))'
  done
done
