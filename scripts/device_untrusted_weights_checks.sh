#!/usr/bin/env bash
# On the GPU machine, after `scripts/device_build.sh --only-build --targets
# "stratum-run stratum-train stratum-ckpt"` (build-device/): --init-from of a
# stranger's weights on CUDA, where each rank checks the slice it copied into
# its masters on the GPU.
#   1. a copy of the Llama-3 fixture with one NaN and one +Inf element: refused
#      naming the tensor (ZeRO-3 and ZeRO-0), within seconds, no step taken
#   2. the fixtures themselves still load bit for bit at ZeRO-3 (fp32, lr 0)
#   3. a config.json whose llama3 rope_parameters lacks its factor: refused by key
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_COMM_TIMEOUT=120
bin=build-device/bin
work=$(mktemp -d)
for stage in 3 0; do
  cat > "$work/z$stage.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0, "weight_decay": 0.0}}, "zero_optimization": {"stage": $stage}}
JSON
done
train() { timeout 120 "$bin/stratum-run" --num_gpus 1 "$bin/stratum-train" --data default --cache-dir "$work/cache" \
  --eval-every 0 --sample-tokens 0 "$@" 2>&1; }
llama_seq=(--set max_seq_len=32)  # the Llama-3 fixture's positions

# A copy of the fixture with element 37 of one tensor NaN and element 5 of another +Inf (bytes patched in place).
cp -r tests/data/hf/llama3 "$work/bad"
python3 - "$work/bad" <<'PY'
import json, struct, sys, glob, os
d = sys.argv[1]
patched = []
for path in sorted(glob.glob(os.path.join(d, "model-*.safetensors"))):
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        for name, t in header.items():
            if name == "__metadata__" or t["dtype"] not in ("F32", "BF16") or len(patched) == 2:
                continue
            begin = 8 + n + t["data_offsets"][0]
            element = 37 if not patched else 5
            if t["dtype"] == "F32":
                f.seek(begin + 4 * element); f.write(struct.pack("<f", float("nan") if not patched else float("inf")))
            else:
                f.seek(begin + 2 * element); f.write(b"\xc0\x7f" if not patched else b"\x80\x7f")
            patched.append(f"{name} ({t['dtype']}) element {element}")
print("patched:", "; ".join(patched))
PY
echo "=== NaN and Inf weights refused on the GPU ==="
for stage in 3 0; do
  start=$(date +%s%N)
  train --config "$work/z$stage.json" --init-from "$work/bad" "${llama_seq[@]}" --steps 1 --save-dir "$work/bad_run" \
    | grep -E "holds NaN|error|step 1/1" | sed 's/^\[rank 0\] //' | head -3
  echo "ZeRO-$stage: exit ${PIPESTATUS[0]} after $(( ($(date +%s%N) - start) / 1000000 )) ms"
done
echo "=== the fixtures still load bit for bit at ZeRO-3 ==="
for f in gpt2 llama3; do
  extra=(); [ $f = llama3 ] && extra=("${llama_seq[@]}")
  train --config "$work/z3.json" --init-from tests/data/hf/$f "${extra[@]}" --steps 1 --save-dir "$work/$f" \
    | grep -E "initialized from|step 1/1|error" | sed 's/^\[rank 0\] //'
  "$bin/stratum-ckpt" export "$work/$f" "$work/${f}_hf" --dtype fp32 | tail -1
  echo -n "$f: "; python3 scripts/compare_safetensors.py tests/data/hf/$f "$work/${f}_hf"
done
echo "=== llama3 rope_parameters without its factor ==="
cp -r tests/data/hf/llama3 "$work/nofactor"
python3 - "$work/nofactor/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["rope_parameters"].pop("factor"); json.dump(c, open(p, "w"), indent=1)
PY
train --config "$work/z3.json" --init-from "$work/nofactor" "${llama_seq[@]}" --steps 1 --save-dir "$work/nf" | grep -E "factor|error" | head -2
rm -rf "$work"
