"""Python peers of Stratum's mixture-of-experts throughput (scripts/device_moe.sh):
transformers' own MixtralForCausalLM and Qwen3MoeForCausalLM at the same
shape as Stratum's run (bench_engine --model mixtral-8x7b / qwen3-30b-a3b
with --set layers=N), bf16 parameters, torch's fused AdamW (lr 3e-4, betas
0.9/0.95, weight decay 0.1, clipping 1.0), random tokens, micro-batch,
sequence and micro-batches an optimizer step (--gas) as given; eager, or under torch.compile (--compile). The router's
auxiliary loss is off on both sides (transformers computes it only with
output_router_logits).

Prints one JSON line with bench_engine's keys: tokens/s over the steps after
the warm-up, MFU on the active parameters (6 N_active + 12 L d s FLOPs a
token, 989 TFLOP/s), peak allocated GiB (torch.cuda.max_memory_allocated).

  python3 bench/peers/moe_peers.py --arch mixtral --layers 4 --seq 4096 --steps 8 [--compile]
"""
import argparse
import json
import time

import torch


def config(args):
    if args.arch == "mixtral":
        from transformers import MixtralConfig
        return MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=args.layers,
                             num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
                             num_experts_per_tok=2, max_position_embeddings=max(32768, args.seq), rope_theta=1e6,
                             tie_word_embeddings=False, router_jitter_noise=0.0, attn_implementation="sdpa",
                             use_cache=False)
    from transformers import Qwen3MoeConfig
    return Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                          num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                          num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
                          max_position_embeddings=max(40960, args.seq), rope_theta=1e6, tie_word_embeddings=False,
                          attn_implementation="sdpa", use_cache=False)


def active_parameters(model, cfg):
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    e = cfg.num_local_experts if hasattr(cfg, "num_local_experts") else cfg.num_experts
    return total - experts + experts * cfg.num_experts_per_tok // e


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", choices=["mixtral", "qwen3_moe"], required=True)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--micro", type=int, default=1)
    p.add_argument("--gas", type=int, default=1, help="micro-batches an optimizer step (their mean loss's gradient)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--device", default="cuda", help="cuda (the measurement), or cpu for a smoke run")
    args = p.parse_args()
    from transformers import MixtralForCausalLM, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    cfg = config(args)
    cls = MixtralForCausalLM if args.arch == "mixtral" else Qwen3MoeForCausalLM
    cuda = args.device == "cuda"
    with torch.device(args.device):
        model = cls(cfg).to(torch.bfloat16)
    model.train()
    active = active_parameters(model, cfg)
    step_model = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    tokens = torch.randint(0, cfg.vocab_size, (args.micro, args.seq), device=args.device)
    times = []
    for step in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        for _ in range(args.gas):
            out = step_model(input_ids=tokens, labels=tokens)  # transformers shifts the labels itself
            (out.loss / args.gas).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    tok_s = args.micro * args.gas * args.seq * len(times) / sum(times)
    head_width = cfg.num_attention_heads * (getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    flops = 6 * active + 12 * cfg.num_hidden_layers * head_width * args.seq
    # The keys of bench_engine's and gpt_peers.py's rows (bench/report.py reads them alike).
    print(json.dumps({"system": "transformers" + ("-compile" if args.compile else ""), "arch": args.arch,
                      "layers": args.layers, "gpus": 1, "seq": args.seq, "micro": args.micro, "gas": args.gas,
                      "tokens_per_s_per_gpu": round(tok_s, 1), "tflops_per_gpu": round(tok_s * flops / 1e12, 2),
                      "mfu": round(tok_s * flops / 989e12, 4),
                      "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
                      "wall_step_s": sum(times) / len(times), "active_params": active, "loss": out.loss.item()}))


if __name__ == "__main__":
    main()
