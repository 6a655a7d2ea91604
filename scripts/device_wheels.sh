#!/usr/bin/env bash
# Fills .whl/ (git-ignored) with what the GPU machine lacks to run the Python
# peers of bench/peers/ (DeepSpeed's rows of bench/run_matrix.sh): DeepSpeed as
# a pure-Python wheel built here from its sdist with no compiled ops (PyPI has
# no current wheel), and the wheels of its dependencies for the device's Python
# 3.12 on manylinux x86-64.
# On the device (carry ".whl"):  python3 -m pip install --no-index --find-links .whl deepspeed
set -euo pipefail
cd "$(dirname "$0")/.."
py=${STRATUM_PYTHON:-.venv/bin/python}
version=${DEEPSPEED_VERSION:-0.19.8}
mkdir -p .whl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download "deepspeed==$version" --no-deps --no-binary=:all: -d "$tmp"
tar xzf "$tmp/deepspeed-$version.tar.gz" -C "$tmp"
# No compiled ops: the peers use torch's own Adam (DeepSpeed's FusedAdam needs nvcc builds).
DS_BUILD_OPS=0 "$py" -m pip wheel "$tmp/deepspeed-$version" --no-deps --no-build-isolation -w .whl
"$py" -m pip download einops hjson msgpack ninja numpy packaging psutil py-cpuinfo "pydantic>=2" tqdm typing-extensions \
  --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 -d .whl
du -sh .whl
