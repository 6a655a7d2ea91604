"""Writes pretokenized files in the formats other tools use, from their
specifications (not from Stratum's reader), for the data tests:

  llm.c shard:   256 int32 (magic 20240520, version 1, token count), uint16 tokens
  llm.c LLaMA-3: magic 20240801, version 7, uint32 tokens
  Megatron:      PREFIX.idx ("MMIDIDX\\0\\0", <Q version 1, <B dtype code, <Q sequences,
                 <Q documents, <i sizes, <q byte pointers, <q document index) + PREFIX.bin

  python3 write_foreign_token_files.py OUT_DIR
Also writes damaged copies: truncated shards and indexes, a wrong magic, a bad pointer.
"""
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def llmc(path, tokens, magic=20240520, version=1, width=2, count=None):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%d%s" % (len(tokens), "H" if width == 2 else "I"), *tokens))


gpt2 = [(i * 7919) % 50257 for i in range(3000)]
llmc(os.path.join(out, "shard_gpt2.bin"), gpt2)
llmc(os.path.join(out, "shard_llama3.bin"), [(i * 104729) % 128256 for i in range(2000)], magic=20240801, version=7,
     width=4)
llmc(os.path.join(out, "shard_truncated.bin"), gpt2[:100], count=200)
llmc(os.path.join(out, "shard_bad_version.bin"), gpt2[:100], version=3)

# Megatron: documents of several sequences (sentences), each document ending in EOD (id 0), uint16 tokens.
docs = [[[1 + (d * 31 + s * 7 + t) % 999 for t in range(5 + s)] for s in range(1 + d % 3)] for d in range(40)]
docs = [doc[:-1] + [doc[-1] + [0]] for doc in docs]  # --append-eod: the document's last sequence ends in EOD


def megatron(prefix, docs, code=8, fmt="H", corrupt=None):
    sizes, pointers, doc_idx, data = [], [], [0], b""
    for doc in docs:
        for seq in doc:
            pointers.append(len(data))
            sizes.append(len(seq))
            data += struct.pack("<%d%s" % (len(seq), fmt), *seq)
        doc_idx.append(len(sizes))
    if corrupt == "pointer":
        pointers[3] += 2
    idx = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code) + struct.pack("<Q", len(sizes))
    idx += struct.pack("<Q", len(doc_idx)) + struct.pack("<%di" % len(sizes), *sizes)
    idx += struct.pack("<%dq" % len(pointers), *pointers) + struct.pack("<%dq" % len(doc_idx), *doc_idx)
    if corrupt == "truncated_idx":
        idx = idx[:-12]
    if corrupt == "magic":
        idx = b"MMIDIDY" + idx[7:]
    with open(prefix + ".idx", "wb") as f:
        f.write(idx)
    with open(prefix + ".bin", "wb") as f:
        f.write(data if corrupt != "truncated_bin" else data[:-6])


megatron(os.path.join(out, "megatron_text_document"), docs)
megatron(os.path.join(out, "megatron_int32"), docs, code=4, fmt="i")
for c in ("pointer", "truncated_idx", "magic", "truncated_bin"):
    megatron(os.path.join(out, "megatron_" + c), docs, corrupt=c)
with open(os.path.join(out, "expected.txt"), "w") as f:
    flat = [t for doc in docs for seq in doc for t in seq]
    f.write(" ".join(map(str, flat)) + "\n")
    f.write(" ".join(map(str, gpt2)) + "\n")
