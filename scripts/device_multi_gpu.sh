#!/usr/bin/env bash
# On a machine with several GPUs of one host (2, 4 or 8 H100/H200; OpenMPI,
# NCCL), after `scripts/device_build.sh --only-build --targets "stratum-train
# stratum-run stratum-estimate"` (build-device/); one rank per GPU, NCCL
# between them; GPUS (default: nvidia-smi's count) caps the sizes tried.
#   1. Expert parallelism. 1a: tiny Mixtral (4 experts, top 2) and a tiny
#      Qwen3-MoE with 128 experts, top 8, fp32, at EP 2, 4, 8 (each rank also
#      data parallel), 12 steps, against the one-GPU run: per-step losses
#      within 1e-5 relative. 1b: bf16 at the real shapes, Mixtral 8x7B's
#      (8 experts of ffn 14336, top 2) and Qwen3-30B-A3B's (128 of ffn 768,
#      top 8) at the layers one GPU holds at ZeRO 0 (4 and 8 on a 141 GB GPU,
#      2 and 4 on an 80 GB one; MIXTRAL_LAYERS, QWEN3_LAYERS), seq 4096,
#      micro-batch 1, 8 steps: tokens/s per GPU (the median of the second
#      half), TFLOP/s and MFU on the active parameters (6 x active + attention,
#      no recomputation, against PEAK_TFLOPS, default 989) and the per-GPU
#      throughput against one GPU's (target >= 0.95 at EP 2), beside
#      Megatron-Core's published 468 TFLOP/s per H100 (Mixtral 8x7B, bf16).
#   2. Context parallelism, llama-8b. 2a: tiny LLaMA (8 heads of 16, seq 256) by
#      Ulysses and ring at CP 2, 4, 8 against one GPU, fp32, 12 steps, within
#      1e-5. 2b: llama-8b at 128K tokens, bf16, ZeRO-3 with the optimizer on
#      the host, the MLP and the loss tiled along the sequence (8K), activation
#      checkpointing (on the host where one GPU's 128K checkpoints would take
#      over a third of its memory, for every run alike): one GPU, then Ulysses
#      and ring at each CP; tokens/s per GPU, MFU and the per-GPU throughput
#      against one GPU's. 2c: the longest sequence all GPUs train a step at
#      (ring over all of them; LONG_METHOD), doubling from 256K to MAX_SEQ
#      (default 8M), each length's checkpoints on the GPU while they take
#      under a third of it, else on the host while they fit there.
#   3. llama-70b born sharded at the planner's best layout for the node:
#      stratum-estimate --plan with the node's GPU count, GPU and host memory
#      (seq 4096, global batch GLOBAL_BATCH, default 8); when no layout of the
#      80 layers fits, the most layers one does (70, 60, 50, 40, ...: all 80
#      need about 1 TB of host memory for the optimizer on 8 GPUs; with 90% of
#      a 560 GiB host the planner fits 60 layers on 8 H200s, 40 on 8 H100s,
#      32 on 4 H100s, 12 on 2). Its first
#      row becomes the ds_config; 10 steps; the start-up and training peaks
#      stratum-train reports (the largest rank's, the smallest's) and each
#      GPU's peak as nvidia-smi saw it, against the planner's GiB a GPU
#      (target within 10%), and the planner's step time against the measured.
# Every run is bounded by DEADLINE_AT (epoch seconds): a run predicted to end
# after it is not started, saying so, and one still running then is stopped.
# Finished runs are kept in RESULTS (default build-device/multi_gpu, kept on a
# warm machine) and reused by a later call with the same command and config,
# so a call repeating the PARTS of one that ran out of time goes on where it
# stopped (FRESH=1 runs everything again).
#   PARTS="1 2 3" (default; 1 = 1a 1b, 2 = 2a 2b 2c); EP_SIZES, CP_SIZES
#   (default 2 4 8 up to GPUS); the logs and this output land in $OUT.
# Modes:
#   DRY=1     every part's commands on CPU ranks over MPI on this host (no
#             GPU): the tiny presets, 2 steps, GPUS=4 by default; checks the
#             plumbing (configs, parsing, comparisons, tables).
#   SHARED=1  on one GPU, its GPUS (default 4) ranks sharing GPU 0 over MPI:
#             the same small shapes on the CUDA path, a dry run on a
#             one-GPU machine.
#   The DRY and SHARED part 3 plans tiny-llama widened to 13M parameters.
# $OUT gets this output (device_multi_gpu.txt) and every run's log, config,
# metrics and summary (multi_gpu_runs.tar.gz).
# Device calls, after the build's (kind nvidia-h100-x2, -x4 or -x8; timeout_s
# 600; each ~560 s; what one leaves undone the next, with the same PARTS,
# finishes on the still-warm machine):
#   command: DEADLINE_AT=$(( $(date +%s) + 560 )) PARTS="..." bash scripts/device_multi_gpu.sh
#   2 GPUs: PARTS="1 2a" | "2b" | "2c 3"
#   4 GPUs: PARTS="1a 2a" | "1b" | "2b" (twice) | "2c 3"
#   8 GPUs: PARTS="1a 2a" | "1b" | "2b" (twice) | "2c" | "3"
#   (on 8 GPUs these calls and the build take over 30 minutes of the machine:
#   "1a 2a 1b" first, the rest on a later start.) First, on one GPU: SHARED=1 DEADLINE_AT=...
#   PARTS="1 2 3" (about 5 minutes) checks the CUDA path of every part.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATUM_LOG_LEVEL=info
bin=${BIN:-build-device/bin}
dry=${DRY:-0}
shared=${SHARED:-0}
fresh=${FRESH:-0}
peak=${PEAK_TFLOPS:-989}
deadline=${DEADLINE_AT:-$(( $(date +%s) + 100000 ))}
parts=" $(echo "${PARTS:-1 2 3}" | sed -e 's/\b1\b/1a 1b/g' -e 's/\b2\b/2a 2b 2c/g') "
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${OUT:-$work}
if [ -n "${OUT:-}" ]; then exec > >(tee "$OUT/device_multi_gpu.txt") 2>&1; fi

launch_args=()
if [ "$dry" = 1 ]; then
  # CPU ranks, even where a GPU is visible.
  export CUDA_VISIBLE_DEVICES="" STRATUM_SHARED_GPU=0
  [ -x "$bin/stratum-train" ] || bin=build/bin
  mode=cpu gpus=${GPUS:-4} launch=--num_procs
  launch_args=(--launcher_args "--mca btl_vader_single_copy_mechanism none")
  results=${RESULTS:-$work/results}
elif [ "$shared" = 1 ]; then
  export CUDA_VISIBLE_DEVICES=0
  mode=shared gpus=${GPUS:-4} launch=--num_procs
  results=${RESULTS:-build-device/multi_gpu-shared}
else
  mode=gpu gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')} launch=--num_gpus
  results=${RESULTS:-build-device/multi_gpu}
fi
small=$([ "$mode" = gpu ] && echo 0 || echo 1)
quick=$([ "$small" = 1 ] && echo "${QUICK:-15}" || echo 60)  # seconds predicted for a tiny model's run
mkdir -p "$results"
cache=$results/cache
if [ "$mode" = cpu ]; then
  gpu_name="none: CPU ranks; the planner is told of H100s" gpu_mib=81559 plan_gpu=h100
else
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0)
  gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)
  plan_gpu=$([[ "$gpu_name" == *H200* ]] && echo h200 || echo h100)
fi
host_gib=$(awk '/^MemTotal:/ {print int($2 / 1048576)}' /proc/meminfo)
sizes() {  # the sizes of $1 (or 2 4 8) up to the GPUs
  local s
  for s in ${1:-2 4 8}; do [ "$s" -le "$gpus" ] && echo "$s"; done
}
ep_sizes=$(sizes "${EP_SIZES:-}" | xargs)
cp_sizes=$(sizes "${CP_SIZES:-}" | xargs)
cp_entries=("ref 1")
for cp in $cp_sizes; do cp_entries+=("ulysses $cp" "ring $cp"); done
echo "=== device_multi_gpu: $mode, $gpus GPUs ($gpu_name, $gpu_mib MiB), host $host_gib GiB; parts $(echo "$parts" | xargs);" \
     "$(( deadline - $(date +%s) )) s before DEADLINE_AT; results in $results ==="
[ "$gpus" -ge 1 ] || { echo "no GPU found (GPUS= to say how many)"; exit 1; }
[ -x "$bin/stratum-train" ] || { echo "no $bin/stratum-train: build it first"; exit 1; }

# The parsing, comparisons and tables.
py=$work/multi_gpu.py
cat > "$py" <<'PY'
import csv, json, math, re, statistics, sys

HEAD_DIM = {"tiny-qwen3-moe": 32, "qwen3-30b-a3b": 128}  # Qwen3's heads x head_dim is not hidden


def load(results, name):
    """A run's summary.json, metrics.csv rows, log and exit status (empty where absent)."""
    def read(path, parse, empty):
        try:
            with open(path, errors="replace") as f:
                return parse(f)
        except (OSError, ValueError):
            return empty
    summary = read(f"{results}/{name}/summary.json", json.load, {})
    rows = read(f"{results}/{name}/metrics.csv", lambda f: list(csv.DictReader(f)), [])
    log = read(f"{results}/{name}.log", lambda f: f.read(), "")
    rc = read(f"{results}/{name}.rc", lambda f: f.read().strip(), "")
    return summary, rows, log, rc


def why_not(results, name, rows, rc):
    if rows and rc == "0":
        return None
    if rc == "":
        return "not run (skipped or stopped at DEADLINE_AT)"
    return f"failed (exit {rc}; log {results}/{name}.log)"


def flops_per_token(summary, log):
    """Training FLOPs a token as Stratum counts them: 6 x active parameters + 12 x layers x heads' width x seq."""
    m = re.search(r"info: (\S+) \(\w+\): (\d+) layers, (\d+) hidden, (\d+) heads", log)
    p = re.search(r"; ([\d,]+) parameters(?: \(([\d,]+) active a token\))?", log)
    if not m or not p or not summary.get("sequence_length"):
        return None
    name, layers, hidden, heads = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    active = int((p.group(2) or p.group(1)).replace(",", ""))
    width = heads * HEAD_DIM.get(name, hidden // heads)
    return 6.0 * active + 12.0 * layers * width * summary["sequence_length"]


def throughput(results, name, ranks, peak):
    summary, rows, log, rc = load(results, name)
    if why_not(results, name, rows, rc):
        return None
    tps = summary.get("tokens_per_s") or statistics.median(float(r["tokens_per_s"]) for r in rows[len(rows) // 2:])
    per_gpu = tps / ranks
    f = flops_per_token(summary, log)
    tflops = per_gpu * f / 1e12 if f else float("nan")
    mfu = summary.get("mfu") or tflops / peak  # stratum-train's own on GPUs; the same count
    mem = max((float(r["memory_gib"]) for r in rows if r.get("memory_gib")), default=float("nan"))
    return {"tps": tps, "per_gpu": per_gpu, "tflops": tflops, "mfu": mfu, "mem": mem,
            "step_s": summary.get("train_batch_size", 1) * summary.get("sequence_length", 0) / tps}


def cmd_compare(results, name, ref, tol):
    tol = float(tol)
    _, a_rows, _, a_rc = load(results, name)
    _, b_rows, _, b_rc = load(results, ref)
    for n, rows, rc in ((ref, b_rows, b_rc), (name, a_rows, a_rc)):
        why = why_not(results, n, rows, rc)
        if why:
            print(f"{'SKIP' if rc == '' else 'FAIL'} {name:28s} {n}: {why}")
            return
    a = {int(r["step"]): float(r["loss"]) for r in a_rows}
    b = {int(r["step"]): float(r["loss"]) for r in b_rows}
    common = sorted(set(a) & set(b))
    if not common or len(common) < len(b):
        print(f"FAIL {name:28s} steps {sorted(a)} against the reference's {sorted(b)}")
        return
    worst = max(common, key=lambda s: abs(a[s] - b[s]) / abs(b[s]))
    diff = abs(a[worst] - b[worst]) / abs(b[worst])
    print(f"{'PASS' if diff <= tol else 'FAIL'} {name:28s} largest relative loss difference {diff:.2e} at step "
          f"{worst} of {len(common)} (bound {tol:g}); loss {b[min(b)]:.4f} -> {a[max(a)]:.4f}")


def cmd_table(results, peak, title, *rows):
    """rows: name|label|ranks|target (target: the least per-GPU ratio to the first row's, or -)."""
    peak = float(peak)
    print(f"--- {title} ---")
    print(f"  {'run':34s} {'GPUs':>4s} {'tokens/s':>10s} {'tok/s/GPU':>10s} {'TFLOP/s/GPU':>11s} {'MFU':>9s} "
          f"{'step s':>8s} {'vs 1 GPU':>8s} {'peak GiB':>8s}")
    ref = None
    verdicts = []
    best = None
    for i, spec in enumerate(rows):
        name, label, ranks, target = spec.split("|")
        ranks = int(ranks)
        r = throughput(results, name, ranks, peak)
        if r is None:
            _, rws, _, rc = load(results, name)
            print(f"  {label:34s} {ranks:4d}  {why_not(results, name, rws, rc)}")
            if target != "-":
                verdicts.append(f"SKIP {label}: no measurement (target >= {target} of one GPU's per-GPU throughput)")
            continue
        if i == 0:
            ref = r
        ratio = r["per_gpu"] / ref["per_gpu"] if ref else float("nan")
        print(f"  {label:34s} {ranks:4d} {r['tps']:10.1f} {r['per_gpu']:10.1f} {r['tflops']:11.4g} "
              f"{100 * r['mfu']:8.3g}% {r['step_s']:8.3f} {ratio:8.3f} {r['mem']:8.3f}")
        if i > 0 and (best is None or r["tflops"] > best[1]["tflops"]):
            best = (label, r)
        if target != "-":
            ok = ref is not None and ratio >= float(target)
            verdicts.append(f"{'PASS' if ok else 'FAIL'} {label}: per-GPU throughput {ratio:.3f} of one GPU's "
                            f"(target >= {target})")
    for v in verdicts:
        print(v)
    return best


def cmd_moe_table(results, peak, title, *rows):
    best = cmd_table(results, peak, title, *rows)
    if "mixtral" not in title:
        return
    line = "  reference: Megatron-Core's published Mixtral 8x7B bf16 on H100s: 468 TFLOP/s a GPU"
    if best and not math.isnan(best[1]["tflops"]):
        line += f"; here at best {best[1]['tflops']:.4g} TFLOP/s a GPU ({best[0]}), {best[1]['tflops'] / 468:.2f} of it"
    print(line)


def cmd_long(results, name, seq, cp):
    """One line per length; writes NAME.step (the step's seconds) for the next length's prediction."""
    summary, rows, log, rc = load(results, name)
    why = why_not(results, name, rows, rc)
    if why:
        print(f"  seq {int(seq):>9d} cp {cp}: did not train: {why}")
        sys.exit(1)
    r = rows[-1]
    step_s = int(seq) / float(r["tokens_per_s"])
    open(f"{results}/{name}.step", "w").write(f"{step_s:.0f}\n")
    f = flops_per_token(summary, log)
    attention = 1 - 6.0 * float(re.search(r"; ([\d,]+) parameters", log).group(1).replace(",", "")) / f if f else 0
    ckpt = "host" if '"cpu_checkpointing": true' in open(f"{results}/{name}.json").read() else "device"
    print(f"  seq {int(seq):>9d} cp {cp}: one step {step_s:.1f} s, {float(r['tokens_per_s']) / int(cp):.0f} tokens/s "
          f"a GPU, MFU {100 * (summary.get('mfu') or 0):.1f}%, peak {float(r['memory_gib']):.2f} GiB, "
          f"checkpoints on the {ckpt}, attention {attention:.0%} of the FLOPs, loss {float(r['loss']):.4f}")


def cmd_plan(plan_file, batch, config_out, base_config):
    """The planner's first layout: a ds_config at config_out, shell assignments on stdout (fits=0 if none)."""
    text = open(plan_file).read()
    row = re.search(
        r"^\s*1\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(-|\d+ (?:ring|uly|hyb\d+))\s+(on|-)\s+(\d)\s+(-|opt\+par|opt)\s+"
        r"(\d+) x (\d+)\s+(\S+(?: x\d+)?)\s+(on|-)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
        r"([\d.]+).*?(\d+)%\s+(\S+)\s*$", text, re.M)
    if not row:
        print("fits=0")
        return
    dp, pp, tp, ep = (int(row.group(i)) for i in range(1, 5))
    cp_text, sp, zero, offload = row.group(5), row.group(6) == "on", int(row.group(7)), row.group(8)
    micro, acc, schedule, ckpt = int(row.group(9)), int(row.group(10)), row.group(11), row.group(12) == "on"
    total, step, mfu, tps = float(row.group(16)), float(row.group(18)), row.group(19), row.group(20)
    config = json.load(open(base_config))
    config.update({"train_batch_size": int(batch), "train_micro_batch_size_per_gpu": micro,
                   "gradient_accumulation_steps": acc})
    z = {"stage": zero}
    if offload in ("opt", "opt+par"):
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload == "opt+par":
        z["offload_param"] = {"device": "cpu", "pin_memory": True}
    config["zero_optimization"] = z
    if pp > 1:
        name, _, virtual = schedule.partition(" x")
        config["pipeline"] = {"stages": pp, "schedule": name}
        if virtual:
            config["pipeline"]["virtual_stages"] = int(virtual)
    if tp > 1:
        config["tensor_parallel"] = {"autotp_size": tp, "sequence_parallel": sp}
    if cp_text != "-":
        size, method = cp_text.split()
        cp = {"size": int(size), "method": {"ring": "ring", "uly": "ulysses"}.get(method, "hybrid")}
        if method.startswith("hyb"):
            cp["ulysses_size"] = int(method[3:])
        config["context_parallel"] = cp
    if ep > 1:
        config.setdefault("moe", {})["expert_parallel_size"] = ep
    if ckpt:
        config["activation_checkpointing"] = {}
    json.dump(config, open(config_out, "w"), indent=1)
    layout = (f"dp {dp} x pp {pp}{' (' + schedule + ')' if pp > 1 else ''} x tp {tp}{' (sp)' if sp else ''}"
              f"{' x cp ' + cp_text if cp_text != '-' else ''}, ZeRO-{zero}, offload {offload}, micro-batch "
              f"{micro} x {acc}, checkpointing {'on' if ckpt else 'off'}")
    print(f"fits=1 est_gib={total} est_step={step} est_mfu={mfu} est_tps={tps} layout='{layout}'")


def cmd_memory(results, name, est_gib, est_step, gpus):
    est_gib, est_step = float(est_gib), float(est_step)
    summary, rows, log, rc = load(results, name)
    why = why_not(results, name, rows, rc)
    if why:
        print(f"SKIP {name}: {why}" if rc == "" else f"FAIL {name}: {why}")
        return
    m = re.search(r"start-up peak memory ([\d.]+) GiB(?: \(rank (\d+); the smallest rank's ([\d.]+) GiB\))?", log)
    cpu = "resident high-water mark" in log
    unit = "GiB resident (CPU ranks)" if cpu else "GiB allocated"
    if m:
        largest, rank, smallest = m.group(1), m.group(2) or "0", m.group(3) or m.group(1)
        print(f"  start-up peak: {largest} {unit} (rank {rank}, the largest); the smallest rank's {smallest}")
    train = [(float(g), int(r)) for g, r in re.findall(r"\| mem ([\d.]+) GiB \(rank (\d+)\)", log)]
    train += [(float(g), 0) for g in re.findall(r"\| mem ([\d.]+) GiB \|", log)]  # one rank: no rank named
    peak_gib, peak_rank = max(train) if train else (max(float(r["memory_gib"]) for r in rows), 0)
    print(f"  training peak: {peak_gib:.2f} {unit} (rank {peak_rank}, the largest over the steps)")
    try:
        used = {}
        for line in open(f"{results}/{name}.smi"):
            f = [x.strip() for x in line.split(",")]
            if len(f) == 2 and f[0].isdigit() and f[1].isdigit():
                used[int(f[0])] = max(used.get(int(f[0]), 0), int(f[1]))
        if used:
            print("  each GPU's peak as nvidia-smi saw it (the allocator's reserve and the CUDA context included): " +
                  ", ".join(f"GPU {g} {used[g] / 1024:.1f} GiB" for g in sorted(used)[:int(gpus)]))
    except OSError:
        pass
    note = " (CPU ranks' resident memory, the runtime's included: not the planner's quantity)" if cpu else ""
    if est_gib > 0:
        diff = peak_gib / est_gib - 1
        print(f"{'PASS' if abs(diff) <= 0.10 else 'FAIL'} training peak {peak_gib:.2f} GiB against the planner's "
              f"{est_gib:.2f} GiB a GPU: {diff:+.1%} (target within 10%){note}")
    else:
        print(f"FAIL training peak {peak_gib:.2f} GiB: the planner's estimate rounds to 0.00 GiB{note}")
    steps = [summary.get("train_batch_size", 1) * summary.get("sequence_length", 0) / float(r["tokens_per_s"])
             for r in rows[1:] or rows]
    measured = statistics.median(steps)
    ratio = f"{measured / est_step:.2f}" if est_step > 0 else "-"
    print(f"  step time: measured {measured:.3f} s (median of steps 2-{len(rows)}), the planner's {est_step:.3f} s "
          f"(measured / predicted {ratio})")


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1].replace("-", "_")](*sys.argv[2:])
PY

# run NAME RANKS PREDICTED_S ARGS...: stratum-train on RANKS ranks with the
# config $results/NAME.json, its output in NAME.log, its exit status in
# NAME.rc. A run an earlier call finished with the same command and config is
# reused; one predicted (PREDICTED_S) to end after DEADLINE_AT is not started
# (returns 3), one still running then is stopped (not recorded, so a later
# call tries it again).
run() {
  local name=$1 ranks=$2 predicted=$3
  shift 3
  local cmd=("$bin/stratum-run" "$launch" "$ranks" "${launch_args[@]}" --heartbeat_timeout 900
             "$bin/stratum-train" --config "$results/$name.json" "$@" --cache-dir "$cache" --log-dir "$results/$name"
             --eval-every 0 --sample-tokens 0 --print-every 1 --peak-tflops "$peak")
  local key
  key=$(printf '%s\n' "${cmd[@]}"; cat "$results/$name.json")
  if [ "$fresh" != 1 ] && [ -f "$results/$name.rc" ] && [ "$(cat "$results/$name.key" 2>/dev/null)" = "$key" ]; then
    echo "  $name: kept from an earlier call (exit $(cat "$results/$name.rc"))"
    return "$(cat "$results/$name.rc")"
  fi
  rm -rf "${results:?}/$name" "$results/$name.rc" "$results/$name.step"
  local left=$(( deadline - $(date +%s) ))
  if [ "$predicted" -gt "$left" ]; then
    echo "  $name: not started (predicted $predicted s, $left s left before DEADLINE_AT)"
    return 3
  fi
  local smi="" t0 rc
  if [ "$mode" != cpu ]; then
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$results/$name.smi" 2>/dev/null &
    smi=$!
  fi
  t0=$(date +%s)
  timeout -k 20 "$left" "${cmd[@]}" > "$results/$name.log" 2>&1
  rc=$?
  [ -n "$smi" ] && kill "$smi" 2>/dev/null && wait "$smi" 2>/dev/null
  echo $(( $(date +%s) - t0 )) > "$results/$name.wall"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "  $name: stopped at DEADLINE_AT after $(cat "$results/$name.wall") s"
    return "$rc"
  fi
  echo "$rc" > "$results/$name.rc"
  printf '%s' "$key" > "$results/$name.key"
  if [ "$rc" != 0 ]; then
    echo "  $name: exit $rc after $(cat "$results/$name.wall") s; the log's end:"
    grep -v "^\[rank [0-9]*\] step " "$results/$name.log" | tail -6 | sed 's/^/    /'
  fi
  return "$rc"
}

# config NAME JSON: the run's ds_config.
config() { echo "$2" > "$results/$1.json"; }

# A corpus of repeated licence texts of at least $1 characters (the content
# does not change the speed or the memory), kept for later calls.
corpus=$results/long.txt
long_corpus() {
  [ -f "$corpus" ] && [ "$(stat -c %s "$corpus")" -ge "$1" ] && return 0
  python3 scripts/licence_corpus.py "$corpus" "$1"
}

# --- 1. expert parallelism ------------------------------------------------------
if [[ "$parts" == *" 1a "* ]]; then
  echo "=== 1a. expert parallelism over NCCL, fp32, tiny shapes: EP $ep_sizes against one GPU ==="
  steps=$([ "$dry" = 1 ] && echo 2 || echo 12)
  for model in mixtral qwen3; do
    if [ "$model" = mixtral ]; then
      args=(--model tiny-mixtral --set layers=2 --set max_seq_len=64)
    else
      args=(--model tiny-qwen3-moe --set layers=2 --set max_seq_len=64 --set num_experts=128 --set top_k=8)
    fi
    for ep in 1 $ep_sizes; do
      name=ep-fp32-$model-ep$ep
      config "$name" "{\"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,
 \"moe\": {\"expert_parallel_size\": $ep, \"aux_loss_coeff\": 0, \"z_loss_coeff\": 0.001},
 \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}}}"
      run "$name" "$ep" "$quick" "${args[@]}" --data default --steps "$steps" --seed 7
      [ "$ep" = 1 ] || python3 "$py" compare "$results" "$name" "ep-fp32-$model-ep1" 1e-5
    done
  done
fi

if [[ "$parts" == *" 1b "* ]]; then
  echo "=== 1b. expert parallelism over NCCL, bf16, real shapes: throughput at EP $ep_sizes against one GPU ==="
  big=$([ "$gpu_mib" -ge 120000 ] && echo 1 || echo 0)
  steps=$([ "$small" = 1 ] && echo 2 || echo 8)
  [ "$mode" = shared ] && steps=4
  seq=$([ "$small" = 1 ] && echo 64 || echo 4096)
  long_corpus $(( seq * (gpus * steps + 8) * 3 + 2000000 ))
  for model in mixtral qwen3; do
    if [ "$small" = 1 ]; then
      preset=$([ "$model" = mixtral ] && echo tiny-mixtral || echo tiny-qwen3-moe)
      layers=2
    elif [ "$model" = mixtral ]; then
      preset=mixtral-8x7b layers=${MIXTRAL_LAYERS:-$([ "$big" = 1 ] && echo 4 || echo 2)}
    else
      preset=qwen3-30b-a3b layers=${QWEN3_LAYERS:-$([ "$big" = 1 ] && echo 8 || echo 4)}
    fi
    args=(--model "$preset" --set layers="$layers" --set max_seq_len="$seq")
    [ "$preset" = tiny-qwen3-moe ] && args+=(--set num_experts=128 --set top_k=8)
    rows=()
    for ep in 1 $ep_sizes; do
      name=ep-bf16-$model-ep$ep
      config "$name" "{\"train_batch_size\": $ep, \"gradient_accumulation_steps\": 1, \"bf16\": {\"enabled\": true},
 \"moe\": {\"expert_parallel_size\": $ep, \"aux_loss_coeff\": 0.01, \"z_loss_coeff\": 0.001},
 \"zero_optimization\": {\"stage\": 0},
 \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4}}}"
      run "$name" "$ep" "$([ "$small" = 1 ] && echo "$quick" || echo 120)" "${args[@]}" --data "$corpus" \
        --eval-fraction 0.02 --steps "$steps" --seed 7
      rows+=("$name|$preset ${layers}L EP $ep|$ep|$([ "$ep" = 2 ] && echo 0.95 || echo -)")
    done
    python3 "$py" moe-table "$results" "$peak" \
      "$preset at $layers layers, seq $seq, micro-batch 1 a GPU, bf16, ZeRO 0 ($model)" "${rows[@]}"
  done
fi

# --- 2. context parallelism -----------------------------------------------------
if [[ "$parts" == *" 2a "* ]]; then
  echo "=== 2a. context parallelism over NCCL, fp32, tiny LLaMA: Ulysses and ring at CP $cp_sizes against one GPU ==="
  steps=$([ "$dry" = 1 ] && echo 2 || echo 12)
  args=(--model tiny-llama --set layers=2 --set max_seq_len=256 --set hidden=128 --set heads=8 --set kv_heads=8)
  for entry in "${cp_entries[@]}"; do
    read -r method cp <<< "$entry"
    name=cp-fp32-$method$cp cpjson=""
    [ "$method" = ref ] && name="cp-fp32-ref"
    [ "$cp" -gt 1 ] && cpjson="\"context_parallel\": {\"size\": $cp, \"method\": \"$method\"},"
    config "$name" "{\"train_batch_size\": 4, \"gradient_accumulation_steps\": 2, $cpjson
 \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}}}"
    run "$name" "$cp" "$quick" "${args[@]}" --data default --steps "$steps" --seed 7
    [ "$name" = cp-fp32-ref ] || python3 "$py" compare "$results" "$name" cp-fp32-ref 1e-5
  done
fi

# Seconds predicted for llama-8b at sequence $1 over $2 GPUs: start-up, then a
# step at 350 TFLOP/s a GPU with the forward recomputed.
predict_8b() {
  python3 -c "s, n = $1, $2; print(int(90 + 1.33 * s * (6 * 8.03e9 + 12 * 32 * 4096 * s) / (n * 350e12)))"
}
# Whether llama-8b's activation checkpoints at sequence $1 over $2 GPUs go to
# the host: over a third of a GPU, and the host holds them beside the optimizer.
host_checkpoints() {
  local per_gpu_mib=$(( $1 * 262144 / $2 / 1048576 )) all_gib=$(( $1 * 262144 / 1073741824 ))
  [ "$small" = 1 ] && { echo false; return; }
  [ $(( per_gpu_mib * 3 )) -gt "$gpu_mib" ] && [ $(( all_gib + 130 )) -lt "$host_gib" ] && echo true || echo false
}
# long_config NAME CP METHOD HOST: llama-8b's long-sequence ds_config.
long_config() {
  local cpjson=""
  [ "$2" -gt 1 ] && cpjson="\"context_parallel\": {\"size\": $2, \"method\": \"$3\"},"
  config "$1" "{\"train_batch_size\": 1, \"bf16\": {\"enabled\": true}, $cpjson
 \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}},
 \"activation_checkpointing\": {\"cpu_checkpointing\": $4},
 \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-5}}}"
}
if [ "$small" = 1 ]; then
  long_args=(--model tiny-llama --set layers=2 --set hidden=128 --set heads=8 --set kv_heads=8)
  cp_seq=1024 long_first=256 max_seq=${MAX_SEQ:-1024} tile=256
else
  long_args=(--model llama-8b)
  cp_seq=131072 long_first=262144 max_seq=${MAX_SEQ:-8388608} tile=8192
fi

if [[ "$parts" == *" 2b "* ]]; then
  echo "=== 2b. context parallelism over NCCL, bf16: ${long_args[1]} at $cp_seq tokens, against one GPU ==="
  long_corpus $(( cp_seq * 6 + 4000000 ))
  host=$(host_checkpoints "$cp_seq" 1)
  steps=$([ "$cp_seq" -gt 65536 ] && echo 1 || echo 2)
  echo "  ZeRO-3, optimizer on the host, MLP and loss tiled by $tile, checkpoints on the $([ "$host" = true ] && echo host || echo device), $steps step(s)"
  rows=()
  for entry in "${cp_entries[@]}"; do
    read -r method cp <<< "$entry"
    name=cp-bf16-$method$cp
    long_config "$name" "$cp" "$method" "$host"
    predicted=$quick
    [ "$small" = 1 ] || predicted=$(predict_8b "$cp_seq" "$cp")
    run "$name" "$cp" "$predicted" "${long_args[@]}" --set max_seq_len="$cp_seq" --set tiled_mlp_tokens="$tile" \
      --set tiled_loss_tokens="$tile" --data "$corpus" --eval-fraction 0.02 --steps "$steps" --seed 7
    rows+=("$name|$([ "$method" = ref ] && echo "one GPU" || echo "$method CP $cp")|$cp|-")
  done
  python3 "$py" table "$results" "$peak" "${long_args[1]}, seq $cp_seq, one sequence a step, bf16, ZeRO-3 + offload" \
    "${rows[@]}"
fi

if [[ "$parts" == *" 2c "* ]]; then
  method=${LONG_METHOD:-ring}
  echo "=== 2c. the longest sequence ${long_args[1]} trains a step at over all $gpus GPUs ($method), doubling from $long_first ==="
  long_corpus $(( max_seq * 6 + 4000000 ))
  seq=$long_first
  predicted=$quick
  [ "$small" = 1 ] || predicted=$(predict_8b "$seq" "$gpus")
  longest=0
  while [ "$seq" -le "$max_seq" ]; do
    name=long-$method-cp$gpus-$seq
    long_config "$name" "$gpus" "$method" "$(host_checkpoints "$seq" "$gpus")"
    tile_here=$(( seq / gpus < tile ? seq / gpus : tile ))
    run "$name" "$gpus" "$predicted" "${long_args[@]}" --set max_seq_len="$seq" --set tiled_mlp_tokens="$tile_here" \
      --set tiled_loss_tokens="$tile_here" --data "$corpus" --eval-fraction 0.02 --steps 1 --seed 7
    rc=$?
    if [ "$rc" = 3 ]; then
      echo "  seq $seq: not tried (predicted $predicted s, past DEADLINE_AT)"
      break
    fi
    python3 "$py" long "$results" "$name" "$seq" "$gpus" || break
    longest=$seq
    # The next length: this one's start-up, its step 4.2 times as long (attention's S^2, plus the linear part).
    step_s=$(cat "$results/$name.step" 2>/dev/null || echo 0)
    predicted=$(( $(cat "$results/$name.wall") + step_s * 32 / 10 ))
    seq=$(( seq * 2 ))
  done
  target=$([ "$small" = 1 ] && echo 1024 || echo $(( 4194304 * gpus / 8 )))
  verdict=$([ "$longest" -ge "$target" ] && echo PASS || echo FAIL)
  [ "$longest" = 0 ] && [ "$rc" = 3 ] && verdict=SKIP
  echo "$verdict longest sequence trained over $gpus GPUs: $longest tokens" \
       "(target >= $target$([ "$small" = 1 ] || echo ": 4M on 8 GPUs, pro rata"))"
fi

# --- 3. llama-70b at the planner's layout --------------------------------------
if [[ "$parts" == *" 3 "* ]]; then
  batch=${GLOBAL_BATCH:-8}
  if [ "$small" = 1 ]; then
    # tiny-llama widened to 13M parameters: the planner's GiB show in its two decimals.
    model=tiny-llama layer_list=4 seq=64 shape=(--set hidden=512 --set ffn_hidden=1408 --set heads=8 --set kv_heads=8)
  else
    model=llama-70b layer_list="80 70 60 50 40 32 24 16 12 8 4 2" seq=4096 shape=()
  fi
  plan_mib=$gpu_mib
  [ "$mode" = shared ] && plan_mib=$(( gpu_mib / gpus ))  # the ranks share the one GPU's memory
  echo "=== 3. $model born sharded at the planner's best layout for $gpus x $plan_gpu ($plan_mib MiB a GPU), host $host_gib GiB ==="
  echo '{"train_batch_size": '"$batch"', "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}' \
    > "$work/plan-base.json"
  fits=0 layout="" est_gib=0 est_step=0 est_mfu=0 est_tps=0
  for layers in $layer_list; do
    "$bin/stratum-estimate" --plan --model "$model" "${shape[@]}" --set layers="$layers" --nodes 1 --gpus-per-node "$gpus" \
      --gpu "$plan_gpu" --gpu-memory "${plan_mib}MiB" --host-memory "$(( host_gib * 9 / 10 ))GiB" --seq "$seq" \
      --global-batch "$batch" --config "$work/plan-base.json" --rows 3 > "$results/plan-$layers.txt" 2>&1
    eval "$(python3 "$py" plan "$results/plan-$layers.txt" "$batch" "$results/plan-$model.json" "$work/plan-base.json")"
    [ "$fits" = 1 ] && break
    echo "  $layers layers: no layout fits ($(grep -m1 -o "none fits.*\|error.*" "$results/plan-$layers.txt"))"
  done
  if [ "$fits" != 1 ]; then
    echo "FAIL no layout of $model fits the node"
  else
    sed -n '1,4p;/^     #/,/^  data parallelism/p' "$results/plan-$layers.txt" | grep -v "^  data parallelism" | sed 's/^/  /'
    echo "  the planner's choice for $model at $layers layers: $layout; $est_gib GiB a GPU, $est_step s a step" \
         "($est_mfu% MFU, $est_tps tokens/s)"
    name=plan-$model
    if [ -x "$bin/stratum-config" ] && ! "$bin/stratum-config" check "$results/$name.json" --world-size "$gpus" \
         > "$work/check.txt" 2>&1; then
      echo "  stratum-config check refuses the layout's config:"; sed 's/^/    /' "$work/check.txt"
    fi
    steps=$([ "$dry" = 1 ] && echo 2 || echo 10)
    long_corpus $(( seq * batch * (steps + 4) * 3 + 2000000 ))
    predicted=$quick
    [ "$small" = 1 ] || predicted=$(python3 -c "print(int(150 + 2 * $steps * $est_step))")
    run "$name" "$gpus" "$predicted" --model "$model" "${shape[@]}" --set layers="$layers" --set max_seq_len="$seq" \
      --data "$corpus" --eval-fraction 0.02 --steps "$steps" --seed 7
    echo "--- $model ($layers layers) at the planner's layout, $gpus ranks, $steps steps ---"
    python3 "$py" memory "$results" "$name" "$est_gib" "$est_step" "$gpus"
  fi
fi

# Every run's log, config, metrics and summary in one file ($OUT brings back 8 files at most).
[ "$out" = "$work" ] || tar -czf "$out/multi_gpu_runs.tar.gz" -C "$results" --exclude=cache --exclude=long.txt . 2>/dev/null
echo "=== device_multi_gpu: done, $(( deadline - $(date +%s) )) s before DEADLINE_AT ==="
