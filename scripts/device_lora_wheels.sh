#!/usr/bin/env bash
# Fills .whl/lora_a and .whl/lora_b (git-ignored) with the wheels the GPU
# machine lacks to run bench/peers/lora_peers.py: bitsandbytes and numpy in
# one set, transformers, peft, accelerate and their pure-Python or abi3
# dependencies in the other (one call's carry holds 64 MiB; torch and what
# it brings are on the machine). For the device's Python 3.12, manylinux x86-64.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl/lora_a .whl/lora_b
platforms=(--platform manylinux_2_24_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux_2_28_x86_64)
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 "${platforms[@]}" -d "$1" "${@:2}"; }
get .whl/lora_a bitsandbytes==0.50.2 numpy
for p in peft transformers accelerate huggingface-hub hf-xet tokenizers safetensors regex pyyaml tqdm psutil packaging \
         pydantic pydantic-core annotated-types typing-inspection annotated-doc rich pygments markdown-it-py mdurl typer \
         click shellingham anyio h11 idna httpx2 httpcore2 httpx2-jsfetch kernels tomlkit truststore; do
  get .whl/lora_b "$p"
done
du -sh .whl/lora_a .whl/lora_b
