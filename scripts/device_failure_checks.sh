#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets ...`
# (build-device/): how jobs end and checkpoints stay sound on CUDA + NCCL.
#   1. the CRC-32C share of a large save on this machine's disk and cores
#   2. stratum-train on the GPU (NCCL world): save, verify, resume; a flipped
#      bit in the shard ends the resumed job in seconds naming file and tensor
#   3. the multi-rank failure, checkpoint-integrity, launcher and train-CLI
#      tests (CPU ranks under mpirun beside the GPU; this machine's Open MPI)
# Prints one line per figure; exits non-zero on the first failed check.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin=build-device/bin
work=$(mktemp -d /tmp/stratum_failure_checks.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "=== checksum cost of a save (16 cores, local disk) ==="
"$bin/bench_checkpoint_checksum" --gib 8 --dir "$work"

echo "=== stratum-train on the GPU: save, verify, resume, corrupt ==="
train() {
  "$bin/stratum-run" --num_gpus 1 "$bin/stratum-train" --config configs/default.json --model gpt2-tiny-bytes \
    --data default --cache-dir "$work/cache" --eval-every 0 --sample-tokens 0 --save-dir "$work/ckpt" "$@"
}
train --steps 20 --save-every 10 2>&1 | tail -3
"$bin/stratum-ckpt" info "$work/ckpt" --verify | tail -3
train --steps 30 --resume 2>&1 | grep -E "resumed at step|loaded checkpoint"
shard="$work/ckpt/global_step30/rank_00000.safetensors"
python3 - "$shard" <<'PY'
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    f.seek(8 + n + 5)
    b = f.read(1)
    f.seek(8 + n + 5)
    f.write(bytes([b[0] ^ 0x20]))
PY
start=$(date +%s.%N)
if train --steps 40 --resume > "$work/corrupt.log" 2>&1; then echo "FAILED: a corrupt shard loaded"; exit 1; fi
end=$(date +%s.%N)
grep -E "is corrupt|job failed" "$work/corrupt.log"
python3 -c "print('corrupt-shard job ended after %.1f s' % ($end - $start))"

echo "=== failure, integrity and CLI tests ==="
(cd build-device && ctest -R "DistProcess|checkpoint_np|CheckpointIntegrity|CheckpointManifest|CheckpointTags|ManifestLimits|TrainCli|TrainFlags|Crc32c|ReadRegularFile|TensorChecksum|Launcher|Hostfile|Hostname|MpirunCommand|Resources" \
  --output-on-failure --timeout 300 -j 8 2>&1 | tail -25)
