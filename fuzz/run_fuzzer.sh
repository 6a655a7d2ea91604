#!/usr/bin/env bash
# One bounded libFuzzer run, as CTest runs it: FUZZER on a copy of SEEDS (the
# repository's corpus stays as it is) in WORK, for SECONDS (STRATUM_FUZZ_SECONDS
# overrides). Fails on a crash, a hang (-timeout), a leak, an allocation or RSS
# over the limit, or a sanitizer report; the input that did it is left in
# WORK/artifacts/. Further arguments go to libFuzzer (e.g. -max_len=100000).
#   fuzz/run_fuzzer.sh FUZZER SEEDS WORK [SECONDS [LIBFUZZER_FLAGS...]]
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3
seconds=${STRATUM_FUZZ_SECONDS:-${4:-30}}
shift $(($# < 4 ? $# : 4))
if [ ! -x "$fuzzer" ]; then
  echo "fuzz: $fuzzer is not built (the fuzz build runs with the main build: cmake --build build --target stratum_fuzz)" >&2
  exit 1
fi
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp -R "$seeds"/. "$work/corpus/"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
exec "$fuzzer" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$@" "$work/corpus"
