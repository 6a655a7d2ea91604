#!/usr/bin/env bash
# FP8's training quality against bf16 on one GPU, ON THE GPU
# MACHINE after `scripts/device_build.sh --only-build --targets "stratum-train
# stratum-run"` (build-device/). Each model trains three times from scratch
# for 1,840 steps of 16,384 tokens (30.1M tokens): bf16 and FP8 (tensorwise)
# from seed 1 (same initial weights, same data order), and bf16 from seed 2
# (the seed-to-seed gap the FP8 difference is held against). Then
# scripts/fp8_loss_curves.py checks each model's final eval loss (FP8 within
# 0.5% relative of bf16 and within twice the bf16 seed gap; every loss finite,
# no skipped step, no eval loss more than 2% above bf16's on the way) and
# draws the curves.
#
#   gpt2-350m: seq 1024, micro 16.
#   llama-1b: 6 of its 16 layers (d 2048, ffn 8192, 32 query / 8 key-value
#     heads: its GEMM shapes, which is what FP8 changes), seq 2048, micro 8:
#     at 16 layers a run would take ~375 s, three of them four calls; at 6 the
#     three fit one call.
#   Both with a byte vocabulary (--set vocab_size=256): the corpus is read as
#     bytes (no BPE tokenizer on the machine), so the presets' 50,257 /
#     128,256-row tied embeddings and heads would be rows never seen (13% of
#     gpt2-350m's FLOPs, 39% of 6-layer llama-1b's); they stay bf16 under FP8
#     either way.
#   Corpus: Debian's linux-doc, as the main job (scripts/device_main_job.sh;
#     carry .deps/corpus: scripts/device_deps.sh makes it): 25.8 MB of text read
#     as bytes, 5% held out for eval (the same windows for every run, 24
#     micro-batches of them every 92 steps): 30.1M tokens are 1.23 passes over
#     the 24.5M training bytes. (A BPE tokenizer would give ~6M tokens: 5 passes.)
#   AdamW lr 3e-4 (betas 0.9/0.95, weight decay 0.1), 100 warm-up steps, cosine
#   to 10%, clipping 1.0, ZeRO-1.
#
# Time on one H200 (bf16 from docs/benchmarks.md's MFU at these shapes, FP8
# taken as 1.2x; start-up, tokenizing and evals ~25 s a run):
#   gpt2-350m at vocab 256: 6N + 12 L d s = 2.12 GFLOP a token; 48% MFU (its
#     1gpu-gpt2-350m row) is 224K tokens/s: 30.1M tokens in ~135 s bf16,
#     ~110 s FP8.
#   llama-1b at 6 layers, vocab 256: 2.49 GFLOP a token; 53% MFU (1gpu-llama-1b)
#     is 210K tokens/s: ~145 s bf16, ~120 s FP8.
# PARTS (default "gpt2 llama"), each ONE DEVICE CALL of at most 600 s:
#   gpt2     gpt2-350m: bf16 seed 1, FP8 tensorwise seed 1, bf16 seed 2   ~460 s
#   llama    llama-1b (6 layers): the same three runs                     ~490 s
#   rowwise  FP8 rowwise seed 1 of both models                           ~300 s
#   gpt2-seed2  gpt2-350m's bf16 seed 2 alone                            ~170 s
#   llama-seed2 llama-1b's bf16 seed 2 alone, where the llama part's call
#               ran out of time after seed 1's two runs
#     (on an H100 the gpt2 part's runs took 166 s, 200 s and more than the
#     call had left; seed 1's two came back and are kept in
#     bench/results/fp8_quality/: this part completes the verdict, over
#     `python3 scripts/fp8_loss_curves.py bench/results/fp8_quality FILES_AT`)
# So the verdict takes 2 calls, 3 with rowwise. A run whose predicted time
# (the last run of its model, else the estimate above) would pass DEADLINE_AT
# (epoch seconds; default 570 s after the start) is skipped, saying so.
# Device call (build-device/ from an earlier call on the same warm machine):
#   command: PARTS=gpt2 bash scripts/device_fp8_quality.sh     carry: [".deps/corpus"]   timeout_s: 600
# Each run's metrics go to runs/fp8_quality/<model>-<run>.csv (kept on a warm
# machine: the verdict at the end is over every run there, so rowwise is held
# against the bf16 runs of earlier calls) and, with its log, to $OUT, with
# fp8_loss_curves.svg of the runs so far; here, over every call's files:
#   python3 scripts/fp8_loss_curves.py FILES_AT_1 FILES_AT_2 ... --svg docs/fp8_loss_curves.svg
# SMOKE=1 BIN=build/bin checks this script on CPU ranks (tiny presets, 20 steps, FP8 emulated).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin=${BIN:-build-device/bin}
parts=${PARTS:-gpt2 llama}
start=$(date +%s)
deadline=${DEADLINE_AT:-$((start + 570))}
keep=runs/fp8_quality
out=${OUT:-$keep}
mkdir -p "$keep" "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps=1840 warmup=100
[ -x "$bin/stratum-train" ] || { echo "device_fp8_quality: no $bin/stratum-train: build first" >&2; exit 1; }

# The corpus: linux-doc's text documents, unpacked where apt puts them, as a directory of documents.
if ! compgen -G "/usr/share/doc/linux-doc-*/Documentation" >/dev/null; then
  [ -f .deps/corpus/linux-doc-documents.tar.xz ] ||
    { echo "device_fp8_quality: no linux-doc and no .deps/corpus/linux-doc-documents.tar.xz (carry it)" >&2; exit 1; }
  tar -C / -xJf .deps/corpus/linux-doc-documents.tar.xz
fi
corpus=$(python3 scripts/linux_docs_corpus.py .stratum-cache/linux-docs) || exit 1

declare -A model_args=(
  [gpt2-350m]="--model gpt2-350m --set vocab_size=256"
  [llama-1b]="--model llama-1b --set layers=6 --set vocab_size=256 --set max_seq_len=2048"
)
declare -A micro=([gpt2-350m]=16 [llama-1b]=8)
declare -A estimate=([gpt2-350m]=160 [llama-1b]=170)  # seconds a run, start-up included
declare -A last=()
launch=(--num_gpus 1)
eval_every=92
if [ -n "${SMOKE:-}" ]; then  # this script checked on a CPU: the tiny presets, 20 steps, FP8 emulated
  model_args=([gpt2-350m]="--model tiny-gpt2" [llama-1b]="--model tiny-llama")
  steps=20 warmup=5 eval_every=10 launch=(--num_procs 1)
  export STRATUM_FP8_CPU_EMULATION=1
fi

# One run: MODEL NAME SEED [FP8 RECIPE]; its metrics to $out/MODEL-NAME.csv.
train() {
  local model=$1 name=$2 seed=$3 recipe=${4:-} fp8=""
  local predicted=${last[$model]:-${estimate[$model]}}
  if [ $(( $(date +%s) + predicted )) -gt "$deadline" ]; then
    echo "$model $name: not run (predicted ${predicted} s, past this call's deadline)"
    return
  fi
  [ -n "$recipe" ] && fp8="\"fp8\": {\"enabled\": true, \"recipe\": \"$recipe\"},"
  cat > "$work/$model-$name.json" <<JSON
{"train_micro_batch_size_per_gpu": ${micro[$model]}, "gradient_accumulation_steps": 1,
 "bf16": {"enabled": true}, $fp8
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": $steps, "warmup_num_steps": $warmup, "cos_min_ratio": 0.1}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 1}, "steps_per_print": 200}
JSON
  local t0 rc
  t0=$(date +%s)
  # shellcheck disable=SC2086
  "$bin/stratum-run" "${launch[@]}" "$bin/stratum-train" --config "$work/$model-$name.json" ${model_args[$model]} \
    --data "$corpus" --cache-dir .stratum-cache --steps "$steps" --eval-every "$eval_every" --eval-batches 24 --seed "$seed" \
    --sample-tokens 0 --print-every 200 --log-dir "$work/$model-$name" > "$out/$model-$name.log" 2>&1
  rc=$?
  last[$model]=$(( $(date +%s) - t0 ))
  cp "$work/$model-$name/metrics.csv" "$keep/$model-$name.csv" 2>/dev/null &&
    cp "$keep/$model-$name.csv" "$out/" 2>/dev/null
  echo "$model $name: exit $rc after ${last[$model]} s; $(grep -m1 -o '[0-9,]* train / [0-9,]* eval sequences' \
    "$out/$model-$name.log")"
  [ "$rc" = 0 ] || tail -5 "$out/$model-$name.log" | sed 's/^/  /'
}

for part in $parts; do
  case $part in
    gpt2|llama)
      model=gpt2-350m
      [ "$part" = llama ] && model=llama-1b
      echo "=== $model: bf16 and FP8 tensorwise from seed 1, bf16 from seed 2 ==="
      train "$model" bf16-seed1 1
      train "$model" fp8-tensorwise-seed1 1 tensorwise
      train "$model" bf16-seed2 2 ;;
    gpt2-seed2|llama-seed2)
      model=gpt2-350m
      [ "$part" = llama-seed2 ] && model=llama-1b
      echo "=== $model: bf16 from seed 2 (seed 1's runs in bench/results/fp8_quality/) ==="
      train "$model" bf16-seed2 2 ;;
    rowwise)
      echo "=== FP8 rowwise from seed 1 ==="
      train gpt2-350m fp8-rowwise-seed1 1 rowwise
      train llama-1b fp8-rowwise-seed1 1 rowwise ;;
    *) echo "device_fp8_quality: unknown part '$part' (gpt2, gpt2-seed2, llama, llama-seed2, rowwise)" >&2 ;;
  esac
done
echo "=== the verdict over the runs in $keep ==="
python3 scripts/fp8_loss_curves.py "$keep" --svg "$out/fp8_loss_curves.svg"
echo "device_fp8_quality: $(( $(date +%s) - start )) s"
