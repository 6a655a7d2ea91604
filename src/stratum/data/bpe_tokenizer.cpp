#include "stratum/data/bpe_tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::data {

namespace {

constexpr size_t kMaxChunkBytes = 64;  // bounds the quadratic merge loop per chunk
// A merges file is ~10 bytes a merge: this allows vocabularies of millions.
constexpr size_t kMaxMergesFileBytes = size_t{256} << 20;
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

enum class ByteClass { letter, digit, punct, space, other_space };

ByteClass classify(unsigned char c) {
  if (c == ' ') return ByteClass::space;
  if (c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v') return ByteClass::other_space;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return ByteClass::letter;
  if (c >= '0' && c <= '9') return ByteClass::digit;
  return ByteClass::punct;
}

bool is_space(ByteClass c) { return c == ByteClass::space || c == ByteClass::other_space; }

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Replaces every (left, right) in `symbols`, scanning left to right.
void apply_merge(std::vector<int32_t>& symbols, int32_t left, int32_t right, int32_t merged) {
  size_t out = 0;
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
      symbols[out++] = merged;
      ++i;
    } else {
      symbols[out++] = symbols[i];
    }
  }
  symbols.resize(out);
}

}  // namespace

std::vector<std::string_view> bpe_chunks(std::string_view text) {
  std::vector<std::string_view> chunks;
  const auto cls = [&](size_t i) { return classify(static_cast<unsigned char>(text[i])); };
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    if (cls(i) == ByteClass::space && i + 1 < text.size() && !is_space(cls(i + 1))) ++i;  // " word"
    const ByteClass c = cls(i);
    if (!is_space(c)) {
      while (i < text.size() && cls(i) == c && i - start < kMaxChunkBytes) ++i;
    } else {
      // A whitespace run leaves its last space to the word after it.
      while (i < text.size() && is_space(cls(i)) && i - start < kMaxChunkBytes) {
        if (i > start && cls(i) == ByteClass::space && i + 1 < text.size() && !is_space(cls(i + 1))) break;
        ++i;
      }
    }
    chunks.push_back(text.substr(start, i - start));
  }
  return chunks;
}

BpeTokenizer::BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges) : merges_(std::move(merges)) {
  bytes_.reserve(256 + merges_.size());
  for (int b = 0; b < 256; ++b) bytes_.emplace_back(1, static_cast<char>(b));
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a over the merge list
  for (size_t i = 0; i < merges_.size(); ++i) {
    const auto [l, r] = merges_[i];
    rank_[pair_key(l, r)] = static_cast<int32_t>(i);
    bytes_.push_back(bytes_[l] + bytes_[r]);
    for (int32_t v : {l, r})
      for (int k = 0; k < 4; ++k) hash = (hash ^ ((static_cast<uint32_t>(v) >> (8 * k)) & 0xFF)) * 0x100000001b3ull;
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(hash ^ (hash >> 32)));
  name_ = "bpe" + std::to_string(vocab_size()) + "-" + hex;
}

BpeTokenizer BpeTokenizer::train(std::string_view text, int64_t vocab_size) {
  if (vocab_size < 256 || vocab_size > (int64_t{1} << 31))
    throw Error("BPE: vocabulary size " + std::to_string(vocab_size) + " is not in [256, 2^31]");
  // Distinct chunks with their counts, in a fixed (sorted) order.
  std::unordered_map<std::string_view, int64_t> counts;
  for (auto chunk : bpe_chunks(text)) ++counts[chunk];
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> weights;
  for (const auto& [chunk, n] : sorted) {
    if (chunk.size() < 2) continue;  // nothing to merge
    words.emplace_back(chunk.begin(), chunk.end());
    for (auto& s : words.back()) s = static_cast<unsigned char>(s);
    weights.push_back(n);
  }
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::unordered_map<uint64_t, int64_t> pairs;
  for (int64_t id = 256; id < vocab_size; ++id) {
    pairs.clear();
    for (size_t w = 0; w < words.size(); ++w)
      for (size_t i = 0; i + 1 < words[w].size(); ++i) pairs[pair_key(words[w][i], words[w][i + 1])] += weights[w];
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [key, n] : pairs)
      if (n > best_count || (n == best_count && key < best)) best = key, best_count = n;
    if (best_count < 2) break;
    const auto left = static_cast<int32_t>(best >> 32), right = static_cast<int32_t>(best & 0xFFFFFFFF);
    merges.emplace_back(left, right);
    for (auto& word : words) apply_merge(word, left, right, static_cast<int32_t>(id));
  }
  return BpeTokenizer(std::move(merges));
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  // Read whole through the regular-file reader: a FIFO or device given as the
  // merges file is refused instead of blocking, a huge file by its size.
  std::istringstream in(fs::read_regular_file(path, kMaxMergesFileBytes, "BPE merges"));
  std::string line;
  std::string magic;
  int version = 0;
  int64_t vocab = 0;
  if (!std::getline(in, line) || !(std::istringstream(line) >> magic >> version >> vocab) || magic != "stratum-bpe")
    throw Error(path + ":1: not a Stratum BPE merges file (expected \"stratum-bpe 1 <vocab_size>\")");
  if (version != 1) throw Error(path + ":1: BPE merges version " + std::to_string(version) + ", this Stratum reads 1");
  if (vocab < 256 || vocab > (int64_t{1} << 31))
    throw Error(path + ":1: vocabulary size " + std::to_string(vocab) + " is not in [256, 2^31]");
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<int64_t> token_bytes(256, 1);  // id -> length of the bytes it stands for
  for (int64_t line_no = 2; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    int64_t l = -1, r = -1;
    std::string rest;
    std::istringstream fields(line);
    const int64_t next_id = 256 + static_cast<int64_t>(merges.size());
    if (!(fields >> l >> r) || (fields >> rest) || l < 0 || r < 0 || l >= next_id || r >= next_id)
      throw Error(path + ":" + std::to_string(line_no) + ": expected two ids below " + std::to_string(next_id) +
                  ", got \"" + line + "\"");
    // Merges never cross a chunk, so no token is longer than one; a file whose
    // merges double a token's length line after line would exhaust memory.
    const int64_t length = token_bytes[l] + token_bytes[r];
    if (length > static_cast<int64_t>(kMaxChunkBytes))
      throw Error(path + ":" + std::to_string(line_no) + ": merge \"" + line + "\" makes a token of " +
                  std::to_string(length) + " bytes, longer than a chunk (" + std::to_string(kMaxChunkBytes) +
                  "): not a merges file Stratum wrote");
    token_bytes.push_back(length);
    merges.emplace_back(static_cast<int32_t>(l), static_cast<int32_t>(r));
  }
  if (256 + static_cast<int64_t>(merges.size()) != vocab)
    throw Error(path + ": header says vocabulary size " + std::to_string(vocab) + " but the file holds " +
                std::to_string(merges.size()) + " merges (vocabulary " + std::to_string(256 + merges.size()) + ")");
  return BpeTokenizer(std::move(merges));
}

void BpeTokenizer::save(const std::string& path) const {
  std::string text = "stratum-bpe 1 " + std::to_string(vocab_size()) + "\n";
  for (const auto& [l, r] : merges_) text += std::to_string(l) + " " + std::to_string(r) + "\n";
  fs::write_file_atomically(path, text, "BPE merges");
}

void BpeTokenizer::encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const {
  std::vector<int32_t> symbols(chunk.begin(), chunk.end());
  for (auto& s : symbols) s = static_cast<unsigned char>(s);
  while (symbols.size() > 1) {
    int32_t best = -1;  // lowest merge index among adjacent pairs: merges apply in training order
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = rank_.find(pair_key(symbols[i], symbols[i + 1]));
      if (it != rank_.end() && (best < 0 || it->second < best)) best = it->second;
    }
    if (best < 0) break;
    apply_merge(symbols, merges_[best].first, merges_[best].second, 256 + best);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 2);
  std::unordered_map<std::string_view, std::vector<int32_t>> seen;  // text repeats its words
  for (auto chunk : bpe_chunks(text)) {
    auto [it, fresh] = seen.try_emplace(chunk);
    if (fresh) encode_chunk(chunk, it->second);
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < static_cast<int32_t>(bytes_.size()))
      out += bytes_[id];
    else
      out += kReplacement;
  }
  return out;
}

}  // namespace stratum::data
