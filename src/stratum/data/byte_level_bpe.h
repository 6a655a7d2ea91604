#pragma once
// Byte-level BPE as GPT-2 defined it and Hugging Face's `tokenizers` runs it:
// every byte is first a printable character of GPT-2's byte alphabet (so a
// vocabulary of text covers all bytes), then a merge table joins adjacent
// tokens, lowest rank first. Plain C++, no torch, no PCRE2.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stratum::data::detail {

// Appends code point `cp` (below U+10000) as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's map from bytes to printable characters (UTF-8): the printable
// Latin-1 bytes stand for themselves, the other 68 for U+0100 onwards in byte
// order.
std::vector<std::string> byte_alphabet();

// (left << 32 | right): the key of a pair of token ids in a MergeTable.
inline uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

// pair_key(left, right) -> (rank, id of the merged token); lower ranks merge first.
using MergeTable = std::unordered_map<uint64_t, std::pair<int32_t, int32_t>>;

// Merges the token ids in `ids` (one per byte at first) in place, as
// `tokenizers`' Word::merge_all does, in O(n log n). ids.size() must fit in
// int32_t.
void bpe_merge(const MergeTable& merges, std::vector<int32_t>& ids);

}  // namespace stratum::data::detail
