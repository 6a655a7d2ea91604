#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "stratum-train stratum-run"` (build-device/):
#   1. Context parallelism on the CUDA path, its ranks sharing the one GPU
#      (over MPI through the host): tiny LLaMA (seq 256, 4 key/value heads)
#      with each sequence over CP = 2 and 4 ranks by ring, Ulysses and hybrid,
#      against the one-rank run: fp32 (the ring's blocks by the math path;
#      per-step losses within 1e-5 relative) and bf16 (FlashAttention-2's
#      kernels for the ring's blocks; within 2e-2, bf16's own noise); and
#      tiny Mixtral (its balancing terms on) over CP = 2 by the ring (fp32).
#   2. The longest sequence that trains a step on the one GPU, doubling:
#      llama-1b from 4K, then llama-8b from 32K; ZeRO-3 with the optimizer on
#      the host, the MLP and the LM head's loss tiled along the sequence,
#      bf16, micro-batch 1; llama-1b's activation checkpoints on the host
#      (cpu_checkpointing), llama-8b's on the GPU (its optimizer's states
#      and 16-bit copy, 105 GiB, fill most of the host's 128 GiB). Each
#      length's tokens/s, MFU, peak GPU memory, the host's high-water mark
#      (summary.json), and attention's share of the FLOPs (causal:
#      6 L d S against 6 N a token). Two steps (the second timed) up to 64K,
#      one beyond. A length whose predicted time (4.2x the previous one's)
#      would pass DEADLINE_AT (epoch seconds) is not tried, saying so.
#   3. llama-1b at 32K with each sequence over 2 ranks sharing the GPU
#      (ring): a rank's peak memory against one rank's.
#   PARTS="1 2 3" (default); MAX_SEQ caps part 2 (default 2097152);
#   LONG_MODELS (default "llama-1b llama-8b") and FIRST_1B / FIRST_8B (the
#   first length tried, default 4096 / 32768) pick part 2's runs, so that
#   each model's doubling can have a device call of its own. After the first
#   length that does not train, the one halfway to the last that did is tried
#   once; KNOWN_8B names a length that trained in an earlier call, so that a
#   first length that fails still has its halfway retry. OFFLOAD_PARAM=1 puts
#   the 16-bit parameter shard on the host too (offload_param): the GPU keeps
#   the gradient shard, the gathered layers and the activations.
#   HOST_BLOCKS_8B=N puts llama-8b's first N blocks' checkpoints on the host
#   and the rest on the GPU (cpu_checkpointing_layers; stratum-estimate
#   --longest --cpu-checkpointing gives the N for the longest).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_LOG_LEVEL=info
bin=${BIN:-build-device/bin}
parts=${PARTS:-1 2 3}
max_seq=${MAX_SEQ:-2097152}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${OUT:-$work}

# Per-step losses of run $2 against run $3 within relative $4.
compare() {
  python3 - "$1" "$2" "$3" "$4" <<'PY'
import csv, sys
work, name, ref, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def losses(n):
    with open(f"{work}/{n}/metrics.csv") as f:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f)}
try:
    a, b = losses(name), losses(ref)
except OSError as e:
    print(f"{name:24s} FAIL  {e}")
    sys.exit(0)
worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in b)
print(f"{name:24s} {'PASS' if worst <= tol else 'FAIL'}  largest relative difference {worst:.2e} (bound {tol:g}); "
      f"loss {b[min(b)]:.4f} -> {a[max(a)]:.4f}")
PY
}

if [[ " $parts " == *" 1 "* ]]; then
  echo "=== context parallelism on the shared GPU: tiny LLaMA, against one rank ==="
  model=(--model tiny-llama --set layers=2 --set max_seq_len=256 --set kv_heads=4)
  for precision in fp32 bf16; do
    bf16=""
    tol=1e-5
    [ "$precision" = bf16 ] && bf16='"bf16": {"enabled": true},' && tol=2e-2
    for entry in "ref 1 1 ring 1" "ring2 2 2 ring 1" "ring4 4 4 ring 1" "ulysses2 2 2 ulysses 2" \
                 "ulysses4 4 4 ulysses 4" "hybrid4 4 4 hybrid 2"; do
      read -r name ranks cp method ulysses <<< "$entry"
      extra=""
      [ "$method" = hybrid ] && extra=", \"ulysses_size\": $ulysses"
      cat > "$work/$precision-$name.json" <<JSON
{"train_batch_size": 4, "gradient_accumulation_steps": 2, $bf16
 "context_parallel": {"size": $cp, "method": "$method"$extra},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}
JSON
      "$bin/stratum-run" --num_procs "$ranks" "$bin/stratum-train" --config "$work/$precision-$name.json" \
        "${model[@]}" --data default --cache-dir "$work/cache" --steps 12 --eval-every 100 --sample-tokens 0 \
        --print-every 1000 --seed 7 --log-dir "$work/$precision-$name" > "$work/$precision-$name.log" 2>&1 ||
        { echo "$precision-$name: exit $?"; tail -5 "$work/$precision-$name.log"; }
      [ "$name" = ref ] || compare "$work" "$precision-$name" "$precision-ref" "$tol"
    done
  done
  echo "=== a mixture of experts under context parallelism: tiny Mixtral, fp32, against one rank ==="
  # moe-ring2-ep2: the experts split over the same two ranks as well.
  for entry in "moe-ref 1 1" "moe-ring2 2 1" "moe-ring2-ep2 2 2"; do
    read -r name cp ep <<< "$entry"
    section=""
    [ "$cp" -gt 1 ] && section="\"context_parallel\": {\"size\": $cp, \"method\": \"ring\"},"
    cat > "$work/$name.json" <<JSON
{"train_batch_size": 4, "gradient_accumulation_steps": 2, $section
 "moe": {"aux_loss_coeff": 0.01, "z_loss_coeff": 0.001, "load_balancing": "seq_aux_loss", "expert_parallel_size": $ep},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}
JSON
    "$bin/stratum-run" --num_procs "$cp" "$bin/stratum-train" --config "$work/$name.json" --model tiny-mixtral \
      --set layers=2 --set max_seq_len=256 --data default --cache-dir "$work/cache" --steps 12 --eval-every 100 \
      --sample-tokens 0 --print-every 1000 --seed 7 --log-dir "$work/$name" > "$work/$name.log" 2>&1 ||
      { echo "$name: exit $?"; tail -5 "$work/$name.log"; }
    [ "$name" = moe-ref ] || compare "$work" "$name" moe-ref 1e-5
  done
fi

# A corpus of repeated licence texts, long enough for the longest windows
# (the content does not change the speed or the memory).
long_corpus() { python3 scripts/licence_corpus.py "$1" "$2"; }

# Steps of $1 at sequence $2 on $3 ranks with context parallelism $4, activation
# checkpoints on the host when $5 is true (default), on the GPU when false,
# the first $5 blocks' on the host when a number; prints a line.
long_run() {
  local model=$1 seq=$2 ranks=$3 cp=$4 host=${5:-true} name="$1-$2-cp$4"
  local params=""
  [ "${OFFLOAD_PARAM:-0}" = 1 ] && params=', "offload_param": {"device": "cpu", "pin_memory": true}'
  local steps=2
  [ "$seq" -gt 65536 ] && steps=1
  local checkpoints="\"cpu_checkpointing\": $host"
  [[ "$host" =~ ^[0-9]+$ ]] && checkpoints="\"cpu_checkpointing\": true, \"cpu_checkpointing_layers\": $host"
  local cpjson=""
  [ "$cp" -gt 1 ] && cpjson="\"context_parallel\": {\"size\": $cp, \"method\": \"ring\"},"
  cat > "$work/$name.json" <<JSON
{"train_batch_size": 1, "bf16": {"enabled": true}, $cpjson
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true}$params},
 "activation_checkpointing": {$checkpoints},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}
JSON
  local tile=$((seq < 8192 ? seq : 8192))
  "$bin/stratum-run" --num_procs "$ranks" "$bin/stratum-train" --config "$work/$name.json" --model "$model" \
    --set max_seq_len="$seq" --set tiled_mlp_tokens="$tile" --set tiled_loss_tokens="$tile" \
    --data "$work/long.txt" --cache-dir "$work/cache" --steps "$steps" --eval-every 0 --eval-fraction 0.02 \
    --sample-tokens 0 --print-every 1 --log-dir "$work/$name" > "$work/$name.log" 2>&1
  local rc=$?
  python3 - "$work/$name" "$model" "$seq" "$rc" "$cp" <<'PY'
import csv, json, os, sys
d, model, seq, rc, cp = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
shape = {"llama-1b": (16, 2048, 1.24e9), "llama-8b": (32, 4096, 8.03e9)}[model]
layers, hidden, params = shape
attention = 6 * layers * hidden * seq / (6 * params + 6 * layers * hidden * seq)
try:
    rows = list(csv.DictReader(open(f"{d}/metrics.csv")))
except OSError:
    rows = []
if rc != 0 or not rows:
    print(f"{model:9s} seq {seq:>8d} cp {cp}: did not train (exit {rc})")
    sys.exit(1)
r = rows[-1]
open(f"{d}/step_seconds", "w").write(f"{seq / float(r['tokens_per_s']):.0f}\n")
keys = {k: r.get(k, "") for k in ("tokens_per_s", "mfu", "memory_gib")}
try:  # the host's high-water mark: the offloaded optimizer and host checkpoints
    keys["host_peak_gib"] = f"{json.load(open(f'{d}/summary.json'))['host_peak_gib']:.1f}"
except (OSError, KeyError, ValueError):
    pass
where = " (parameters on the host)" if os.environ.get("OFFLOAD_PARAM") == "1" else ""
if model == "llama-8b" and os.environ.get("HOST_BLOCKS_8B"):
    where += f" (the first {os.environ['HOST_BLOCKS_8B']} blocks' checkpoints on the host)"
print(f"{model:9s} seq {seq:>8d} cp {cp}{where}: " + ", ".join(f"{k} {v}" for k, v in keys.items() if v) +
      f", attention {attention:.0%} of the FLOPs, loss {r['loss']}")
PY
}

if [[ " $parts " == *" 2 "* ]]; then
  echo "=== the longest sequence one GPU trains a step at ==="
  long_corpus "$work/long.txt" $((3 * max_seq * 2 + 4000000))
  deadline=${DEADLINE_AT:-$(( $(date +%s) + 100000 ))}
  for model in ${LONG_MODELS:-llama-1b llama-8b}; do
    first=${FIRST_1B:-4096} host=true
    [ "$model" = llama-8b ] && first=${FIRST_8B:-32768} host=${HOST_BLOCKS_8B:-false}
    seq=$first predicted=0 last_ok=0 halved=0
    [ "$model" = llama-8b ] && predicted=$((60 + 30 * first / 32768)) last_ok=${KNOWN_8B:-0}  # start-up and a first step
    while [ "$seq" -le "$max_seq" ]; do
      if [ $(( $(date +%s) + predicted )) -gt "$deadline" ]; then
        echo "$model seq $seq: not tried (predicted ${predicted} s, past DEADLINE_AT)"
        break
      fi
      t0=$(date +%s)
      if ! long_run "$model" "$seq" 1 1 "$host"; then
        tail -4 "$work/$model-$seq-cp1.log" | sed 's/^/  /'
        # Once: the length halfway between the last that trained and this one
        # (a multiple of 8192, as the tiles), so the longest is known to 25%.
        mid=$(( (last_ok + seq) / 2 / 8192 * 8192 ))
        if [ "$halved" = 0 ] && [ "$last_ok" -gt 0 ] && [ "$mid" -gt "$last_ok" ]; then
          halved=1 seq=$mid
          continue
        fi
        break
      fi
      last_ok=$seq
      # The next length: its start-up as this one's, its steps 4.2x as long (attention's S^2).
      step_s=$(cat "$work/$model-$seq-cp1/step_seconds" 2>/dev/null || echo 0)
      steps=2
      [ $((seq * 2)) -gt 65536 ] && steps=1
      predicted=$(( $(date +%s) - t0 + step_s * (42 * steps - 10 * (seq > 65536 ? 1 : 2)) / 10 ))
      [ "$halved" = 1 ] && break  # the midpoint trained: the failed length is the bound
      seq=$((seq * 2))
    done
  done
fi

if [[ " $parts " == *" 3 "* ]]; then
  echo "=== llama-1b at 32K: each sequence over 2 ranks sharing the GPU, against one rank ==="
  [ -f "$work/long.txt" ] || long_corpus "$work/long.txt" 8000000
  long_run llama-1b 32768 1 1
  long_run llama-1b 32768 2 2 || tail -4 "$work/llama-1b-32768-cp2.log" | sed 's/^/  /'
fi
cp "$work"/*.log "$out"/ 2>/dev/null || true
