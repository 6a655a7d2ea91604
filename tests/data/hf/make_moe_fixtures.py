"""Writes the mixture-of-experts Hugging Face fixtures the tests load: tiny
random models saved by transformers itself (config.json + model.safetensors,
each expert's weights under its own name as the hub stores them), and
transformers' logits on a fixed input beside each.

  python3 tests/data/hf/make_moe_fixtures.py tests/data/hf   (needs torch and transformers)

mixtral:    MixtralForCausalLM: 4 experts, top 2, GQA (4 heads, 2 key/value heads), untied
qwen3_moe:  Qwen3MoeForCausalLM: 8 experts, top 2 with the chosen weights normalised,
            q/k norms, heads of 16 at hidden 32 with 4 heads (head_dim != hidden / heads)
qwen3_moe_unnormalised: the same shape with norm_topk_prob false (transformers' default)
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file


def write(model, out):
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    ids = (torch.arange(24, dtype=torch.int64) * 37 % model.config.vocab_size).reshape(2, 12)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float().contiguous()
    save_file({"input_ids": ids, "logits": logits}, os.path.join(out, "transformers_logits.safetensors"))


def randomize_norms(model):
    # RMSNorm scales start at 1: draw them so that a misplaced norm shows in
    # the logits. The routers' logits are widened so that no token's choice
    # of experts hangs on a rounding.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
            elif name.endswith(".gate.weight"):
                p.mul_(50.0)


def main(root):
    torch.manual_seed(10)
    mixtral = transformers.MixtralConfig(vocab_size=320, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                         num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-5,
                                         rope_theta=1e6, tie_word_embeddings=False, router_jitter_noise=0.0)
    model = transformers.MixtralForCausalLM(mixtral)
    randomize_norms(model)
    write(model, os.path.join(root, "mixtral"))
    for name, normalise in (("qwen3_moe", True), ("qwen3_moe_unnormalised", False)):
        torch.manual_seed(11)
        qwen = transformers.Qwen3MoeConfig(vocab_size=320, hidden_size=32, intermediate_size=64,
                                           moe_intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                                           num_experts=8, num_experts_per_tok=2, norm_topk_prob=normalise,
                                           rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False)
        model = transformers.Qwen3MoeForCausalLM(qwen)
        randomize_norms(model)
        write(model, os.path.join(root, name))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
