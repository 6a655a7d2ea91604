#!/usr/bin/env python3
"""Writes EXPECTED.tsv from what `stratum-config check` does with each config here.

EXPECTED.tsv is what the corpus test (tests/config/test_config_corpus.cpp)
asserts: per file `run`, `notes` with the noted key paths, or `refused` with the
problem lines' paths and reasons. Regenerate after a change of the policy and
review the diff line by line: a config that stops running, or a refusal whose
reason changes, must be meant.

Usage: expectations.py STRATUM_CONFIG_BINARY > EXPECTED.tsv
"""
import pathlib
import subprocess
import sys

here = pathlib.Path(__file__).resolve().parent
binary = sys.argv[1]
print("file\toutcome\tdetails (notes: key paths; refused: text of the problems, '|' between)")
for f in sorted(here.glob("*.json")):
    r = subprocess.run([binary, "check", str(f)], capture_output=True, text=True)
    # The engine's default optimizer is noted by check, not by the parser the corpus test reads.
    notes = [l[len("note: "):].split(": ")[0] for l in r.stderr.splitlines()
             if l.startswith("note: ") and not l.startswith("note: optimizer: not set")]
    if r.returncode == 0:
        print(f"{f.name}\t{'notes' if notes else 'run'}\t{'|'.join(notes)}")
        continue
    problems = [l.strip() for l in r.stderr.splitlines() if l.startswith("  ")]
    # The path and the start of the reason of each problem, at most four.
    details = [p[: p.find(": ") + 2 + 40] if ": " in p else p[:60] for p in problems[:4]]
    print(f"{f.name}\trefused\t{'|'.join(d.rstrip() for d in details)}")
