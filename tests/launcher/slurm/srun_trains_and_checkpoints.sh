#!/usr/bin/env bash
# Ranks started by a real SLURM's srun: a one-node slurmctld + slurmd + MUNGE
# (start_slurm.sh) runs a 2-task stratum-train that trains and checkpoints,
# then resumes from it; srun without PMIx is refused by name. Then
# `stratum-run --launcher slurm` trains through srun (rank prefixes, 2 ranks),
# and a job whose rank 1 fails ends at once, naming that rank. Exits 77 (a
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
grep -q "batch 16 = 8 x 1 x 2 data-parallel" <<<"$out" || { echo "FAIL: not 2 data-parallel ranks"; echo "$out"; exit 1; }
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

# stratum-run --launcher slurm: one srun step, each task through the rank shim.
out=$(timeout 240 "$bin/stratum-run" --launcher slurm --num_procs 2 "$bin/stratum-train" \
  --config "$src/configs/default.json" --cache-dir "$work/cache" --steps 3 --print-every 1 --eval-every 0 \
  --sample-tokens 0 --save-dir "$work/ckpt-run" --log-dir "$work/log-run" 2>&1) || { echo "$out"; exit 1; }
echo "$out" | tail -2
grep -q "^stratum-run: 2 ranks through srun" <<<"$out" || { echo "FAIL: no srun launch line"; echo "$out"; exit 1; }
grep -q "^\[rank 0\] .*batch 16 = 8 x 1 x 2 data-parallel" <<<"$out" || { echo "FAIL: not 2 ranks, prefixed"; echo "$out"; exit 1; }
grep -q "^\[rank 0\] step 3/3" <<<"$out" || { echo "FAIL: did not train 3 steps"; echo "$out"; exit 1; }
# Rank 1 fails, rank 0 would sleep a minute: srun must end the step and stratum-run name rank 1.
printf '#!/bin/sh\n[ "$SLURM_PROCID" = 1 ] && exit 3\nexec sleep 60\n' >"$work/fail_rank1.sh"
chmod +x "$work/fail_rank1.sh"
start=$(date +%s)
status=0
out=$(timeout 50 "$bin/stratum-run" --launcher slurm --num_procs 2 "$work/fail_rank1.sh" 2>&1) || status=$?
took=$(( $(date +%s) - start ))
case $status in 0|124) echo "FAIL: stratum-run exited with $status after ${took}s"; echo "$out"; exit 1;; esac
[ "$took" -le 20 ] || { echo "FAIL: the failed job took ${took}s to end"; echo "$out"; exit 1; }
named="^stratum-run: job failed: rank 1 \(host [^,]+, local rank 1\) exited with status 3 \(srun exited with status [1-9]"
grep -qE "$named" <<<"$out" || { echo "FAIL: rank 1's failure not named"; echo "$out"; exit 1; }
echo "$out" | tail -1
echo "stratum-run --launcher slurm: 2 ranks trained; a failed rank ended the job in ${took}s (status $status)"
