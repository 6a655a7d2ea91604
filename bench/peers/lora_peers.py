"""Python peers of Stratum's LoRA / QLoRA throughput (scripts/device_lora.sh):
transformers' LlamaForCausalLM at a Llama shape with peft's LoRA on all
seven projections, in bf16 ("lora"), or with every block linear in
bitsandbytes' NF4 with double quantization and bf16 compute ("qlora", the
QLoRA recipe without prepare_model_for_kbit_training's fp32 upcast of the
embeddings and head, which would only slow the peer). Gradient checkpointing
(non-reentrant), AdamW on the adapters, micro-batch 1, random tokens (the
throughput does not depend on them), weights drawn at the shape (no
checkpoint travels to the GPU machine).

Prints one JSON line: tokens/s over the steps after the warm-up, peak
allocated GiB (torch.cuda.max_memory_allocated), the trainable parameters.

  python3 bench/peers/lora_peers.py --mode qlora --layers 32 --seq 4096 --steps 8
"""
import argparse
import json
import time

import torch


def llama_config(args):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=128256, hidden_size=args.hidden, intermediate_size=args.ffn,
                       num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                       max_position_embeddings=max(8192, args.seq), rope_theta=500000.0, tie_word_embeddings=False,
                       attn_implementation="sdpa", torch_dtype=torch.bfloat16, use_cache=False)


def to_nf4(model):
    """Every block linear as bitsandbytes' Linear4bit (NF4, double quantization, bf16 compute)."""
    import bitsandbytes as bnb
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, lin in list(parent.named_children()):
                if not isinstance(lin, torch.nn.Linear):
                    continue
                q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=False, compute_dtype=torch.bfloat16,
                                      compress_statistics=True, quant_type="nf4", device="meta")
                q.weight = bnb.nn.Params4bit(lin.weight.data.cpu(), requires_grad=False, compress_statistics=True,
                                             quant_type="nf4").cuda()
                setattr(parent, name, q)
                del lin
    torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["lora", "qlora"], required=True)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=14336)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--r", type=int, default=16)
    args = p.parse_args()
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(llama_config(args)).to(torch.bfloat16)
    if args.mode == "qlora":
        to_nf4(model)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=args.r, lora_alpha=2 * args.r, lora_dropout=0.0, task_type="CAUSAL_LM",
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj"]))
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=2e-4, fused=True)
    torch.cuda.reset_peak_memory_stats()
    tokens = torch.randint(0, 128256, (1, args.seq), device="cuda")
    times = []
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    steady = times[args.warmup:] or times
    print(json.dumps({"peer": f"peft {args.mode}", "layers": args.layers, "seq": args.seq,
                      "tokens_per_s": round(args.seq / (sum(steady) / len(steady))),
                      "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "trainable_m": round(sum(p.numel() for p in trainable) / 1e6, 2),
                      "loss": round(float(loss), 4)}))


if __name__ == "__main__":
    main()
