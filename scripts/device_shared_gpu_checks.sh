#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "test_collectives stratum-train"` (build-device/): more ranks than GPUs, the
# ranks sharing the one GPU and their tensors travelling over MPI, staged
# through pinned host memory (NCCL needs one GPU a rank).
#   1. test_collectives at 1 rank (NCCL, and MPI carrying CUDA tensors beside
#      it), at 2 and 4 ranks on the one GPU (every collective over MPI with
#      CUDA tensors), and at 2 ranks with STRATUM_SHARED_GPU=0 (CPU ranks)
#   2. stratum-train, gpt2-tiny-bytes for 5 steps: 2 ranks on the GPU in fp32
#      ZeRO-1 (configs/default.json) beside the same run on CPU ranks
#      (STRATUM_SHARED_GPU=0; the losses agree to float rounding), 2 and 4
#      ranks on the GPU in bf16 ZeRO-2 with overlap_comm (configs/default_gpu.json)
# Prints one line per figure and every failure; goes on after a failure and
# exits non-zero if anything failed. Logs go to $OUT when it is set.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_COMM_TIMEOUT=60
bin=build-device/bin
work=$(mktemp -d /tmp/stratum_shared_gpu.XXXXXX)
keep_logs() {  # one file: $OUT takes few
  [ -n "${OUT:-}" ] && for f in "$work"/*.log; do echo "##### $(basename "$f")"; cat "$f"; done >"$OUT/shared_gpu_checks.log"
  rm -rf "$work"
}
trap keep_logs EXIT
failed=0
# A hung job is killed and reported, not left to eat the call's time.
mpi() { timeout 120 mpirun --oversubscribe --bind-to none "$@"; }
seconds_since() { python3 -c "import sys, time; print('%.1f' % (time.time() - float(sys.argv[1])))" "$1"; }

echo "=== Open MPI's CUDA support (Stratum stages through host memory either way) ==="
ompi_info --parsable --all 2>/dev/null | grep -m1 "mpi_built_with_cuda_support:value" || echo "(ompi_info does not say)"

echo "=== test_collectives: every collective, over NCCL and over MPI with CUDA tensors ==="
collectives() {  # NAME NP [mpirun arguments]
  local name=$1 np=$2 start rc
  shift 2
  start=$(date +%s.%N)
  mpi -np "$np" "$@" "$bin/test_collectives" --gtest_color=no >"$work/collectives_$name.log" 2>&1
  rc=$?
  echo "-- $name: $np ranks, exit $rc, $(seconds_since "$start") s"
  grep -m1 -E "share .* on this node|on this node but" "$work/collectives_$name.log"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]|Failure|error:" "$work/collectives_$name.log" | head -20
  [ "$rc" = 0 ] || failed=1
}
collectives np1 1
collectives np2 2
collectives np4 4
collectives np2_cpu 2 -x STRATUM_SHARED_GPU=0 -x GTEST_FILTER='Collectives.DeviceWorld*:Collectives.AllReduceEveryOpAndDtype'

echo "=== stratum-train on the one GPU: gpt2-tiny-bytes, 5 steps ==="
train() {  # NAME NP CONFIG [mpirun -x ...]
  local name=$1 np=$2 config=$3 start rc
  shift 3
  start=$(date +%s.%N)
  mpi -np "$np" "$@" "$bin/stratum-train" --config "$config" --model gpt2-tiny-bytes --data default \
    --cache-dir "$work/cache" --log-dir "$work/$name" --eval-every 0 --sample-tokens 0 --steps 5 --print-every 1 \
    >"$work/train_$name.log" 2>&1
  rc=$?
  echo "-- $name: $np ranks, $config, exit $rc, $(seconds_since "$start") s"
  grep -m1 -E "share .* on this node|on this node but" "$work/train_$name.log"
  if [ "$rc" != 0 ]; then
    failed=1
    tail -c 1500 "$work/train_$name.log"; echo
    return
  fi
  python3 - "$work/$name" <<'PY'
import json, sys
d = sys.argv[1]
steps = [json.loads(l) for l in open(d + "/metrics.jsonl")]
s = json.load(open(d + "/summary.json"))
print("   device {} | {} | losses {} | tokens/s {:,.0f} | peak {:.2f} GiB".format(
    s["device"], s["dtype"], " ".join("%.5f" % m["loss"] for m in steps), s["tokens_per_s"], s["peak_memory_gib"]))
PY
}
train zero1_gpu 2 configs/default.json
train zero1_cpu 2 configs/default.json -x STRATUM_SHARED_GPU=0
train zero2_bf16_gpu 2 configs/default_gpu.json
train zero2_bf16_gpu_np4 4 configs/default_gpu.json
if [ -f "$work/zero1_gpu/metrics.jsonl" ] && [ -f "$work/zero1_cpu/metrics.jsonl" ]; then
  python3 - "$work/zero1_gpu" "$work/zero1_cpu" <<'PY'
import json, sys
gpu, cpu = ([json.loads(l)["loss"] for l in open(d + "/metrics.jsonl")] for d in sys.argv[1:])
print("fp32 ZeRO-1, shared GPU against CPU ranks: largest loss difference %.2e over %d steps" %
      (max(abs(a - b) for a, b in zip(gpu, cpu)), len(gpu)))
PY
fi
[ "$failed" = 0 ] && echo "shared-GPU checks: all passed" || echo "shared-GPU checks: FAILED (above)"
exit "$failed"
