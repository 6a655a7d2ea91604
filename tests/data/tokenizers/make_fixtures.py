"""Writes the tokenizer fixtures the tests load, and the reference ids the
Python packages give for a varied text.

  .venv/bin/python tests/data/tokenizers/make_fixtures.py tests/data/tokenizers
  (needs the `tokenizers`, `transformers` and `sentencepiece` packages)

gpt2/     tokenizer.json built as GPT-2's is (byte-level BPE, GPT-2's
          pre-tokenizer regex inside ByteLevel, <|endoftext|> after the merges),
          trained on this text by `tokenizers`; tokenizer_config.json by
          transformers.
llama3/   tokenizer.json built as Llama-3's is (a Split with Llama-3's regex,
          then ByteLevel without its regex, ignore_merges, special tokens after
          the merges, a template that prepends <|begin_of_text|>).
llama2/   tokenizer.model trained by `sentencepiece` as Llama-2's was (BPE,
          byte fallback, split digits, dummy prefix, no whitespace folding),
          ids 0/1/2 = <unk>/<s>/</s>.
text.txt  the text the ids are for: English, Chinese, code, a dozen scripts,
          combining marks, emoji (ZWJ sequences, flags, skin tones), digits,
          runs of spaces, tabs, CR LF, NBSP, NEL and other whitespace, contractions
          in both cases, special-token strings. Its documents are separated by
          a line holding only the form feed character.
<name>/expected.bin  for each document, then for the whole text: uint32 count,
          count x int32 ids (little-endian) without special tokens; then the
          same for the first 64 documents with the tokenizer's special tokens
          (Python's add_special_tokens=True; BOS for SentencePiece, as Llama-2's add_bos_token).
"""
import glob
import os
import random
import struct
import sys

import sentencepiece as spm
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
DOC_SEPARATOR = "\n\f\n"
SPECIAL_DOCS = 64

SENTENCES = [
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "صِف خَلقَ خَودِ كَمِثلِ الشَمسِ إِذ بَزَغَت — يَحظى الضَجيعُ بِها نَجلاءَ مِعطارِ",
    "דג סקרן שט בים מאוכזב ולפתע מצא חברה",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ うゐのおくやま けふこえて",
    "키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다.",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "Tiếng Việt có dấu: Chữ Quốc ngữ được dùng từ thế kỷ 17.",
    "Pijamalı hasta yağız şoföre çabucak güvendi.",
    "Falsches Üben von Xylophonmusik quält jeden größeren Zwerg; Straße, Maß, Fuß.",
    "Voix ambiguë d'un cœur qui, au zéphyr, préfère les jattes de kiwis. L'été où l'on s'était vus.",
    "Ça, c'est l'œuvre — « entre guillemets » … et puis ‹ ça › !",
    "Dès Noël, où un zéphyr haï me vêt de glaçons würmiens, je dîne d’exquis rôtis de bœuf au kir.",
    "Combining: e\u0301 a\u0300 o\u0302 n\u0303 u\u0308 (decomposed) vs é à ô ñ ü (composed); Å Å Ω Ω.",
    "Next\u0085line (NEL, whitespace to Oniguruma's \\s),\u0085\u0085 after:\u0085x \u0085 y.",
    "Zero\u200bwidth\u200cjoiners\u200dand\u2060word\ufeffjoiners; soft\u00adhyphen.",
    "Math: ∀x∈ℝ, ∃y: x² + y² ≤ 1 ⇒ |x| ≤ 1; ∑ᵢ aᵢ = ∫₀¹ f(t) dt ≈ 3.14159; ½ ¼ ⅞ Ⅻ ⑦.",
    "Fullwidth ＡＢＣ１２３ and ideographic　space、句読点。",
    "中文的标点：“引号”‘单引号’（括号）【方括号】《书名号》——破折号……省略号",
]
EMOJI = ["😀", "😂", "🥲", "👍", "👍🏻", "👍🏿", "👩‍👩‍👧‍👦", "👨‍💻", "🧑🏽‍🚀", "🏳️‍🌈", "🇺🇸", "🇯🇵", "🇩🇪",
         "❤️", "❤", "✔️", "1️⃣", "#️⃣", "🫠", "🪐", "🐈‍⬛", "☃", "♥", "⚡", "🎉🎉🎉", "🔥"]
WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", " \t ", "\r\n", "\n", "\n\n", "\n\n\n", "\r", "\u00a0",
              "\u2003", "\u3000", "\u2028", "\u000b", "\u000c", " \n", "  \n  ", "\n ", "\t\n", "\u0085",
              " \u0085 "]
WORDS = ["don't", "DON'T", "I'm", "I'M", "she'll", "She'LL", "we've", "WE'VE", "they're", "it's", "IT'S", "he'd",
         "'s", "'t", "o'clock", "rock'n'roll", "the", "The", "THE", "hello", "world", "Hello,", "world!", "naïve",
         "café", "über", "straße", "coöperate", "résumé", "x86_64", "snake_case", "camelCase", "kebab-case",
         "e-mail", "user@example.com", "https://example.org/a?b=c&d=e#f", "C++", "std::vector<int>", "a->b", "i++",
         "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<s>", "</s>", "<unk>", "▁", "Ġ", "Ċ"]


def numbers(rng):
    kinds = [lambda: str(rng.randrange(10 ** rng.randrange(1, 16))),
             lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 7)}f}",
             lambda: f"{rng.randrange(10**7):,}",
             lambda: f"{rng.randrange(1900, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
             lambda: f"+1 ({rng.randrange(200, 999)}) {rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}",
             lambda: f"{rng.random():.3e}", lambda: "0x" + format(rng.getrandbits(32), "08x"),
             lambda: "٠١٢٣٤٥٦٧٨٩", lambda: "१२३४", lambda: "１２３"]
    return rng.choice(kinds)()


def random_codepoints(rng, n):
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0x2000, 0x206F), (0x2190, 0x22FF), (0x1F300, 0x1F5FF)]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(blocks)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def mixed_document(rng):
    parts = []
    for _ in range(rng.randrange(20, 200)):
        r = rng.random()
        if r < 0.30: parts.append(rng.choice(WORDS))
        elif r < 0.45: parts.append(numbers(rng))
        elif r < 0.60: parts.append(rng.choice(EMOJI) * rng.randrange(1, 3))
        elif r < 0.72: parts.append(rng.choice(SENTENCES))
        elif r < 0.80: parts.append(random_codepoints(rng, rng.randrange(1, 12)))
        elif r < 0.85: parts.append(" " * rng.randrange(5, 40))
        else: parts.append(rng.choice(["(", ")", "...", "!!", "?!", "--", "—", "\"", "'", "``", ";", ":", "#", "$"]))
        parts.append(rng.choice(WHITESPACE) if rng.random() < 0.5 else " ")
    return "".join(parts)


def build_text(repo):
    rng = random.Random(1234)
    docs = []
    licenses = sorted(glob.glob("/usr/share/common-licenses/*"))
    for path in licenses[:6]:
        if os.path.isfile(path):
            text = open(path, encoding="utf-8").read()
            docs += [p for p in text.split("\n\n") if p.strip()][:60]
    seed = sorted(glob.glob(os.path.join(repo, "..", "shared", "seed", "*.txt")))
    for path in seed:
        docs += [p for p in open(path, encoding="utf-8").read().split("\n\n") if p.strip()]
    for path in ["src/stratum/data/dataset.cpp", "src/stratum/core/log.cpp", "tests/data/hf/make_fixtures.py",
                 "scripts/setup.sh", "Makefile"]:
        docs.append(open(os.path.join(repo, path), encoding="utf-8").read())
    docs += [mixed_document(rng) for _ in range(500)]
    docs += [s + rng.choice(WHITESPACE) for s in SENTENCES]
    rng.shuffle(docs)
    return [d for d in docs if "\f" not in d]


def write_ids(path, docs, whole, encode, encode_special):
    with open(path, "wb") as f:
        def put(ids):
            f.write(struct.pack("<I", len(ids)))
            f.write(struct.pack(f"<{len(ids)}i", *ids))
        for d in docs:
            put(encode(d))
        put(encode(whole))
        for d in docs[:SPECIAL_DOCS]:
            put(encode_special(d))


def byte_level(regex_split, vocab, specials, ignore_merges):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if regex_split:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    return tok, trainer


def main(out):
    repo = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    docs = build_text(repo)
    whole = DOC_SEPARATOR.join(docs)
    with open(os.path.join(out, "text.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(whole)
    training = [whole]

    # GPT-2's shape.
    tok, trainer = byte_level(False, 3000, [], False)
    tok.train_from_iterator(training, trainer)
    tok.add_special_tokens(["<|endoftext|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    d = os.path.join(out, "gpt2")
    os.makedirs(d, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                            unk_token="<|endoftext|>").save_pretrained(d)
    for extra in ["special_tokens_map.json"]:
        if os.path.exists(os.path.join(d, extra)): os.remove(os.path.join(d, extra))
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    write_ids(os.path.join(d, "expected.bin"), docs, whole, lambda s: tok.encode(s, add_special_tokens=False).ids,
              lambda s: tok.encode(s, add_special_tokens=True).ids)

    # Llama-3's shape.
    tok, trainer = byte_level(True, 3000, [], True)
    tok.train_from_iterator(training, trainer)
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1",
        special_tokens=[("<|begin_of_text|>", bos)])
    d = os.path.join(out, "llama3")
    os.makedirs(d, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                            eos_token="<|end_of_text|>").save_pretrained(d)
    for extra in ["special_tokens_map.json"]:
        if os.path.exists(os.path.join(d, extra)): os.remove(os.path.join(d, extra))
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    write_ids(os.path.join(d, "expected.bin"), docs, whole, lambda s: tok.encode(s, add_special_tokens=False).ids,
              lambda s: tok.encode(s, add_special_tokens=True).ids)

    # Llama-2's shape: SentencePiece.
    d = os.path.join(out, "llama2")
    os.makedirs(d, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(docs), model_prefix=os.path.join(d, "tokenizer"), model_type="bpe", vocab_size=3000,
        byte_fallback=True, split_digits=True, add_dummy_prefix=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", allow_whitespace_only_pieces=True, character_coverage=0.995,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, max_sentence_length=1 << 20, num_threads=2, minloglevel=2)
    os.remove(os.path.join(d, "tokenizer.vocab"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))
    write_ids(os.path.join(d, "expected.bin"), docs, whole, lambda s: sp.encode(s),
              lambda s: [sp.bos_id()] + sp.encode(s))
    print(f"{len(docs)} documents, {len(whole.encode('utf-8'))} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
