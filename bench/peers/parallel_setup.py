"""What the parallel peers (pipeline_peers.py, tp_peers.py) share: their common
flags and the process group (NCCL on CUDA, gloo on CPU ranks)."""
import os

import torch
import torch.distributed as dist


def add_common_args(ap, micro):
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--micro", type=int, default=micro)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--check-loss", action="store_true")


def init_ranks(device_name):
    """(world, rank, device, cuda) of this process, its process group initialised."""
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    cuda = device_name == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    return world, rank, device, cuda
