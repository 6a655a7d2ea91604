"""Summarizes a Chrome trace of one training step (bench_engine --profile, or
bench/peers/gpt_peers.py --profile): GPU time per stream, per kind of kernel
(matrix products, attention, normalization, elementwise, copies, optimizer,
communication) and the longest kernels, so that Stratum's step and a peer's
can be compared kernel by kernel.
With --gaps N it also lists the N longest idle gaps of the busiest stream (the
compute stream): where it stood waiting for communication or for the host.
  python3 bench/profile_summary.py TRACE.json [TRACE2.json ...] [--top 25] [--gaps 10]"""
import argparse
import gzip
import json
import re
from collections import defaultdict

KINDS = [  # first match wins
    ("communication", r"nccl"),
    ("attention", r"flash|fmha|attention|sdpa"),
    ("matmul", r"gemm|nvjet|xmma|cutlass|cublas|sm90_|splitk|matmul"),
    ("optimizer", r"adam|multi_tensor|foreach|clip"),
    ("cross-entropy", r"softmax|nll_loss|cross_entropy|logsumexp"),
    ("normalization", r"layer_norm|layernorm|rms|norm_"),
    ("copy/cast/fill", r"copy|memcpy|memset|fill|cast|cat_|index|gather|scatter|embedding"),
    ("elementwise", r"elementwise|vectorized|unrolled|reduce|gelu|silu|tanh|mul|add|triton"),
]


def kind_of(name):
    low = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def print_gaps(kernels, count):
    streams = defaultdict(list)
    for e in kernels:
        streams[e.get("args", {}).get("stream", e.get("tid"))].append(e)
    busiest = max(streams.values(), key=lambda l: sum(e["dur"] for e in l))
    busiest.sort(key=lambda e: e["ts"])
    begin = busiest[0]["ts"]
    gaps = [(b["ts"] - a["ts"] - a["dur"], a, b) for a, b in zip(busiest, busiest[1:])]
    print(f"\ncompute stream idle {sum(max(g, 0) for g, _, _ in gaps) / 1e3:.2f} ms; longest gaps (us, at ms, between):")
    for g, a, b in sorted(gaps, key=lambda x: -x[0])[:count]:
        print(f"  {g:7.0f} {(a['ts'] + a['dur'] - begin) / 1e3:8.2f}  {a['name'][:50]} -> {b['name'][:50]}")


def summarize(path, top, gaps=0):
    kernels = load(path)
    print(f"\n## {path}: {len(kernels)} GPU operations")
    if not kernels:
        return
    begin = min(e["ts"] for e in kernels)
    end = max(e["ts"] + e["dur"] for e in kernels)
    print(f"GPU span {(end - begin) / 1e3:.2f} ms")
    streams = defaultdict(float)
    for e in kernels:
        streams[e.get("args", {}).get("stream", e.get("tid"))] += e["dur"]
    for s, d in sorted(streams.items(), key=lambda x: -x[1]):
        print(f"  stream {s}: busy {d / 1e3:.2f} ms")
    kinds, names, counts = defaultdict(float), defaultdict(float), defaultdict(int)
    for e in kernels:
        kinds[kind_of(e["name"])] += e["dur"]
        names[e["name"]] += e["dur"]
        counts[e["name"]] += 1
    total = sum(kinds.values())
    print("| kind | ms | share |\n| --- | ---: | ---: |")
    for k, d in sorted(kinds.items(), key=lambda x: -x[1]):
        print(f"| {k} | {d / 1e3:.2f} | {100 * d / total:.1f}% |")
    print(f"\nlongest {top} kernels (total ms, launches, kind):")
    for n, d in sorted(names.items(), key=lambda x: -x[1])[:top]:
        print(f"  {d / 1e3:8.2f} {counts[n]:5d}  {kind_of(n):14s} {n[:110]}")
    if gaps:
        print_gaps(kernels, gaps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--gaps", type=int, default=0)
    a = ap.parse_args()
    for path in a.traces:
        summarize(path, a.top, a.gaps)


if __name__ == "__main__":
    main()
