#!/usr/bin/env bash
# Fetches the build dependencies that the GPU machine lacks and cannot download
# itself (it has no network): header-only / static Debian packages (and
# PCRE2, which Hugging Face tokenizer.json files need), unpacked
# under .deps/ (git-ignored). Run it HERE, then carry `.deps` to the device and
# configure with -DSTRATUM_DEPS_DIR=$PWD/.deps (scripts/device_build.sh does).
#
# The packages' CMake config files compute their prefix relative to themselves,
# so they work from .deps/usr as well as from /usr.
# Idempotent: a package already downloaded is not fetched again; unpacking is
# cheap and always redone, so a half-unpacked tree heals.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(nlohmann-json3-dev libcli11-dev libgtest-dev googletest libpcre2-dev libpcre2-8-0)
deps=.deps
debs=$deps/debs

log() { echo "[device_deps] $*" >&2; }

mkdir -p "$debs"
missing=()
for p in "${packages[@]}"; do
  compgen -G "$debs/${p}_*.deb" >/dev/null || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  log "downloading: ${missing[*]}"
  # `apt-get download` needs package lists; refresh them once if it fails.
  if ! (cd "$debs" && apt-get download -q "${missing[@]}" >&2); then
    log "download failed; refreshing package lists and retrying"
    if [ "$(id -u)" = 0 ]; then apt-get update -qq >&2; else sudo apt-get update -qq >&2; fi
    (cd "$debs" && apt-get download -q "${missing[@]}" >&2)
  fi
fi

for deb in "$debs"/*.deb; do
  dpkg -x "$deb" "$deps"
done

# What CMake will look for; a missing one means a package changed its layout.
for f in usr/include/nlohmann/json.hpp \
         usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
         usr/include/CLI/CLI.hpp usr/include/pcre2.h \
         usr/share/cmake/CLI11/CLI11Config.cmake \
         usr/include/gtest/gtest.h \
         usr/lib/x86_64-linux-gnu/libgtest.a \
         usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake; do
  [ -e "$deps/$f" ] || { log "expected $deps/$f after unpacking, not there"; exit 1; }
done
# The main job's corpus on GPUs (scripts/run_main.sh): the text documents of
# Debian's linux-doc (its *.rst and *.txt, ungzipped, without translations:
# what scripts/linux_docs_corpus.py reads), about 5 MB as .tar.xz in
# .deps/corpus/, for scripts/device_main_job.sh to unpack where apt would
# install them (the whole .deb, 37 MB, would crowd the 64 MiB a transfer to the GPU machine holds).
corpus=$deps/corpus/linux-doc-documents.tar.xz
if [ ! -f "$corpus" ]; then
  tmp=$(mktemp -d)
  pkg=$(apt-cache depends linux-doc | sed -n 's/.*Depends: \(linux-doc-[0-9.]*\)$/\1/p' | head -1)
  (cd "$tmp" && apt-get download -q "$pkg" >&2) && dpkg -x "$tmp"/"$pkg"_*.deb "$tmp/root"
  python3 - "$tmp/root" "$tmp/docs" <<'PY'
import glob, gzip, os, shutil, sys
src_root, dst_root = sys.argv[1], sys.argv[2]
for doc in glob.glob(src_root + "/usr/share/doc/linux-doc-*/Documentation"):
    rel_doc = os.path.relpath(doc, src_root)
    for root, dirs, files in os.walk(doc):
        dirs[:] = [d for d in dirs if not (root == doc and d == "translations")]
        for name in files:
            path = os.path.join(root, name)
            plain = name[:-3] if name.endswith(".gz") else name
            if os.path.islink(path) or not (plain.endswith(".rst") or plain.endswith(".txt")):
                continue
            out = os.path.join(dst_root, rel_doc, os.path.relpath(os.path.join(root, plain), doc))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with (gzip.open if name.endswith(".gz") else open)(path, "rb") as f, open(out, "wb") as g:
                shutil.copyfileobj(f, g)
PY
  mkdir -p "$deps/corpus"
  tar -C "$tmp/docs" -cf - usr | xz -6 -T0 > "$corpus"
  rm -rf "$tmp"
fi
log "ready: $(ls "$debs" | tr '\n' ' ')($(du -sh "$deps" | cut -f1) in $deps)"
