#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "stratum-train stratum-run"` (build-device/): the README's main job as a GPU
# machine runs it (scripts/run_main.sh: gpt2-38m-bytes, bf16, ZeRO-2, 3000
# steps on the Linux kernel's documentation), then its eval losses, the best
# and the last. The device machine has no package registry, so linux-doc's
# text documents travel as .deps/corpus/linux-doc-documents.tar.xz
# (scripts/device_deps.sh makes it) and are unpacked where apt puts them.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! compgen -G "/usr/share/doc/linux-doc-*/Documentation" >/dev/null; then
  [ -f .deps/corpus/linux-doc-documents.tar.xz ] ||
    { echo "device_main_job: no linux-doc installed and no .deps/corpus/linux-doc-documents.tar.xz" >&2; exit 1; }
  tar -C / -xJf .deps/corpus/linux-doc-documents.tar.xz
fi
log=${OUT:-/tmp}/main_job.log
start=$(date +%s)
bash scripts/run_main.sh build-device > "$log" 2>&1
rc=$?
echo "=== the main job: exit $rc after $(( $(date +%s) - start )) s ==="
grep -E "linux_docs_corpus|corpus|batch |eval loss|saved checkpoint" "$log" | head -30
python3 - runs/default/metrics.csv <<'PY'
import csv, sys
try:
    rows = list(csv.DictReader(open(sys.argv[1])))
except OSError as e:
    sys.exit(f"no metrics: {e}")
evals = [(int(r["step"]), float(r["eval_loss"])) for r in rows if r.get("eval_loss")]
if evals:
    best = min(evals, key=lambda e: e[1])
    print("eval loss by step: " + ", ".join(f"{s}: {v:.4f}" for s, v in evals))
    print(f"best {best[1]:.4f} at step {best[0]}; last {evals[-1][1]:.4f} at step {evals[-1][0]} "
          f"({(evals[-1][1] / best[1] - 1) * 100:+.2f}% from the best)")
tps = sorted(float(r["tokens_per_s"]) for r in rows[len(rows) // 2:] if r.get("tokens_per_s"))
if tps:
    print(f"tokens/s (median of the second half): {tps[len(tps) // 2]:.0f}")
PY
