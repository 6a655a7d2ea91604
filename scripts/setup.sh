#!/usr/bin/env bash
# Installs what the build needs, idempotently, and prints the Python that has torch.
# Fast when everything is already there: it only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[setup] $*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else log "need root (or sudo) to run: $*"; exit 1; fi
}

# --- system packages (Debian/Ubuntu names) -----------------------------------
packages=(g++ cmake ninja-build ccache make
          libopenmpi-dev openmpi-bin nlohmann-json3-dev libcli11-dev libgtest-dev
          libpcre2-dev libsentencepiece-dev  # tokenizer.json regexes, tokenizer.model
          clang libclang-rt-dev)  # clang + compiler-rt: the fuzz targets (libFuzzer, ASan, UBSan)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The venv module only matters when we must create .venv (pyenv/conda Pythons have it built in).
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || { log "missing ${missing[*]} and no apt-get: install them by hand"; exit 1; }
  log "installing system packages: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi

# --- the main job's corpus on GPUs -----------------------------------------------
# The Linux kernel's documentation (Debian's linux-doc: about 37 MB to fetch,
# 25 MB of English text; scripts/linux_docs_corpus.py), only where there are
# GPUs to train on it; CPU machines and the tests keep the default corpus. Not
# fatal: without it the main job trains on the default corpus, saying so.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' &&
   ! dpkg-query -W -f='${Status}' linux-doc 2>/dev/null | grep -q "install ok installed" &&
   command -v apt-get >/dev/null; then
  log "installing linux-doc (the main job's corpus on GPUs)"
  ( as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-doc ) >&2 ||
    log "linux-doc not installed: the main job will train on the default corpus"
fi

# --- torch ---------------------------------------------------------------------
# A torch >= 2.11 already importable (e.g. the CUDA build on a GPU machine) wins;
# otherwise the project venv gets the CPU wheel.
torch_ok() {
  "$1" - <<'PY' 2>/dev/null
import sys, torch
major, minor = (int(x) for x in torch.__version__.split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 11) else 1)
PY
}
python=""
if [ -n "${STRATUM_PYTHON:-}" ]; then python="$STRATUM_PYTHON"
elif [ -x .venv/bin/python ] && torch_ok .venv/bin/python; then python="$PWD/.venv/bin/python"
elif command -v python3 >/dev/null && torch_ok python3; then python="$(command -v python3)"
else
  log "no torch >= 2.11 importable: installing torch==2.13.0 into .venv"
  [ -x .venv/bin/python ] || python3 -m venv .venv >&2
  .venv/bin/pip install -q --disable-pip-version-check torch==2.13.0 >&2
  python="$PWD/.venv/bin/python"
fi
torch_ok "$python" || { log "$python cannot import torch >= 2.11"; exit 1; }
# TensorBoard's own reader, for the test that reads stratum-train's event files
# back (it skips, saying so, where the package cannot be installed).
if ! "$python" -c 'import tensorboard' 2>/dev/null; then
  log "installing tensorboard (the event-file reader test)"
  "$python" -m pip install -q --disable-pip-version-check tensorboard >&2 || log "tensorboard not installed: that test will skip"
fi
echo "$python"
