#!/usr/bin/env bash
# Every device check and measurement in one ordered queue (scripts/device_queue.sh):
# the same command line, called again on the still-warm machine, goes on where
# the last call stopped. What has not run on a GPU yet first, then
# measurements; goodput ran on the H200 on 2026-12-05 (a re-check); moe_ep
# and cp_layouts did too, before their mixture-of-experts rows under sequence
# and context parallelism (not yet on a GPU); gpt2-350m's FP8 quality runs of seed 1 came back from an H100
# (bench/results/fp8_quality/): fp8_quality_gpt2_seed2 adds bf16's second
# seed; llama-1b's three came back from an H100 on 2026-12-06, as did moe_ep
# with its qlora-dp2-zero3 row. The Llama-8B FP8 scenario needs an H200's memory (micro 4:
# 110 GiB); on a smaller GPU fp8_speed_llama runs its 8-layer version.
# cp_longest_8b: llama-8b with its parameters and its first blocks'
# checkpoints on the host (stratum-estimate --longest --cpu-checkpointing
# gives 8 blocks and 347K on an H200; an H100 trained 160K with 12 on
# 2026-12-06). long_1m_start and long_1m (llama-1b at 1M tokens, ~15 minutes alone on the
# GPU; trained on an H100 on 2026-12-05, a re-check now) go last: long_1m
# waits over as many calls as it takes.
#   Device call: command: bash scripts/device_all.sh   carry: [".deps", ".whl/fp8"]   timeout_s: 600
# moe_speed (Mixtral's shape at 5 layers and Qwen3-MoE's at 8 on an H200; 2
# and 4 on a smaller GPU, where they ran on 2026-12-06 at 4,096 tokens a step
# and with 8 micro-batches a step, -gas8) needs transformers and numpy (.whl/lora_b and
# lora_a's numpy, without hf_xet and peft, linked into .whl/moe); with the
# tree that is over the 64 MiB a call carries, so moe_speed runs in a call of
# its own on the warm machine (built), without the corpus:
#   carry: [".deps/usr", ".whl/moe"]
#   STEPS="name ..." runs those steps only (in this order); the names are below.
# Each step's log and files come back in $OUT/queue-results.tar.gz (out/<step>/).
set -uo pipefail
cd "$(dirname "$0")/.."
targets="stratum-train stratum-run stratum-estimate bench_engine bench_moe_gemm bench_fp8_cast_bandwidth test_float8 test_float8_composition test_engine"
all=(
  "build=600=build:set -o pipefail; bash scripts/device_build.sh --only-build --targets '$targets' | grep -vE '^\[[0-9]+/[0-9]+\] '"
  "fp8_tests=150=bash scripts/device_fp8_tests.sh"
  "fp8_gpu_cases=60=QUICK=1 bash scripts/device_fp8_tests.sh"
  "fp8_cast_bw=40=build-device/bin/bench_fp8_cast_bandwidth | tee \$OUT/fp8_cast_bandwidth.jsonl"
  "fp8_layouts=150=bash scripts/device_fp8_layouts.sh"
  "fp8_profile=120=bash scripts/device_fp8_profile.sh"
  "fp8_profile_llama=150=MODEL=llama-8b SEQ=4096 MICRO=\$(bash scripts/gpu_memory_gib.sh 100 4 2) SET=\"layers=\$(bash scripts/gpu_memory_gib.sh 100 16 8)\" RECIPES=tensorwise bash scripts/device_fp8_profile.sh"
  "moe_gemm=60=PARTS=3 bash scripts/device_moe.sh"
  "fp8_speed_gpt2=420=bash bench/run_matrix.sh 1gpu-fp8-gpt2-1.3b-seq2048"
  "main_job=330=bash scripts/device_main_job.sh"
  "moe_speed=560=WHEELS=.whl/moe PARTS=2 SCENARIOS=\"\$(bash scripts/gpu_memory_gib.sh 100 '1gpu-moe-mixtral-5l 1gpu-moe-qwen3-8l 1gpu-moe-mixtral-gas8 1gpu-moe-qwen3-gas8' '1gpu-moe-mixtral-gas8 1gpu-moe-qwen3-gas8')\" bash scripts/device_moe.sh"
  "cp_longest_8b=560=DEADLINE_AT=\$QUEUE_DEADLINE_AT PARTS=2 LONG_MODELS=llama-8b OFFLOAD_PARAM=1 HOST_BLOCKS_8B=\$(bash scripts/gpu_memory_gib.sh 100 8 12) FIRST_8B=\${FIRST_8B:-\$(bash scripts/gpu_memory_gib.sh 100 262144 163840)} KNOWN_8B=163840 bash scripts/device_long_context.sh"
  "cp_past_host_8b=300=PARTS=2 LONG_MODELS=llama-8b OFFLOAD_PARAM=1 HOST_BLOCKS_8B=15 FIRST_8B=196608 MAX_SEQ=196608 bash scripts/device_long_context.sh"
  "cp_longest_1b=560=DEADLINE_AT=\$QUEUE_DEADLINE_AT PARTS=2 LONG_MODELS=llama-1b bash scripts/device_long_context.sh"
  "fp8_speed_llama=560=bash bench/run_matrix.sh \$(bash scripts/gpu_memory_gib.sh 100 1gpu-fp8-llama-8b-16l 1gpu-fp8-llama-8b-8l)"
  "fp8_speed_llama_gas8=240=bash bench/run_matrix.sh 1gpu-fp8-llama-8b-8l-gas8"
  "fp8_quality_gpt2_seed2=200=PARTS=gpt2-seed2 bash scripts/device_fp8_quality.sh"
  "fp8_quality_llama=510=PARTS=llama bash scripts/device_fp8_quality.sh"
  "goodput=330=bash scripts/device_goodput.sh"
  "moe_ep=90=PARTS=1 bash scripts/device_moe.sh"
  "cp_layouts=170=PARTS='1 3' bash scripts/device_long_context.sh"
  "multi_gpu_shared=330=SHARED=1 DEADLINE_AT=\$QUEUE_DEADLINE_AT bash scripts/device_multi_gpu.sh"
  "long_1m_start=30=bash scripts/device_long_1m.sh start"
  "long_1m=60=bash scripts/device_long_1m.sh wait"
)
steps=()
for spec in "${all[@]}"; do
  name=${spec%%=*}
  if [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $name "* ]]; then steps+=("$spec"); fi
done
# The step scripts read STEPS as a count of training steps: not this list.
unset STEPS
exec bash scripts/device_queue.sh --budget "${BUDGET:-570}" "${steps[@]}"
