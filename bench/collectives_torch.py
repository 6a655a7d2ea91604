"""torch.distributed (NCCL) peer of bench/collectives_stratum.cpp: the same ops,
sizes, dtype, warm-up and timing, so the two print comparable CSV lines.
Run under mpirun (one process per GPU): mpirun -np 2 python3 bench/collectives_torch.py
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--dtype", default="bf16")
    a = p.parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", 0)))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK", 0)))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", local))
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    elem = torch.tensor([], dtype=dtype).element_size()
    if rank == 0:
        print("system,op,bytes,time_us,algbw_GBps,busbw_GBps", flush=True)
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        bytes_ = 4 << 10
        while bytes_ <= a.max_bytes:
            numel = bytes_ // elem
            full = torch.ones(numel, dtype=dtype, device="cuda")
            shard = torch.ones(numel // world, dtype=dtype, device="cuda")

            def issue():
                if op == "all_reduce":
                    dist.all_reduce(full)
                elif op == "reduce_scatter":
                    dist.reduce_scatter_tensor(shard, full)
                else:
                    dist.all_gather_into_tensor(full, shard)

            for _ in range(5):
                issue()
            dist.barrier()
            torch.cuda.synchronize()
            iters = max(10, min(500, (20 << 30) // bytes_))
            t0 = time.perf_counter()
            for _ in range(iters):
                issue()
            torch.cuda.synchronize()
            seconds = (time.perf_counter() - t0) / iters
            algbw = bytes_ / seconds / 1e9
            factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
            if rank == 0:
                print(f"torch,{op},{bytes_},{seconds * 1e6:.2f},{algbw:.2f},{algbw * factor:.2f}", flush=True)
            bytes_ *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
