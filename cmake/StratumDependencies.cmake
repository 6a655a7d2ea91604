# Finds every dependency once, for all targets.
#   torch    from the Python environment given by STRATUM_PYTHON (CUDA if that torch has it)
#   MPI      OpenMPI (CPU collectives, launch)
#   NCCL     the one that ships with a CUDA torch wheel (nvidia-nccl-*), CUDA builds only
#   nlohmann_json, CLI11, GTest   system packages (or unpacked .deb under STRATUM_DEPS_DIR)

set(STRATUM_PYTHON "python3" CACHE STRING "Python interpreter whose torch we build against")
set(STRATUM_DEPS_DIR "" CACHE PATH "Root of unpacked header-only Debian packages (device builds)")
if(STRATUM_DEPS_DIR)
  list(APPEND CMAKE_PREFIX_PATH "${STRATUM_DEPS_DIR}/usr" "${STRATUM_DEPS_DIR}/usr/lib/x86_64-linux-gnu")
endif()

execute_process(
  COMMAND ${STRATUM_PYTHON} -c "import torch, sys; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(torch.version.cuda or '')"
  OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _torch_rc ERROR_VARIABLE _torch_err)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "Cannot import torch with STRATUM_PYTHON='${STRATUM_PYTHON}': ${_torch_err}\n"
                      "Run scripts/setup.sh (or `make build`) to install it.")
endif()
string(REPLACE "\n" ";" _torch_info "${_torch_info}")
list(GET _torch_info 0 STRATUM_TORCH_PREFIX)
list(GET _torch_info 1 STRATUM_TORCH_VERSION)
string(REGEX REPLACE "[+].*" "" STRATUM_TORCH_VERSION_NUMBER "${STRATUM_TORCH_VERSION}")  # 2.13.0 of 2.13.0+cpu
list(LENGTH _torch_info _n)
set(STRATUM_TORCH_CUDA "")
if(_n GREATER 2)
  list(GET _torch_info 2 STRATUM_TORCH_CUDA)
endif()
list(APPEND CMAKE_PREFIX_PATH "${STRATUM_TORCH_PREFIX}")

if(STRATUM_TORCH_CUDA)
  set(STRATUM_WITH_CUDA ON)
  # CUDA architectures: those of the GPUs on this machine (nvidia-smi), else
  # (a build machine without one) every one from Ampere to Hopper. Either is
  # overridden by CMAKE_CUDA_ARCHITECTURES / TORCH_CUDA_ARCH_LIST.
  set(_stratum_cuda_caps "")
  execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                  OUTPUT_VARIABLE _smi_caps RESULT_VARIABLE _smi_status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_smi_status EQUAL 0 AND _smi_caps MATCHES "^[0-9]")
    string(REPLACE "\n" ";" _smi_caps "${_smi_caps}")
    foreach(_cap IN LISTS _smi_caps)
      string(STRIP "${_cap}" _cap)
      list(APPEND _stratum_cuda_caps "${_cap}")
    endforeach()
    list(REMOVE_DUPLICATES _stratum_cuda_caps)
  else()
    set(_stratum_cuda_caps 8.0 8.6 8.9 9.0)
  endif()
  string(REPLACE "." "" _stratum_cuda_archs "${_stratum_cuda_caps}")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    list(JOIN _stratum_cuda_caps ";" _torch_arch_list)
    set(ENV{TORCH_CUDA_ARCH_LIST} "${_torch_arch_list}")
  endif()
  # Stratum's own kernels (optim/mixed_adam_cuda.cu) need nvcc; without it the
  # build still works and the optimizer takes torch's fused kernels.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${_stratum_cuda_archs})
    endif()
    message(STATUS "Stratum: CUDA kernels for architectures ${CMAKE_CUDA_ARCHITECTURES}")
    enable_language(CUDA)
    set(STRATUM_WITH_CUDA_KERNELS ON)
    # cuBLASLt (nn/gemm_epilogue_cuda.cu): the library torch itself loads (its
    # wheel's nvidia/*/lib), so one copy of the soname runs; else the toolkit's.
    execute_process(
      COMMAND ${STRATUM_PYTHON} -c "import glob, os, nvidia; print(next(iter(sorted(f for p in nvidia.__path__ for f in glob.glob(os.path.join(p, '*', 'lib', 'libcublasLt.so.*')))), ''))"
      OUTPUT_VARIABLE _cublaslt_lib OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    add_library(stratum_cublaslt INTERFACE)
    if(_cublaslt_lib)
      target_link_libraries(stratum_cublaslt INTERFACE ${_cublaslt_lib})
    else()
      find_package(CUDAToolkit REQUIRED)
      target_link_libraries(stratum_cublaslt INTERFACE CUDA::cublasLt)
      set(_cublaslt_lib "CUDA::cublasLt (toolkit)")
    endif()
    message(STATUS "Stratum: cuBLASLt ${_cublaslt_lib}")
  else()
    message(WARNING "Stratum: no nvcc found: built without Stratum's CUDA kernels (slower optimizer step)")
    set(STRATUM_WITH_CUDA_KERNELS OFF)
  endif()
else()
  set(STRATUM_WITH_CUDA OFF)
endif()

find_package(Torch REQUIRED)
message(STATUS "Stratum: torch ${STRATUM_TORCH_VERSION} (CUDA: ${STRATUM_TORCH_CUDA}) from ${STRATUM_TORCH_PREFIX}")
# Only the torch libraries, not TORCH_CXX_FLAGS globally: targets get them through `torch`.

find_package(MPI REQUIRED COMPONENTS C)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
# A prebuilt libgtest.a from another compiler can break the One Definition Rule
# (its libstdc++ template instances win over ours: seen as crashes in file I/O
# with Debian 12's gtest under GCC 13). Where that can happen, build googletest
# from its sources with our compiler.
set(STRATUM_GTEST_SOURCE_DIR "" CACHE PATH "googletest sources to build with this compiler (device builds)")
if(STRATUM_BUILD_TESTS)
  if(STRATUM_GTEST_SOURCE_DIR)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(${STRATUM_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/_googletest EXCLUDE_FROM_ALL SYSTEM)
    if(NOT TARGET GTest::gtest)
      add_library(GTest::gtest ALIAS gtest)
      add_library(GTest::gtest_main ALIAS gtest_main)
    endif()
  else()
    find_package(GTest REQUIRED)
  endif()
endif()

set(STRATUM_WITH_NCCL OFF)
if(STRATUM_WITH_CUDA)
  execute_process(
    COMMAND ${STRATUM_PYTHON} -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])"
    OUTPUT_VARIABLE _nccl_root OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _nccl_rc ERROR_QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_root}/include $ENV{NCCL_HOME}/include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_root}/lib $ENV{NCCL_HOME}/lib)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(STRATUM_WITH_NCCL ON)
    add_library(stratum_nccl INTERFACE)
    target_include_directories(stratum_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(stratum_nccl INTERFACE ${NCCL_LIBRARY})
    message(STATUS "Stratum: NCCL ${NCCL_LIBRARY}")
  else()
    message(FATAL_ERROR "torch has CUDA but nccl.h / libnccl were not found (looked in '${_nccl_root}' and NCCL_HOME)")
  endif()
endif()
