#!/usr/bin/env bash
# Ranks started by a real SLURM's srun: a one-node slurmctld + slurmd + MUNGE
# (start_slurm.sh) runs a 2-task stratum-train that trains and checkpoints,
# then resumes from it; srun without PMIx is refused by name. Exits 77 (a
# skip) where the daemons cannot start.
#   srun_trains_and_checkpoints.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
state=$(mktemp -d /tmp/stratum-slurm-XXXXXX)
work=$(mktemp -d /tmp/stratum-srun-XXXXXX)
trap '"$src/tests/launcher/slurm/stop_slurm.sh" "$state" >/dev/null 2>&1; rm -rf "$state" "$work"' EXIT
env_lines=$("$src/tests/launcher/slurm/start_slurm.sh" "$state") || exit $?
eval "$env_lines"
export STRATUM_COMM_TIMEOUT=60
train() {  # train SRUN_MPI_FLAG STRATUM_TRAIN_ARGS...
  local mpi=$1; shift
  timeout 240 srun -n 2 "$mpi" "$bin/stratum-train" "$@" --config "$src/configs/default.json" --cache-dir "$work/cache" \
    --print-every 1 --eval-every 0 --sample-tokens 0 --save-dir "$work/ckpt" --log-dir "$work/log"
}
out=$(train --mpi=pmix --steps 4 2>&1) || { echo "$out"; exit 1; }
echo "$out" | tail -4
grep -q "batch 16 = 8 x 1 x 2 ranks" <<<"$out" || { echo "FAIL: not 2 data-parallel ranks"; echo "$out"; exit 1; }
[ -d "$work/ckpt/global_step4" ] || { echo "FAIL: no checkpoint global_step4"; exit 1; }
out=$(train --mpi=pmix --resume --steps 6 2>&1) || { echo "$out"; exit 1; }
grep -q "step 5/6" <<<"$out" && ! grep -q "step 1/6" <<<"$out" || { echo "FAIL: did not resume at step 5"; echo "$out"; exit 1; }
[ -d "$work/ckpt/global_step6" ] || { echo "FAIL: no checkpoint global_step6"; exit 1; }
# Without PMIx Open MPI's ranks cannot join (each would be a world of one).
if out=$(timeout 120 srun -n 2 --mpi=none "$bin/stratum-train" --config "$src/configs/default.json" \
    --cache-dir "$work/cache" --steps 1 2>&1); then
  echo "FAIL: srun --mpi=none trained"; echo "$out"; exit 1
fi
grep -qE "mpi=pmix|PMI support" <<<"$out" || { echo "FAIL: srun --mpi=none without a clear error"; echo "$out"; exit 1; }
echo "srun: 2 ranks trained, checkpointed and resumed"
