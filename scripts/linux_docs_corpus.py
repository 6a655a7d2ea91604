#!/usr/bin/env python3
"""The main job's corpus on GPUs: the Linux kernel's documentation as Debian's
`linux-doc` package installs it (GPL-2.0; `linux-doc-6.1` on Debian 12),
written as a directory of text files, one document each, for stratum-train's
--data DIR (each file a document: --documents separate keeps them apart).

  python3 scripts/linux_docs_corpus.py OUT_DIR   # prints OUT_DIR

The documents: every *.rst and *.txt file (gzipped as Debian ships them, or
not) under /usr/share/doc/linux-doc-*/Documentation (the newest version
present), without translations/ (other languages); in byte order of their
paths, written as OUT_DIR/NNNNN_<path with / as ->.txt so that the order of
the names is that order. Their text is kept as it is (reStructuredText
markup and all), read as UTF-8 with invalid bytes replaced; empty files are
skipped. About 25 MB of English in some 4,900 documents for linux-doc-6.1.

The directory is written once (into OUT_DIR.tmp, then renamed) and left as it
is while OUT_DIR/SOURCE names the same Documentation directory and package
version, so a token cache built from it stays fresh. Exits 1, saying so, when
no linux-doc is installed (scripts/setup.sh installs it on GPU machines).
"""
import glob
import gzip
import os
import re
import shutil
import subprocess
import sys


def documentation_dir():
    found = [d for d in glob.glob("/usr/share/doc/linux-doc*/Documentation") if os.path.isdir(d)]
    if not found:
        return None

    def version(path):
        m = re.search(r"linux-doc-([0-9.]+)", path)
        return [int(x) for x in m.group(1).strip(".").split(".")] if m else []

    return sorted(found, key=version)[-1]


def package_version(doc_dir):
    package = doc_dir.split("/")[4]  # /usr/share/doc/<package>/Documentation
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
        return package + " " + (out.stdout.strip() or "unknown")
    except OSError:
        return package + " unknown"


def documents(doc_dir):
    paths = []
    for root, dirs, files in os.walk(doc_dir):
        dirs[:] = [d for d in dirs if not (root == doc_dir and d == "translations")]
        for name in files:
            plain = name[:-3] if name.endswith(".gz") else name
            if plain.endswith(".rst") or plain.endswith(".txt"):
                paths.append(os.path.join(root, name))
    paths.sort(key=lambda p: os.path.relpath(p, doc_dir).encode())
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        if text.strip():
            rel = os.path.relpath(path, doc_dir)
            yield (rel[:-3] if rel.endswith(".gz") else rel), text


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: linux_docs_corpus.py OUT_DIR")
    out = sys.argv[1].rstrip("/")
    doc_dir = documentation_dir()
    if doc_dir is None:
        print("linux_docs_corpus: no /usr/share/doc/linux-doc-*/Documentation: install the linux-doc package "
              "(apt-get install linux-doc)", file=sys.stderr)
        sys.exit(1)
    source = doc_dir + "\n" + package_version(doc_dir) + "\n"
    stamp = os.path.join(out, "SOURCE")
    if os.path.exists(stamp) and open(stamp).read() == source:
        print(out)
        return
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    count = size = 0
    for i, (rel, text) in enumerate(documents(doc_dir)):
        name = "%05d_%s.txt" % (i, re.sub(r"[^A-Za-z0-9._-]", "-", rel))
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.write(text)
        count, size = count + 1, size + len(text.encode())
    with open(os.path.join(tmp, "SOURCE"), "w") as f:
        f.write(source)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    print("linux_docs_corpus: %d documents, %.1f MB, from %s" % (count, size / 1e6, source.split("\n")[1]),
          file=sys.stderr)
    print(out)


if __name__ == "__main__":
    main()
