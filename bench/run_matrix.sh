#!/usr/bin/env bash
# The benchmarks: named scenarios (bench/scenarios.json), each one run on one
# machine, written to bench/results/<scenario>.jsonl (and $OUT when set);
# docs/benchmarks.md is generated from those files (python3 bench/report.py).
#   bash bench/run_matrix.sh --list
#   bash bench/run_matrix.sh --dry-run SCENARIO...
#   bash scripts/device_build.sh --only-build --targets "$(bash bench/run_matrix.sh --targets SCENARIO)" &&
#     bash bench/run_matrix.sh SCENARIO...
# DeepSpeed's rows need its wheels in .whl (scripts/device_wheels.sh fills it).
# Every NCCL_* and STRATUM_* variable set here reaches Stratum's ranks; where
# the tree has no .git, STRATUM_COMMIT names the commit the results record.
# $OUT receives <scenario>.jsonl and <scenario>.log: copy the .jsonl into
# bench/results/ of the checkout, then regenerate docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast off: a program using it can take the host's shared GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
exec python3 bench/runner.py "$@"
