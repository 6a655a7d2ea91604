"""Writes the Hugging Face fixtures the tests load: tiny random models saved by
transformers itself (config.json + safetensors, one file or shards with an
index), and transformers' logits on a fixed input beside each.

  python3 tests/data/hf/make_fixtures.py tests/data/hf   (needs torch and transformers)

gpt2:        GPT2LMHeadModel (tied head, learned positions, Conv1D weights)
llama3:      LlamaForCausalLM, Llama-3 shape: GQA (4 heads, 2 key/value heads),
             llama3 RoPE scaling, untied head; saved in shards with an index
llama2:      LlamaForCausalLM, Llama-2 shape: no GQA, no RoPE scaling, tied head
llama2_spm:  the Llama-2 shape at the vocabulary of tests/data/tokenizers/llama2's
             SentencePiece model, which it carries (tokenizer.model and its
             tokenizer_config.json): a directory to fine-tune as downloaded
"""
import shutil
import os
import sys

import torch
import transformers
from safetensors.torch import save_file


def write(model, out, shard=None):
    model.eval()
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(out, safe_serialization=True, **kwargs)
    ids = (torch.arange(24, dtype=torch.int64) * 37 % model.config.vocab_size).reshape(2, 12)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float().contiguous()
    save_file({"input_ids": ids, "logits": logits}, os.path.join(out, "transformers_logits.safetensors"))


def main(root):
    torch.manual_seed(0)
    gpt2 = transformers.GPT2Config(vocab_size=320, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                   embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    write(transformers.GPT2LMHeadModel(gpt2), os.path.join(root, "gpt2"))
    torch.manual_seed(1)
    llama3 = transformers.LlamaConfig(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    write(transformers.LlamaForCausalLM(llama3), os.path.join(root, "llama3"), shard="40KB")
    torch.manual_seed(2)
    llama2 = transformers.LlamaConfig(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True)
    write(transformers.LlamaForCausalLM(llama2), os.path.join(root, "llama2"))
    write_llama2_spm(root)


def write_llama2_spm(root):
    torch.manual_seed(3)
    config = transformers.LlamaConfig(vocab_size=3000, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
                                      bos_token_id=1, eos_token_id=2)
    out = os.path.join(root, "llama2_spm")
    write(transformers.LlamaForCausalLM(config), out)
    os.remove(os.path.join(out, "transformers_logits.safetensors"))  # the logits tests use the others
    shutil.copy(os.path.join(root, "..", "tokenizers", "llama2", "tokenizer.model"), out)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        f.write('{"add_bos_token": true, "add_eos_token": false, "bos_token": "<s>", "eos_token": "</s>", '
                '"tokenizer_class": "LlamaTokenizer"}\n')


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
