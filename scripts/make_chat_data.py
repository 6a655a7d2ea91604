#!/usr/bin/env python3
"""Writes synthetic chat data as JSON Lines of {"messages": [...]}: one to
three user/assistant turns of words drawn from a text, each conversation a
few hundred to a few thousand characters, so that packing has examples of
many lengths. For throughput runs where no instruction set travels.

  python3 scripts/make_chat_data.py TEXT OUT.jsonl --conversations 4000 --seed 1
"""
import argparse
import json
import random

parser = argparse.ArgumentParser()
parser.add_argument("text")
parser.add_argument("out")
parser.add_argument("--conversations", type=int, default=4000)
parser.add_argument("--seed", type=int, default=1)
args = parser.parse_args()

words = open(args.text, encoding="utf-8", errors="replace").read().split()
rng = random.Random(args.seed)


def passage(lo, hi):
    n = int(rng.lognormvariate(0, 0.8) * lo)
    n = max(lo // 4, min(hi, n))
    start = rng.randrange(0, max(1, len(words) - n))
    return " ".join(words[start:start + n])


with open(args.out, "w", encoding="utf-8") as out:
    for _ in range(args.conversations):
        messages = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": passage(10, 40)})
        for _ in range(rng.choice([1, 1, 2, 3])):
            messages.append({"role": "user", "content": passage(40, 600)})
            messages.append({"role": "assistant", "content": passage(80, 1200)})
        out.write(json.dumps({"messages": messages}) + "\n")
