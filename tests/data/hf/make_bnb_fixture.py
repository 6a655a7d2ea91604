#!/usr/bin/env python3
"""Writes llama3_bnb4/: tests/data/hf/llama3 as transformers saves a model
loaded with BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=bfloat16): every
nn.Linear of the blocks in NF4 (the packed weight beside its
QuantState.as_dict(packed=True)), lm_head, the embedding and the norms
dense, and config.json's quantization_config as transformers writes it.
Also dequantized.safetensors: bitsandbytes' own dequantization of each
quantized weight, for the test to compare with.

Run with bitsandbytes 0.50.2, safetensors and torch 2.13 (CPU), from tests/data/hf:
  python make_bnb_fixture.py
"""
import json
import os

import bitsandbytes
import bitsandbytes.functional as F
import torch
from safetensors.torch import load_file, save_file

src, out = "llama3", "llama3_bnb4"
os.makedirs(out, exist_ok=True)
weights = {}
for f in sorted(os.listdir(src)):
    if f.startswith("model-") and f.endswith(".safetensors"):
        weights.update(load_file(os.path.join(src, f)))
linears = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
stored, dequantized = {}, {}
for name, w in weights.items():
    module = name.rsplit(".", 2)[-2] if name.endswith(".weight") else ""
    if module not in linears:
        stored[name] = w.to(torch.bfloat16)
        continue
    packed, state = F.quantize_4bit(w.to(torch.bfloat16), blocksize=64, compress_statistics=True, quant_type="nf4")
    stored[name] = packed
    for key, value in state.as_dict(packed=True).items():
        stored[f"{name}.{key}"] = value
    dequantized[name] = F.dequantize_4bit(packed, state)
save_file(stored, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
save_file(dequantized, os.path.join(out, "dequantized.safetensors"))
config = json.load(open(os.path.join(src, "config.json")))
config["dtype"] = "bfloat16"
config["quantization_config"] = {
    "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
    "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
    "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
    "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
print(f"{out}: {sum(1 for n in stored if n.endswith('quant_state.bitsandbytes__nf4'))} weights in NF4 "
      f"(bitsandbytes {bitsandbytes.__version__})")
