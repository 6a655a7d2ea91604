#!/usr/bin/env python3
"""stratum-train's records as the tools people open read them: the TensorBoard
event file through TensorBoard's own reader (EventAccumulator), summary.json
through json, loss_curve.svg through an XML parser; each against metrics.csv.

Usage: check_run_records.py BIN_DIR WORK_DIR   (exit 77: tensorboard is not installed)
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard is not installed in this Python: its reader cannot be run (scripts/setup.sh installs it)")
    sys.exit(77)

bin_dir, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)  # a fresh run: one event file
os.makedirs(work)
config = os.path.join(work, "ds_config.json")
with open(config, "w") as f:
    json.dump({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "tensorboard": {"enabled": True, "output_path": os.path.join(work, "tb"), "job_name": "tiny"}}, f)
steps = 6
cmd = [f"{bin_dir}/stratum-run", "--num_procs", "2", f"{bin_dir}/stratum-train", "--config", config,
       "--model", "gpt2-tiny-bytes", "--set", "layers=1", "--set", "max_seq_len=64", "--data", "default",
       "--cache-dir", os.path.join(work, "cache"), "--steps", str(steps), "--eval-every", "3", "--eval-batches", "1",
       "--sample-tokens", "0", "--log-dir", os.path.join(work, "log")]
run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
if run.returncode != 0:
    sys.exit(f"stratum-train failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")

with open(os.path.join(work, "log", "metrics.csv")) as f:
    rows = list(csv.DictReader(f))
assert len(rows) == steps, rows

events = [n for n in os.listdir(os.path.join(work, "tb", "tiny")) if n.startswith("events.out.tfevents.")]
assert len(events) == 1, events
acc = EventAccumulator(os.path.join(work, "tb", "tiny"))
acc.Reload()
tags = set(acc.Tags()["scalars"])
want = {"Train/Samples/train_loss", "Train/Samples/lr", "Train/Samples/loss_scale", "Train/Samples/grad_norm",
        "Train/Samples/tokens_per_s", "Train/Samples/mfu", "Train/Samples/memory_gib", "Eval/Samples/eval_loss"}
assert want <= tags, f"tags {sorted(tags)}"
loss = acc.Scalars("Train/Samples/train_loss")
assert [e.step for e in loss] == [8 * (i + 1) for i in range(steps)], [e.step for e in loss]  # samples: 4 x 2 ranks a step
for e, row in zip(loss, rows):
    assert abs(e.value - float(row["loss"])) <= 1e-6 * abs(float(row["loss"])) + 1e-6, (e.value, row["loss"])
evals = acc.Scalars("Eval/Samples/eval_loss")
assert [e.step for e in evals] == [24, 48], [e.step for e in evals]

summary = json.load(open(os.path.join(work, "log", "summary.json")))
assert summary["steps"] == steps and summary["model"] == "gpt2-tiny-bytes" and summary["ranks"] == 2, summary
assert abs(summary["final_loss"] - float(rows[-1]["loss"])) < 1e-6, summary
assert "best_eval_loss" in summary and summary["wall_seconds"] > 0, summary
# The host high-water mark (VmHWM) of the largest rank bounds every resident size the memory column sampled.
assert summary["host_peak_gib"] >= summary["peak_memory_gib"] > 0 and summary["host_peak_rank"] in (0, 1), summary
svg = ET.parse(os.path.join(work, "log", "loss_curve.svg")).getroot()
lines = [p for p in svg.iter("{http://www.w3.org/2000/svg}polyline")]
assert len(lines) == 2 and len(lines[0].get("points").split()) == steps, [p.get("points") for p in lines]
print(f"TensorBoard read {len(tags)} scalar tags, {len(loss)} losses equal to metrics.csv; "
      f"summary.json and loss_curve.svg ({len(lines)} curves) read back")
