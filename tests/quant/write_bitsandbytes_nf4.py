#!/usr/bin/env python3
"""Writes bitsandbytes_nf4.safetensors: weights and what bitsandbytes'
quantize_4bit(..., quant_type="nf4") made of them on the CPU, in the layout a
bitsandbytes-quantized Hugging Face checkpoint stores (QuantState.as_dict(packed=True)),
plus bitsandbytes' own dequantization. test_nf4.cpp reads it.

  a: bf16 [150, 128], double quantization (300 blocks of 64: two nested blocks of 256)
  b: bf16 [100, 37], double quantization (a last block of 52 values, one nested block of 58)
  c: fp32 [64, 64] x 0.02, absmax kept in fp32 (no double quantization)
  blockwise: quantize_blockwise of 8,192 fp32 values in blocks of 256 through the
    dynamic map (the 8-bit step of double quantization, on more values than the scales give)

Run with bitsandbytes 0.50.2 and torch 2.13 (CPU):
  python write_bitsandbytes_nf4.py bitsandbytes_nf4.safetensors
"""
import sys

import bitsandbytes
import bitsandbytes.functional as F
import torch
from safetensors.torch import save_file

torch.manual_seed(2023)
a = torch.randn(150, 128)
a[3, 5] = 9.0  # an outlier: its block's other values crowd into few codes
a[140, :64] = 0.0  # a block of zeros
cases = {
    "a": (a.to(torch.bfloat16), True),
    "b": (torch.randn(100, 37).to(torch.bfloat16), True),
    "c": (torch.randn(64, 64) * 0.02, False),
}
out = {}
for name, (w, nested) in cases.items():
    packed, state = F.quantize_4bit(w, blocksize=64, compress_statistics=nested, quant_type="nf4")
    out[f"{name}.source"] = w
    out[f"{name}.weight"] = packed
    for key, value in state.as_dict(packed=True).items():
        out[f"{name}.weight.{key}"] = value
    out[f"{name}.dequantized"] = F.dequantize_4bit(packed, state)
values = torch.randn(8192) * torch.rand(8192)
codes, state = F.quantize_blockwise(values, blocksize=256)
out["blockwise.source"] = values
out["blockwise.codes"] = codes
out["blockwise.absmax"] = state.absmax
out["blockwise.code"] = state.code
save_file({k: v.contiguous() for k, v in out.items()}, sys.argv[1],
          metadata={"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__})
