#!/usr/bin/env python3
"""Fails when a field of the parsed config is read by nothing outside config/.

A ds_config key that is parsed into a field and then never read is the worst
case of the config policy (docs/config_policy.md): accepted, then ignored. Every
field of the structs in src/stratum/config/sections.h and of stratum::Config
(config.h) must be read somewhere in src/stratum outside config/, or in apps/
(as `.field` or `->field`), or be listed in READ_IN_CONFIG below with the
config/ function that acts on it. Keys whose Stratum design makes them moot are
not stored at all: they are validated and noted in the parser.

Usage: check_config_fields_read.py SOURCE_DIR
"""
import pathlib
import re
import sys

# Fields whose consumer lives in config/ itself, with where and why.
READ_IN_CONFIG = {
    "train_batch_size": "config/batch.cpp resolves the batch triple the engine runs with",
    "train_micro_batch_size_per_gpu": "config/batch.cpp resolves the batch triple",
    "gradient_accumulation_steps": "config/batch.cpp resolves the batch triple",
    "source": "names the file in every message",
    "notes": "printed by stratum-config and stratum-train",
    "bf16": "Config::precision() (config.cpp) picks the training dtype from it",
}

STRUCT = re.compile(r"^struct (\w+) \{$")
FIELD = re.compile(r"^  (?:[\w:<>, ]+?) (\w+)(?: = [^;]+)?;")


def fields(header: pathlib.Path) -> list[tuple[str, str]]:
    out, struct = [], None
    for line in header.read_text().splitlines():
        if m := STRUCT.match(line):
            struct = m.group(1)
        elif line.startswith("};"):
            struct = None
        elif struct and (m := FIELD.match(line)) and "(" not in line.split("=")[0]:
            out.append((struct, m.group(1)))
    return out


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    cfg = root / "src" / "stratum" / "config"
    found = fields(cfg / "sections.h") + fields(cfg / "config.h")
    if len(found) < 40:
        sys.exit(f"{cfg}: found only {len(found)} config fields; has the header layout changed?")
    readers = [p for p in (root / "src" / "stratum").rglob("*") if p.suffix in (".h", ".cpp", ".cu")
               and cfg not in p.parents]
    readers += [p for p in (root / "apps").rglob("*.cpp")]
    text = "\n".join(p.read_text() for p in readers)
    problems = []
    for struct, name in found:
        if name in READ_IN_CONFIG:
            continue
        if not re.search(r"(\.|->)" + re.escape(name) + r"\b", text):
            problems.append(f"{struct}::{name}: parsed from the ds_config but read nowhere outside config/ "
                            f"(read it where it takes effect, or do not store it and note the key in the parser)")
    for p in problems:
        print(p)
    print(f"{len(found)} config fields checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
