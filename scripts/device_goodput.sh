#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "stratum-train stratum-run"` (build-device/): what a checkpoint costs
# training. llama-1b, bf16, ZeRO-2 (its states about 14.8 GB a save), seq
# 2048, micro-batch 16, 120 steps with saves at steps 40 and 80 and one at
# the end: once synchronous, once with "checkpoint": {"async": true}. Each
# save's bytes, blocked and write seconds (the run's own report; the first
# async save also allocates its pinned staging), and the steps after each
# save (those beside the background write) against the same steps of the
# synchronous run, whose steps have no write beside them.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin=${BIN:-build-device/bin}
work=$(mktemp -d)
# An 80 GB H100 holds micro-batch 8 (stratum-estimate: 18 GiB of states and
# 53 GiB of activations at 16): the same 32K tokens a step in 2 micro-batches.
micro=16 accum=1
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
if [ -n "$gpu_mib" ] && [ "$gpu_mib" -lt 100000 ]; then micro=8 accum=2; fi
echo "GPU memory ${gpu_mib:-?} MiB: micro-batch $micro x $accum"
trap 'rm -rf "$work"' EXIT
for mode in sync async; do
  async=false
  [ "$mode" = async ] && async=true
  cat > "$work/$mode.json" <<JSON
{"train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": $accum, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 2}, "checkpoint": {"async": $async},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
JSON
  "$bin/stratum-run" --num_gpus 1 "$bin/stratum-train" --config "$work/$mode.json" --model llama-1b \
    --set max_seq_len=2048 --data default --cache-dir "$work/cache" --steps 120 --eval-every 0 --sample-tokens 0 \
    --print-every 10 --save-dir "$work/ckpt-$mode" --save-every 40 --log-dir "$work/$mode" > "$work/$mode.log" 2>&1 ||
    { echo "$mode: exit $?"; tail -6 "$work/$mode.log"; }
  echo "=== $mode ==="
  grep -E "saved checkpoint" "$work/$mode.log" | sed 's/^.*saved/  saved/'
  grep -E "VmHWM|host memory" "$work/$mode.log" | head -2
  rm -rf "$work/ckpt-$mode"
  [ -n "${OUT:-}" ] && cp "$work/$mode.log" "$OUT/goodput-$mode.log"
done
python3 - "$work" <<'PY'
import csv, statistics, sys
work = sys.argv[1]
def times(mode):
    rows = list(csv.DictReader(open(f"{work}/{mode}/metrics.csv")))
    return {int(r["step"]): float(r["tokens_per_s"]) for r in rows}
try:
    s, a = times("sync"), times("async")
except OSError as e:
    sys.exit(f"no metrics: {e}")
for name, lo, hi in (("steps 11-40 (no save yet)", 11, 40), ("steps 41-80 (after the first save)", 41, 80),
                     ("steps 81-120 (after the second save)", 81, 120)):
    ms = statistics.median(s[i] for i in range(lo, hi + 1) if i in s)
    ma = statistics.median(a[i] for i in range(lo, hi + 1) if i in a)
    print(f"{name}: median tokens/s sync {ms:.0f}, async {ma:.0f} ({(ma / ms - 1) * 100:+.1f}%)")
base = statistics.median(a[j] for j in range(11, 41) if j in a)
slow = [i for i in range(41, 121) if i in a and a[i] < 0.95 * base]
print(f"async steps 41-120 more than 5% below the async run's median of steps 11-40: {len(slow)} {slow[:16]}")
PY
