"""Writes docs/benchmarks.md from the latest run of every scenario:

  python3 bench/report.py > docs/benchmarks.md

It reads bench/scenarios.json (what each scenario compares, the targets),
bench/results/<scenario>.jsonl (one run each, written by bench/run_matrix.sh)
and bench/method.md (hand-written: how the figures are measured, what is in
the way of the missed targets). Every ratio is between rows of one run.
Python 3 standard library only.
"""
import json
import os
import shlex
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenarios as sc  # noqa: E402

COMMAND = "python3 bench/report.py > docs/benchmarks.md"


def has_fp8_rows(spec):
    return any("--fp8" in flags for run in sc.runs(spec) for _, flags in sc.stratum_rows(run))


GROUPS = [  # (heading, which scenarios)
    ("Training throughput on one GPU",
     lambda s: s["kind"] == "matrix" and sc.gpus_needed(s) == 1 and not s.get("moe_arch") and not has_fp8_rows(s)),
    ("FP8 on one GPU", lambda s: s["kind"] == "matrix" and has_fp8_rows(s)),
    ("Mixtures of experts on one GPU", lambda s: s["kind"] == "matrix" and s.get("moe_arch")),
    ("Training throughput on two GPUs", lambda s: s["kind"] == "matrix" and sc.gpus_needed(s) >= 2),
    ("Collectives", lambda s: s["kind"] == "collectives"),
    ("Kernels", lambda s: s["kind"] in ("attention", "adam-bandwidth", "cpu-adam")),
    ("Pipeline parallelism", lambda s: s["kind"] == "pipeline-bubble"),
    ("The training app (stratum-train)", lambda s: s["kind"] == "train"),
]


def load_results(folder):
    """{scenario: {"meta": ..., "rows": [...]}} of the results files in `folder`."""
    out = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(folder, name)) as f:
            records = [json.loads(line) for line in f if line.strip()]
        meta = next((r for r in records if r.get("record") == "meta"), {})
        out[name[: -len(".jsonl")]] = {"meta": meta, "rows": [r for r in records if r.get("record") == "row"]}
    return out


# ---- formatting -------------------------------------------------------------------

def num(v, fmt="{:,.0f}"):
    return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def ms(v):
    return num(v * 1e3 if isinstance(v, (int, float)) else None, "{:.1f}")


def table(header, rows):
    align = ["---" if h.startswith("<") else "---:" for h in header]
    lines = ["| " + " | ".join(h.lstrip("<") for h in header) + " |", "| " + " | ".join(align) + " |"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def human_bytes(b):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024:
            return f"{b:g} {unit}"
        b /= 1024
    return f"{b:g} TiB"


def environment_line(meta, spec):
    e = meta.get("environment", {})
    parts = []
    if e.get("gpu"):
        parts.append(f"{e.get('gpu_count', 1)} x {e['gpu']}" + (f" (driver {e['driver']})" if e.get("driver") else ""))
    if spec["kind"] in ("cpu-adam", "pipeline-bubble") or not e.get("gpu"):
        parts.append(f"{e.get('cpu', 'unknown CPU')}, {e.get('cpu_cores', '?')} logical cores")
    for key, name in (("cuda", "CUDA"), ("torch", "torch"), ("cudnn", "cuDNN"), ("compiler", "compiler")):
        if e.get(key) and (key != "cudnn" or spec["kind"] == "attention"):
            parts.append(f"{name} {e[key]}")
    if e.get("gpu") and (e.get("stratum_nccl") or e.get("nccl")):
        parts.append(f"NCCL {e.get('stratum_nccl') or e.get('nccl')}")
    if e.get("mpi") and spec["kind"] in ("matrix", "collectives", "train"):
        parts.append(e["mpi"])
    uses_ds = any(p.startswith("deepspeed") for r in sc.runs(spec) for p in r.get("peers", []))
    if uses_ds and e.get("deepspeed"):
        parts.append(f"DeepSpeed {e['deepspeed']}")
    if any(r.get("export_check") for r in sc.runs(spec)) and e.get("transformers"):
        parts.append(f"transformers {e['transformers']}")
    return ", ".join(parts)


def footer(name, spec, result):
    meta = result["meta"]
    commit = meta.get("commit", "unknown") + (" (with local changes)" if meta.get("commit_dirty") else "")
    lines = [f"Measured {meta.get('date', '?')[:10]} at commit `{commit}` on {environment_line(meta, spec)}."]
    if meta.get("placement"):
        lines.append(meta["placement"])
    if meta.get("note"):
        lines.append(meta["note"])
    targets = " ".join(sc.build_targets(spec))
    build = (f"cmake --build build --target {targets}" if sc.gpus_needed(spec) == 0 else
             f"bash scripts/device_build.sh --only-build --targets \"{targets}\"")
    lines.append(f"Reproduce: `bash bench/run_matrix.sh {name}`, built with `{build}`.")
    commands = list(dict.fromkeys(r["command"] for r in result["rows"] if r.get("command")))
    if commands:
        lines.append("\n<details><summary>The commands of this run</summary>\n\n```\n" + "\n".join(commands) +
                     "\n```\n</details>")
    return "\n".join(lines)


# ---- one run's rows -----------------------------------------------------------------

def label(row, spec_run):
    common = shlex.join(spec_run.get("stratum_flags", []))
    flags = row.get("flags", "")
    extra = flags[len(common):].strip() if common and flags.startswith(common) else flags
    return row["system"] + (f" `{extra}`" if extra else "")


def merged(rows):
    """One row per system and flags: the median of each figure over the rounds."""
    groups = {}
    for r in rows:
        groups.setdefault((r["system"], r.get("flags", "")), []).append(r)
    out = []
    for group in groups.values():
        group = [g for g in group if "error" not in g] or group  # a failed round does not hide the others
        row = dict(group[0])
        for k, v in row.items():
            if isinstance(v, float):
                row[k] = statistics.median(g[k] for g in group if isinstance(g.get(k), (int, float)))
        row["rounds"] = len(group)
        out.append(row)
    return out


def run_rows(result, run):
    label_ = sc.run_label(run)
    return [r for r in result["rows"] if r.get("run") == label_]


def peers_of(rows, names=None):
    """The rows a Stratum row is held against: the peers', or those named (a Stratum row too: FP8 against bf16)."""
    return {r["system"]: r for r in rows if "error" not in r
            and (r["system"] in names if names is not None else not r["system"].startswith("stratum"))}


def row_key(row, spec_run):
    """What a row is in its scenario: the ZeRO stage and the row's own flags, or the peer's name."""
    system = row["system"]
    if system.startswith("stratum-zero"):
        system = system[: len("stratum-zero") + 1]  # bench_engine names some flags too (-sparse, -tuned)
    return system, label(dict(row, system=""), spec_run).strip()


def spec_keys(run):
    """row_key of each row the scenario asks for, in its order."""
    common = len(run.get("stratum_flags", []))
    return [(f"stratum-zero{stage}", f"`{shlex.join(flags[common:])}`" if flags[common:] else "")
            for stage, flags in sc.stratum_rows(run)] + [(p, "") for p in run.get("peers", [])]


def matrix_section(name, spec, result):
    out = []
    for run in sc.runs(spec):
        wanted = spec_keys(run)
        order = {k: i for i, k in enumerate(wanted)}
        rows = sorted(merged(run_rows(result, run)), key=lambda r: order.get(row_key(r, run), len(order)))
        if len(sc.runs(spec)) > 1:
            out.append(f"**{sc.run_label(run)}**\n")
        if not rows:
            out.append("Not in this run.\n")
            continue
        peers = peers_of(rows)
        header = ["<system", "tokens/s per GPU"] + [f"vs {p}" for p in peers] + [
            "MFU", "peak GiB", "fwd ms", "bwd ms", "opt ms", "exposed comm ms"]
        lines = []
        for r in rows:
            if "error" in r:
                lines.append([label(r, run), f"failed: {r['error']}"] + [""] * (len(header) - 2))
                continue
            t = r["tokens_per_s_per_gpu"]
            lines.append([label(r, run), num(t)] + [f"{t / p['tokens_per_s_per_gpu']:.2f}x" for p in peers.values()] +
                         [num(100 * r["mfu"], "{:.1f}%"), num(r.get("peak_memory_gib"), "{:.2f}"),
                          ms(r.get("forward_s")), ms(r.get("backward_s")), ms(r.get("optimizer_s")),
                          ms(r.get("exposed_comm_s"))])
        out.append(table(header, lines))
        rounds = max(r["rounds"] for r in rows)
        if rounds > 1:
            out.append(f"\nEach figure is the median of {rounds} rounds.")
        present = {row_key(r, run) for r in rows}
        missing = [f"{s} {f}".strip() for s, f in wanted if (s, f) not in present]
        if missing:
            out.append("\nNot in this run: " + ", ".join(missing) + ".")
        out.append("")
    return "\n".join(out)


def collectives_best(result):
    best = {}  # (op, bytes) -> system -> row of the shortest time
    for r in result["rows"]:
        if "error" in r:
            continue
        cur = best.setdefault((r["op"], r["bytes"]), {}).get(r["system"])
        if cur is None or r["time_us"] < cur["time_us"]:
            best[(r["op"], r["bytes"])][r["system"]] = r
    return {k: v for k, v in best.items() if "stratum" in v and "torch" in v}


def collectives_section(name, spec, result):
    lines = []
    for (op, b), v in sorted(collectives_best(result).items()):
        s, t = v["stratum"], v["torch"]
        lines.append([op, human_bytes(b), f"{s['busbw_GBps']:.1f}", f"{t['busbw_GBps']:.1f}",
                      f"{busbw_ratio(v):.3f}", f"{s['time_us']:.1f}", f"{t['time_us']:.1f}"])
    return table(["<op", "size", "Stratum busbw GB/s", "torch busbw GB/s", "busbw ratio", "Stratum latency us",
                  "torch latency us"], lines) + \
        "\n\nEach point is the best of the run's rounds; the busbw ratio is torch's time over Stratum's (same bytes).\n"


def busbw_ratio(point):
    return point["torch"]["time_us"] / point["stratum"]["time_us"]


def attention_section(name, spec, result):
    backends = list(dict.fromkeys(r["system"] for r in result["rows"]))
    by = {(r["shape"], r["system"]): r for r in result["rows"] if "shape" in r}
    lines = []
    for shape in dict.fromkeys(r["shape"] for r in result["rows"] if "shape" in r):
        cells = []
        for b in backends:
            r = by.get((shape, b))
            cells.append("unavailable" if r is None or "forward_backward_ms" not in r else
                         f"{r['forward_backward_ms']:.3f}")
        lines.append([shape] + cells)
    return table(["<shape"] + [f"{b} fwd+bwd ms" for b in backends], lines) + \
        "\n\nOne causal attention call forward and backward, bf16, outputs and gradients checked against flash.\n"


def adam_bandwidth_section(name, spec, result):
    copy = next((r for r in result["rows"] if r["system"] == "copy fp32"), None)
    lines = [[r["system"], num(r.get("n")), num(r.get("ms"), "{:.2f}"), num(r.get("TB_per_s"), "{:.2f}"),
              f"{r['TB_per_s'] / copy['TB_per_s']:.0%}" if copy and r.get("TB_per_s") else "-"]
             for r in result["rows"] if "error" not in r]
    return table(["<case", "elements", "ms", "TB/s", "of the copy's"], lines) + "\n"


def cpu_adam_section(name, spec, result):
    by = {}
    for r in result["rows"]:
        if "error" not in r:
            by.setdefault((r["params"], r["threads"]), {})[r["system"]] = r["updates_per_s"]
    systems = ["stratum-cpu-adam", "stratum-cpu-adam-bf16-copy", "torch-optim-adam", "aten-fused-adam"]
    lines = []
    for (n, threads), v in sorted(by.items()):
        ours = v.get("stratum-cpu-adam")
        lines.append([f"{n / 1e6:g}M", str(threads)] + [num(v.get(s), "{:.3g}") for s in systems] +
                     [f"{ours / v[p]:.2f}x" if ours and v.get(p) else "-" for p in systems[2:]])
    isa = next((r.get("isa") for r in result["rows"] if r.get("isa")), "?")
    return table(["params", "threads"] + [f"{s} upd/s" for s in systems] +
                 ["vs torch-optim-adam", "vs aten-fused-adam"], lines) + \
        f"\n\nUpdates per second of a full Adam step (fp32, no weight decay); the fastest of the timed steps; " \
        f"the kernel's path: {isa}.\n"


def train_rows(result):
    estimates = {r["run"]: r for r in result["rows"] if r["system"] == "stratum-estimate" and "error" not in r}
    return [(r, estimates.get(r["run"])) for r in result["rows"] if r["system"] == "stratum-train"]


def losses_text(r):
    losses = r.get("losses") or {}
    if not losses:
        return "-"
    steps = sorted(losses, key=int)
    return f"{losses[steps[0]]:.2f} (step {steps[0]}) → {losses[steps[-1]]:.2f} (step {steps[-1]})"


def train_section(name, spec, result):
    pairs = train_rows(result)
    same = len({(r.get("model"), r.get("gpus")) for r, _ in pairs}) == 1 and len(pairs) > 1
    base = pairs[0][0] if same and "error" not in pairs[0][0] else None
    header = ["<run", "parameters", "tokens/s (job)", "tokens/s per GPU"] + ([f"vs {base['run']}"] if base else []) + [
        "MFU", "step s", "peak GiB", "estimate GiB", "start-up peak GiB", "<loss", "eval loss"]
    lines = []
    for r, est in pairs:
        if "error" in r:
            lines.append([r["run"], f"failed: {r['error']}"] + [""] * (len(header) - 2))
            continue
        e = est["estimate_gib"] if est else None
        err = f" ({e / r['peak_memory_gib'] - 1:+.1%})" if e and r.get("peak_memory_gib") else ""
        vs = (f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base and r.get("tokens_per_s") and
              base.get("tokens_per_s") else "-")
        lines.append([r["run"], num(r.get("params")), num(r.get("tokens_per_s")), num(r.get("tokens_per_s_per_gpu"))] +
                     ([vs] if base else []) +
                     [num(100 * r["mfu"], "{:.1f}%") if r.get("mfu") is not None else "-", num(r.get("step_s"), "{:.3f}"),
                      num(r.get("peak_memory_gib"), "{:.2f}"), num(e, "{:.2f}") + err,
                      num(r.get("startup_peak_memory_gib"), "{:.2f}"), losses_text(r), num(r.get("eval_loss"), "{:.2f}")])
    out = [table(header, lines)]
    for r in result["rows"]:
        if r["system"] == "hf-export-check" and "error" not in r:
            out.append(f"\nThe checkpoint of {r['run']}, exported with `stratum-ckpt export` (fp32) and loaded by "
                       f"transformers' `{r['hf_class']}`: max |logits difference| {r['max_abs_logits_diff']:.1e} "
                       f"(max |logit| {r['max_abs_logit']:.2f}), argmax agreement {100 * r['argmax_agreement']:.1f}%.")
        elif r["system"] in ("hf-export-check", "stratum-ckpt", "dump_logits", "stratum-estimate") and "error" in r:
            out.append(f"\n{r['system']} ({r['run']}) failed: {r['error']}")
    return "\n".join(out) + "\n"


def pipeline_bubble_section(name, spec, result):
    rows = [r for r in result["rows"] if "error" not in r and r.get("system") == "stratum-pipeline"]
    lines = [[r["schedule"] + (f" (v {r['virtual_stages']})" if r.get("virtual_stages", 1) > 1 else ""),
              str(r["stages"]), str(r["micro_batches"]), f"{r['forward_ms']:.2f}", f"{r['backward_input_ms']:.2f}",
              f"{r['backward_weight_ms']:.2f}", f"{100 * r['theory_bubble']:.1f}%", f"{100 * r['simulated_bubble']:.1f}%",
              f"{100 * r['measured_bubble']:.1f}%"] for r in rows]
    out = table(["schedule", "stages", "micro-batches", "F ms", "B ms", "W ms", "unit costs", "simulated",
                 "measured"], lines)
    failed = [r for r in result["rows"] if "error" in r]
    return out + "\n\nPer rank and chunk, the mean time of a forward (F), of a backward or its input half (B) " \
        "and of its weight half (W, zb-h1); the bubble at unit costs (the formulas), the simulator's from these " \
        "measured costs, and the measured one: (the slowest rank's schedule time - the busiest rank's compute) / " \
        "the busiest rank's compute." + "".join(f"\n\nFailed: {r['error']}" for r in failed) + "\n"


SECTIONS = {"matrix": matrix_section, "pipeline-bubble": pipeline_bubble_section, "collectives": collectives_section, "attention": attention_section,
            "adam-bandwidth": adam_bandwidth_section, "cpu-adam": cpu_adam_section, "train": train_section}


def scenario_section(name, spec, result, targets):
    head = f"### {name}\n\n{spec['about']}."
    if spec["kind"] == "matrix":
        run = sc.runs(spec)[0]
        head += (f" bf16, AdamW; {run.get('steps', 8)} timed steps after {run.get('warmup', 3)} warm-up steps"
                 f"{', ' + str(run.get('rounds')) + ' rounds' if run.get('rounds', 1) > 1 else ''}.")
        if run.get("stratum_flags"):
            head += f" Stratum's rows run with `{' '.join(run['stratum_flags'])}`."
    if not result:
        return f"{head}\n\nNot measured yet: `bash bench/run_matrix.sh {name}`.\n"
    body = SECTIONS[spec["kind"]](name, spec, result)
    checks = ""
    for t in spec.get("targets", []):
        verdicts = evaluate(t, targets[t], spec, result)
        if verdicts:
            checks += f"\n- {targets[t]['text']}: " + "; ".join(
                f"{text} ({'met' if ok else '**missed**'})" for _, text, ok in verdicts) + "."
    checks = f"\nTargets:\n{checks}\n" if checks else ""
    return f"{head}\n\n{body}{checks}\n{footer(name, spec, result)}\n"


# ---- targets --------------------------------------------------------------------

def evaluate(name, target, spec, result):
    """[(target name, result text, met)] of one target over one run."""
    rule = target["rule"]
    out = []
    if rule in ("ratio", "mfu"):
        for run in sc.runs(spec):
            rows = [r for r in merged(run_rows(result, run)) if "error" not in r]
            peers = peers_of(rows, target.get("peers", []))
            best = max(peers.values(), key=lambda p: p["tokens_per_s_per_gpu"], default=None)
            where = f"{sc.run_label(run)}: " if len(sc.runs(spec)) > 1 else ""
            for r in rows:
                if r["system"] not in target["stratum"]:
                    continue
                if rule == "mfu":
                    out.append((name, f"{label(r, run)} {100 * r['mfu']:.1f}%", r["mfu"] >= target["at_least"]))
                elif best:
                    ratio = r["tokens_per_s_per_gpu"] / best["tokens_per_s_per_gpu"]
                    memory_ok = not target.get("memory") or r["peak_memory_gib"] <= best["peak_memory_gib"]
                    out.append((name, f"{where}{label(r, run)} {ratio:.3f}x {best['system']} at "
                                      f"{r['peak_memory_gib']:.2f} vs {best['peak_memory_gib']:.2f} GiB",
                                ratio >= target["at_least"] and memory_ok))
    elif rule == "scaling":
        by_gpus = {r["gpus"]: r for run in sc.runs(spec) for r in merged(run_rows(result, run))
                   if r["system"] in target["stratum"] and "error" not in r}
        if 1 in by_gpus and 2 in by_gpus:
            s = by_gpus[2]["tokens_per_s_per_gpu"] / by_gpus[1]["tokens_per_s_per_gpu"]
            out.append((name, f"{s:.1%} ({num(by_gpus[1]['tokens_per_s_per_gpu'])} -> "
                              f"{num(by_gpus[2]['tokens_per_s_per_gpu'])} per GPU)", s >= target["at_least"]))
    elif rule == "collectives":
        best = collectives_best(result)
        big = [busbw_ratio(v) for (op, b), v in best.items() if b >= 64 << 20]
        small = [(v["stratum"]["time_us"], v["torch"]["time_us"]) for (op, b), v in best.items() if b < 1 << 20]
        if big and small:
            out.append((name, f"busbw ratio {min(big):.3f}-{max(big):.3f} at >= 64 MiB; latency "
                              f"{min(s for s, _ in small):.1f}-{max(s for s, _ in small):.1f} us against "
                              f"{min(t for _, t in small):.1f}-{max(t for _, t in small):.1f} below 1 MiB",
                        min(big) >= target["at_least"] and all(s < t for s, t in small)))
    elif rule == "speedup":
        by = {}
        for r in result["rows"]:
            if "error" not in r:
                by.setdefault((r["params"], r["threads"]), {})[r["system"]] = r["updates_per_s"]
        ratios = [v[target["stratum"][0]] / v[target["peers"][0]] for v in by.values()
                  if target["stratum"][0] in v and target["peers"][0] in v]
        if ratios:
            out.append((name, f"{min(ratios):.2f}x-{max(ratios):.2f}x", min(ratios) >= target["at_least"]))
    elif rule == "train-stage":
        rows = [r for r, _ in train_rows(result) if "error" not in r]
        for r in rows:
            if r["stage"] != 3:
                continue
            z2 = next((b for b in rows if b["stage"] == 2 and b["offload_optimizer"] == r["offload_optimizer"]), None)
            if z2 and r.get("tokens_per_s") and z2.get("tokens_per_s"):
                ratio = r["tokens_per_s"] / z2["tokens_per_s"]
                out.append((name, f"{r['run']}: {ratio:.2f}x ZeRO-2", ratio >= target["at_least"]))
    elif rule == "params":
        for r, _ in train_rows(result):
            if "error" not in r and r.get("params"):
                out.append((name, f"{r['run']}: {r['params'] / 1e9:.2f}B parameters", r["params"] >= target["at_least"]))
    elif rule == "estimate":
        errors = [e["estimate_gib"] / r["peak_memory_gib"] - 1 for r, e in train_rows(result)
                  if e and "error" not in r and r.get("peak_memory_gib")]
        if errors:
            span = f"{min(errors):+.1%}" + (f" to {max(errors):+.1%}" if len(errors) > 1 else "")
            out.append((name, span,
                        max(abs(x) for x in errors) <= target["within"]))
    return out


# ---- the document ---------------------------------------------------------------------

def summary(data, results):
    """One table per target: each scenario's rows held against it."""
    out = []
    for t, target in data["targets"].items():
        lines = []
        for name, spec in data["scenarios"].items():
            if t in spec.get("targets", []) and name in results:
                lines += [[f"[{name}](#{anchor(name)})", text, "met" if ok else "**missed**"]
                          for _, text, ok in evaluate(t, target, spec, results[name])]
        waiting = [f"[{n}](#{anchor(n)})" for n, s in data["scenarios"].items()
                   if t in s.get("targets", []) and n not in results]
        out.append(f"**{target['text']}**\n")
        out.append(table(["<scenario", "<result", "<"], lines) if lines else "No run measures it yet.")
        if waiting:
            out.append("\nNot measured yet: " + ", ".join(waiting) + ".")
        out.append("")
    return "\n".join(out)


def anchor(name):
    return "".join(c for c in name.lower() if c.isalnum() or c in "-_")


def index(data, results):
    lines = []
    for name, spec in data["scenarios"].items():
        r = results.get(name)
        when = f"{r['meta'].get('date', '?')[:10]}, `{r['meta'].get('commit', '?')}`" if r else "not measured yet"
        lines.append([f"[{name}](#{anchor(name)})", str(sc.gpus_needed(spec)), when, spec["about"]])
    return table(["<scenario", "GPUs", "<measured", "<what it compares"], lines)


def fp8_quality_paragraph():
    """FP8's loss curves against bf16 (scripts/fp8_loss_curves.py draws them from the runs in
    bench/results/fp8_quality/), where drawn."""
    runs = os.path.join(sc.HERE, "results", "fp8_quality")
    picture = os.path.join(sc.HERE, os.pardir, "docs", "fp8_loss_curves.svg")
    if not os.path.exists(picture):
        return "FP8's training quality against bf16: not measured yet (`scripts/device_fp8_quality.sh`).\n"
    names = sorted(n[: -len(".csv")] for n in os.listdir(runs) if n.endswith(".csv")) if os.path.isdir(runs) else []
    return ("FP8's training quality against bf16, from the same seed and data (the verdicts and what has not "
            "run: [docs/fp8.md](fp8.md#quality-on-a-gpu); the runs: " + ", ".join(f"`{n}`" for n in names) +
            " in `bench/results/fp8_quality/`):\n\n![FP8 against bf16: loss by tokens trained](fp8_loss_curves.svg)\n")


def document(data, results, method):
    out = [f"# Benchmarks\n\n<!-- Generated by `{COMMAND}`: edit bench/scenarios.json, bench/method.md or "
           f"re-run a scenario, not this file. -->\n",
           f"Generated by `{COMMAND}` from `bench/results/*.jsonl` (the latest run of each scenario of "
           f"`bench/scenarios.json`) and `bench/method.md`. Each table is one run on one machine, the systems "
           f"one after the other; ratios are only taken between rows of the same run. "
           f"`bash bench/run_matrix.sh --list` lists the scenarios, `bash bench/run_matrix.sh SCENARIO` runs one "
           f"and replaces its results file. How the figures are measured: [Method](#method).\n",
           "## Summary\n", "Each target against the latest run of each scenario that measures it; what is in the way "
           "of the missed ones: [below](#what-is-in-the-way-of-the-missed-targets).\n",
           summary(data, results), "\n## Scenarios\n", index(data, results), ""]
    for heading, member in GROUPS:
        names = [n for n, s in data["scenarios"].items() if member(s)]
        out.append(f"## {heading}\n")
        if heading == "FP8 on one GPU":
            out.append(fp8_quality_paragraph())
        out += [scenario_section(n, data["scenarios"][n], results.get(n), data["targets"]) for n in names]
    out.append(method.strip() + "\n")
    return "\n".join(out)


def main():
    data = sc.load()
    results = load_results(os.path.join(sc.HERE, "results"))
    with open(os.path.join(sc.HERE, "method.md")) as f:
        method = f.read()
    sys.stdout.write(document(data, results, method))


if __name__ == "__main__":
    main()
