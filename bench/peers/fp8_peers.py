"""torchao's float8 training under torch.compile: the peer of Stratum's FP8 rows
(bench/scenarios.json, 1gpu-fp8-*).

The model is gpt_peers.py's (the same shapes, initialization and tied or untied
head as Stratum's presets; --layers for fewer blocks), fp32 parameters under
bf16 autocast, --gas micro-batches an optimizer step, torch's fused AdamW (lr
3e-4, betas 0.9/0.95, weight decay 0.1, clipping 1.0), random tokens. torchao's convert_to_float8_training swaps the
blocks' projections (attention QKV and output, MLP) for Float8Linear with the
recipe's scaling (tensorwise: dynamic per tensor; rowwise: per row, powers of
two), as Stratum's fp8 section does; the LM head (tied: not an nn.Linear;
untied: filtered out), embeddings and norms stay bf16. Then torch.compile
over the whole model, which fuses torchao's casts and amaxes.

Prints one JSON line with bench_engine's keys: tokens/s over the steps after
the warm-up, MFU against bf16's 989 TFLOP/s (6N + 12*L*d*seq FLOPs a token, as
the bf16 rows, so FP8 rows can pass 100% of a bf16 roof), peak allocated GiB.

  PYTHONPATH=.pylib python3 bench/peers/fp8_peers.py --recipe tensorwise --model llama-8b --layers 16 --seq 4096 --micro 4
  python3 bench/peers/fp8_peers.py --recipe rowwise --model tiny-llama --seq 64 --micro 2 --device cpu --no-compile
    (a smoke run: torchao's emulated float8 on the CPU)
"""
import argparse
import dataclasses
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_peers import PRESETS, CausalLM  # noqa: E402

PROJECTIONS = ("c_attn", "c_proj", "c_fc", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def to_float8(model, recipe, emulate):
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # .whl/fp8 (scripts/device_fp8_wheels.sh)
    config = Float8LinearConfig.from_recipe_name(recipe)
    if emulate:  # the CPU has no FP8 GEMM: torchao's emulation, for smoke runs only
        config = dataclasses.replace(config, emulate=True)

    def projection(module, fqn):
        # The blocks' projections whose GEMM dims FP8 takes (multiples of 16), as Stratum's fp8 section.
        return (fqn.startswith("blocks.") and fqn.rsplit(".", 1)[-1] in PROJECTIONS
                and module.in_features % 16 == 0 and module.out_features % 16 == 0)
    convert_to_float8_training(model, config=config, module_filter_fn=projection)
    return sum(1 for m in model.modules() if type(m).__name__ == "Float8Linear")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", choices=["tensorwise", "rowwise"], required=True)
    ap.add_argument("--model", default="gpt2-1.3b", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, help="fewer blocks than the preset's (Stratum's --set layers=N)")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--gas", type=int, default=1, help="micro-batches an optimizer step (gradient accumulation)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="eager (torchao's float8 is slow without compile)")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--device", default="cuda", help="cuda (the measurement), or cpu for a smoke run")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    torch.manual_seed(42)
    with torch.device(a.device):  # drawn on the device: billions of parameters in seconds
        model = CausalLM(a.model, a.seq, a.layers)
    n_params = sum(p.numel() for p in model.parameters())
    converted = to_float8(model, a.recipe, emulate=not cuda)
    step_model = model if a.no_compile else torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gen = torch.Generator(device=a.device).manual_seed(1000)
    times = []
    for step in range(a.warmup + a.steps):
        tokens = torch.randint(0, model.vocab, (a.gas, a.micro, a.seq + 1), generator=gen, device=a.device)
        sync()
        t0 = time.perf_counter()
        for micro in tokens:
            with torch.autocast(torch.device(a.device).type, dtype=torch.bfloat16):
                loss = step_model(micro[:, :-1], micro[:, 1:])
            (loss / a.gas).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    tok_s = a.gas * a.micro * a.seq * len(times) / sum(times)
    flops = 6 * n_params + 12 * model.layers * model.hidden * a.seq
    system = f"torchao-float8-{a.recipe}" + ("" if a.no_compile else "-compile")
    print(json.dumps({"system": system, "model": a.model, "layers": model.layers, "gpus": 1, "seq": a.seq,
                      "micro": a.micro, "gas": a.gas, "params": n_params, "float8_linears": converted,
                      "tokens_per_s_per_gpu": round(tok_s, 1), "tflops_per_gpu": round(tok_s * flops / 1e12, 2),
                      "mfu": round(tok_s * flops / (a.peak_tflops * 1e12), 4),
                      "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
                      "wall_step_s": round(sum(times) / len(times), 4), "loss": round(loss.item(), 4)}), flush=True)


if __name__ == "__main__":
    main()
