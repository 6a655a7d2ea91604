#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets ...`
# (build-device/): the ds_config options the engine implements, on CUDA + NCCL.
#   1. the GPU tests of the optimizers (Lamb, Adam without bias correction, the
#      mixed-precision kernel), the flops profiler, the engine options, the
#      config policy and corpus
#   2. stratum-train on the GPU with every diagnostic on: comms_logger
#      (verbose), wall_clock_breakdown, flops_profiler, activation
#      checkpointing's profile and contiguous buffer, Lamb, bf16
#   3. gpt2-350m, bf16: the flops profiler's forward flops against 6N + 12·L·d·s;
#      Lamb against AdamW; activation checkpointing with and without the
#      contiguous buffer (tokens/s, peak memory)
# Prints one line per figure and every failed test; goes on after a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin=build-device/bin
work=$(mktemp -d /tmp/stratum_config_checks.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "=== GPU tests: optimizers, profiler, engine options, config ==="
"$bin/test_optim" --gtest_filter='Lamb.*:Adam*:CpuAdam.*:HostAdam.*' 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED" | head -20
"$bin/test_config" 2>&1 | grep -E "^\[  (PASSED|FAILED) |corpus:" | head -5
(cd build-device && ctest -R "engine_np1|TrainCli.(Flops|CommsLogger)" --output-on-failure --timeout 300 2>&1 | tail -6)

# config(optimizer, extra keys): a bf16 ds_config for one GPU.
config() {
  local path="$work/$1.json"
  cat > "$path" <<EOF
{"train_micro_batch_size_per_gpu": $2, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "optimizer": $3, "gradient_clipping": 1.0, "zero_optimization": {"stage": 1}, "steps_per_print": 5 $4}
EOF
  echo "$path"
}
adamw='{"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}}'
lamb='{"type": "Lamb", "params": {"lr": 3e-3, "weight_decay": 0.01, "bias_correction": false, "max_coeff": 0.3, "min_coeff": 0.01}}'
train() {
  "$bin/stratum-run" --num_gpus 1 "$bin/stratum-train" --data default --cache-dir "$work/cache" --eval-every 0 \
    --sample-tokens 0 "$@"
}

echo "=== stratum-train on the GPU with every diagnostic ==="
c=$(config all 8 "$lamb" ', "wall_clock_breakdown": true, "flops_profiler": {"enabled": true, "profile_step": 3, "detailed": false},
 "comms_logger": {"enabled": true, "verbose": true}, "dump_state": true,
 "activation_checkpointing": {"contiguous_memory_optimization": true, "profile": true, "partition_activations": true}')
train --config "$c" --model gpt2-124m --steps 10 > "$work/all.log" 2>&1
grep -E "note:|fwd flops per GPU|fwd latency|time \(ms\) \| fwd:|communication summary|activation checkpointing at|all_reduce" "$work/all.log" | head -20

echo "=== gpt2-350m, bf16, seq 1024: profiler, Lamb vs AdamW, contiguous checkpoint buffer ==="
run() {  # name model micro optimizer extra
  local c; c=$(config "$1" "$3" "$4" "$5")
  train --config "$c" --model "$2" --steps 30 --log-dir "$work/$1" > "$work/$1.log" 2>&1
  python3 - "$work/$1/metrics.csv" "$1" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))[10:]  # past warm-up
tps = sum(float(r["tokens_per_s"]) for r in rows) / len(rows)
mem = max(float(r["memory_gib"]) for r in rows)
print(f"{sys.argv[2]}: {tps:,.0f} tokens/s, peak {mem:.2f} GiB, final loss {float(rows[-1]['loss']):.3f}")
PY
}
run adamw gpt2-350m 8 "$adamw" ""
run lamb gpt2-350m 8 "$lamb" ""
run ckpt gpt2-350m 16 "$adamw" ', "activation_checkpointing": {}'
run ckpt_contiguous gpt2-350m 16 "$adamw" ', "activation_checkpointing": {"contiguous_memory_optimization": true}'
c=$(config prof 8 "$adamw" ', "flops_profiler": {"enabled": true, "profile_step": 3, "detailed": false}')
train --config "$c" --model gpt2-350m --steps 4 > "$work/prof.log" 2>&1
python3 - "$work/prof.log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def value(label):
    m = re.search(re.escape(label) + r"\s+([\d.]+)\s*([KMGT]?)", text)
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]
    return float(m.group(1)) * scale
fwd = value("fwd flops per GPU:")
n, layers, d, s, tokens = 354.8e6, 24, 1024, 1024, 8 * 1024  # gpt2-350m (tied), micro 8 x seq 1024
m = re.search(r"params per GPU:\s+([\d.]+)\s*M", text)
if m: n = float(m.group(1)) * 1e6
analytic = (6 * n + 12 * layers * d * s) / 3 * tokens
print(f"flops profiler gpt2-350m: fwd {fwd/1e12:.2f} TFLOP measured vs {analytic/1e12:.2f} analytic "
      f"((6N + 12Lds)/3 x tokens, N = {n/1e6:.1f} M): {100 * (fwd / analytic - 1):+.2f}%")
PY
grep -E "fwd latency|fwd FLOPS per GPU" "$work/prof.log" | head -2
