"""Runs benchmark scenarios (bench/scenarios.json) and writes bench/results/<scenario>.jsonl.

  bash bench/run_matrix.sh --list                  the scenarios: name, GPUs, minutes, what they compare
  bash bench/run_matrix.sh --targets SCENARIO...   the CMake targets they need built
  bash bench/run_matrix.sh --dry-run SCENARIO...   the commands they would run
  bash bench/run_matrix.sh SCENARIO...             run them (after scripts/device_build.sh)

A results file is one run: its first line is the run's metadata (date, commit,
GPUs, driver, CUDA, torch, NCCL, ... and the command), each further line one
row: the system, its figures, the exact command that printed them. Rows are
written as they come to <scenario>.jsonl.partial, which replaces
<scenario>.jsonl once the scenario ends; with $OUT set both are copied there.
The commit comes from STRATUM_COMMIT when set, else from git.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402
import scenarios as sc  # noqa: E402

REPO = os.path.dirname(sc.HERE)
WHEELS_SITE = "/tmp/site"


def default_build():
    for d in ("build-device", "build"):
        if os.path.isdir(os.path.join(REPO, d, "bin")):
            return d
    return "build-device"


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


# ---- the run's metadata ---------------------------------------------------------

def capture(argv, timeout=60):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return p.stdout.strip() if p.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


PY_VERSIONS = """
import json, platform
v = {"python": platform.python_version()}
try:
    import torch
    v["torch"] = torch.__version__
    v["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        v["cudnn"] = str(torch.backends.cudnn.version())
except ImportError:
    pass
for name in ("deepspeed", "transformers"):
    try:
        v[name] = __import__(name).__version__
    except Exception:
        pass
print(json.dumps(v))
"""


def commit():
    # STRATUM_COMMIT wins: a copy of the tree (the GPU machine's) may carry a
    # .git of another commit than the files it holds.
    if os.environ.get("STRATUM_COMMIT"):
        return os.environ["STRATUM_COMMIT"], None
    sha = capture(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    if not sha:
        return "unknown", None
    changed = capture(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no", "--", ".",
                       ":!bench/results"])
    return sha, bool(changed)


def environment(build):
    env = {}
    gpus = capture(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    rows = [[x.strip() for x in line.split(",")] for line in gpus.splitlines() if line.strip()]
    if rows:
        env.update(gpu=rows[0][0], gpu_count=len(rows), driver=rows[0][1], gpu_memory=rows[0][2])
    versions = capture(["python3", "-c", PY_VERSIONS], timeout=120)
    if versions:
        env.update(json.loads(versions))
    report = capture([os.path.join(build, "bin", "stratum-report"), "--json"])
    if report:
        r = json.loads(report)
        env.update(stratum_nccl=r["comm"]["nccl_version"], mpi=r["comm"]["mpi_library_version"].split(",")[0],
                   compiler=r["build"]["compiler"], stratum_build=r["build"]["git_sha"])
        env.setdefault("torch", r["torch"]["runtime_version"] or r["build"]["torch_wheel_version"])
    else:
        mpi = capture(["mpirun", "--version"])
        env["mpi"] = mpi.splitlines()[0] if mpi else ""
    nvcc = capture(["nvcc", "--version"]) or capture(["/usr/local/cuda/bin/nvcc", "--version"])
    release = re.search(r"release [0-9.]+, V([0-9.]+)", nvcc)
    if release:
        env["nvcc"] = release.group(1)
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    env.update(cpu=names[0] if names else "unknown", cpu_cores=os.cpu_count())
    return {k: v for k, v in env.items() if v not in ("", None)}


# ---- the rows a program prints --------------------------------------------------

def parse_json(text, step):
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and ("system" in r or "case" in r):
            if "case" in r:
                r = {"system": r.pop("case"), **r}
            rows.append(r)
    return rows


def parse_collectives(text, step):
    rows = []
    for line in text.splitlines():
        f = line.strip().split(",")
        if len(f) == 6 and f[0] in ("stratum", "torch") and f[2].isdigit():
            rows.append({"system": f[0], "op": f[1], "bytes": int(f[2]), "time_us": float(f[3]),
                         "algbw_GBps": float(f[4]), "busbw_GBps": float(f[5])})
    return rows


def parse_estimate(text, step):
    # stratum-estimate --plan's first layout: "1  dp pp tp sp ZeRO offload micro x acc schedule ckpt
    # states activ buffers total ..." (GiB a GPU).
    for line in text.splitlines():
        f = line.split()
        if len(f) > 15 and f[0] == "1" and f[8] == "x":
            states, act, buffers, total = (float(x) for x in f[12:16])
            return [{"system": "stratum-estimate", "model_states_gib": states, "activations_gib": act,
                     "buffers_gib": buffers, "estimate_gib": round(total, 2)}]
    return []


def parse_train(text, step):
    path = os.path.join(step.log_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    rates = [m["tokens_per_s"] for m in metrics if m.get("tokens_per_s")]
    if not rates:
        return []
    # The steady rate: the median of the second half of the steps (the first ones start up).
    rate = statistics.median(rates[len(rates) // 2:])
    f = step.fields
    tokens_per_step = f["micro"] * f["gas"] * f["gpus"] * f["seq"]
    row = {"system": "stratum-train", "steps": len(metrics), "tokens_per_s": round(rate, 1),
           "tokens_per_s_per_gpu": round(rate / f["gpus"], 1), "step_s": round(tokens_per_step / rate, 4),
           "mfu": statistics.median(m["mfu"] for m in metrics[len(metrics) // 2:]),
           "peak_memory_gib": max(m.get("memory_gib") or 0.0 for m in metrics),
           "losses": {str(int(m["step"])): round(m["loss"], 4) for m in metrics if m.get("loss") is not None}}
    evals = [m["eval_loss"] for m in metrics if m.get("eval_loss") is not None]
    if evals:
        row["eval_loss"] = round(evals[-1], 4)
    m = re.search(r"start-up peak memory ([0-9.]+) GiB", text)
    if m:
        row["startup_peak_memory_gib"] = float(m.group(1))
    m = re.search(r"; ([0-9,]+) parameters", text)  # the model's line at start-up
    if m:
        row["params"] = int(m.group(1).replace(",", ""))
    return [row]


PARSERS = {"json": parse_json, "collectives-csv": parse_collectives, "estimate": parse_estimate,
           "train": parse_train, "none": lambda text, step: []}


# ---- running --------------------------------------------------------------------

def run_step(step, log):
    """Runs one program to its end or its time limit; its rows, or one row saying why there are none."""
    for path, text in step.files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    env = dict(os.environ, **step.env)
    proc = subprocess.Popen(step.argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=step.timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpirun's and torchrun's ranks with it
        text, _ = proc.communicate()
        rc = "timeout"
    log.write(f"\n=== {step.command()}\n{text}\n=== exit {rc}\n")
    log.flush()
    rows = PARSERS[step.parse](text, step) if rc == 0 else []
    base = {"record": "row", "system": step.system}
    if rows:
        return [{**base, **r, **step.fields, "command": step.command()} for r in rows]
    if rc == 0 and step.parse == "none":
        return []
    lines = [l for l in text.splitlines() if l.strip()]
    # The cause: the last line saying so that is not a frame of a backtrace.
    said = [l for l in lines if re.search(r"rror|Killed|FAILED", l) and not re.match(r"\s*frame #\d+:", l)]
    why = said[-1] if said else (lines[-1] if lines else "")
    if rc == "timeout":
        status = f"timed out after {step.timeout} s"
    else:
        status = "no result line" if rc == 0 else f"exit {rc}"
    return [{**base, **step.fields, "error": f"{status}: {why.strip()[:300]}".rstrip(": "), "command": step.command()}]


def run_phase(steps, log, emit):
    lanes = {}
    for s in steps:
        lanes.setdefault(s.lane, []).append(s)
    threads = [threading.Thread(target=lambda ss=ss: [emit(r) for s in ss for r in run_step(s, log)])
               for ss in lanes.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def show(row):
    """One line of progress for a row."""
    name = " ".join(x for x in (row["system"], row.get("flags", "")) if x)
    if "error" in row:
        return f"{name}: FAILED {row['error']}"
    keys = ("tokens_per_s_per_gpu", "tokens_per_s", "mfu", "peak_memory_gib", "busbw_GBps", "TB_per_s",
            "updates_per_s", "forward_backward_ms", "estimate_gib", "max_abs_logits_diff")
    value = lambda v: f"{v:,.0f}" if isinstance(v, float) and v >= 1000 else (f"{v:.4g}" if isinstance(v, float) else v)
    figures = ", ".join(f"{k} {value(row[k])}" for k in keys if k in row)
    where = " ".join(str(row[k]) for k in ("run", "op", "bytes", "shape", "params", "threads") if k in row)
    return f"{name} [{where}]: {figures}"


def install_deepspeed(log):
    """DeepSpeed and what the image lacks travel as wheels in .whl (carried); installed once per machine."""
    if capture(["python3", "-c", "import deepspeed; print(1)"]):
        return
    wheels = [os.path.join(REPO, ".whl", w) for w in sorted(os.listdir(os.path.join(REPO, ".whl")))] \
        if os.path.isdir(os.path.join(REPO, ".whl")) else []
    if wheels:
        subprocess.run(["python3", "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", WHEELS_SITE] + wheels, stdout=log, stderr=log)
        os.environ["PYTHONPATH"] = WHEELS_SITE + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
        os.environ["DS_BUILD_OPS"] = "0"
    if not capture(["python3", "-c", "import deepspeed; print(1)"]):
        print("run_matrix: DeepSpeed is not installed (carry .whl): its rows will fail", flush=True)


def install_torchao(log):
    """torchao travels as a wheel in .whl/fp8 (carried; scripts/device_fp8_wheels.sh fills it), installed into
    .pylib/ (the torchao peers' PYTHONPATH) once per machine."""
    def importable():
        return subprocess.run(["python3", "-c", "import torchao.float8"], cwd=REPO, capture_output=True,
                              env=dict(os.environ, PYTHONPATH=".pylib")).returncode == 0
    if importable():
        return
    folder = os.path.join(REPO, ".whl", "fp8")
    wheels = [os.path.join(folder, w) for w in sorted(os.listdir(folder)) if w.endswith(".whl")] \
        if os.path.isdir(folder) else []
    if wheels:
        subprocess.run(["python3", "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", os.path.join(REPO, ".pylib")] + wheels,
                       stdout=log, stderr=log)
    if not importable():
        print("run_matrix: torchao is not installed (carry .whl/fp8): its rows will fail", flush=True)


def run_scenario(name, spec, build, results, out):
    work = os.path.join("/tmp/stratum-bench", name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.makedirs(results, exist_ok=True)
    log_path = os.path.join(out or work, f"{name}.log")
    final = os.path.join(results, f"{name}.jsonl")
    partial = final + ".partial"
    lock = threading.Lock()
    with open(log_path, "w") as log, open(partial, "w") as f:
        if any(p.startswith("deepspeed") for r in sc.runs(spec) for p in r.get("peers", [])):
            install_deepspeed(log)
        if any(p.startswith("torchao") for r in sc.runs(spec) for p in r.get("peers", [])):
            install_torchao(log)
        sha, dirty = commit()
        gpus = gpu_count()
        meta = {"record": "meta", "scenario": name,
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "commit": sha, "commit_dirty": dirty, "environment": environment(build),
                "command": f"bash bench/run_matrix.sh {name}", "spec": spec}
        if spec["kind"] == "matrix" and sc.gpus_needed(spec) == 1 and gpus >= 2:
            meta["placement"] = "Stratum's rows ran on GPU 0 while the peers' ran on GPU 1."

        def emit(row):
            with lock:
                f.write(json.dumps(row) + "\n")
                f.flush()
                if out:
                    shutil.copy(partial, os.path.join(out, f"{name}.jsonl.partial"))
                print(show(row), flush=True)

        f.write(json.dumps(meta) + "\n")
        steps = sc.plan(name, spec, build, work, gpus)
        for phase in sorted({s.phase for s in steps}):
            run_phase([s for s in steps if s.phase == phase], log, emit)
    os.replace(partial, final)
    if out:
        shutil.copy(final, os.path.join(out, f"{name}.jsonl"))
        if os.path.exists(os.path.join(out, f"{name}.jsonl.partial")):
            os.remove(os.path.join(out, f"{name}.jsonl.partial"))
    print(f"run_matrix: wrote {os.path.relpath(final, REPO)} (log: {log_path})", flush=True)


def list_scenarios(data, results):
    print(f"{'scenario':40} {'GPUs':>4} {'min':>4}  what it compares")
    for name, spec in data["scenarios"].items():
        measured = "" if os.path.exists(os.path.join(results, f"{name}.jsonl")) else " [not measured yet]"
        note = f" ({spec['note']})" if spec.get("note") else ""
        print(f"{name:40} {sc.gpus_needed(spec):>4} {spec.get('minutes', '?'):>4}  {spec['about']}{note}{measured}")


def main(argv):
    ap = argparse.ArgumentParser(prog="bench/run_matrix.sh", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", help="scenario names (see --list)")
    ap.add_argument("--list", action="store_true", help="list the scenarios")
    ap.add_argument("--targets", action="store_true", help="print the CMake targets the scenarios need")
    ap.add_argument("--dry-run", action="store_true", help="print the commands the scenarios would run")
    ap.add_argument("--build", default=default_build(), help="the build folder (default: build-device, else build)")
    ap.add_argument("--results", default=os.path.join(sc.HERE, "results"), help="where <scenario>.jsonl goes")
    ap.add_argument("--scenarios-file", default=sc.SCENARIOS_FILE, help="the scenarios (default: bench/scenarios.json)")
    a = ap.parse_args(argv)
    data = sc.load(a.scenarios_file)
    if a.list:
        list_scenarios(data, a.results)
        return 0
    unknown = [n for n in a.scenarios if n not in data["scenarios"]]
    if unknown or not a.scenarios:
        ap.error(f"unknown scenario(s): {' '.join(unknown)}" if unknown else "name a scenario (--list shows them)")
    specs = [(n, data["scenarios"][n]) for n in a.scenarios]
    if a.targets:
        print(" ".join(dict.fromkeys(t for _, s in specs for t in sc.build_targets(s))))
        return 0
    build = os.path.abspath(os.path.join(REPO, a.build))
    if a.dry_run:
        for name, spec in specs:
            print(f"# {name}: {spec['about']}")
            steps = sc.plan(name, spec, os.path.relpath(build, REPO), f"/tmp/stratum-bench/{name}",
                            gpu_count() or sc.gpus_needed(spec))
            for phase in sorted({s.phase for s in steps}):
                in_phase = [s for s in steps if s.phase == phase]
                together = len({s.lane for s in in_phase}) > 1
                for s in in_phase:
                    print(("  [at the same time] " if together else "  ") + s.command())
        return 0
    if not os.path.isdir(os.path.join(build, "bin")):
        print(f"run_matrix: no {build}/bin: build first (scripts/device_build.sh --only-build --targets "
              f"\"{' '.join(t for _, s in specs for t in sc.build_targets(s))}\")", file=sys.stderr)
        return 1
    out = os.environ.get("OUT") or None
    if build.startswith(REPO + os.sep):
        build = os.path.relpath(build, REPO)  # the commands run in the checkout: shorter, as a user types them
    for name, spec in specs:
        if sc.gpus_needed(spec) > gpu_count():
            print(f"run_matrix: {name} needs {sc.gpus_needed(spec)} GPU(s), this machine has {gpu_count()}",
                  file=sys.stderr)
            return 1
        run_scenario(name, spec, build, os.path.abspath(a.results), out)
        # The scenario's section, as docs/benchmarks.md will show it.
        print(report.scenario_section(name, spec, report.load_results(os.path.abspath(a.results)).get(name),
                                      data["targets"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
