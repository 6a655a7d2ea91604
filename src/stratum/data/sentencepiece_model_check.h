#pragma once
// Checks a serialized SentencePiece model (tokenizer.model, a ModelProto)
// before libsentencepiece parses it. The library (Debian's 0.1.97) trusts the
// normalizer's precompiled_charsmap, a Darts-clone double-array trie plus a
// blob of NUL-terminated strings: it walks the trie with the text's bytes as
// indices and reads the strings its leaves point to, all without bounds
// checks, so a damaged or hostile file reads out of bounds while text is
// tokenized. This reads the protobuf wire format itself (bounds-checked, no
// recursion) and refuses such a file by name and field first.
// Plain C++, no torch.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace stratum::data {

// A tokenizer.model is at most this large (Llama-2's is 500 KB).
inline constexpr size_t kMaxSentencePieceModelBytes = size_t{256} << 20;
// Pieces in one model (Llama-2 has 32,000; the largest known, 256,000).
inline constexpr int64_t kMaxSentencePiecePieces = int64_t{1} << 22;
// One precompiled_charsmap (nmt_nfkc's is 240 KB): bounds the trie walk below.
inline constexpr size_t kMaxPrecompiledCharsmapBytes = size_t{8} << 20;
// Leaves on one path through a charsmap trie: libsentencepiece's normalizer
// keeps a position's matches in an array of this many (kMaxTrieResultsSize)
// and reads as many entries as the trie reports, beyond the array if more.
inline constexpr int kMaxCharsmapLeavesPerPath = 32;

// What the check read, for the caller's messages and tests.
struct SentencePieceModelFacts {
  int64_t pieces = 0;
  int model_type = 1;  // TrainerSpec.ModelType: 1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR
  bool byte_fallback = false;
  size_t normalizer_charsmap_bytes = 0, denormalizer_charsmap_bytes = 0;
};

// Throws stratum::Error "<source>: <field>: <problem>; <what to do>" for a
// file that is not a well-formed ModelProto, has no pieces or more than
// kMaxSentencePiecePieces, an empty, repeated or NUL-containing piece, a
// non-finite score, an unknown piece type or model_type, a special id
// (unk/bos/eos/pad) outside the pieces or shared by two of them, or a
// precompiled_charsmap that check_precompiled_charsmap refuses.
SentencePieceModelFacts check_sentencepiece_model(std::string_view bytes, const std::string& source);

// The charsmap blob as libsentencepiece decodes it: <trie size, 4 bytes LE>
// <trie: units of 4 bytes LE> <NUL-terminated normalized strings>. Walks every
// trie unit reachable from the root as Darts-clone does (a unit's children at
// (pos ^ offset) ^ byte, its leaf at pos ^ offset) and refuses a unit whose
// 256 children or leaf lie beyond the trie, a leaf whose string lies beyond
// the blob or has no NUL inside it, a cycle through a leaf, or a path with
// more than kMaxCharsmapLeavesPerPath leaves. `field` names it in messages
// ("normalizer_spec.precompiled_charsmap"). Empty means no charsmap: accepted.
void check_precompiled_charsmap(std::string_view blob, const std::string& source, const std::string& field);

}  // namespace stratum::data
