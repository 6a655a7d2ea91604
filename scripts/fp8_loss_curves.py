#!/usr/bin/env python3
"""FP8's training quality against bf16 (scripts/device_fp8_quality.sh): the
verdict per model, and the loss curves as one SVG (written by hand: the GPU
machine has no matplotlib).

Reads stratum-train's metrics.csv files named <model>-<run>.csv, the run being
bf16-seed1, bf16-seed2, fp8-tensorwise-seed1 or fp8-rowwise-seed1, from the
folders (or files) given; a later file of the same name replaces an earlier one.
For each model and FP8 recipe, against bf16 from the same seed:
  - final eval loss within 0.5% relative;
  - and within twice the gap between the two bf16 seeds;
  - every loss finite, no skipped step, and no eval loss on the way more than
    2% above bf16's, or where the two bf16 seeds differ more, more than twice
    their gap at that step (divergence: while the loss falls steeply a run a
    few steps ahead or behind differs by more than 2% without diverging).
Prints one line per check, PASS or FAIL; exits 1 if any failed.

  python3 scripts/fp8_loss_curves.py DIR... [--svg docs/fp8_loss_curves.svg] [--tokens-per-step 16384]
      [--device "one H100"]
"""
import argparse
import csv
import glob
import math
import os
import re
import sys

NAME = re.compile(r"^(?P<model>.+?)-(?P<run>bf16|fp8-[a-z]+)-seed(?P<seed>\d+)\.csv$")
RELATIVE_BOUND, SEED_GAP_TIMES, DIVERGENCE = 0.005, 2.0, 0.02
COLOURS = {"bf16-seed1": "#1f4e9c", "bf16-seed2": "#8c8c8c", "fp8-tensorwise-seed1": "#e07b00",
           "fp8-rowwise-seed1": "#2a9d3a"}


def read_runs(paths):
    """{model: {run name: [rows]}}, each row a dict of floats (absent values: None)."""
    files = []
    for p in paths:
        files += sorted(glob.glob(os.path.join(p, "*.csv"))) if os.path.isdir(p) else [p]
    runs = {}
    for f in files:
        m = NAME.match(os.path.basename(f))
        if not m:
            continue
        with open(f) as fh:
            rows = [{k: (float(v) if v not in ("", None) else None) for k, v in r.items()} for r in csv.DictReader(fh)]
        if rows:
            runs.setdefault(m["model"], {})[f"{m['run']}-seed{m['seed']}"] = rows
    return runs


def evals(rows):
    return {int(r["step"]): r["eval_loss"] for r in rows if r.get("eval_loss") is not None}


def verdicts(model, runs):
    """[(ok, text)] of one model's checks (ok None: a figure, no check)."""
    out = []
    ref = runs.get("bf16-seed1")
    if not ref:
        return [(False, f"{model}: no bf16-seed1 run")]
    ref_evals = evals(ref)
    last = max(ref_evals) if ref_evals else None
    other = runs.get("bf16-seed2")
    gap = None
    if other and last in evals(other):
        gap = abs(evals(other)[last] - ref_evals[last])
        out.append((None, f"{model}: bf16 seed 2 against seed 1 at step {last}: {evals(other)[last]:.4f} vs "
                          f"{ref_evals[last]:.4f} (gap {gap:.4f}, {gap / ref_evals[last]:.3%})"))
    for name in sorted(n for n in runs if n.startswith("fp8")):
        rows, got = runs[name], evals(runs[name])
        if last is None or last not in got:
            out.append((False, f"{model} {name}: no eval at bf16's last step {last} (ended at step "
                               f"{int(rows[-1]['step'])})"))
            continue
        rel = got[last] / ref_evals[last] - 1
        out.append((abs(rel) <= RELATIVE_BOUND, f"{model} {name}: final eval loss {got[last]:.4f} vs bf16 "
                                                f"{ref_evals[last]:.4f}: {rel:+.3%} (bound {RELATIVE_BOUND:.1%})"))
        if gap is not None:
            diff = abs(got[last] - ref_evals[last])
            out.append((diff <= SEED_GAP_TIMES * gap, f"{model} {name}: |difference| {diff:.4f} against twice the "
                                                      f"bf16 seed gap {SEED_GAP_TIMES * gap:.4f}"))
        finite = all(r["loss"] is not None and math.isfinite(r["loss"]) for r in rows)
        skipped = sum(1 for r in rows if r.get("skipped"))
        seed_evals = evals(other) if other else {}

        def bound(s):  # the relative excess allowed at eval step s
            seed_rel = abs(seed_evals[s] / ref_evals[s] - 1) if s in seed_evals else 0.0
            return max(DIVERGENCE, SEED_GAP_TIMES * seed_rel)
        shared = [s for s in got if s in ref_evals]
        worst = max((got[s] / ref_evals[s] - 1 - bound(s), s) for s in shared)
        excess, at = got[worst[1]] / ref_evals[worst[1]] - 1, worst[1]
        out.append((finite and skipped == 0 and worst[0] <= 0,
                    f"{model} {name}: losses {'finite' if finite else 'NOT FINITE'}, {skipped} skipped steps, eval "
                    f"loss {excess:+.3%} from bf16's at step {at}, where divergence is above {bound(at):.2%}"
                    + ("" if other else " (no bf16 seed 2: 2% throughout)")))
    return out


# ---- the picture -------------------------------------------------------------------------

def ticks(lo, hi, n=5):
    """Round tick values spanning [lo, hi]."""
    span = (hi - lo) or 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 2.5, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def label(v):
    return f"{v:g}" if abs(v) >= 1e-9 else "0"


class Panel:
    """One plot area of the SVG: data coordinates to pixels, axes, lines."""

    def __init__(self, svg, x, y, w, h, xr, yr, title, xlabel, ylabel, clip):
        self.svg, self.x, self.y, self.w, self.h, self.xr, self.yr, self.clip = svg, x, y, w, h, xr, yr, clip
        svg.append(f'<clipPath id="{clip}"><rect x="{x}" y="{y}" width="{w}" height="{h}"/></clipPath>')
        svg.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="none" stroke="#444"/>')
        svg.append(f'<text x="{x + w / 2}" y="{y - 8}" text-anchor="middle" font-weight="bold">{title}</text>')
        svg.append(f'<text x="{x + w / 2}" y="{y + h + 34}" text-anchor="middle">{xlabel}</text>')
        svg.append(f'<text transform="translate({x - 46},{y + h / 2}) rotate(-90)" text-anchor="middle">{ylabel}</text>')
        for t in ticks(*xr):
            px = self.px(t)
            svg.append(f'<line x1="{px:.1f}" y1="{y + h}" x2="{px:.1f}" y2="{y + h + 4}" stroke="#444"/>'
                       f'<text x="{px:.1f}" y="{y + h + 17}" text-anchor="middle">{label(t)}</text>')
        for t in ticks(*yr):
            py = self.py(t)
            svg.append(f'<line x1="{x}" y1="{py:.1f}" x2="{x + w}" y2="{py:.1f}" stroke="#e4e4e4"/>'
                       f'<text x="{x - 6}" y="{py + 4:.1f}" text-anchor="end">{label(t)}</text>')

    def px(self, v):
        return self.x + (v - self.xr[0]) / (self.xr[1] - self.xr[0]) * self.w

    def py(self, v):
        return self.y + self.h - (v - self.yr[0]) / (self.yr[1] - self.yr[0]) * self.h

    def line(self, points, colour, width=1.5, dash=""):
        if len(points) < 2:
            return
        d = " ".join(f"{self.px(a):.1f},{self.py(b):.1f}" for a, b in points)
        dash = f' stroke-dasharray="{dash}"' if dash else ""
        self.svg.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="{width}"{dash} '
                        f'clip-path="url(#{self.clip})"/>')

    def band(self, lo, hi, colour):
        y0, y1 = self.py(max(hi, self.yr[0])), self.py(max(min(lo, self.yr[1]), self.yr[0]))
        self.svg.append(f'<rect x="{self.x}" y="{min(y0, y1):.1f}" width="{self.w}" height="{abs(y1 - y0):.1f}" '
                        f'fill="{colour}" clip-path="url(#{self.clip})"/>')


def smoothed(rows, window=50):
    """The train loss as a moving average, every window/5 steps."""
    pts, acc = [], []
    for r in rows:
        if r["loss"] is None or not math.isfinite(r["loss"]):
            continue
        acc.append(r["loss"])
        if len(acc) > window:
            acc.pop(0)
        if int(r["step"]) % max(1, window // 5) == 0 and len(acc) == window:
            pts.append((r["step"], sum(acc) / len(acc)))
    return pts


def draw(runs, tokens_per_step, device):
    models = sorted(runs)
    pw, ph, left, top, gap_x, gap_y = 420, 250, 70, 60, 110, 125
    width, height = left + 2 * pw + gap_x + 30, top + len(models) * (ph + gap_y)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">'
           f'FP8 against bf16: loss by tokens trained (Stratum, {device})</text>']
    m_tok = tokens_per_step / 1e6
    for i, model in enumerate(models):
        rs, y = runs[model], top + i * (ph + gap_y)
        last = max(int(r["step"]) for rows in rs.values() for r in rows)
        xr = (0, last * m_tok)
        # Left: train loss (moving average) and eval loss; the y range leaves out the first tenth's high losses.
        later = [v for rows in rs.values() for s, v in evals(rows).items() if s >= last / 10]
        later += [v for rows in rs.values() for s, v in smoothed(rows) if s >= last / 10]
        lo, hi = (min(later), max(later)) if later else (0, 1)
        pad = (hi - lo) * 0.08 or 0.05
        p = Panel(svg, left, y, pw, ph, xr, (lo - pad, hi + pad), f"{model}: loss", "tokens (M)", "loss", f"c{i}a")
        for name, rows in sorted(rs.items()):
            colour = COLOURS.get(name, "#000")
            p.line([(s * m_tok, v) for s, v in smoothed(rows)], colour, 1.0)
            p.line([(s * m_tok, v) for s, v in sorted(evals(rows).items())], colour, 2.0, "5,3")
        # Right: each run's eval loss relative to bf16 seed 1, with the 0.5% bound.
        ref = evals(rs.get("bf16-seed1", []))
        rel = {n: [(s * m_tok, 100 * (v / ref[s] - 1)) for s, v in sorted(evals(rows).items()) if s in ref]
               for n, rows in rs.items() if n != "bf16-seed1"}
        values = [v for pts in rel.values() for x, v in pts if x >= xr[1] / 10] + [-0.75, 0.75]
        q = Panel(svg, left + pw + gap_x, y, pw, ph, xr, (min(values) - 0.1, max(values) + 0.1),
                  f"{model}: eval loss against bf16 seed 1", "tokens (M)", "difference (%)", f"c{i}b")
        q.band(-100 * RELATIVE_BOUND, 100 * RELATIVE_BOUND, "#eef5e9")
        q.line([(0, 0), (xr[1], 0)], COLOURS["bf16-seed1"], 1.0)
        for name, pts in sorted(rel.items()):
            q.line(pts, COLOURS.get(name, "#000"), 2.0)
        # The legend under both panels.
        lx = left
        for name in sorted(rs):
            svg.append(f'<line x1="{lx}" y1="{y + ph + 52}" x2="{lx + 24}" y2="{y + ph + 52}" '
                       f'stroke="{COLOURS.get(name, "#000")}" stroke-width="3"/>'
                       f'<text x="{lx + 30}" y="{y + ph + 56}">{name}</text>')
            lx += 170
        svg.append(f'<text x="{left}" y="{y + ph + 76}" fill="#555">solid: train loss (moving average of 50 steps), '
                   f'dashed: eval loss; green band: ±{RELATIVE_BOUND:.1%}</text>')
    svg.append("</svg>")
    return "\n".join(svg) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="folders of <model>-<run>.csv files, or the files")
    ap.add_argument("--svg", help="write the curves here")
    ap.add_argument("--tokens-per-step", type=int, default=16384, help="the runs' tokens a step (for the x axis)")
    ap.add_argument("--device", default="one GPU", help="where the runs trained, for the picture's title")
    a = ap.parse_args()
    runs = read_runs(a.paths)
    if not runs:
        sys.exit(f"fp8_loss_curves: no <model>-<run>.csv files in {' '.join(a.paths)}")
    ok = True
    for model in sorted(runs):
        for good, text in verdicts(model, runs[model]):
            ok &= good is not False
            print(f"{'    ' if good is None else 'PASS' if good else 'FAIL'}  {text}")
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(draw(runs, a.tokens_per_step, a.device))
        print(f"fp8_loss_curves: wrote {a.svg}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
