#!/usr/bin/env bash
# The main job (`make run`): trains a byte-level GPT-2 with every local device:
# on all GPUs (bf16, ZeRO-2) gpt2-38m-bytes for 3000 steps on the Linux
# kernel's documentation (Debian's linux-doc, which scripts/setup.sh installs
# on GPU machines; 25 MB in 4,762 documents, written as a directory of text
# files by scripts/linux_docs_corpus.py and trained with --documents separate,
# so no window attends across two documents; the default corpus when
# linux-doc is missing), else on 2 CPU ranks (fp32, ZeRO-1) gpt2-tiny-bytes
# (0.9M) for 300 steps on the default corpus. Progress on the terminal,
# metrics (and summary.json, loss_curve.svg) in runs/default/, checkpoints in
# runs/default/checkpoints, a sample of generated text at the end. Extra
# arguments go to stratum-train.
set -euo pipefail
cd "$(dirname "$0")/.."
data=(--data default)
build_dir=${1:-build}
shift || true
bin=$build_dir/bin
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true); fi
if [ "$gpus" -gt 0 ]; then  # a model worth the GPUs: 38M parameters for a minute or two
  launch=(--num_gpus "$gpus"); config=configs/default_gpu.json; model=gpt2-38m-bytes; steps=3000; every=500
  if corpus=$(python3 scripts/linux_docs_corpus.py .stratum-cache/linux-docs); then
    data=(--data "$corpus" --documents separate)
  else
    echo "[run] no linux-doc: training on the default corpus (237 KB, which the model memorises)" >&2
  fi
else
  launch=(--num_procs 2); config=configs/default.json; model=gpt2-tiny-bytes; steps=300; every=100
fi
exec "$bin/stratum-run" "${launch[@]}" "$bin/stratum-train" --config "$config" --model "$model" \
  "${data[@]}" --cache-dir .stratum-cache --steps "$steps" --eval-every "$every" \
  --save-dir runs/default/checkpoints "$@"
