#pragma once
// HfTokenizer's state, private to the two files that share it:
// hf_tokenizer_file.cpp reads tokenizer.json (and tokenizer_config.json) into
// it, hf_tokenizer.cpp encodes and decodes with it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "stratum/data/bounded_regex.h"
#include "stratum/data/byte_level_bpe.h"
#include "stratum/data/hf_tokenizer.h"

namespace stratum::data {

namespace detail {

struct PreTokenizerStep {
  enum Kind { split, byte_level } kind;
  std::shared_ptr<const Regex> regex;  // split; byte_level with use_regex
  bool remove_matches = false;         // split: behaviour Removed
  bool add_prefix_space = false;       // byte_level
};

}  // namespace detail

struct HfTokenizer::Impl {
  std::string path, name;
  std::vector<std::string> files;  // tokenizer.json, and its tokenizer_config.json if any
  std::vector<std::string> alphabet = detail::byte_alphabet();
  std::unordered_map<std::string, int> char_byte;  // alphabet character -> byte
  std::unordered_map<std::string, int32_t> vocab;
  detail::MergeTable merges;
  std::vector<int32_t> byte_ids;     // byte -> id of its alphabet character
  std::vector<std::string> id_text;  // id -> token text (alphabet or added)
  std::vector<bool> id_used;         // id names a token (ids may have holes)
  std::vector<bool> id_added;
  std::vector<std::pair<std::string, int32_t>> added;  // added tokens, longest first
  std::vector<detail::PreTokenizerStep> steps;
  size_t regex_window = kRegexWindowBytes;
  bool ignore_merges = false;
  std::vector<int32_t> prefix, suffix;  // what the post-processor puts around a text
  int32_t bos = -1, eos = -1;
  int64_t size = 0;

  void pre_tokenize(std::string_view text, detail::WorkBudget& budget, std::vector<std::string>& pieces) const;
  void bpe(const std::string& piece, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, detail::WorkBudget& budget, std::vector<int32_t>& out,
                    std::unordered_map<std::string, std::vector<int32_t>>& cache) const;
  int32_t lookup(const std::string& token, const std::string& where) const;
};

namespace detail {

// The tokenizer `text` describes, with tokenizer_config.json's special tokens
// when config_path is not empty. Throws stratum::Error naming the file and key.
std::unique_ptr<HfTokenizer::Impl> parse_tokenizer_json(std::string_view text, const std::string& path,
                                                        std::string_view config_text, const std::string& config_path);

}  // namespace detail
}  // namespace stratum::data
