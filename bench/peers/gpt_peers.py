"""PyTorch peers of Stratum's training throughput benchmark (bench/run_matrix.sh).

The same models as Stratum's presets (GPT-2: learned positions, LayerNorm,
tanh-GELU, tied embeddings; LLaMA: RMSNorm, RoPE, SwiGLU, grouped-query
attention, llama-8b's head untied; --layers N for fewer blocks, as --set
layers=N), GPT-2's initialization (normal 0.02, residual projections scaled by
1/sqrt(2 layers)), the same batch, sequence length, bf16 and AdamW, run as
  single   one GPU
  ddp      DistributedDataParallel (bf16 autocast over fp32 parameters)
  fsdp2    fully_shard per block and at the root (bf16 parameters, fp32 reductions)
  deepspeed  DeepSpeed ZeRO-1/2/3 with bf16 (no compiled ops: torch's AdamW)
each eager or under torch.compile (--compile; not with deepspeed). Data are
random tokens: throughput does not depend on them.

Prints one JSON line (rank 0): tokens/s per GPU, TFLOP/s per GPU and MFU
(6N + 12*L*d*seq FLOPs per token against --peak-tflops), peak allocated memory,
and the mean time of forward, backward and optimizer step from CUDA events.

  python3 bench/peers/gpt_peers.py --system single --model gpt2-350m --micro 8
  python3 -m torch.distributed.run --nproc_per_node 2 bench/peers/gpt_peers.py --system fsdp2 ...
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# name: (arch, vocab, seq, hidden, layers, heads, kv_heads, ffn, rope_theta) as in models/model_config.cpp
PRESETS = {
    "tiny-gpt2": ("gpt2", 256, 64, 64, 2, 4, 4, 256, 0),
    "tiny-llama": ("llama", 256, 64, 64, 2, 4, 2, 128, 10000.0),
    "gpt2-350m": ("gpt2", 50257, 1024, 1024, 24, 16, 16, 4096, 0),
    "gpt2-1.3b": ("gpt2", 50257, 2048, 2048, 24, 16, 16, 8192, 0),
    "llama-1b": ("llama", 128256, 131072, 2048, 16, 32, 8, 8192, 500000.0),
    "llama-8b": ("llama", 128256, 8192, 4096, 32, 32, 8, 14336, 500000.0),
}
UNTIED = {"llama-8b"}  # presets whose LM head is a matrix of its own (Stratum's tie_embeddings false)


class Attention(nn.Module):
    def __init__(self, arch, d, heads, kv_heads, theta):
        super().__init__()
        self.arch, self.heads, self.kv_heads, self.head_dim, self.theta = arch, heads, kv_heads, d // heads, theta
        if arch == "gpt2":
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
        else:
            self.q_proj = nn.Linear(d, heads * self.head_dim, bias=False)
            self.k_proj = nn.Linear(d, kv_heads * self.head_dim, bias=False)
            self.v_proj = nn.Linear(d, kv_heads * self.head_dim, bias=False)
            self.o_proj = nn.Linear(heads * self.head_dim, d, bias=False)

    def rope(self, x):  # x: [B, n, T, D]
        T, D = x.shape[2], x.shape[3]
        inv = 1.0 / (self.theta ** (torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D))
        ang = torch.outer(torch.arange(T, device=x.device, dtype=torch.float32), inv)
        cos, sin = torch.cat([ang, ang], -1).cos().to(x.dtype), torch.cat([ang, ang], -1).sin().to(x.dtype)
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, x):
        B, T, C = x.shape
        split = lambda t, n: t.view(B, T, n, self.head_dim).transpose(1, 2)
        if self.arch == "gpt2":
            q, k, v = self.c_attn(x).split(C, -1)
            q, k, v = split(q, self.heads), split(k, self.heads), split(v, self.heads)
        else:
            q, k = self.rope(split(self.q_proj(x), self.heads)), self.rope(split(self.k_proj(x), self.kv_heads))
            v = split(self.v_proj(x), self.kv_heads)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.heads != self.kv_heads)
        y = y.transpose(1, 2).reshape(B, T, self.heads * self.head_dim)
        return self.c_proj(y) if self.arch == "gpt2" else self.o_proj(y)


class Block(nn.Module):
    def __init__(self, arch, d, heads, kv_heads, ffn, theta):
        super().__init__()
        self.arch = arch
        norm = (lambda: nn.LayerNorm(d)) if arch == "gpt2" else (lambda: nn.RMSNorm(d, eps=1e-5))
        self.ln_1, self.ln_2 = norm(), norm()
        self.attn = Attention(arch, d, heads, kv_heads, theta)
        if arch == "gpt2":
            self.c_fc, self.c_proj = nn.Linear(d, ffn), nn.Linear(ffn, d)
        else:
            self.gate_proj = nn.Linear(d, ffn, bias=False)
            self.up_proj = nn.Linear(d, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = self.ln_2(x)
        if self.arch == "gpt2":
            return x + self.c_proj(F.gelu(self.c_fc(h), approximate="tanh"))
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class CausalLM(nn.Module):
    def __init__(self, preset, seq, layers=None):
        super().__init__()
        arch, vocab, max_seq, d, preset_layers, heads, kv, ffn, theta = PRESETS[preset]
        layers = layers or preset_layers  # fewer blocks, as Stratum's --set layers=N
        self.arch = arch
        self.wte = nn.Embedding(vocab, d)
        # max_seq rows, as the preset; a longer --seq grows the table as Stratum's --set max_seq_len=SEQ does
        self.wpe = nn.Embedding(max(max_seq, seq), d) if arch == "gpt2" else None
        self.blocks = nn.ModuleList(Block(arch, d, heads, kv, ffn, theta) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d) if arch == "gpt2" else nn.RMSNorm(d, eps=1e-5)
        self.lm_head = nn.Linear(d, vocab, bias=False) if preset in UNTIED else None
        self.layers, self.hidden, self.vocab = layers, d, vocab
        self.init_weights(layers)

    def init_weights(self, layers):
        residual = 0.02 / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith(("c_proj.weight", "o_proj.weight", "down_proj.weight")):  # residual projections
                nn.init.normal_(p, 0.0, residual)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, tokens, targets):
        x = self.wte(tokens)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        head = self.wte.weight if self.lm_head is None else self.lm_head.weight  # tied or not, as the preset
        logits = F.linear(self.ln_f(x), head)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", choices=["single", "ddp", "fsdp2", "deepspeed"], default="single")
    ap.add_argument("--zero", type=int, default=2, help="DeepSpeed ZeRO stage")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--model", default="gpt2-350m", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, help="fewer blocks than the preset's (Stratum's --set layers=N)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", help="trace one more step (rank 0) to this Chrome trace path")
    a = ap.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = a.device == "cuda"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if a.system != "single":
        import torch.distributed as dist
        dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(42)
    model = CausalLM(a.model, a.seq, a.layers)
    n_params = sum(p.numel() for p in model.parameters())
    bf16 = torch.bfloat16
    lr, betas, wd = 3e-4, (0.9, 0.95), 0.1

    if a.system == "deepspeed":
        import deepspeed
        cfg = {"train_micro_batch_size_per_gpu": a.micro, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
               "zero_optimization": {"stage": a.zero, "overlap_comm": True, "reduce_bucket_size": 5e7},
               "gradient_clipping": 1.0, "steps_per_print": 1 << 30}
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, weight_decay=wd, fused=cuda)
        engine, _, _, _ = deepspeed.initialize(model=model.to(device), optimizer=opt, config=cfg)
        run = engine
        backward, step = engine.backward, engine.step
        autocast = False
    else:
        model = model.to(device)
        if a.system == "ddp":
            model = nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None,
                                                        bucket_cap_mb=25, gradient_as_bucket_view=True)
        elif a.system == "fsdp2":
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            mp = MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=torch.float32)
            for block in model.blocks:
                fully_shard(block, mp_policy=mp)
            fully_shard(model, mp_policy=mp)
        if a.compile:
            model = torch.compile(model)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, weight_decay=wd, fused=cuda)
        run = model
        backward = lambda loss: loss.backward()

        def step():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        autocast = a.system != "fsdp2"  # FSDP2 casts parameters itself; single and DDP use AMP

    # Tokens drawn on the device: a host-to-device copy would synchronize every step.
    gen = torch.Generator(device=device).manual_seed(1000 + rank)
    times = {"forward": [], "backward": [], "optimizer": []}
    ev = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else None

    def train_step(marks):
        # Phase boundaries as CUDA events on the compute stream, read after the
        # last step: no synchronization between steps (as bench_engine).
        tokens = torch.randint(0, model_vocab(model), (a.micro, a.seq + 1), generator=gen, device=device)
        if marks is not None:
            marks[0].record()
        with torch.autocast(device.type, dtype=bf16, enabled=autocast):
            loss = run(tokens[:, :-1], tokens[:, 1:])
        if marks is not None:
            marks[1].record()
        backward(loss)
        if marks is not None:
            marks[2].record()
        step()
        if marks is not None:
            marks[3].record()
        return loss

    for _ in range(a.warmup):
        train_step(None)
    if cuda:
        torch.cuda.synchronize()
    all_marks = []
    t0 = time.perf_counter()
    for _ in range(a.steps):
        marks = [ev() for _ in range(4)] if cuda else None
        all_marks.append(marks)
        loss = train_step(marks)
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if cuda:
        for marks in all_marks:
            for k, (s, e) in zip(times, zip(marks[:-1], marks[1:])):
                times[k].append(s.elapsed_time(e) / 1e3)
    tokens_per_gpu = a.steps * a.micro * a.seq / wall
    flops_per_token = 6 * n_params + 12 * model_layers(model) * PRESETS[a.model][3] * a.seq
    tflops = tokens_per_gpu * flops_per_token / 1e12
    out = {"system": a.system + (f"-zero{a.zero}" if a.system == "deepspeed" else "") + ("-compile" if a.compile else ""),
           "model": a.model, "gpus": world, "seq": a.seq, "micro": a.micro, "params": n_params,
           "tokens_per_s_per_gpu": round(tokens_per_gpu, 1), "tflops_per_gpu": round(tflops, 2),
           "mfu": round(tflops / a.peak_tflops, 4),
           "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if cuda else None,
           "wall_step_s": round(wall / a.steps, 4), "loss": round(loss.item(), 4), "exposed_comm_s": None}
    for k, v in times.items():  # CUDA-event times of the phases on the compute stream
        out[k + "_s"] = round(sum(v) / len(v), 4) if v else None
    if rank == 0:
        print(json.dumps(out), flush=True)
    if a.profile:
        tokens = torch.randint(0, model_vocab(model), (a.micro, a.seq + 1), generator=gen, device=device)

        def one_step():
            with torch.autocast(device.type, dtype=bf16, enabled=autocast):
                loss = run(tokens[:, :-1], tokens[:, 1:])
            backward(loss)
            step()
            if cuda:
                torch.cuda.synchronize()
        if rank == 0:
            acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
            with torch.profiler.profile(activities=acts) as prof:
                one_step()
            prof.export_chrome_trace(a.profile)
        else:
            one_step()
    if a.system != "single":
        import torch.distributed as dist
        dist.destroy_process_group()


def model_layers(model):
    inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None) or model
    return getattr(inner, "_orig_mod", inner).layers


def model_vocab(model):
    inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None) or model
    inner = getattr(inner, "_orig_mod", inner)
    return inner.vocab


if __name__ == "__main__":
    main()
