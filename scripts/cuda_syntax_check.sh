#!/usr/bin/env bash
# Type-checks Stratum's CUDA files on a machine without nvcc (this one): clang
# parses them for the host and an sm_80 device pass against the CUDA 12
# headers of the nvidia-cuda-{runtime,nvcc,cccl}-cu12 wheels (set up once in
# .cuda-check/, git-ignored). It catches what a compile would, short of nvcc's
# own quirks and code generation; the device build stays the real test.
# With a configured build/ (compile_commands.json) it also type-checks the
# host sources' GPU branches (STRATUM_WITH_CUDA, _CUDA_KERNELS, _NCCL, and
# distributed/nccl_communicator.cpp) with g++ against the same headers and NCCL's.
# Usage: scripts/cuda_syntax_check.sh [file.cu|file.cpp ...]
#        (default: every src/**/*.cu and every host file with a GPU branch)
set -euo pipefail
cd "$(dirname "$0")/.."
root=.cuda-check
if [ ! -f "$root/cuda/include/cuda_runtime.h" ]; then
  command -v clang++ >/dev/null || apt-get install -y -q clang >/dev/null
  rm -rf "$root" && mkdir -p "$root/wheels" "$root/cuda/include" "$root/cuda/nvvm/libdevice" "$root/cuda/bin" "$root/cuda/lib64"
  python3 -m pip download -q --no-deps -d "$root/wheels" \
    nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12 2>&1 | grep -v '^WARNING' || true
  for w in "$root"/wheels/*.whl; do python3 -m zipfile -e "$w" "$root/unpacked"; done
  for d in cuda_runtime cuda_nvcc cuda_cccl; do cp -r "$root/unpacked/nvidia/$d/include/." "$root/cuda/include/"; done
  cp "$root/unpacked/nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc" "$root/cuda/nvvm/libdevice/"
  echo "CUDA Version 12" > "$root/cuda/version.txt"
  # clang 14 predates CUDA 12: its wrapper wants a curand header and texture
  # references CUDA 12 dropped, and launches through cudaConfigureCall.
  touch "$root/cuda/include/curand_mtgp32_kernel.h"
  printf '%s\n' '#include <cuda_runtime_api.h>' \
    'extern "C" __host__ __device__ cudaError_t cudaConfigureCall(dim3, dim3, size_t = 0, cudaStream_t = 0);' \
    > "$root/prelude.h"
fi
if [ ! -f "$root/nccl/include/nccl.h" ] || [ ! -f "$root/stub/c10/cuda/impl/cuda_cmake_macros.h" ]; then
  python3 -m pip download -q --no-deps -d "$root/wheels" nvidia-nccl-cu12 2>&1 | grep -v '^WARNING' || true
  for w in "$root"/wheels/nvidia_nccl*.whl; do python3 -m zipfile -e "$w" "$root/unpacked"; done
  mkdir -p "$root/nccl/include" "$root/stub/c10/cuda/impl"
  cp "$root/unpacked/nvidia/nccl/include/"*.h "$root/nccl/include/"
  echo '#pragma once' > "$root/stub/c10/cuda/impl/cuda_cmake_macros.h"  # the CPU torch wheel lacks it
fi
if [ ! -f "$root/cuda/include/cublasLt.h" ]; then  # nn/gemm_epilogue_cuda.cu (a 0.6 GB wheel; headers kept)
  python3 -m pip download -q --no-deps -d "$root/wheels" nvidia-cublas-cu12 2>&1 | grep -v '^WARNING' || true
  python3 - "$root" <<'PY'
import glob, sys, zipfile
root = sys.argv[1]
with zipfile.ZipFile(glob.glob(f"{root}/wheels/nvidia_cublas*.whl")[0]) as z:
    for n in z.namelist():
        if n.startswith("nvidia/cublas/include/") and n.endswith(".h"):
            open(f"{root}/cuda/include/" + n.rsplit("/", 1)[1], "wb").write(z.read(n))
PY
  rm -f "$root"/wheels/nvidia_cublas*.whl
fi
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(find src -name '*.cu' | sort
    { grep -rlE 'STRATUM_WITH_(CUDA|CUDA_KERNELS|NCCL)\b' src apps bench tests --include='*.cpp'
      echo src/stratum/distributed/nccl_communicator.cpp; } | sort -u)
fi
status=0
for f in "${files[@]}"; do
  if [[ "$f" == *.cpp ]]; then
    python3 scripts/host_gpu_check.py "$root" "$f" && echo "ok      $f" || { echo "FAILED  $f"; status=1; }
    continue
  fi
  if clang++ -x cuda --cuda-path="$root/cuda" --cuda-gpu-arch=sm_80 -nocudalib -Wno-unknown-cuda-version \
       -D__CLANG_CUDA_TEXTURE_INTRINSICS_H__ -include "$root/prelude.h" -fsyntax-only -std=c++17 -Wall -Isrc "$f"; then
    echo "ok      $f"
  else
    echo "FAILED  $f"; status=1
  fi
done
exit $status
