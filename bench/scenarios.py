"""The benchmark scenarios (bench/scenarios.json) and the commands each runs.

A scenario is one run on one machine. Its keys (a key given in an entry of
"runs" overrides the scenario's for that run; without "runs" the scenario is
one run):
  kind       matrix | collectives | attention | adam-bandwidth | cpu-adam | pipeline-bubble | train
  about      what it compares, one line (bash bench/run_matrix.sh --list prints it)
  gpus       GPUs it needs (0: none)
  minutes    about how long it runs once built; note: what else a user must know
  targets    names of the top-level "targets" its rows are held against (bench/report.py)
The top-level "defaults" give each kind's keys that a scenario leaves out.
  step_timeout_s  seconds any one program may run (default 420)
kind matrix (bench_engine against bench/peers/gpt_peers.py):
  model, seq, micro  the preset, sequence length and micro-batch per GPU of every row
  gas        micro-batches an optimizer step (1): bench_engine's --gas, moe_peers.py's and fp8_peers.py's
             (gpt_peers.py takes none: a scenario with gas > 1 lists only transformers and torchao peers)
  stratum    ZeRO stages, or {"stage": N, "flags": [bench_engine flags]} for a row with more flags
  stratum_flags  bench_engine flags of every Stratum row (e.g. ["--set", "max_seq_len=2048"])
  peers      gpt_peers.py systems: single, ddp, fsdp2, each also "-compile"; deepspeed-zero1/2/3;
             a mixture of experts: transformers, transformers-compile (bench/peers/moe_peers.py, its own
             MixtralForCausalLM / Qwen3MoeForCausalLM; transformers from .pylib/); torchao's float8
             training under torch.compile: torchao-float8-tensorwise-compile, torchao-float8-rowwise-compile
             (bench/peers/fp8_peers.py; torchao from .pylib/, installed there from .whl/fp8 when missing).
             stratum_flags' --set layers=N reaches gpt_peers.py and fp8_peers.py as --layers N
  moe_arch   mixtral | qwen3_moe: the transformers model the peers build (its layers: stratum_flags' layers=N)
  steps, warmup, rounds  timed steps (8) after warm-up steps (3); rounds (1): every system once a round
kind collectives: rounds, max_bytes, dtype
kind attention: iters
kind adam-bandwidth: elements
kind cpu-adam: sizes, steps
kind pipeline-bubble (CPU ranks, one stage each): ranks, layers, micro_batches, steps
kind train (stratum-train through stratum-run, stratum-estimate beside it):
  model, seq, gpus, set (more --set overrides), steps, eval_every, eval_batches, print_every,
  config (the DeepSpeed config; a run's stage and offload_optimizer go into zero_optimization,
  offload_optimizer taking the scenario's "offload" section), export_check (save, export the
  checkpoint, compare its logits with Hugging Face transformers')
"""
import json
import os
import shlex
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS_FILE = os.path.join(HERE, "scenarios.json")
KINDS = ("matrix", "collectives", "attention", "adam-bandwidth", "cpu-adam", "pipeline-bubble", "train")
PEERS = ("single", "single-compile", "ddp", "ddp-compile", "fsdp2", "fsdp2-compile",
         "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3", "transformers", "transformers-compile",
         "torchao-float8-tensorwise-compile", "torchao-float8-rowwise-compile")
# NVLink multicast off: a program using it can take the host's shared GPUs out of service.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass
class Step:
    """One program of a scenario. Steps of one phase on different lanes run at the same time."""
    system: str                 # the row's system, as the program names it
    argv: list
    parse: str = "json"         # how its rows are read: json, collectives-csv, train, estimate, none
    fields: dict = field(default_factory=dict)  # added to each of its rows
    env: dict = field(default_factory=dict)
    phase: int = 0
    lane: int = 0
    timeout: int = 420
    files: dict = field(default_factory=dict)   # path -> text, written before it runs
    log_dir: str = ""           # train: the run's metrics.jsonl is here

    def command(self):
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + shlex.join(self.argv)


def load(path=SCENARIOS_FILE):
    """The file's scenarios, each with its kind's "defaults" under its own keys."""
    with open(path) as f:
        data = json.load(f)
    for name, spec in data["scenarios"].items():
        data["scenarios"][name] = spec = dict(data.get("defaults", {}).get(spec.get("kind"), {}), **spec)
        check(name, spec, data["targets"])
    return data


def check(name, spec, targets):
    if spec.get("kind") not in KINDS:
        raise ValueError(f"scenario {name}: kind must be one of {', '.join(KINDS)}")
    for t in spec.get("targets", []):
        if t not in targets:
            raise ValueError(f"scenario {name}: unknown target {t}")
    for run in runs(spec):
        for p in run.get("peers", []):
            if p not in PEERS:
                raise ValueError(f"scenario {name}: unknown peer {p} (one of {', '.join(PEERS)})")
            if run.get("gas", 1) > 1 and not p.startswith(("transformers", "torchao-float8")):
                raise ValueError(f"scenario {name}: peer {p} takes no gradient accumulation (gas "
                                 f"{run['gas']}); only the transformers and torchao peers do")


def runs(spec):
    """The scenario's runs, each with the scenario's keys under its own."""
    base = {k: v for k, v in spec.items() if k != "runs"}
    return [dict(base, **r) for r in spec.get("runs", [{}])]


def gpus_needed(spec):
    return max(r.get("gpus", 0) for r in runs(spec))


def stratum_rows(run):
    """(stage, flags) of each Stratum row of a matrix run."""
    common = run.get("stratum_flags", [])
    out = []
    for s in run.get("stratum", []):
        stage, flags = (s, []) if isinstance(s, int) else (s["stage"], s.get("flags", []))
        out.append((stage, common + flags))
    return out


def run_label(run):
    gpus = f"{run['gpus']} GPU" + ("s" if run["gpus"] != 1 else "")
    if run["kind"] == "train":
        extra = "".join(f", {s}" for s in run.get("set", []))
        offload = ", optimizer offloaded" if run.get("offload_optimizer") else ""
        stage = f", ZeRO-{run['stage']}" if "stage" in run else ""
        return f"{run['model']}{extra}{stage}{offload}, {gpus}"
    return f"{run['model']} seq {run['seq']} micro {run['micro']}, {gpus}"


def build_targets(spec):
    """The CMake targets a scenario runs (stratum-report gives the run's versions)."""
    kind = spec["kind"]
    names = {"matrix": ["bench_engine"], "collectives": ["bench_collectives"], "attention": [],
             "adam-bandwidth": ["bench_adam_bandwidth"], "cpu-adam": ["bench_cpu_adam"],
             "pipeline-bubble": ["bench_pipeline_bubble"],
             "train": ["stratum-run", "stratum-train", "stratum-estimate"]}[kind]
    if any(r.get("export_check") for r in runs(spec)):
        names += ["stratum-ckpt", "dump_logits"]
    return names + ["stratum-report"]


def mpirun(np_, passed=()):
    """Open MPI's launcher with the multicast settings and `passed` variables sent to every rank."""
    argv = ["mpirun", "--bind-to", "none", "-np", str(np_)]
    for v in list(MULTICAST_OFF) + list(passed):
        argv += ["-x", v]
    return argv


def passed_through():
    """NCCL_* and STRATUM_* settings of the caller reach Stratum's ranks (torch.distributed.run passes its own)."""
    return sorted(v for v in os.environ if v.startswith(("NCCL_", "STRATUM_")) and v not in MULTICAST_OFF)


def plan(name, spec, build, work, gpus_available):
    """The steps of one scenario: `build` holds bin/, `work` is a scratch folder of its own."""
    kind = spec["kind"]
    steps = []
    for i, run in enumerate(runs(spec)):
        planner = {"matrix": plan_matrix, "collectives": plan_collectives, "attention": plan_attention,
                   "adam-bandwidth": plan_adam_bandwidth, "cpu-adam": plan_cpu_adam,
                   "pipeline-bubble": plan_pipeline_bubble, "train": plan_train}[kind]
        for s in planner(run, build, os.path.join(work, f"run{i}"), gpus_available):
            s.phase += 1000 * i  # runs one after the other
            s.timeout = run.get("step_timeout_s", s.timeout)
            steps.append(s)
    return steps


def plan_matrix(run, build, work, gpus_available):
    gpus = run["gpus"]
    common = ["--model", run["model"], "--seq", str(run["seq"]), "--micro", str(run["micro"]),
              "--steps", str(run.get("steps", 8)), "--warmup", str(run.get("warmup", 3))]
    gas = ["--gas", str(run["gas"])] if run.get("gas", 1) > 1 else []
    # One GPU of a machine of two: Stratum's rows on GPU 0 while the peers' run on GPU 1.
    side_by_side = gpus == 1 and gpus_available >= 2
    label = run_label(run)
    steps = []
    for rnd in range(1, run.get("rounds", 1) + 1):
        for stage, flags in stratum_rows(run):
            env = {"CUDA_VISIBLE_DEVICES": "0"} if side_by_side else {}
            argv = (mpirun(gpus, list(env) + passed_through()) + [f"{build}/bin/bench_engine"] + common + gas +
                    ["--stage", str(stage)] + flags)
            steps.append(Step(f"stratum-zero{stage}", argv, env=env, phase=rnd, lane=0,
                              fields={"run": label, "flags": shlex.join(flags), "round": rnd}))
        for peer in run.get("peers", []):
            if peer.startswith("transformers"):
                steps.append(moe_peer(run, peer, rnd, label, side_by_side))
                continue
            if peer.startswith("torchao-float8"):
                steps.append(fp8_peer(run, peer, common, rnd, label, side_by_side))
                continue
            if peer.startswith("deepspeed-zero"):
                args = ["--system", "deepspeed", "--zero", peer[-1]]
            elif peer.endswith("-compile"):
                args = ["--system", peer[: -len("-compile")], "--compile"]
            else:
                args = ["--system", peer]
            launch = (["python3"] if gpus == 1 else
                      ["python3", "-m", "torch.distributed.run", "--nproc_per_node", str(gpus)])
            env = {"CUDA_VISIBLE_DEVICES": "1"} if side_by_side else {}
            steps.append(Step(peer, launch + ["bench/peers/gpt_peers.py"] + args + common + layers_flag(run), env=env,
                              phase=rnd, lane=1 if side_by_side else 0, fields={"run": label, "flags": "", "round": rnd}))
    return steps


def layers_flag(run):
    """--layers N where Stratum's rows run with --set layers=N: the Python peers build the same depth."""
    layers = next((f.split("=", 1)[1] for f in run.get("stratum_flags", []) if f.startswith("layers=")), None)
    return ["--layers", layers] if layers else []


def fp8_peer(run, peer, common, rnd, label, side_by_side):
    """torchao's float8 training of gpt_peers.py's model under torch.compile (bench/peers/fp8_peers.py), one GPU."""
    recipe = peer[len("torchao-float8-"): -len("-compile")]
    env = {"PYTHONPATH": ".pylib"}
    if side_by_side:
        env["CUDA_VISIBLE_DEVICES"] = "1"
    gas = ["--gas", str(run["gas"])] if run.get("gas", 1) > 1 else []
    return Step(peer, ["python3", "bench/peers/fp8_peers.py", "--recipe", recipe] + common + gas + layers_flag(run),
                env=env, phase=rnd, lane=1 if side_by_side else 0, fields={"run": label, "flags": "", "round": rnd})


def moe_peer(run, peer, rnd, label, side_by_side):
    """transformers' own MoE model at the scenario's shape (bench/peers/moe_peers.py), one GPU."""
    flags = run.get("stratum_flags", [])
    layers = next((f.split("=", 1)[1] for f in flags if f.startswith("layers=")), None)
    if not run.get("moe_arch") or layers is None:
        raise ValueError(f"{peer}: a transformers peer needs moe_arch and stratum_flags' --set layers=N")
    argv = ["python3", "bench/peers/moe_peers.py", "--arch", run["moe_arch"], "--layers", layers,
            "--seq", str(run["seq"]), "--micro", str(run["micro"]), "--steps", str(run.get("steps", 8)),
            "--warmup", str(run.get("warmup", 3))] + (["--compile"] if peer.endswith("-compile") else [])
    if run.get("gas", 1) > 1:
        argv += ["--gas", str(run["gas"])]
    env = {"PYTHONPATH": ".pylib"}
    if side_by_side:
        env["CUDA_VISIBLE_DEVICES"] = "1"
    return Step(peer, argv, env=env, phase=rnd, lane=1 if side_by_side else 0,
                fields={"run": label, "flags": "", "round": rnd})


def plan_collectives(run, build, work, gpus_available):
    sizes = ["--max-bytes", str(run.get("max_bytes", 1 << 30)), "--dtype", run.get("dtype", "bf16")]
    steps = []
    for rnd in range(1, run.get("rounds", 2) + 1):
        fields = {"round": rnd}
        steps.append(Step("stratum", mpirun(run["gpus"]) + [f"{build}/bin/bench_collectives"] + sizes,
                          parse="collectives-csv", phase=rnd, fields=fields))
        steps.append(Step("torch", mpirun(run["gpus"]) + ["-x", f"MASTER_PORT={29500 + rnd}", "python3",
                                                          "bench/collectives_torch.py"] + sizes,
                          parse="collectives-csv", phase=rnd, fields=fields))
    return steps


def plan_attention(run, build, work, gpus_available):
    return [Step("sdpa", ["python3", "bench/attention_backends.py", "--json", "--iters", str(run.get("iters", 30))])]


def plan_adam_bandwidth(run, build, work, gpus_available):
    return [Step("adam-bandwidth", [f"{build}/bin/bench_adam_bandwidth", str(run.get("elements", 1315723264))])]


def plan_cpu_adam(run, build, work, gpus_available):
    sizes = ",".join(str(n) for n in run.get("sizes", [10000000, 100000000]))
    return [Step("cpu-adam", [f"{build}/bin/bench_cpu_adam", "--json", "--sizes", sizes,
                              "--steps", str(run.get("steps", 5))])]


def plan_pipeline_bubble(run, build, work, gpus_available):
    return [Step("pipeline-bubble", mpirun(run.get("ranks", 2), ["STRATUM_DISABLE_NCCL"]) + [
        f"{build}/bin/bench_pipeline_bubble", "--json", "--layers", str(run.get("layers", 8)),
        "--micro-batches", str(run.get("micro_batches", 8)), "--steps", str(run.get("steps", 5))],
        env={"STRATUM_DISABLE_NCCL": "1"})]


def train_config(run):
    cfg = json.loads(json.dumps(run["config"]))
    zero = cfg.setdefault("zero_optimization", {})
    if "stage" in run:
        zero["stage"] = run["stage"]
    if run.get("offload_optimizer"):
        zero["offload_optimizer"] = run["offload"]
    return cfg


def plan_train(run, build, work, gpus_available):
    label = run_label(run)
    cfg = train_config(run)
    micro = cfg["train_micro_batch_size_per_gpu"]
    checkpointing = "activation_checkpointing" in cfg
    sets = [a for s in run.get("set", []) for a in ("--set", s)]
    fields = {"run": label, "model": run["model"], "gpus": run["gpus"], "seq": run["seq"], "micro": micro,
              "gas": cfg.get("gradient_accumulation_steps", 1), "stage": cfg["zero_optimization"].get("stage", 0),
              "offload_optimizer": bool(run.get("offload_optimizer")), "checkpointing": checkpointing}
    config_path, log_dir, ckpt = f"{work}/config.json", f"{work}/log", f"{work}/checkpoint"
    # The planner's estimate of this very layout (pp = tp = 1, its ZeRO stage,
    # offload, micro-batch and checkpointing): what --plan ranks layouts by.
    # A GPU memory no layout reaches, so the row is listed whatever it needs.
    gas = cfg.get("gradient_accumulation_steps", 1)
    estimate = ([f"{build}/bin/stratum-estimate", "--plan", "--model", run["model"], "--nodes", "1",
                 "--gpus-per-node", str(run["gpus"]), "--gpu", "h200", "--gpu-memory", "1PiB", "--seq", str(run["seq"]),
                 "--global-batch", str(micro * gas * run["gpus"]), "--pp", "1", "--tp", "1",
                 "--zero", str(fields["stage"]), "--micro-batch", str(micro), "--micro-batches", str(gas),
                 "--offload", "optimizer" if run.get("offload_optimizer") else "none", "--rows", "1"] +
                (["--checkpointing"] if checkpointing else ["--no-checkpointing"]) + sets)
    train = ([f"{build}/bin/stratum-run", "--num_gpus", str(run["gpus"]), f"{build}/bin/stratum-train",
              "--config", config_path, "--model", run["model"], "--set", f"max_seq_len={run['seq']}"] + sets +
             ["--data", "default", "--cache-dir", "/tmp/stratum-cache", "--steps", str(run["steps"]),
              "--eval-every", str(run.get("eval_every", 0)), "--eval-batches", str(run.get("eval_batches", 2)),
              "--print-every", str(run.get("print_every", 10)), "--sample-tokens", "0", "--log-dir", log_dir] +
             (["--save-dir", ckpt] if run.get("export_check") else []))
    steps = [Step("stratum-estimate", estimate, parse="estimate", fields=fields),
             Step("stratum-train", train, parse="train", fields=fields, log_dir=log_dir,
                  files={config_path: json.dumps(cfg, indent=1)})]
    if run.get("export_check"):
        hf, logits = f"{work}/hf", f"{work}/stratum_logits.safetensors"
        steps += [Step("stratum-ckpt", [f"{build}/bin/stratum-ckpt", "export", ckpt, hf, "--dtype", "fp32"],
                       parse="none", fields=fields),
                  Step("dump_logits", [f"{build}/bin/dump_logits", hf, logits], parse="none", fields=fields),
                  Step("hf-export-check", ["python3", "bench/hf_compare.py", hf, logits, "--json"], fields=fields)]
    return steps
