#!/usr/bin/env bash
# Fills .whl/fp8 (git-ignored) with what the GPU machine lacks to run the
# torchao peer of the FP8 scenarios (bench/peers/fp8_peers.py): torchao alone.
# 0.17.0 is the release of torch 2.11's cycle (the device's torch; its
# __init__ loads its compiled ops only with torch >= 2.11, and float8 training
# is Python and torch.compile); the wheel is abi3 (cp310 and later, so the
# device's Python 3.12), manylinux x86-64, and needs nothing beyond torch at
# run time (the peer builds gpt_peers.py's plain torch model: no
# transformers). 3.1 MiB of a call's 64 MiB carry. bench/runner.py installs it
# into .pylib/ when a scenario has torchao rows.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl/fp8
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux2014_x86_64 \
  -d .whl/fp8 torchao==0.17.0
ls -l .whl/fp8
du -sh .whl/fp8
