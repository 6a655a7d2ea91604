# Precompiled headers. The torch headers are most of every translation unit's
# compile time (ATen/ATen.h alone is ~350k preprocessed lines), so each is parsed
# once per build instead of once per source. GCC loads a PCH in time that grows
# with its size (ATen's, ~0.4 GB: ~2 s; torch/torch.h's, ~0.7 GB: ~10 s), so a
# target takes the smallest one that covers what its sources include:
#   stratum_precompile_aten(T)   ATen/ATen.h                 (the library)
#   stratum_reuse_aten_pch(T)    the library's, for programs that include ATen only
#   stratum_reuse_torch_pch(T)   torch/torch.h + gtest/gtest.h (tests over torch's C++ API)
# STRATUM_PRECOMPILED_HEADERS=OFF builds without them (to check that every
# source includes what it uses).
option(STRATUM_PRECOMPILED_HEADERS "Precompile the torch headers" ON)

function(stratum_precompile_aten target)
  if(STRATUM_PRECOMPILED_HEADERS)
    target_precompile_headers(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:<ATen/ATen.h$<ANGLE-R>>)
  endif()
endfunction()

function(stratum_reuse_aten_pch target)
  if(STRATUM_PRECOMPILED_HEADERS)
    target_precompile_headers(${target} REUSE_FROM stratum)
  endif()
endfunction()

# One target owns the test PCH; the test programs reuse it (compiled once).
function(stratum_reuse_torch_pch target)
  if(NOT STRATUM_PRECOMPILED_HEADERS)
    return()
  endif()
  if(NOT TARGET stratum_torch_pch)
    file(WRITE ${CMAKE_BINARY_DIR}/stratum_torch_pch.cpp "// Owner of the tests' precompiled header.\n")
    add_library(stratum_torch_pch OBJECT ${CMAKE_BINARY_DIR}/stratum_torch_pch.cpp)
    target_link_libraries(stratum_torch_pch PRIVATE stratum GTest::gtest)
    target_precompile_headers(stratum_torch_pch PRIVATE <torch/torch.h> <gtest/gtest.h>)
  endif()
  target_precompile_headers(${target} REUSE_FROM stratum_torch_pch)
endfunction()
