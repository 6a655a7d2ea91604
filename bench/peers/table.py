"""Reads the JSON lines of bench_engine and bench/peers/gpt_peers.py (stdin or
files) and prints one markdown table per (model, seq, GPUs): tokens/s per GPU,
TFLOP/s, MFU, peak memory, phase times, exposed communication (Stratum's
measure; '-' where a system cannot report it), and each row's speed against the best
PyTorch DDP/single row and against FSDP2 and DeepSpeed ZeRO-3. With --one: a
single table for every cell, the cell (model, seq, GPUs) as its first columns.

  python3 bench/peers/table.py [--one] [FILE...]"""
import fileinput
import json
import sys
from collections import defaultdict

one = "--one" in sys.argv[1:]
files = [a for a in sys.argv[1:] if a != "--one"]
rows = defaultdict(list)
for line in fileinput.input(files):
    line = line.strip()
    if line.startswith('{"system"'):
        r = json.loads(line)
        rows[(r["model"], r["seq"], r["gpus"])].append(r)


def best(group, prefixes):
    xs = [r["tokens_per_s_per_gpu"] for r in group if r["system"].startswith(prefixes)]
    return max(xs) if xs else None


HEADER = ("| system | micro | tokens/s per GPU | TFLOP/s | MFU | peak GiB | fwd s | bwd s | opt s | exposed comm s "
          "| vs DDP/single | vs FSDP2 | vs DS ZeRO-3 |")
RULE = "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
if one:
    print("\n| model | seq | GPUs " + HEADER)
    print("| --- | ---: | ---: " + RULE)
for (model, seq, gpus), group in sorted(rows.items()):
    cell = f"| {model} | {seq} | {gpus} " if one else ""
    if not one:
        print(f"\n### {model}, seq {seq}, {gpus} GPU(s)\n")
        print(HEADER)
        print(RULE)
    ddp = best(group, ("ddp", "single"))
    fsdp = best(group, ("fsdp2",))
    ds3 = best(group, ("deepspeed-zero3",))
    for r in sorted(group, key=lambda r: -r["tokens_per_s_per_gpu"]):
        t = r["tokens_per_s_per_gpu"]
        ratio = lambda ref: f"{t / ref:.2f}x" if ref else "-"
        fmt = lambda v, f: f.format(v) if isinstance(v, (int, float)) else "-"
        print(f"{cell}| {r['system']} | {r['micro']} | {t:,.0f} | {r['tflops_per_gpu']:.1f} | {100 * r['mfu']:.1f}% | "
              f"{fmt(r.get('peak_memory_gib'), '{:.2f}')} | {fmt(r.get('forward_s'), '{:.3f}')} | "
              f"{fmt(r.get('backward_s'), '{:.3f}')} | {fmt(r.get('optimizer_s'), '{:.3f}')} | "
              f"{fmt(r.get('exposed_comm_s'), '{:.3f}')} | "
              f"{ratio(ddp)} | {ratio(fsdp)} | {ratio(ds3)} |")
