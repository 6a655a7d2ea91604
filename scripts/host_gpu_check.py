"""Type-checks one host source with its GPU branches on (cuda_syntax_check.sh).

Takes the file's compile command from build/compile_commands.json (or, for a
GPU-only file the CPU build does not compile, that of a file in the same
folder), adds the STRATUM_WITH_CUDA/_CUDA_KERNELS/_NCCL definitions and the
CUDA, NCCL and stub headers under ROOT, and runs it with -fsyntax-only.
Usage: python3 scripts/host_gpu_check.py ROOT FILE
"""
import json
import os
import shlex
import subprocess
import sys

root, path = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
db = "build/compile_commands.json"
if not os.path.exists(db):
    sys.exit(f"host_gpu_check: {db} not found; configure the CPU build first (make build)")
entries = json.load(open(db))
entry = next((e for e in entries if os.path.abspath(e["file"]) == path), None)
if entry is None:  # e.g. distributed/nccl_communicator.cpp: borrow a neighbour's flags
    entry = next((e for e in entries if os.path.dirname(os.path.abspath(e["file"])) == os.path.dirname(path)), None)
if entry is None:
    sys.exit(f"host_gpu_check: no compile command for {path} or its folder in {db}")
args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
out, i = [], 0
while i < len(args):
    a = args[i]
    if a in ("-o", "-include", "-MF", "-MT", "-MQ"):  # outputs and the precompiled header
        i += 2
        continue
    if a in ("-c", "-MD", "-MMD") or a.startswith("-Winvalid-pch") or os.path.abspath(os.path.join(entry["directory"], a)) == os.path.abspath(entry["file"]):
        i += 1
        continue
    if a == "-Xclang":
        i += 2
        continue
    out.append(a)
    i += 1
out += ["-fsyntax-only", path, "-DSTRATUM_WITH_CUDA=1", "-DSTRATUM_WITH_CUDA_KERNELS=1", "-DSTRATUM_WITH_NCCL=1",
        f"-I{root}/cuda/include", f"-I{root}/nccl/include", f"-I{root}/stub"]
sys.exit(subprocess.run(out, cwd=entry["directory"]).returncode)
