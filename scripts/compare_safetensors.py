#!/usr/bin/env python3
"""Compares the tensors of two Hugging Face model directories byte for byte
(model.safetensors, or the shards model.safetensors.index.json names), with
the standard library only (the GPU machine has no safetensors package).

  compare_safetensors.py DIR_A DIR_B
Prints the tensor count and exits 0 when every tensor of A is in B with the
same dtype, shape and bytes; else names the first few that differ, exit 1.
"""
import json
import os
import struct
import sys


def tensors(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for name in files:
        with open(os.path.join(directory, name), "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
            data = f.read()
        for key, info in header.items():
            if key == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            out[key] = (info["dtype"], tuple(info["shape"]), data[begin:end])
    return out


def main(a_dir, b_dir):
    a, b = tensors(a_dir), tensors(b_dir)
    bad = [k for k in sorted(a) if k not in b or a[k] != b[k]]
    if bad:
        for k in bad[:5]:
            print(f"{k}: " + ("missing in " + b_dir if k not in b else f"differs ({a[k][:2]} vs {b[k][:2]})"))
        return 1
    print(f"{len(a)} tensors identical")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
