"""Writes LoRA adapters saved by the real `peft` package over the tiny models of
make_fixtures.py, and the adapted model's logits beside each, for the tests of
checkpoint/peft_adapter.h.

  python3 tests/data/hf/make_peft_fixtures.py tests/data/hf   (needs torch, transformers, peft)

gpt2_lora:   c_attn, c_proj, c_fc (Conv1D, so fan_in_fan_out), r 4, alpha 8
llama3_lora: every projection of the blocks, r 4, alpha 16, rsLoRA, and the
             LM head trained whole (modules_to_save)

Each directory holds what `save_pretrained` writes (adapter_config.json,
adapter_model.safetensors) and peft_logits.safetensors: the adapted model's
fp32 logits in eval mode on the input_ids of the base's
transformers_logits.safetensors. Every lora_B (zero after peft's init) and the
LM head's copy are set to seeded random values, so the adapter moves the logits.
"""
import os
import sys

import peft
import torch
import transformers
from safetensors.torch import load_file, save_file


def write(root, base, out, seed, **lora):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(root, base), dtype=torch.float32)
    model = peft.get_peft_model(model, peft.LoraConfig(task_type="CAUSAL_LM", r=4, **lora))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn_like(p) * 0.1)
            elif ".modules_to_save." in name:
                p.add_(torch.randn_like(p) * 0.02)
    # The base as the tests name it (from the repository root), not this machine's path.
    model.peft_config["default"].base_model_name_or_path = "tests/data/hf/" + base
    model.eval()
    out = os.path.join(root, out)
    model.save_pretrained(out)
    os.remove(os.path.join(out, "README.md"))  # peft's model card template: nothing a test reads
    ids = load_file(os.path.join(root, base, "transformers_logits.safetensors"))["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float().contiguous()
    save_file({"input_ids": ids, "logits": logits}, os.path.join(out, "peft_logits.safetensors"))


def main(root):
    write(root, "gpt2", "gpt2_lora", 10, target_modules=["c_attn", "c_proj", "c_fc"], lora_alpha=8,
          fan_in_fan_out=True)
    write(root, "llama3", "llama3_lora", 11,
          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
          lora_alpha=16, use_rslora=True, modules_to_save=["lm_head"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
