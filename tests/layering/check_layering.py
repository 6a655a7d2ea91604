#!/usr/bin/env python3
"""Fails when a layer of src/stratum includes one that stands above it.

The order is written once: the table of docs/architecture.md, whose rows list
the folders from the bottom layer up. A folder may include its own headers and
those of folders listed before it; nothing else. Every folder under
src/stratum must have a row, and every row a folder.

Usage: check_layering.py SOURCE_DIR
"""
import pathlib
import re
import sys

ROW = re.compile(r"^\|\s*`([a-z_]+)/`\s*\|")
INCLUDE = re.compile(r'^\s*#\s*include\s+"stratum/([^"]+)"')


def layer_order(doc: pathlib.Path) -> list[str]:
    order = [m.group(1) for line in doc.read_text().splitlines() if (m := ROW.match(line))]
    if not order:
        sys.exit(f"{doc}: no layer table found (rows like '| `core/` | ... |')")
    return order


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    doc = root / "docs" / "architecture.md"
    src = root / "src" / "stratum"
    order = layer_order(doc)
    rank = {name: i for i, name in enumerate(order)}
    problems = []
    folders = sorted(p.name for p in src.iterdir() if p.is_dir())
    for f in folders:
        if f not in rank:
            problems.append(f"src/stratum/{f}/: not in the layer table of docs/architecture.md")
    for name in order:
        if name not in folders:
            problems.append(f"docs/architecture.md: layer '{name}/' has no folder src/stratum/{name}/")
    checked = 0
    for path in sorted(src.rglob("*")):
        if path.suffix not in {".h", ".cpp", ".cu", ".cuh", ".hpp"} or not path.is_file():
            continue
        layer = path.relative_to(src).parts[0]
        if layer not in rank:
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            checked += 1
            target = m.group(1).split("/")[0]
            if "/" not in m.group(1):
                continue  # generated top-level headers (build_info.h) belong to no layer
            where = f"{path.relative_to(root)}:{lineno}"
            if target not in rank:
                problems.append(f'{where}: includes "stratum/{m.group(1)}", a folder not in the layer table')
            elif rank[target] > rank[layer]:
                problems.append(f'{where}: {layer}/ includes "stratum/{m.group(1)}", but {target}/ stands above '
                                f"{layer}/ in docs/architecture.md ({' < '.join(order)})")
    for p in problems:
        print(p)
    print(f"{checked} includes in {len(folders)} layers checked: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
