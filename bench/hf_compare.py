"""Loads a `stratum-ckpt export` directory with Hugging Face transformers and
compares its logits with Stratum's (bench/dump_logits) on the same input.
Usage: python3 bench/hf_compare.py HF_DIR STRATUM_LOGITS.safetensors"""
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main(hf_dir, stratum_file):
    ours = load_file(stratum_file)
    try:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = model(ours["tokens"]).logits.float()
    diff = (theirs - ours["logits"]).abs().max().item()
    scale = theirs.abs().max().item()
    print(f"hf_compare: {type(model).__name__} from {hf_dir}: max |logits diff| = {diff:.3e} "
          f"(max |logit| {scale:.2f}), argmax agreement "
          f"{(theirs.argmax(-1) == ours['logits'].argmax(-1)).float().mean().item() * 100:.1f}%")
    return 0 if diff < 1e-3 * max(1.0, scale) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
