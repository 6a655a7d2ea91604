#!/usr/bin/env bash
# Where an FP8 step's time goes, ON THE GPU MACHINE after `scripts/device_build.sh
# --only-build --targets bench_engine`: one traced step of gpt2-1.3b (seq 2048,
# micro 8, as the scenario 1gpu-fp8-gpt2-1.3b-seq2048) in bf16 and with each
# FP8 recipe, then bench/profile_summary.py over the traces side by side: GPU
# time per kind of kernel (matrix products, casts, elementwise...), the
# longest kernels, and the compute stream's longest idle gaps (the host
# holding the GPU back). The traces come back gzipped in $OUT.
#   MODEL, SEQ, MICRO, RECIPES ("tensorwise rowwise") override the defaults;
#   SET adds model settings (SET="layers=8": --set layers=8).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin=${BIN:-build-device/bin}
model=${MODEL:-gpt2-1.3b} seq=${SEQ:-2048} micro=${MICRO:-8}
out=${OUT:-/tmp}
traces=()
for recipe in bf16 ${RECIPES:-tensorwise rowwise}; do
  flags=()
  [ "$recipe" != bf16 ] && flags=(--fp8 "$recipe")
  for kv in ${SET:-}; do flags+=(--set "$kv"); done
  trace=/tmp/fp8-profile-$recipe.json
  mpirun --bind-to none -np 1 -x NCCL_NVLS_ENABLE "$bin/bench_engine" --model "$model" --seq "$seq" --micro "$micro" \
    --stage 0 --steps 6 --warmup 3 --profile "$trace" "${flags[@]}" 2>&1 | grep -E '^\{"system"|rror'
  [ -f "$trace" ] && traces+=("$trace") && gzip -c "$trace" > "$out/fp8-profile-$recipe.json.gz"
done
python3 bench/profile_summary.py "${traces[@]}" --top 30 --gaps 10
