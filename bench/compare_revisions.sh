#!/usr/bin/env bash
# The checkout's training throughput against another revision's, on the same
# GPU in one run: bench_engine of each build, alternating round by round, so a
# refactor can be shown to cost nothing (the ratio is the mean over rounds).
#
# Here (the GPU machine has no git): export the other revision into a
# git-ignored folder, e.g.
#   echo /.rev-base/ >> .git/info/exclude
#   rm -rf .rev-base && mkdir .rev-base && git archive REV | tar -x -C .rev-base
# On the GPU machine (carry ".deps" and ".rev-base"), after scripts/device_build.sh
# has built this checkout's bench_engine (the other revision is built here):
#   bash bench/compare_revisions.sh .rev-base [ROUNDS] -- [bench_engine flags]
# Default flags: scenario 1gpu-gpt2-1.3b's (gpt2-1.3b, seq 1024, micro 32, ZeRO-0).
# Rows go to stdout and, when set, $OUT/compare_revisions.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: compare_revisions.sh BASE_DIR [ROUNDS] -- [bench_engine flags]}
shift
rounds=2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then rounds=$1; shift; fi
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--model gpt2-1.3b --seq 1024 --micro 32 --steps 8 --warmup 3 --stage 0)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

current=build-device/bin/bench_engine
[ -x "$current" ] || { echo "compare_revisions: $current is missing: build it with scripts/device_build.sh" >&2; exit 1; }
[ -d "$base/src" ] || { echo "compare_revisions: $base holds no source tree (see the header of this script)" >&2; exit 1; }
if [ ! -x "$base/build-device/bin/bench_engine" ]; then
  [ -e "$base/.deps" ] || ln -s "$PWD/.deps" "$base/.deps"
  echo "compare_revisions: building bench_engine of $base"
  bash "$base/scripts/device_build.sh" --only-build --targets bench_engine >"$base/build.log" 2>&1 ||
    { tail -30 "$base/build.log" >&2; exit 1; }
fi

rows=$(mktemp)
for ((r = 1; r <= rounds; r++)); do
  for side in base current; do
    bin=$current
    [ "$side" = base ] && bin=$base/build-device/bin/bench_engine
    row=$(mpirun --bind-to none -np 1 -x NCCL_NVLS_ENABLE "$bin" "${flags[@]}" | tail -1)
    echo "{\"revision\": \"$side\", \"round\": $r, ${row#\{}" | tee -a "$rows"
  done
done
[ -n "${OUT:-}" ] && cp "$rows" "$OUT/compare_revisions.jsonl"
python3 - "$rows" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
mean = {}
for side in ("base", "current"):
    values = [r["tokens_per_s_per_gpu"] for r in rows if r["revision"] == side]
    mean[side] = sum(values) / len(values)
print("tokens/s per GPU: base %.0f, current %.0f: current/base = %.4f over %d rounds"
      % (mean["base"], mean["current"], mean["current"] / mean["base"], len(rows) // 2))
PY
