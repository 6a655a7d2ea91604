"""Loads a LoRA adapter directory (as Stratum's write_peft_adapter writes it)
onto the transformers model with peft's own loader, and compares its logits
with a file's.

  python3 scripts/peft_check_adapter.py BASE_DIR ADAPTER_DIR LOGITS_FILE

LOGITS_FILE: safetensors with "input_ids" and "logits" (fp32), such as a
peft fixture's peft_logits.safetensors. Prints the largest absolute
difference; exit status 1 when it is above 1e-5. Needs torch, transformers
and peft (CI has no peft: run by hand).
"""
import sys

import peft
import torch
import transformers
from safetensors.torch import load_file

TOLERANCE = 1e-5


def main(base_dir, adapter_dir, logits_file):
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(model, adapter_dir)
    model.eval()
    want = load_file(logits_file)
    with torch.no_grad():
        got = model(input_ids=want["input_ids"]).logits.float()
    diff = (got - want["logits"]).abs().max().item()
    print(f"{adapter_dir}: max |logits - {logits_file}| = {diff:.3g} (peft {peft.__version__})")
    return 0 if diff <= TOLERANCE else 1


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
