# The fuzz targets (fuzz/): a clang ASan+UBSan build of its own in build/fuzz,
# run as an external project so the main GCC build's flags never change, and
# one CTest case per target (fuzz_NAME: 20 s on a copy of its seed corpus,
# failing on a crash, a hang or a sanitizer report). Without a clang that
# links libFuzzer the cases still exist and fail, saying why.
include(ExternalProject)
include(${PROJECT_SOURCE_DIR}/fuzz/targets.cmake)

set(STRATUM_FUZZ_SECONDS 20 CACHE STRING "How long each fuzz_* CTest case fuzzes")
find_program(STRATUM_FUZZ_CXX NAMES clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)

# Can it build and link a libFuzzer target with both sanitizers? (A missing
# compiler-rt shows up only here, not in find_program.)
set(_fuzz_problem "")
if(NOT STRATUM_FUZZ_CXX)
  set(_fuzz_problem "no clang++ found (scripts/setup.sh installs clang and libclang-rt-dev)")
else()
  set(_probe_dir ${CMAKE_BINARY_DIR}/fuzz-probe)
  file(WRITE ${_probe_dir}/probe.cpp
       "#include <cstddef>\n#include <cstdint>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND ${STRATUM_FUZZ_CXX} -fsanitize=fuzzer,address,undefined ${_probe_dir}/probe.cpp
                          -o ${_probe_dir}/probe
                  RESULT_VARIABLE _probe_rc OUTPUT_VARIABLE _probe_out ERROR_VARIABLE _probe_out)
  if(NOT _probe_rc EQUAL 0)
    string(REPLACE "\n" " " _probe_out "${_probe_out}")
    set(_fuzz_problem "${STRATUM_FUZZ_CXX} -fsanitize=fuzzer,address,undefined does not link (is libclang-rt-dev installed? scripts/setup.sh installs it): ${_probe_out}")
  endif()
endif()

if(_fuzz_problem STREQUAL "")
  string(REPLACE ";" "|" _prefix_path "${CMAKE_PREFIX_PATH}")  # (LIST_SEPARATOR below)
  set(_fuzz_args -DCMAKE_CXX_COMPILER=${STRATUM_FUZZ_CXX} "-DCMAKE_PREFIX_PATH=${_prefix_path}")
  if(CCACHE_PROGRAM)
    list(APPEND _fuzz_args -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE_PROGRAM})
  endif()
  cmake_host_system_information(RESULT _cores QUERY NUMBER_OF_LOGICAL_CORES)
  ExternalProject_Add(stratum_fuzz
    SOURCE_DIR ${PROJECT_SOURCE_DIR}/fuzz
    BINARY_DIR ${CMAKE_BINARY_DIR}/fuzz
    CMAKE_ARGS ${_fuzz_args}
    LIST_SEPARATOR |
    BUILD_COMMAND ${CMAKE_COMMAND} --build <BINARY_DIR> -j ${_cores}
    BUILD_ALWAYS ON  # its sources are the library's: let its own ninja decide what is stale
    INSTALL_COMMAND "")
else()
  message(STATUS "fuzz targets not built: ${_fuzz_problem}")
endif()

foreach(t ${STRATUM_FUZZ_TARGETS})
  if(_fuzz_problem STREQUAL "")
    add_test(NAME fuzz_${t}
             COMMAND ${PROJECT_SOURCE_DIR}/fuzz/run_fuzzer.sh ${CMAKE_BINARY_DIR}/fuzz/bin/fuzz_${t}
                     ${PROJECT_SOURCE_DIR}/fuzz/corpus/${t} ${CMAKE_BINARY_DIR}/fuzz/work/${t} ${STRATUM_FUZZ_SECONDS})
  else()
    add_test(NAME fuzz_${t} COMMAND sh -c "echo \"fuzz_${t}: cannot run: $0\" >&2; exit 1" "${_fuzz_problem}")
  endif()
  math(EXPR _limit "${STRATUM_FUZZ_SECONDS} + 90")
  set_tests_properties(fuzz_${t} PROPERTIES TIMEOUT ${_limit} LABELS fuzz)
endforeach()
