#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "stratum-train stratum-run bench_engine bench_moe_gemm"` (build-device/):
#   1. Expert parallelism on the CUDA path, its ranks sharing the one GPU (over
#      MPI through the host): tiny Mixtral (4 experts, top 2, dropless) at
#      EP = 2 and 4 (each also data parallel), EP 2 x 2 at ZeRO-3, with
#      activation checkpointing, and EP 2 under TP 2 with sequence
#      parallelism (ZeRO-2), against the one-rank run: fp32, per-step
#      losses within 1e-5 relative. The all-to-all's GPU path exercised.
#      Then LoRA on the experts (and q_proj), the base frozen, at EP 2
#      against its one-rank run: each expert's adapters through its own GEMMs;
#      and QLoRA (the base in NF4, bf16 training) the same way, and at ZeRO-3
#      over 2 data-parallel ranks (each layer's 4-bit experts gathered as
#      bytes), within 1e-4 (an H100 measured 8.5e-6 at EP 2 on 2026-12-06).
#   2. Throughput against transformers' own models: the scenarios
#      1gpu-moe-mixtral and 1gpu-moe-qwen3 of bench/run_matrix.sh (Mixtral's
#      shape at 2 layers, Qwen3-30B-A3B's at 4, to fit an H100; seq 4096, micro-batch 1, bf16;
#      the grouped GEMM and a loop of per-expert GEMMs; bench/peers/moe_peers.py
#      eager and compiled, from .pylib/: WHEELS=.whl/lora_b installs
#      transformers first, scripts/device_lora_wheels.sh fills it). Their
#      .jsonl land in $OUT: copy them into bench/results/, then regenerate
#      docs/benchmarks.md (python3 bench/report.py).
#   3. The experts' GEMMs alone at both shapes (bench_moe_gemm): the grouped
#      GEMM (ATen's _grouped_mm) against a loop of one GEMM per expert.
#   PARTS="1 2 3" (default); SCENARIOS picks part 2's scenarios (default both).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_LOG_LEVEL=info
bin=${BIN:-build-device/bin}
parts=${PARTS:-1 2 3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --target .pylib "$WHEELS"/*.whl 2>&1 | grep -v "^WARNING" | tail -3
fi

if [[ " $parts " == *" 1 "* ]]; then
  echo "=== expert parallelism on the shared GPU: tiny Mixtral, fp32, against one rank ==="
  model=(--model tiny-mixtral --set layers=2 --set max_seq_len=64)
  for entry in "ref 1 1 0" "ep2 2 2 0" "ep4 4 4 0" "ep2-dp2-zero3 4 2 3" "ep2-checkpointed 2 2 1" "tp2-sp-ep2 4 2 2" \
               "lora-ref 1 1 0" "lora-ep2 2 2 0" "qlora-ref 1 1 0" "qlora-ep2 2 2 0" \
               "qlora-dp2-zero3 2 1 3"; do
    read -r name ranks ep zero <<< "$entry"
    ref=ref lora="" tol=1e-5
    if [[ $name == lora-* ]]; then
      ref=lora-ref
      lora='"lora": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "w1", "w3", "w2"]},'
    elif [[ $name == qlora-* ]]; then
      ref=qlora-ref tol=1e-4
      lora='"bf16": {"enabled": true}, "lora": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "w1", "w3", "w2"], "base_dtype": "nf4"},'
    fi
    ckpt=""
    [ "$name" = ep2-checkpointed ] && ckpt='"activation_checkpointing": {},' && zero=0
    # Each tensor-parallel rank routes its half of every sequence (sequence parallelism).
    [ "$name" = tp2-sp-ep2 ] && ckpt='"tensor_parallel": {"autotp_size": 2, "sequence_parallel": true},'
    cat > "$work/$name.json" <<JSON
{"train_batch_size": 16, "gradient_accumulation_steps": 2, $ckpt $lora
 "moe": {"expert_parallel_size": $ep, "aux_loss_coeff": 0, "z_loss_coeff": 0.001},
 "zero_optimization": {"stage": $zero},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}
JSON
    "$bin/stratum-run" --num_procs "$ranks" "$bin/stratum-train" --config "$work/$name.json" "${model[@]}" \
      --data default --cache-dir "$work/cache" --steps 12 --eval-every 100 --sample-tokens 0 --print-every 1000 \
      --seed 7 --log-dir "$work/$name" > "$work/$name.log" 2>&1 || { echo "$name: exit $?"; tail -5 "$work/$name.log"; }
    [ "$name" = "$ref" ] && continue
    python3 - "$work" "$name" "$ref" "$tol" <<'PY'
import csv, sys
work, name, ref, tol = sys.argv[1:]
tol = float(tol)
def losses(n):
    with open(f"{work}/{n}/metrics.csv") as f:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f)}
a, b = losses(name), losses(ref)
worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in b)
print(f"{name:20s} {'PASS' if worst <= tol else 'FAIL'}  largest relative difference {worst:.2e} (bound {tol:g}); "
      f"loss {b[min(b)]:.4f} -> {a[max(a)]:.4f}")
PY
    grep -m1 -E "experts max/mean" "$work/$name.log" | sed 's/^/  /'
  done
fi

if [[ " $parts " == *" 2 "* ]]; then
  echo "=== throughput: Stratum against transformers' MoE models (bench/run_matrix.sh) ==="
  # shellcheck disable=SC2086
  bash bench/run_matrix.sh ${SCENARIOS:-1gpu-moe-mixtral 1gpu-moe-qwen3} 2>&1 | tail -20
fi

if [[ " $parts " == *" 3 "* ]]; then
  echo "=== the experts' GEMMs alone: grouped against a loop ==="
  for shape in "--experts 8 --top-k 2 --hidden 4096 --ffn 14336" "--experts 128 --top-k 8 --hidden 2048 --ffn 768"; do
    # shellcheck disable=SC2086
    STRATUM_MOE_GROUPED_GEMM=1 "$bin/bench_moe_gemm" $shape --tokens 8192
    # shellcheck disable=SC2086
    STRATUM_MOE_GROUPED_GEMM=0 "$bin/bench_moe_gemm" $shape --tokens 8192
    # shellcheck disable=SC2086
    "$bin/bench_moe_gemm" $shape --tokens 8192  # the size rule's choice
  done
fi
