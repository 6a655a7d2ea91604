"""Reads the CSV lines of collectives_stratum and collectives_torch (several
rounds each, alternating) and prints a markdown table: the best round of each
system per (op, size), busbw and latency, and Stratum's ratio to torch."""
import csv
import sys
from collections import defaultdict


def human(b):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024:
            return f"{b:g} {unit}"
        b /= 1024
    return f"{b:g} TiB"


def main(paths):
    best = defaultdict(dict)  # (op, bytes) -> system -> (time_us, busbw)
    for path in paths:
        with open(path) as f:
            for row in csv.DictReader(line for line in f if "," in line and not line.startswith("[")):
                if row.get("system") not in ("stratum", "torch"):
                    continue
                key = (row["op"], int(row["bytes"]))
                t, bw = float(row["time_us"]), float(row["busbw_GBps"])
                cur = best[key].get(row["system"])
                if cur is None or t < cur[0]:
                    best[key][row["system"]] = (t, bw)
    print("| op | size | Stratum busbw (GB/s) | torch busbw (GB/s) | busbw ratio | Stratum latency (us) | torch latency (us) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (op, b) in sorted(best, key=lambda k: (k[0], k[1])):
        s, t = best[(op, b)].get("stratum"), best[(op, b)].get("torch")
        if not s or not t:
            continue
        print(f"| {op} | {human(b)} | {s[1]:.1f} | {t[1]:.1f} | {s[1] / t[1]:.3f} | {s[0]:.1f} | {t[0]:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
