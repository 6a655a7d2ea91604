#!/usr/bin/env bash
# Issue 7's whole matrix on one GPU machine, a table per (model, seq, GPUs) as
# each cell ends and all of them in one table at the end: gpt2-350m, gpt2-1.3b
# and llama-1b at seq 1024 and 2048, Stratum at ZeRO 0-3 against single-GPU
# torch, DDP and FSDP2 (eager and compiled) and DeepSpeed ZeRO-1/2/3, on one
# GPU and, where the machine has two, on two.
# bench/run_matrix.sh runs each cell (systems alternating); the device tool's
# 10-minute calls run the same cells one by one (bench/run_issue7.sh).
# Usage, after scripts/device_build.sh --only-build --targets bench_engine (and
# with .whl holding DeepSpeed's wheels for its rows):
#   bash bench/run_all.sh [build-dir] [out-dir]
# Knobs: MODELS, SEQS, ROUNDS/STEPS/WARMUP (passed to run_matrix.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
out=${2:-${OUT:-bench/results/$(date +%F)}}
mkdir -p "$out"
models=${MODELS:-gpt2-350m gpt2-1.3b llama-1b}
seqs=${SEQS:-1024 2048}
chips=$(nvidia-smi -L 2>/dev/null | wc -l)
# Micro-batches that fill an H200 at seq 1024 (halved at 2048: the same tokens a step).
micro_at_1024() { case "$1" in gpt2-350m) echo 16 ;; gpt2-1.3b) echo 8 ;; *) echo 8 ;; esac; }
for model in $models; do
  for seq in $seqs; do
    micro=$(micro_at_1024 "$model")
    [ "$seq" = 2048 ] && micro=$((micro / 2))
    # GPT-2 medium's preset has 1024 positions: both sides grow the table to the sequence.
    flags=""
    [ "$model" = gpt2-350m ] && [ "$seq" -gt 1024 ] && flags="--set max_seq_len=$seq"
    STAGES="0" STRATUM_FLAGS="$flags" bash bench/run_matrix.sh "$model" "$seq" "$micro" 1 "$build" "$out"
    [ "$chips" -ge 2 ] &&
      STRATUM_FLAGS="$flags" bash bench/run_matrix.sh "$model" "$seq" "$micro" 2 "$build" "$out"
  done
done
echo "== all cells"
python3 bench/peers/table.py --one "$out"/matrix_*.jsonl
