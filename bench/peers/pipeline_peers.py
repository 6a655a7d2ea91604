"""PyTorch pipeline-parallel peer of Stratum's training throughput benchmark.

The models and presets of gpt_peers.py (imported, not copied) cut into pipeline
stages with torch.distributed.pipelining: each rank builds the whole model from
one seed (so every split starts from the same initialization as the unsplit
model), then keeps its stages' layers and wraps each in a PipelineStage built
by hand. Stage s holds blocks [s*L/S, (s+1)*L/S) (--layers-per-stage L/S, an
even split); the first stage also holds the embeddings, the last the final norm
and the LM head (the loss function is the schedule's loss_fn). GPT-2 and LLaMA
tie the head to the token embedding: the last stage holds a copy of it, and
after each schedule step the two gradients are summed over the pair of ranks
(as Megatron's embedding group), so both copies stay equal.

  --schedule gpipe        ScheduleGPipe               one stage per rank
  --schedule 1f1b         Schedule1F1B                one stage per rank (--micro-batches >= stages)
  --schedule interleaved  ScheduleInterleaved1F1B     --virtual-stages v >= 2 per rank
  --schedule zb           ScheduleInterleavedZeroBubble (ZB1P), v >= 2 per rank; not with torch.compile
  --micro-batches m       microbatches per schedule step; --micro: sequences per microbatch
  --layers-per-stage n    optional; must equal layers / (pp * v)
  --layers n              override the preset's number of blocks (the tiny presets have 2)
  --dp d                  data parallel over d pipeline replicas (ranks = d * pp; gradients
                          all-reduced after the schedule step); default 1
  --check-loss            also train the unsplit model on rank 0 on the same tokens (all replicas')
                          and assert the per-step losses agree within 1e-5 relative (fp32 on CPU; timing then meaningless)

Stage v of rank r is stage v*pp + r (the loop placement the interleaved schedules
expect). On CUDA the schedule step runs under bf16 autocast over fp32 parameters
(as the ddp peer), so the activations sent between stages are the fp32 residual
stream; CPU runs in fp32 with gloo. AdamW (and gradient clipping at 1.0 on the
global norm) after each schedule step. Gradients are scaled by 1/m by the
schedule (scale_grads), so the step equals one of the whole m*micro batch.

Prints one JSON line (rank 0 of the last stage) with gpt_peers.py's fields:
tokens/s per GPU over the whole job (dp*m*micro*seq tokens per step / world
size), TFLOP/s, MFU, peak allocated memory (max over ranks), the loss of the
last step (mean over microbatches). forward_s/backward_s are null: the schedule
interleaves them; fwd_bwd_s is the schedule step, optimizer_s the rest.

  .venv/bin/python -m torch.distributed.run --nproc_per_node 2 bench/peers/pipeline_peers.py \\
      --device cpu --model tiny-gpt2 --schedule 1f1b --micro-batches 4 --micro 2 --seq 64 --steps 3 --check-loss
  .venv/bin/python -m torch.distributed.run --nproc_per_node 4 bench/peers/pipeline_peers.py \\
      --device cpu --model tiny-llama --layers 8 --schedule zb --virtual-stages 2 --micro-batches 4 --micro 2 --seq 64 --steps 3
  NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --nproc_per_node 2 bench/peers/pipeline_peers.py \\
      --model gpt2-350m --schedule 1f1b --micro-batches 8 --micro 4
  NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --nproc_per_node 4 bench/peers/pipeline_peers.py \\
      --model gpt2-1.3b --schedule interleaved --virtual-stages 2 --micro-batches 8 --micro 2 --seq 2048
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
from gpt_peers import PRESETS, CausalLM  # noqa: E402

from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,  # noqa: E402
                                          ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble)

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B,
             "interleaved": ScheduleInterleaved1F1B, "zb": ScheduleInterleavedZeroBubble}
LR, BETAS, WD = 3e-4, (0.9, 0.95), 0.1


class StageModule(nn.Module):
    """Blocks [lo, hi) of a CausalLM; embeddings on the first stage, ln_f + tied head on the last."""

    def __init__(self, model, lo, hi, first, last, head_weight=None):
        super().__init__()
        self.first, self.last = first, last
        self.wte = model.wte if first else None
        self.wpe = model.wpe if first else None
        self.blocks = nn.ModuleList(model.blocks[lo:hi])
        self.ln_f = model.ln_f if last else None
        # head: the embedding itself when this rank also holds the first stage, else an equal copy
        self.head = (head_weight if head_weight is not None else
                     nn.Parameter(model.wte.weight.detach().clone())) if last else None

    def forward(self, x):
        if self.first:
            tokens = x
            x = self.wte(tokens)
            if self.wpe is not None:
                x = x + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        if self.last:
            return F.linear(self.ln_f(x), self.head)  # logits; the loss is the schedule's loss_fn
        return x


def unique_params(modules):
    seen, out = set(), []
    for m in modules:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-350m", choices=sorted(PRESETS))
    ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    ap.add_argument("--virtual-stages", type=int, default=None, help="stages per rank (default 1, 2 for interleaved/zb)")
    ap.add_argument("--layers-per-stage", type=int, default=None)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--layers", type=int, default=None, help="override the preset's layer count (tiny presets have 2)")
    add_common_args(ap, micro=4)
    a = ap.parse_args()

    world, rank, device, cuda = init_ranks(a.device)
    v = a.virtual_stages or (2 if a.schedule in ("interleaved", "zb") else 1)
    if a.schedule in ("gpipe", "1f1b") and v != 1:
        sys.exit(f"--schedule {a.schedule} runs one stage per rank (--virtual-stages 1)")
    if a.schedule in ("interleaved", "zb") and v < 2:
        sys.exit(f"--schedule {a.schedule} needs --virtual-stages >= 2")
    if world % a.dp:
        sys.exit(f"world size {world} not divisible by --dp {a.dp}")
    pp = world // a.dp
    if a.layers:  # a variant of the preset with more (or fewer) blocks; CausalLM reads the shared PRESETS
        PRESETS[a.model] = PRESETS[a.model][:4] + (a.layers,) + PRESETS[a.model][5:]
    n_stages = pp * v
    arch, vocab, _, hidden, layers = PRESETS[a.model][:5]
    lps = a.layers_per_stage or layers // n_stages
    if lps * n_stages != layers:
        sys.exit(f"{layers} layers do not split evenly into {n_stages} stages of {lps} (pp {pp} x v {v})")

    # ranks: rank = dp_rank * pp + pp_rank; one pp group per replica, one dp group per pp position
    pp_rank, dp_rank = rank % pp, rank // pp
    pp_groups = [dist.new_group(list(range(d * pp, (d + 1) * pp))) for d in range(a.dp)]
    dp_groups = [dist.new_group(list(range(p, world, pp))) for p in range(pp)] if a.dp > 1 else None
    pp_group = pp_groups[dp_rank]
    first_rank, last_rank = 0, (n_stages - 1) % pp  # pp ranks holding stage 0 and stage n-1
    # the pair that sums the tied embedding / head gradients (every replica has its own pair)
    tie_groups = [dist.new_group(sorted({d * pp + first_rank, d * pp + last_rank})) for d in range(a.dp)] \
        if first_rank != last_rank else None

    torch.manual_seed(42)
    model = CausalLM(a.model, a.seq)  # the whole model on every rank, from one seed, then cut
    n_params = sum(p.numel() for p in model.parameters())
    ref = copy.deepcopy(model) if a.check_loss and rank == 0 else None

    my_stage_ids = [k * pp + pp_rank for k in range(v)]
    mods, stages = [], []
    for s in my_stage_ids:
        first, last = s == 0, s == n_stages - 1
        head = model.wte.weight if last and pp_rank == first_rank else None
        m = StageModule(model, s * lps, (s + 1) * lps, first, last, head).to(device)
        mods.append(m)
        stages.append(PipelineStage(m, s, n_stages, device, group=pp_group))
    del model
    params = unique_params(mods)
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, weight_decay=WD, fused=cuda)
    # the copy of the tied head is not counted in the global gradient norm (it equals wte's gradient)
    norm_params = [p for p in params if not (tie_groups and any(m.head is p for m in mods if m.last))]
    tie_params = [m.wte.weight for m in mods if m.first] + [m.head for m in mods if m.last]
    if tie_groups is None:
        tie_params = []

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

    cls = SCHEDULES[a.schedule]
    sched = cls(stages[0] if v == 1 else stages, n_microbatches=a.micro_batches, loss_fn=loss_fn)
    holds_first, holds_last = 0 in my_stage_ids, n_stages - 1 in my_stage_ids

    gen = torch.Generator(device=device).manual_seed(1000 + dp_rank)  # same tokens on all ranks of a replica
    batch = a.micro_batches * a.micro
    bf16 = torch.bfloat16

    def optimizer_step():
        for p in tie_params:  # tied embedding: sum the two stages' gradients
            dist.all_reduce(p.grad, group=tie_groups[dp_rank])
        if dp_groups is not None:
            for p in params:
                p.grad.div_(a.dp)
                dist.all_reduce(p.grad, group=dp_groups[pp_rank])
        sq = torch.stack([p.grad.float().pow(2).sum() for p in norm_params]).sum() if norm_params \
            else torch.zeros((), device=device)
        dist.all_reduce(sq, group=pp_group)
        scale = torch.clamp(1.0 / (sq.sqrt() + 1e-6), max=1.0)
        for p in params:
            p.grad.mul_(scale)
        opt.step()
        opt.zero_grad(set_to_none=True)

    ev = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else None
    step_losses, all_marks = [], []

    def train_step(marks):
        tokens = torch.randint(0, vocab, (batch, a.seq + 1), generator=gen, device=device)
        if marks is not None:
            marks[0].record()
        losses = []
        with torch.autocast(device.type, dtype=bf16, enabled=cuda):
            args = (tokens[:, :-1],) if holds_first else ()
            sched.step(*args, target=tokens[:, 1:] if holds_last else None,
                       losses=losses if holds_last else None, return_outputs=False)
        if marks is not None:
            marks[1].record()
        optimizer_step()
        if marks is not None:
            marks[2].record()
        if holds_last:
            step_losses.append(torch.stack(losses).mean().detach())

    for _ in range(a.warmup):
        train_step(None)
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        marks = [ev() for _ in range(3)] if cuda else None
        all_marks.append(marks)
        train_step(marks)
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    wall = time.perf_counter() - t0

    reporter = dp_rank == 0 and holds_last  # rank 0 of the last stage
    peak = torch.tensor([torch.cuda.max_memory_allocated(device) / 2**30 if cuda else 0.0], device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if reporter:
        times = {"fwd_bwd": [], "optimizer": []}
        if cuda:
            for marks in all_marks:
                for k, (s, e) in zip(times, zip(marks[:-1], marks[1:])):
                    times[k].append(s.elapsed_time(e) / 1e3)
        tokens_per_gpu = a.steps * a.dp * batch * a.seq / wall / world
        flops_per_token = 6 * n_params + 12 * layers * hidden * a.seq
        tflops = tokens_per_gpu * flops_per_token / 1e12
        out = {"system": f"pp-{a.schedule}" + (f"-v{v}" if v > 1 else "") + (f"-dp{a.dp}" if a.dp > 1 else ""),
               "model": a.model, "gpus": world, "pp": pp, "virtual_stages": v, "dp": a.dp,
               "layers_per_stage": lps, "micro_batches": a.micro_batches, "seq": a.seq, "micro": a.micro,
               "params": n_params, "tokens_per_s_per_gpu": round(tokens_per_gpu, 1),
               "tflops_per_gpu": round(tflops, 2), "mfu": round(tflops / a.peak_tflops, 4),
               "peak_memory_gib": round(peak.item(), 2) if cuda else None,
               "wall_step_s": round(wall / a.steps, 4), "loss": round(step_losses[-1].item(), 4),
               "exposed_comm_s": None, "forward_s": None, "backward_s": None}
        for k, t in times.items():
            out[k + "_s"] = round(sum(t) / len(t), 4) if t else None
        print(json.dumps(out), flush=True)

    if a.check_loss:
        # the pipeline's per-step losses, averaged over the replicas (each replica's last-stage rank adds its own)
        n = a.warmup + a.steps
        pl = torch.stack(step_losses).float() if holds_last else torch.zeros(n, device=device)
        dist.all_reduce(pl)
        pl /= a.dp
        if rank == 0:
            # the unsplit model trains on the whole global batch: every replica's tokens, regenerated here
            gens = [torch.Generator(device=device).manual_seed(1000 + d) for d in range(a.dp)]
            all_tokens = [torch.cat([torch.randint(0, vocab, (batch, a.seq + 1), generator=g, device=device)
                                     for g in gens]) for _ in range(n)]
            ref = ref.to(device)
            ropt = torch.optim.AdamW(ref.parameters(), lr=LR, betas=BETAS, weight_decay=WD, fused=cuda)
            worst = 0.0
            for i, tokens in enumerate(all_tokens):
                with torch.autocast(device.type, dtype=bf16, enabled=cuda):
                    loss = ref(tokens[:, :-1], tokens[:, 1:])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
                ropt.step()
                ropt.zero_grad(set_to_none=True)
                rel = abs(pl[i].item() - loss.item()) / abs(loss.item())
                worst = max(worst, rel)
                print(f"check-loss step {i}: pipeline {pl[i].item():.8f} unsplit {loss.item():.8f} rel {rel:.2e}",
                      flush=True)
            tol = 1e-5 if not cuda else 2e-2
            print(json.dumps({"check_loss": "ok" if worst <= tol else "FAIL", "max_rel_diff": worst, "tol": tol}),
                  flush=True)
            assert worst <= tol, f"pipeline loss differs from the unsplit model's by {worst:.2e} relative"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
