#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "stratum-train stratum-run"` (build-device/):
#   1. LoRA and QLoRA (base_dtype nf4) on the CUDA path at several layouts,
#      their ranks sharing the one GPU, against the one-rank run: a tiny
#      untied LLaMA, fp32, per-step losses within 1e-5 relative (tensor
#      parallel QLoRA within 1e-3: each rank quantizes its own piece).
#   2. Throughput and peak memory of LoRA (bf16 base) and QLoRA (NF4 base) on
#      the Llama-3-8B shape (weights drawn: no checkpoint travels), r 16 on
#      all seven projections, seq 4096, micro-batch 1, activation
#      checkpointing: tokens/s over the steps after the first two.
#   3. QLoRA on the Llama-70B shape at seq 8192 (the same settings, the
#      checkpointed layers' inputs offloaded to pinned host memory:
#      activation_checkpointing.cpu_checkpointing): peak memory and tokens/s.
#   4. The largest Llama shape QLoRA fine-tunes here: 200B (hidden 12288,
#      105 layers, 96 heads, 8 key/value heads, ffn 43008; weights drawn),
#      seq 2048: whether it starts and steps, its peak and tokens/s.
#   5. QLoRA against bf16 LoRA over the same 1,000 steps (the llama-1b shape,
#      drawn weights, default corpus, seq 1024): both loss curves' ends.
#   peers: transformers + peft (bf16 LoRA) and + bitsandbytes (QLoRA) on the
#      same 8B shape and settings (bench/peers/lora_peers.py), from .pylib/.
#      Their wheels exceed one call's carry: WHEELS=.whl/lora_a (then
#      .whl/lora_b, on the still-warm machine) installs a set into .pylib/
#      first (scripts/device_lora_wheels.sh fills them here).
#   6. Instruction data, packed: chat conversations (scripts/make_chat_data.py
#      over the default corpus, Llama 3.2's chat template, the tests' small
#      tokenizer) at several layouts on the shared GPU against one rank, then
#      QLoRA on the Llama-3-8B shape at seq 4096 on those packed rows beside
#      the same run on token windows: the cost of keeping examples apart.
#   7. QLoRA from a checkpoint bitsandbytes saved in 4 bits
#      (tests/data/hf/llama3_bnb4) against the dense llama3 quantized here,
#      bf16 on the GPU: the same codes, so the same losses.
#   8. QLoRA at ZeRO-3 on the Llama-3-8B shape: the 4-bit base partitioned
#      over 2 ranks sharing the GPU (gathered as bytes, over MPI through the
#      host) against one rank with the same global batch: the base held per
#      rank, start-up and step peaks, losses (bf16, within 2e-2); then the
#      same two ranks over a bf16 base (four times the bytes gathered).
#   9. Where a LoRA step's time goes on the Llama-3-8B shape (seq 4096,
#      micro-batch 1, checkpointing, r 16 on all seven projections): one
#      traced step of bf16 LoRA and of QLoRA (bench_engine --lora --profile,
#      needs the bench_engine target), GPU time by kind of kernel.
#   PARTS="1 2 3 peers" (default 1 2 3), STEPS8B=8, STEPS70B=4.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_LOG_LEVEL=info
bin=${BIN:-build-device/bin}
parts=${PARTS:-1 2 3}
work=$(mktemp -d)
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --target .pylib "$WHEELS"/*.whl 2>&1 | grep -v "^WARNING" | tail -3
  echo "installed $(ls "$WHEELS" | wc -l) wheels from $WHEELS into .pylib/"
fi
trap 'rm -rf "$work"' EXIT

why() {  # a failed run's log: its error lines, else its end
  grep -m4 -iE "error|exception|what\(\)|terminate|abort" "$1" || tail -6 "$1"
}

compare() {  # name reference tolerance
  python3 - "$work" "$1" "$2" "$3" <<'PY'
import csv, sys
work, name, ref, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def losses(n):
    try:
        with open(f"{work}/{n}/metrics.csv") as f:
            return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f)}
    except OSError:
        return {}
a, b = losses(name), losses(ref)
if not a or a.keys() != b.keys():
    print(f"{name:24s} FAIL (steps {sorted(a)} vs {sorted(b)})"); sys.exit(0)
worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in b)
last = max(b)
import json, re
try:
    peak = json.load(open(f"{work}/{name}/summary.json"))["peak_memory_gib"]
except (OSError, KeyError):
    peak = float("nan")
startup = re.findall(r"start-up peak memory ([0-9.]+ GiB[^\n]*)", open(f"{work}/{name}.log").read())
print(f"{name:24s} {'PASS' if worst <= tol else 'FAIL'}  largest relative difference {worst:.2e} (bound {tol:g}); "
      f"loss {b[min(b)]:.4f} -> {a[last]:.4f}; rank 0 peak {peak:.3f} GiB; start-up {startup[0] if startup else '?'}")
PY
}

run_one() {  # name model-args steps lora-section extra-keys: $procs ranks (1); prints loss, eval, tokens/s, peak
  local name=$1 args=$2 steps=$3 lora=$4 extra=$5
  cat > "$work/$name.json" <<JSON
{"train_micro_batch_size_per_gpu": ${micro:-1}, "gradient_accumulation_steps": 1, "bf16": {"enabled": true}, $extra
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0002}}, "lora": $lora}
JSON
  local start=$(date +%s)
  # shellcheck disable=SC2086
  "$bin/stratum-run" --num_procs "${procs:-1}" "$bin/stratum-train" --config "$work/$name.json" $args ${data_args:---data default} \
    --cache-dir "$work/cache" --steps "$steps" --eval-every "$steps" --eval-batches 8 --sample-tokens 0 \
    --print-every 100 --log-dir "$work/$name" > "$work/$name.log" 2>&1 || { echo "$name: exit $?"; why "$work/$name.log"; }
  grep -E "LoRA r|start-up peak|frozen base partitioned" "$work/$name.log" | sed 's/^/  /'
  python3 - "$work/$name" "$name" "$(( $(date +%s) - start ))" <<'PY'
import csv, json, sys
d, name, wall = sys.argv[1:]
try:
    rows = list(csv.DictReader(open(f"{d}/metrics.csv"))); s = json.load(open(f"{d}/summary.json"))
except OSError as e:
    print(f"  {name}: no metrics ({e})"); sys.exit(0)
steady = [float(r["tokens_per_s"]) for r in rows[2 if len(rows) > 3 else 1:]] or [float(r["tokens_per_s"]) for r in rows]
last10 = [float(r["loss"]) for r in rows[-10:]]
print(f"  {name}: {len(rows)} steps, loss {rows[0]['loss']} -> mean of the last 10 {sum(last10)/len(last10):.4f}, "
      f"eval {s.get('final_eval_loss')}, tokens/s {sum(steady)/len(steady):.0f}, peak {s['peak_memory_gib']:.2f} GiB, {wall} s")
PY
}

if [[ " $parts " == *" 1 "* ]]; then
  echo "=== LoRA / QLoRA layouts on the shared GPU ==="
  model=(--model tiny-llama --set layers=4 --set max_seq_len=64 --set vocab_size=256 --set tie_embeddings=false)
  for base in model nf4; do
    # name ranks "extra keys"
    for entry in "ref 1 " "dp2-zero3 2 \"zero_optimization\": {\"stage\": 3}," "pp2 2 \"pipeline\": {\"stages\": 2}," \
                 "tp2-sp 2 \"tensor_parallel\": {\"autotp_size\": 2, \"sequence_parallel\": true}," \
                 "pp2-dp2-zero2 4 \"pipeline\": {\"stages\": 2}, \"zero_optimization\": {\"stage\": 2},"; do
      read -r name ranks extra <<< "$entry"
      cat > "$work/$base-$name.json" <<JSON
{"train_batch_size": 16, "gradient_accumulation_steps": 4, $extra
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
 "lora": {"r": 8, "lora_alpha": 16, "target_modules": "all-linear", "base_dtype": "$base"}}
JSON
      "$bin/stratum-run" --num_procs "$ranks" "$bin/stratum-train" --config "$work/$base-$name.json" "${model[@]}" \
        --data default --cache-dir "$work/cache" --steps 12 --eval-every 100 --sample-tokens 0 --print-every 1000 \
        --seed 7 --log-dir "$work/$base-$name" > "$work/$base-$name.log" 2>&1 || { echo "$base-$name: exit $?"; tail -5 "$work/$base-$name.log"; }
      [ "$name" = ref ] && continue
      tol=1e-5
      [ "$base" = nf4 ] && [[ "$name" == tp* ]] && tol=1e-3
      compare "$base-$name" "$base-ref" "$tol"
    done
  done
fi

if [[ " $parts " == *" 2 "* ]]; then
  echo "=== Llama-3-8B shape: LoRA r 16 (all seven projections), seq 4096, micro-batch 1, checkpointing ==="
  for base in bf16 nf4; do
    run_one "8b-$base" "--model llama-8b --set max_seq_len=4096" "${STEPS8B:-8}" \
      "{\"r\": 16, \"lora_alpha\": 32, \"target_modules\": \"all-linear\", \"base_dtype\": \"$base\"}" \
      '"activation_checkpointing": {},'
  done
fi

if [[ " $parts " == *" 3 "* ]]; then
  echo "=== Llama-70B shape: QLoRA r 16 (all seven projections), seq 8192, micro-batch 1, checkpoints on the host ==="
  run_one 70b "--model llama-70b --set max_seq_len=8192" "${STEPS70B:-4}" \
    '{"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "base_dtype": "nf4"}' \
    '"activation_checkpointing": {"cpu_checkpointing": true},'
fi

if [[ " $parts " == *" peers "* ]]; then
  echo "=== peers on the Llama-3-8B shape (transformers + peft, bitsandbytes for QLoRA), the same settings ==="
  for mode in lora qlora; do
    PYTHONPATH="$PWD/.pylib" python3 bench/peers/lora_peers.py --mode "$mode" --seq 4096 --steps "${STEPS8B:-8}" 2>&1 |
      grep -E '^\{|Error|error' | tail -3
  done
fi

if [[ " $parts " == *" 4 "* ]]; then
  echo "=== the largest: a 200B Llama shape, QLoRA r 16 all seven projections, seq 2048, checkpointing ==="
  run_one 200b "--model llama-70b --set hidden=12288 --set layers=105 --set heads=96 --set kv_heads=8 --set ffn_hidden=43008 --set max_seq_len=2048" \
    "${STEPS200B:-3}" '{"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "base_dtype": "nf4"}' '"activation_checkpointing": {},'
fi

if [[ " $parts " == *" 5 "* ]]; then
  echo "=== QLoRA against bf16 LoRA, 1,000 steps, llama-1b shape, seq 1024, micro-batch 8 ==="
  for base in bf16 nf4; do
    micro=8 run_one "1b-$base" "--model llama-1b --set max_seq_len=1024" 1000 \
      "{\"r\": 16, \"lora_alpha\": 32, \"target_modules\": \"all-linear\", \"base_dtype\": \"$base\"}" ''
  done
fi

if [[ " $parts " == *" 6 "* ]]; then
  echo "=== instruction data, packed: chat conversations at several layouts on the shared GPU ==="
  chat_tok=tests/data/chat_templates/llama3_chat
  chat_args="--tokenizer $chat_tok --chat-template tests/data/chat_templates/llama-3.2-instruct.jinja"
  mkdir -p "$work/cache"
  "$bin/stratum-train" --config configs/default.json --model gpt2-tiny-bytes --steps 0 --sample-tokens 0 \
    --cache-dir "$work/cache" > /dev/null 2>&1  # writes the default corpus
  python3 scripts/make_chat_data.py "$work/cache/default_corpus.txt" "$work/chat.jsonl" --conversations 3000
  model=(--model tiny-llama --set layers=4 --set max_seq_len=512 --set vocab_size=1280 --set tie_embeddings=false)
  for base in model nf4; do
    for entry in "ref 1 " "dp2-zero3 2 \"zero_optimization\": {\"stage\": 3}," \
                 "pp2 2 \"pipeline\": {\"stages\": 2, \"activation_checkpoint_interval\": 1}," \
                 "tp2-sp 2 \"tensor_parallel\": {\"autotp_size\": 2, \"sequence_parallel\": true},"; do
      read -r name ranks extra <<< "$entry"
      cat > "$work/chat-$base-$name.json" <<JSON
{"train_batch_size": 8, "gradient_accumulation_steps": 2, $extra
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "lora": {"r": 8, "lora_alpha": 16, "target_modules": "all-linear", "base_dtype": "$base"}}
JSON
      # shellcheck disable=SC2086
      "$bin/stratum-run" --num_procs "$ranks" "$bin/stratum-train" --config "$work/chat-$base-$name.json" "${model[@]}" \
        $chat_args --data "chat:$work/chat.jsonl" --cache-dir "$work/cache" --steps 12 --eval-every 100 \
        --sample-tokens 0 --print-every 1000 --seed 7 --log-dir "$work/chat-$base-$name" > "$work/chat-$base-$name.log" 2>&1 ||
        { echo "chat-$base-$name: exit $?"; why "$work/chat-$base-$name.log"; }
      if [ "$name" = ref ]; then grep -E "tokenized|packed into" "$work/chat-$base-$name.log" | sed 's/^/  /' | cut -c1-400; continue; fi
      tol=1e-5
      [ "$base" = nf4 ] && [[ "$name" == tp* ]] && tol=1e-3
      compare "chat-$base-$name" "chat-$base-ref" "$tol"
    done
  done
  echo "=== Llama-3-8B shape QLoRA r 16, seq 4096: packed chat rows against token windows ==="
  python3 scripts/make_chat_data.py "$work/cache/default_corpus.txt" "$work/chat8b.jsonl" --conversations 2000 --seed 2
  lora='{"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "base_dtype": "nf4"}'
  data_args="$chat_args --data chat:$work/chat8b.jsonl" run_one 8b-nf4-packed \
    "--model llama-8b --set max_seq_len=4096" "${STEPS8B:-8}" "$lora" '"activation_checkpointing": {},'
  data_args="--tokenizer $chat_tok --data $work/cache/default_corpus.txt" run_one 8b-nf4-windows \
    "--model llama-8b --set max_seq_len=4096" "${STEPS8B:-8}" "$lora" '"activation_checkpointing": {},'
fi

if [[ " $parts " == *" 7 "* ]]; then
  echo "=== QLoRA from a bitsandbytes 4-bit checkpoint against the dense one quantized here (bf16, GPU) ==="
  cat > "$work/bnb.json" <<JSON
{"train_batch_size": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
 "lora": {"base_dtype": "nf4", "r": 4, "lora_alpha": 8, "target_modules": "all-linear"}}
JSON
  for src in llama3 llama3_bnb4; do
    "$bin/stratum-run" --num_procs 1 "$bin/stratum-train" --config "$work/bnb.json" --init-from "tests/data/hf/$src" \
      --set max_seq_len=32 --data default --cache-dir "$work/cache" --steps 6 --eval-every 100 --sample-tokens 0 \
      --print-every 1000 --log-dir "$work/bnb-$src" > "$work/bnb-$src.log" 2>&1 || { echo "bnb-$src: exit $?"; why "$work/bnb-$src.log"; }
  done
  compare bnb-llama3_bnb4 bnb-llama3 1e-6
fi

if [[ " $parts " == *" 8 "* ]]; then
  echo "=== Llama-3-8B shape QLoRA at ZeRO-3: the 4-bit base over 2 ranks sharing the GPU, against one rank ==="
  lora='{"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "base_dtype": "nf4"}'
  keys='"activation_checkpointing": {}, "zero_optimization": {"stage": 3},'
  procs=1 micro=2 run_one 8b-nf4-zero3-dp1 "--model llama-8b --set max_seq_len=4096" "${STEPS8B:-8}" "$lora" "$keys"
  procs=2 micro=1 run_one 8b-nf4-zero3-dp2 "--model llama-8b --set max_seq_len=4096" "${STEPS8B:-8}" "$lora" "$keys"
  compare 8b-nf4-zero3-dp2 8b-nf4-zero3-dp1 2e-2
  # The same over a bf16 base: four times the bytes gathered.
  procs=2 micro=1 run_one 8b-bf16-zero3-dp2 "--model llama-8b --set max_seq_len=4096" "${STEPS8B:-8}" \
    '{"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "base_dtype": "bf16"}' "$keys"
fi

if [[ " $parts " == *" 9 "* ]]; then
  echo "=== where a LoRA step's time goes: Llama-3-8B shape, seq 4096, micro-batch 1, checkpointing ==="
  for base in bf16 nf4; do
    "$bin/stratum-run" --num_procs 1 "$bin/bench_engine" --model llama-8b --set max_seq_len=4096 --seq 4096 --micro 1 \
      --stage 0 --steps 4 --warmup 2 --checkpointing --profile "$work/lora-$base.json" \
      --lora "{\"r\": 16, \"lora_alpha\": 32, \"target_modules\": \"all-linear\", \"base_dtype\": \"$base\"}" \
      > "$work/lora-$base.log" 2>&1 || { echo "lora-$base: exit $?"; why "$work/lora-$base.log"; }
    grep -o '{"system".*' "$work/lora-$base.log" | python3 -c "$(cat <<'PY'
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("  %s base %s: %.0f tokens/s, forward %.0f ms, backward %.0f ms, optimizer %.0f ms, peak %.2f GiB" % (
        r["system"], r["lora"]["base_dtype"], r["tokens_per_s_per_gpu"], r["forward_s"] * 1e3,
        r["backward_s"] * 1e3, r["optimizer_s"] * 1e3, r["peak_memory_gib"]))
PY
)"
  done
  python3 bench/profile_summary.py "$work/lora-bf16.json" "$work/lora-nf4.json" --top 15
fi
