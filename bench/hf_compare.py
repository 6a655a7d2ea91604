"""Loads a `stratum-ckpt export` directory with Hugging Face transformers and
compares its logits with Stratum's (bench/dump_logits) on the same input; exit
status 1 when they differ by more than 1e-3 of the largest logit.
Usage: python3 bench/hf_compare.py HF_DIR STRATUM_LOGITS.safetensors [--json]"""
import argparse
import json
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main(hf_dir, stratum_file, as_json=False):
    ours = load_file(stratum_file)
    try:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = model(ours["tokens"]).logits.float()
    diff = (theirs - ours["logits"]).abs().max().item()
    scale = theirs.abs().max().item()
    agreement = (theirs.argmax(-1) == ours["logits"].argmax(-1)).float().mean().item()
    passed = diff < 1e-3 * max(1.0, scale)
    if as_json:
        print(json.dumps({"system": "hf-export-check", "hf_class": type(model).__name__, "max_abs_logits_diff": diff,
                          "max_abs_logit": scale, "argmax_agreement": agreement, "passed": passed}))
    else:
        print(f"hf_compare: {type(model).__name__} from {hf_dir}: max |logits diff| = {diff:.3e} "
              f"(max |logit| {scale:.2f}), argmax agreement {agreement * 100:.1f}%")
    return 0 if passed else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_dir")
    ap.add_argument("stratum_logits")
    ap.add_argument("--json", action="store_true", help="one JSON line instead of the sentence")
    a = ap.parse_args()
    sys.exit(main(a.hf_dir, a.stratum_logits, a.json))
