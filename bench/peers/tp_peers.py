"""PyTorch tensor-parallel peer of Stratum's training throughput benchmark.

The models and presets of gpt_peers.py (imported, not copied) sharded over all
ranks with DTensor tensor parallelism (torch.distributed.tensor.parallel), the
plan torchtitan applies to LLaMA:
  attention q, k, v           ColwiseParallel   (heads split over ranks; kv_heads % tp == 0)
  attention output            RowwiseParallel
  MLP up/gate (c_fc)          ColwiseParallel
  MLP down (c_proj)           RowwiseParallel
  token embedding             RowwiseParallel   (vocab-sharded rows), output Replicate, or Shard(1) with SP
  LM head                     tied to the embedding: the same vocab-sharded weight gives vocab-sharded
                              logits, and the loss is computed on them under loss_parallel()
  --sequence-parallel         SequenceParallel on ln_1 / ln_2 / ln_f (activations between the TP regions
                              sharded over the sequence), PrepareModuleInput Shard(1) -> Replicate on
                              attention and MLP, RowwiseParallel outputs Shard(1) (reduce-scatter)
Without --sequence-parallel the attention and MLP inputs are still turned into
one Replicate DTensor by PrepareModuleInput, so the backward all-reduces once
per sublayer, not once per Linear.

Restructured for TP (in this file, after the whole model is built from one
seed; the unsplit model's math is unchanged):
  * GPT-2's fused c_attn [3d, d] is split into q_proj, k_proj, v_proj Linears
    (weights and biases copied): ColwiseParallel on the fused weight would give
    rank 0 all of q and part of k, not a set of whole heads of q, k and v.
  * the MLP Linears of each block move into a `mlp` submodule, so one
    PrepareModuleInput serves up and gate (one all-gather with SP).
  * attention views its local heads as -1 (heads / tp per rank).
  * GPT-2's learned positions: with SP each rank adds its own rows of wpe (a
    plain replicated parameter) to its sequence shard, and the wpe gradient is
    all-reduced over the TP group before the optimizer step.

bf16 on CUDA: autocast over fp32 parameters (as the ddp peer); fp32 with gloo on
CPU. AdamW (plain and DTensor parameters in separate groups) with gradient
clipping at 1.0 on the global norm. --compile wraps each block in torch.compile
(UNVERIFIED: with the CPU build of torch 2.13 and gloo its backward fails,
"'Tensor' object has no attribute '_local_tensor'" in a DTensor redistribute
backward, with or without fullgraph and SP; untested on CUDA).
--check-loss also trains the unsplit model on rank 0 on the same tokens and
asserts the per-step losses and gradient norms agree within 1e-5 relative
(fp32 on CPU).

Prints one JSON line (rank 0) with gpt_peers.py's fields: tokens/s per GPU over
the whole job (micro*seq tokens per step, shared by the TP ranks), TFLOP/s, MFU,
peak allocated memory, forward/backward/optimizer times from CUDA events.

  .venv/bin/python -m torch.distributed.run --nproc_per_node 2 bench/peers/tp_peers.py \\
      --device cpu --model tiny-gpt2 --micro 2 --seq 64 --steps 3 --sequence-parallel --check-loss
  NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --nproc_per_node 2 bench/peers/tp_peers.py \\
      --model gpt2-350m --micro 8 --sequence-parallel
  NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --nproc_per_node 4 bench/peers/tp_peers.py \\
      --model llama-1b --micro 4 --seq 2048 --sequence-parallel --compile
"""
import argparse
import copy
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_setup import add_common_args, init_ranks  # noqa: E402
from gpt_peers import PRESETS, Attention, Block, CausalLM  # noqa: E402

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard  # noqa: E402
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,  # noqa: E402
                                               SequenceParallel, loss_parallel, parallelize_module)

LR, BETAS, WD = 3e-4, (0.9, 0.95), 0.1


class TPAttention(Attention):
    """Attention with separate q/k/v for both archs and the local number of heads taken from the shapes."""

    def forward(self, x):
        B, T = x.shape[0], x.shape[1]
        split = lambda t: t.view(B, T, -1, self.head_dim).transpose(1, 2)
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        if self.arch != "gpt2":
            q, k = self.rope(q), self.rope(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.heads != self.kv_heads)
        y = y.transpose(1, 2).reshape(B, T, -1)
        return self.c_proj(y) if self.arch == "gpt2" else self.o_proj(y)


class TPMLP(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.arch = block.arch
        names = ("c_fc", "c_proj") if block.arch == "gpt2" else ("gate_proj", "up_proj", "down_proj")
        for n in names:
            setattr(self, n, getattr(block, n))
            delattr(block, n)

    def forward(self, h):
        if self.arch == "gpt2":
            return self.c_proj(F.gelu(self.c_fc(h), approximate="tanh"))
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class TPBlock(Block):
    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TPCausalLM(CausalLM):
    """forward returns the loss from vocab-sharded logits; call it (and backward) under loss_parallel()."""

    def forward(self, tokens, targets):
        x = self.wte(tokens)  # local: [B, T, d] replicated, or [B, T/tp, d] with SP
        if self.wpe is not None:
            lo = self.tp_rank * x.shape[1] if self.sp else 0
            x = x + self.wpe.weight[lo:lo + x.shape[1]]
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x)
        if self.sp:
            h = h.redistribute(placements=[Replicate()])  # all-gather the sequence for the head
        else:
            h = DTensor.from_local(h, self.mesh, [Replicate()], run_check=False)
        logits = F.linear(h, self.wte.weight)  # wte.weight is Shard(0) over vocab -> logits Shard(-1)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def to_tp(model, mesh, sp):
    """Restructure a CausalLM in place for TP and shard it over the 1-D mesh."""
    tp = mesh.size()
    for blk in model.blocks:
        attn = blk.attn
        assert attn.heads % tp == 0 and attn.kv_heads % tp == 0, f"heads {attn.heads}/{attn.kv_heads} vs tp {tp}"
        if attn.arch == "gpt2":
            d = attn.c_attn.in_features
            for name, w, b in zip(("q_proj", "k_proj", "v_proj"), attn.c_attn.weight.split(d), attn.c_attn.bias.split(d)):
                lin = nn.Linear(d, d)
                with torch.no_grad():
                    lin.weight.copy_(w)
                    lin.bias.copy_(b)
                setattr(attn, name, lin)
            del attn.c_attn
        attn.__class__ = TPAttention
        blk.mlp = TPMLP(blk)
        blk.__class__ = TPBlock
    model.__class__ = TPCausalLM
    model.sp, model.mesh, model.tp_rank = sp, mesh, mesh.get_local_rank()

    seq_in = Shard(1) if sp else Replicate()
    parallelize_module(model, mesh, {
        "wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq_in),
        **({"ln_f": SequenceParallel()} if sp else {}),
    })
    for blk in model.blocks:
        arch = blk.arch
        out = "attn.c_proj" if arch == "gpt2" else "attn.o_proj"
        plan = {
            "attn": PrepareModuleInput(input_layouts=(seq_in,), desired_input_layouts=(Replicate(),)),
            "attn.q_proj": ColwiseParallel(), "attn.k_proj": ColwiseParallel(), "attn.v_proj": ColwiseParallel(),
            out: RowwiseParallel(output_layouts=seq_in),
            "mlp": PrepareModuleInput(input_layouts=(seq_in,), desired_input_layouts=(Replicate(),)),
        }
        if arch == "gpt2":
            plan.update({"mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel(output_layouts=seq_in)})
        else:
            plan.update({"mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                         "mlp.down_proj": RowwiseParallel(output_layouts=seq_in)})
        if sp:
            plan.update({"ln_1": SequenceParallel(), "ln_2": SequenceParallel()})
        parallelize_module(blk, mesh, plan)
    return model


def clip_grad_norm(params, max_norm):
    """Global-norm clipping over a mix of DTensor (sharded or replicated) and plain replicated gradients."""
    sq = []
    for p in params:
        n = torch.linalg.vector_norm(p.grad.float())
        sq.append((n.full_tensor() if isinstance(n, DTensor) else n) ** 2)
    total = torch.stack(sq).sum().sqrt()
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in params:
        (p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad).mul_(scale)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-350m", choices=sorted(PRESETS))
    ap.add_argument("--sequence-parallel", action="store_true")
    ap.add_argument("--compile", action="store_true")
    add_common_args(ap, micro=8)
    a = ap.parse_args()

    world, rank, device, cuda = init_ranks(a.device)
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("tp",))
    sp = a.sequence_parallel
    if sp and a.seq % world:
        sys.exit(f"--sequence-parallel needs --seq divisible by {world}")

    torch.manual_seed(42)
    model = CausalLM(a.model, a.seq)  # the whole model on every rank, from one seed, then sharded
    n_params = sum(p.numel() for p in model.parameters())
    ref = copy.deepcopy(model) if a.check_loss and rank == 0 else None
    model = to_tp(model.to(device), mesh, sp)
    if a.compile:
        for i, blk in enumerate(model.blocks):
            model.blocks[i] = torch.compile(blk)
    params = list(model.parameters())
    dparams = [p for p in params if isinstance(p, DTensor)]
    pparams = [p for p in params if not isinstance(p, DTensor)]
    groups = [g for g in ({"params": dparams}, {"params": pparams}) if g["params"]]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, weight_decay=WD, fused=cuda)
    wpe = model.wpe.weight if model.wpe is not None else None

    vocab = model.vocab
    gen = torch.Generator(device=device).manual_seed(1000)  # the same tokens on every TP rank
    bf16 = torch.bfloat16
    ev = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else None
    losses, norms, all_tokens, all_marks = [], [], [], []

    def train_step(marks):
        tokens = torch.randint(0, vocab, (a.micro, a.seq + 1), generator=gen, device=device)
        if a.check_loss:
            all_tokens.append(tokens)
        if marks is not None:
            marks[0].record()
        with loss_parallel():
            with torch.autocast(device.type, dtype=bf16, enabled=cuda):
                loss = model(tokens[:, :-1], tokens[:, 1:])
            if marks is not None:
                marks[1].record()
            loss.backward()
        if marks is not None:
            marks[2].record()
        if sp and wpe is not None:  # each rank added its own rows of the replicated wpe
            dist.all_reduce(wpe.grad)
        norms.append(clip_grad_norm(params, 1.0).detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if marks is not None:
            marks[3].record()
        losses.append(loss.detach().full_tensor() if isinstance(loss, DTensor) else loss.detach())

    for _ in range(a.warmup):
        train_step(None)
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        marks = [ev() for _ in range(4)] if cuda else None
        all_marks.append(marks)
        train_step(marks)
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    wall = time.perf_counter() - t0

    if rank == 0:
        times = {"forward": [], "backward": [], "optimizer": []}
        if cuda:
            for marks in all_marks:
                for k, (s, e) in zip(times, zip(marks[:-1], marks[1:])):
                    times[k].append(s.elapsed_time(e) / 1e3)
        tokens_per_gpu = a.steps * a.micro * a.seq / wall / world
        flops_per_token = 6 * n_params + 12 * PRESETS[a.model][4] * PRESETS[a.model][3] * a.seq
        tflops = tokens_per_gpu * flops_per_token / 1e12
        out = {"system": f"tp{world}" + ("-sp" if sp else "") + ("-compile" if a.compile else ""),
               "model": a.model, "gpus": world, "tp": world, "sequence_parallel": sp, "seq": a.seq, "micro": a.micro,
               "params": n_params, "tokens_per_s_per_gpu": round(tokens_per_gpu, 1),
               "tflops_per_gpu": round(tflops, 2), "mfu": round(tflops / a.peak_tflops, 4),
               "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if cuda else None,
               "wall_step_s": round(wall / a.steps, 4), "loss": round(losses[-1].item(), 4), "exposed_comm_s": None}
        for k, t in times.items():
            out[k + "_s"] = round(sum(t) / len(t), 4) if t else None
        print(json.dumps(out), flush=True)

        if a.check_loss:
            ref = ref.to(device)
            ropt = torch.optim.AdamW(ref.parameters(), lr=LR, betas=BETAS, weight_decay=WD, fused=cuda)
            worst = 0.0
            for i, tokens in enumerate(all_tokens):
                with torch.autocast(device.type, dtype=bf16, enabled=cuda):
                    loss = ref(tokens[:, :-1], tokens[:, 1:])
                loss.backward()
                ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0).item()
                ropt.step()
                ropt.zero_grad(set_to_none=True)
                tl = losses[i].item()
                rel = abs(tl - loss.item()) / abs(loss.item())
                # The gradient norm too: a wrong gradient moves it long before the loss.
                norm_rel = abs(norms[i].item() - ref_norm) / max(ref_norm, 1e-12)
                worst = max(worst, rel, norm_rel)
                print(f"check-loss step {i}: tp {tl:.8f} unsplit {loss.item():.8f} rel {rel:.2e}; "
                      f"grad norm {norms[i].item():.6f} vs {ref_norm:.6f} rel {norm_rel:.2e}", flush=True)
            tol = 1e-5 if not cuda else 2e-2
            print(json.dumps({"check_loss": "ok" if worst <= tol else "FAIL", "max_rel_diff": worst, "tol": tol}),
                  flush=True)
            assert worst <= tol, f"TP loss differs from the unsplit model's by {worst:.2e} relative"
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
