#!/usr/bin/env python3
"""Writes PATH: the system's licence texts repeated to at least SIZE
characters, a corpus for sequence-length and throughput runs (its content
changes neither the speed nor the memory). Usage: licence_corpus.py PATH SIZE"""
import glob
import sys

path, size = sys.argv[1], int(sys.argv[2])
text = "".join(open(f, errors="replace").read() + "\n\n" for f in sorted(glob.glob("/usr/share/common-licenses/*"))
               if not f.endswith(".gz"))
with open(path, "w") as f:
    written = 0
    while written < size:
        f.write(text)
        written += len(text)
