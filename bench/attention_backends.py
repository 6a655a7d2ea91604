#!/usr/bin/env python3
"""Causal attention's forward and backward on each SDPA backend, at the shapes
of the benchmark models (bf16), timed with CUDA events; outputs and gradients
checked against the flash backend. (Stratum asks for no backend: torch 2.11
with cuDNN 9.19 already tries cuDNN first on the H200, the fastest here;
tests/nn/test_attention.cpp checks the models' layouts stay eligible for it.)
Times include autograd's host work for one call, as in training.

  python3 bench/attention_backends.py [--iters 30] [--json]
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# name: (micro, heads, kv_heads, seq, head_dim), as the presets in bench/peers/gpt_peers.py
SHAPES = {
    "gpt2-350m": (16, 16, 16, 1024, 64),
    "gpt2-1.3b": (8, 16, 16, 1024, 128),
    "gpt2-1.3b-2048": (4, 16, 16, 2048, 128),
    "llama-1b": (4, 32, 8, 2048, 64),
}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}


def run(backend, q, k, v, dy):
    with sdpa_kernel([backend]):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.size(1) != k.size(1))
        y.backward(dy)
    return y


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", action="store_true", help="one JSON line per shape and backend instead of the table")
    args = ap.parse_args()
    torch.manual_seed(0)
    say = (lambda *a: None) if args.json else print
    say(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    say(f"{'shape':16} {'backend':10} {'fwd ms':>8} {'fwd+bwd ms':>11} {'TFLOP/s':>8} {'max|dy|err':>10} {'max|dq|err':>10}")
    for name, (b, h, kvh, t, d) in SHAPES.items():
        mk = lambda n: torch.randn(b, n, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        q, k, v = mk(h), mk(kvh), mk(kvh)
        dy = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
        flops = 4 * b * h * t * t * d / 2 * 3.5  # causal: half the scores; fwd 2 GEMMs, bwd 5
        ref = None
        for bname, backend in BACKENDS.items():
            try:
                q.grad = k.grad = v.grad = None
                y = run(backend, q, k, v, dy)
                got = (y.detach(), q.grad.clone())
                if ref is None:
                    ref = got
                err_y = (got[0].float() - ref[0].float()).abs().max().item()
                err_q = (got[1].float() - ref[1].float()).abs().max().item()

                def fwd():
                    with torch.no_grad(), sdpa_kernel([backend]):
                        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=h != kvh)

                def both():
                    q.grad = k.grad = v.grad = None
                    run(backend, q, k, v, dy)

                f, fb = time_ms(fwd, args.iters), time_ms(both, args.iters)
                say(f"{name:16} {bname:10} {f:8.3f} {fb:11.3f} {flops / fb / 1e9:8.1f} {err_y:10.4f} {err_q:10.4f}")
                row = {"forward_ms": f, "forward_backward_ms": fb, "tflops": flops / fb / 1e9,
                       "max_dy_err": err_y, "max_dq_err": err_q}
            except RuntimeError as e:
                say(f"{name:16} {bname:10} unavailable: {str(e).splitlines()[0][:90]}")
                row = {"unavailable": str(e).splitlines()[0][:200]}
            if args.json:
                print(json.dumps({"system": bname, "shape": name, **row}), flush=True)


if __name__ == "__main__":
    main()
