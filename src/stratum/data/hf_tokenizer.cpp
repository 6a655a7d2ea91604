#include "stratum/data/hf_tokenizer.h"

#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/bounded_regex.h"
#include "stratum/data/byte_level_bpe.h"
#include "stratum/data/hf_tokenizer_impl.h"
#include "stratum/data/tokenizer_file_util.h"

namespace stratum::data {

#ifndef STRATUM_WITH_PCRE2

bool hf_tokenizer_available() { return false; }
std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) { detail::no_pcre2(path); }
std::unique_ptr<HfTokenizer> HfTokenizer::load_from_text(std::string_view, const std::string& source, std::string_view,
                                                         const std::string&) {
  detail::no_pcre2(source);
}
HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;
std::vector<int32_t> HfTokenizer::encode(std::string_view) const { return {}; }
std::vector<int32_t> HfTokenizer::prefix_tokens() const { return {}; }
std::vector<int32_t> HfTokenizer::suffix_tokens() const { return {}; }
std::string HfTokenizer::decode(const std::vector<int32_t>&) const { return {}; }
int64_t HfTokenizer::vocab_size() const { return 0; }
std::string HfTokenizer::name() const { return {}; }
int32_t HfTokenizer::bos_id() const { return -1; }
int32_t HfTokenizer::eos_id() const { return -1; }
std::vector<std::string> HfTokenizer::files() const { return {}; }

#else

void HfTokenizer::Impl::pre_tokenize(std::string_view text, detail::WorkBudget& budget,
                                     std::vector<std::string>& pieces) const {
  std::vector<std::string> current{std::string(text)}, next;
  std::vector<std::string_view> cut;
  for (const auto& step : steps) {
    next.clear();
    for (auto& piece : current) {
      const bool byte_level = step.kind == detail::PreTokenizerStep::byte_level;
      if (byte_level && step.add_prefix_space && !piece.empty() && piece[0] != ' ') piece.insert(piece.begin(), ' ');
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      cut.clear();
      detail::split_regex(*step.regex, step.remove_matches, piece, regex_window, budget, cut);
      for (auto v : cut) next.emplace_back(v);
    }
    current.swap(next);
  }
  for (auto& p : current)
    if (!p.empty()) pieces.push_back(std::move(p));
}

// A piece's bytes as their alphabet characters' ids, merged.
void HfTokenizer::Impl::bpe(const std::string& piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    std::string mapped;
    for (unsigned char c : piece) mapped += alphabet[c];
    auto it = vocab.find(mapped);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > size_t(std::numeric_limits<int32_t>::max()))
    throw Error(path + ": a piece of " + std::to_string(piece.size()) + " bytes is too long to tokenize");
  std::vector<int32_t> ids(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) ids[i] = byte_ids[static_cast<unsigned char>(piece[i])];
  detail::bpe_merge(merges, ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void HfTokenizer::Impl::encode_plain(std::string_view text, detail::WorkBudget& budget, std::vector<int32_t>& out,
                                     std::unordered_map<std::string, std::vector<int32_t>>& cache) const {
  std::vector<std::string> pieces;
  pre_tokenize(text, budget, pieces);
  for (const auto& piece : pieces) {
    if (piece.size() > 64) {  // long pieces (runs of digits or spaces) are rare: not worth caching
      bpe(piece, out);
      continue;
    }
    auto it = cache.find(piece);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      bpe(piece, ids);
      it = cache.emplace(piece, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

bool hf_tokenizer_available() { return true; }

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) {
  const std::string text = detail::read_bytes(path, detail::kMaxTokenizerFileBytes, "a tokenizer.json");
  const std::string config_path = detail::tokenizer_config_beside(path);
  if (!fs::exists(config_path)) return load_from_text(text, path);
  const std::string config = detail::read_bytes(config_path, detail::kMaxTokenizerConfigBytes, "a tokenizer_config.json");
  return load_from_text(text, path, config, config_path);
}

std::unique_ptr<HfTokenizer> HfTokenizer::load_from_text(std::string_view text, const std::string& source,
                                                         std::string_view config_text,
                                                         const std::string& config_source) {
  try {
    auto impl = detail::parse_tokenizer_json(text, source, config_text, config_source);
    return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(impl)));
  } catch (const nlohmann::json::exception& e) {  // a check the reader missed: still name the file
    throw Error(source + ": " + e.what());
  }
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

std::vector<int32_t> HfTokenizer::encode(std::string_view input) const {
  std::string repaired;
  if (!is_valid_utf8(input)) input = repaired = to_valid_utf8(input);
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  out.reserve(input.size() / 3);
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  detail::WorkBudget budget;
  // Added tokens: the leftmost occurrence wins, the longest on a tie.
  std::vector<size_t> next(t.added.size(), 0);
  for (size_t i = 0; i < t.added.size(); ++i) next[i] = input.find(t.added[i].first);
  size_t at = 0;
  while (at < input.size()) {
    size_t best = std::string_view::npos, which = 0;
    for (size_t i = 0; i < t.added.size(); ++i) {
      if (next[i] != std::string_view::npos && next[i] < at) next[i] = input.find(t.added[i].first, at);
      if (next[i] < best) {
        best = next[i];
        which = i;
      }
    }
    if (best == std::string_view::npos) {
      t.encode_plain(input.substr(at), budget, out, cache);
      break;
    }
    if (best > at) t.encode_plain(input.substr(at, best - at), budget, out, cache);
    out.push_back(t.added[which].second);
    at = best + t.added[which].first.size();
  }
  return out;
}

std::vector<int32_t> HfTokenizer::prefix_tokens() const { return impl_->prefix; }
std::vector<int32_t> HfTokenizer::suffix_tokens() const { return impl_->suffix; }

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  const Impl& t = *impl_;
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= t.size || !t.id_used[id] || t.id_text[id].empty()) {
      out += "\xEF\xBF\xBD";
      continue;
    }
    const std::string& token = t.id_text[id];
    if (t.id_added[id]) {
      out += token;
      continue;
    }
    for (size_t i = 0; i < token.size();) {  // alphabet characters back to bytes
      const unsigned char c = token[i];
      const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      auto it = t.char_byte.find(token.substr(i, len));
      if (it != t.char_byte.end())
        out.push_back(static_cast<char>(it->second));
      else
        out += token.substr(i, len);
      i += len;
    }
  }
  return out;
}

int64_t HfTokenizer::vocab_size() const { return impl_->size; }
std::string HfTokenizer::name() const { return impl_->name; }
int32_t HfTokenizer::bos_id() const { return impl_->bos; }
int32_t HfTokenizer::eos_id() const { return impl_->eos; }
std::vector<std::string> HfTokenizer::files() const { return impl_->files; }

#endif

}  // namespace stratum::data
