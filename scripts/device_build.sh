#!/usr/bin/env bash
# Builds and tests Stratum ON THE GPU MACHINE (CUDA torch, NCCL), which has no
# network: the header-only packages it lacks travel in .deps/.
#
# How to run it, through the device tool:
#   1. here, once:  scripts/device_deps.sh          (fills .deps/, git-ignored)
#   2. device run:  command: bash scripts/device_build.sh [--no-tests | --only-build]
#                   carry:   [".deps"]
#                   timeout_s: 600
#   Logs (at most 8 files) come back under the run's files_at when $OUT is set.
#   build-device/ is git-ignored, so a second call on a still-warm machine
#   rebuilds incrementally.
#
# Options:
#   --no-tests    configure, build, print the report; skip ctest
#   --only-build  configure and build only
#   --targets "a b"  build only these targets (a fresh machine builds in minutes less)
set -Eeuo pipefail
cd "$(dirname "$0")/.."

run_report=1
run_tests=1
targets=()
while [ $# -gt 0 ]; do
  arg=$1; shift
  case "$arg" in
    --no-tests) run_tests=0 ;;
    --only-build) run_tests=0; run_report=0 ;;
    --targets) read -ra targets <<< "${1:-}"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "device_build: unknown option '$arg' (use --no-tests or --only-build)" >&2; exit 2 ;;
  esac
done

# NVLink multicast off: a program using it can take the host's shared GPUs
# out of service (KINDS.md). Exported first so every child inherits it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Tests run as root there; OpenMPI refuses root without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

build_dir=build-device
logs=$build_dir/logs
rm -rf "$logs" && mkdir -p "$logs"  # no stale logs from an earlier call on a warm machine

step_name="start"
step() { step_name="$1"; echo; echo "=== device_build: $1 ==="; }

copy_logs() {
  [ -n "${OUT:-}" ] || return 0
  local files=("$logs"/*)
  [ "$run_tests" = 1 ] && files+=("$build_dir"/Testing/Temporary/LastTest.log)
  for f in "${files[@]}"; do [ -f "$f" ] && cp "$f" "$OUT/" || true; done
}
on_error() {
  echo >&2
  echo "device_build: FAILED at step '$step_name' (exit $1); its log is in $logs/" >&2
  [ "$step_name" = "configure" ] && [ -n "${mpi_missing:-}" ] &&
    echo "device_build: hint: mpi.h was not found above; FindMPI needs OpenMPI's headers (libopenmpi-dev)" >&2
  return 0
}
trap 'on_error $?' ERR
trap copy_logs EXIT

# ---- what the machine has ------------------------------------------------------
step "environment"
# nvcc is often installed but not on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
mpi_missing=1
{
  trap - ERR  # this block reports; the pipeline's failure is reported once, below
  echo "## nvidia-smi -L";   nvidia-smi -L || echo "(nvidia-smi failed)"
  echo "## nvcc --version";  nvcc --version || echo "(no nvcc on PATH)"
  echo "## python3 torch"
  python3 - <<'PY' || echo "(python3 cannot import torch)"
import sys, torch
print(sys.executable)
print("torch", torch.__version__, "| cuda", torch.version.cuda, "| gpus", torch.cuda.device_count())
try:
    print("torch's nccl", torch.cuda.nccl.version())
except Exception as e:
    print("torch's nccl: none (%s)" % e)
try:
    import nvidia.nccl
    print("nvidia.nccl at", list(nvidia.nccl.__path__)[0])
except ImportError:
    print("no nvidia.nccl package")
PY
  echo "## cmake / ninja / c++"; cmake --version | head -1; ninja --version; c++ --version | head -1
  echo "## which mpirun mpicc"; which mpirun mpicc || echo "(mpirun and/or mpicc not on PATH)"
  echo "## MPI headers"
  ls -d /usr/include/*mpi* /usr/lib/x86_64-linux-gnu/openmpi/include 2>/dev/null || true
  for dir in $(mpicc -showme:incdirs 2>/dev/null) /usr/lib/x86_64-linux-gnu/openmpi/include /usr/include; do
    if [ -f "$dir/mpi.h" ]; then echo "mpi.h: $dir/mpi.h"; mpi_missing=; break; fi
  done
  if [ -n "$mpi_missing" ]; then
    echo "!!! MPI headers MISSING: no mpi.h found (mpicc -showme:incdirs, /usr/lib/x86_64-linux-gnu/openmpi/include, /usr/include)."
    echo "!!! find_package(MPI) will fail; the image needs libopenmpi-dev (headers) besides the OpenMPI runtime."
  fi
  echo "## env"; env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_|OMPI_ALLOW|CUDA_VISIBLE)' | sort
} 2>&1 | tee "$logs/env.log"
# mpi_missing was set in the pipeline's subshell: read the verdict back from the log.
grep -q '^mpi.h: ' "$logs/env.log" && mpi_missing= || mpi_missing=1

[ -d .deps/usr/include/nlohmann ] || {
  echo "device_build: .deps/ is missing or empty: run scripts/device_deps.sh here and carry \".deps\"" >&2
  exit 1
}

# ---- configure and build -------------------------------------------------------
step "configure"
# No CMAKE_CUDA_ARCHITECTURES: cmake/StratumDependencies.cmake takes the
# machine's GPUs' (nvidia-smi; 90 on an H200) for Stratum's .cu files and
# torch's CMake.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATUM_PYTHON=python3 \
  -DSTRATUM_DEPS_DIR="$PWD/.deps" -DSTRATUM_GTEST_SOURCE_DIR="$PWD/.deps/usr/src/googletest" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 2>&1 | tee "$logs/configure.log"

step "build"
cmake --build "$build_dir" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"} -- -k 0 2>&1 | tee "$logs/build.log"

# ---- run -----------------------------------------------------------------------
if [ "$run_report" = 1 ]; then
  step "stratum-report"
  "$build_dir/bin/stratum-report" 2>&1 | tee "$logs/report.txt"
  "$build_dir/bin/stratum-report" --json >"$logs/report.json"
fi

if [ "$run_tests" = 1 ]; then
  step "ctest"
  ctest --test-dir "$build_dir" --output-on-failure -j 8 2>&1 | tee "$logs/ctest.log"
fi

step "done"
echo "device_build: OK"
