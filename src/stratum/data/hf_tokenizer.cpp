#include "stratum/data/hf_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/tokenizer_file_util.h"

#ifdef STRATUM_WITH_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace stratum::data {

#ifndef STRATUM_WITH_PCRE2

struct HfTokenizer::Impl {};
bool hf_tokenizer_available() { return false; }
std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) {
  throw Error(path + ": this build of Stratum has no PCRE2, which tokenizer.json's regular expressions need; install "
                     "libpcre2-dev (Debian/Ubuntu) and rebuild");
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

namespace {

using json = nlohmann::json;

// GPT-2's ByteLevel pre-tokenizer pattern (use_regex: true).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's map from bytes to printable characters: the printable Latin-1
// bytes stand for themselves, the other 68 for U+0100 onwards in byte order.
std::vector<std::string> byte_alphabet() {
  std::vector<std::string> chars(256);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    append_utf8(chars[b], printable ? static_cast<uint32_t>(b) : next++);
  }
  return chars;
}

struct Regex {
  pcre2_code* code = nullptr;
  Regex(const std::string& pattern, bool literal, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset,
                         nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw Error(where + ": the regular expression does not compile at offset " + std::to_string(offset) + ": " +
                  reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // an interpreter run where JIT is unavailable
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
};

struct PreTokenizerStep {
  enum Kind { split, byte_level } kind;
  std::shared_ptr<Regex> regex;  // split; byte_level with use_regex
  bool remove_matches = false;   // split: behaviour Removed
  bool add_prefix_space = false;  // byte_level
};

const json& need(const json& object, const char* key, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) throw Error(where + ": no \"" + key + "\"");
  return object.at(key);
}

std::string token_text(const json& value) {  // "x" or {"content": "x"}
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return {};
}

}  // namespace

struct HfTokenizer::Impl {
  std::string path, name;
  std::vector<std::string> files;  // tokenizer.json, and its tokenizer_config.json if any
  std::vector<std::string> alphabet = byte_alphabet();
  std::unordered_map<std::string, int> char_byte;  // alphabet character -> byte
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left << 32 | right) -> (rank, merged id)
  std::vector<int32_t> byte_ids;                                     // byte -> id of its alphabet character
  std::vector<std::string> id_text;                                  // id -> token text (alphabet or added)
  std::vector<bool> id_added;
  std::vector<std::pair<std::string, int32_t>> added;  // added tokens, longest first
  std::vector<PreTokenizerStep> steps;
  bool ignore_merges = false;
  std::vector<int32_t> prefix, suffix;  // what the post-processor puts around a text
  int32_t bos = -1, eos = -1;
  int64_t size = 0;

  void split_regex(const Regex& regex, bool remove, std::string_view text, std::vector<std::string_view>& out) const;
  void pre_tokenize(std::string_view text, std::vector<std::string>& pieces) const;
  void bpe(const std::string& piece, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out,
                    std::unordered_map<std::string, std::vector<int32_t>>& cache) const;
  int32_t lookup(const std::string& token, const std::string& where) const;
};

void HfTokenizer::Impl::split_regex(const Regex& regex, bool remove, std::string_view text,
                                    std::vector<std::string_view>& out) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex.code, nullptr);
  size_t start = 0, last = 0;
  while (start < text.size()) {
    const int rc = pcre2_match(regex.code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                               PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(match);
      throw Error(path + ": the pre-tokenizer's regular expression failed (PCRE2 error " + std::to_string(rc) + ")");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
    const size_t b = ov[0], e = ov[1];
    if (e == b) {  // an empty match: step over one character
      start = b + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (b > last) out.push_back(text.substr(last, b - last));
    if (!remove) out.push_back(text.substr(b, e - b));
    last = start = e;
  }
  pcre2_match_data_free(match);
  if (last < text.size()) out.push_back(text.substr(last));
}

void HfTokenizer::Impl::pre_tokenize(std::string_view text, std::vector<std::string>& pieces) const {
  std::vector<std::string> current{std::string(text)}, next;
  std::vector<std::string_view> cut;
  for (const auto& step : steps) {
    next.clear();
    for (auto& piece : current) {
      if (step.kind == PreTokenizerStep::byte_level && step.add_prefix_space && !piece.empty() && piece[0] != ' ')
        piece.insert(piece.begin(), ' ');
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      cut.clear();
      split_regex(*step.regex, step.remove_matches, piece, cut);
      for (auto v : cut) next.emplace_back(v);
    }
    current.swap(next);
  }
  for (auto& p : current)
    if (!p.empty()) pieces.push_back(std::move(p));
}

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
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  for (unsigned char c : piece) symbols.push_back(byte_ids[c]);
  while (symbols.size() > 1) {
    int32_t best_rank = INT32_MAX, best_id = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = merges.find(uint64_t(uint32_t(symbols[i])) << 32 | uint32_t(symbols[i + 1]));
      if (it != merges.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best_id = it->second.second;
        best = i;
      }
    }
    if (best_id < 0) break;
    symbols[best] = best_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void HfTokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out,
                                     std::unordered_map<std::string, std::vector<int32_t>>& cache) const {
  std::vector<std::string> pieces;
  pre_tokenize(text, pieces);
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

int32_t HfTokenizer::Impl::lookup(const std::string& token, const std::string& where) const {
  for (const auto& [text, id] : added)
    if (text == token) return id;
  auto it = vocab.find(token);
  if (it == vocab.end()) throw Error(path + ": " + where + " '" + token + "' is not a token of the vocabulary");
  return it->second;
}

namespace {

using detail::fnv1a;
using detail::read_bytes;

void read_pre_tokenizer(const json& node, HfTokenizer::Impl& t, const std::string& where) {
  if (node.is_null()) return;
  const std::string type = node.value("type", "");
  if (type == "Sequence") {
    const json& list = need(node, "pretokenizers", where);
    for (size_t i = 0; i < list.size(); ++i) read_pre_tokenizer(list[i], t, where + ".pretokenizers[" + std::to_string(i) + "]");
    return;
  }
  PreTokenizerStep step{};
  if (type == "Split") {
    if (node.value("invert", false)) throw Error(t.path + ": " + where + ".invert = true is not supported");
    const std::string behavior = node.value("behavior", "");
    if (behavior != "Isolated" && behavior != "Removed")
      throw Error(t.path + ": " + where + ".behavior '" + behavior + "' is not supported (Isolated, Removed)");
    const json& pattern = need(node, "pattern", t.path + ": " + where);
    const bool literal = pattern.contains("String");
    const std::string text = literal ? pattern["String"].get<std::string>() : need(pattern, "Regex", where).get<std::string>();
    step.kind = PreTokenizerStep::split;
    step.regex = std::make_shared<Regex>(text, literal, t.path + ": " + where + ".pattern");
    step.remove_matches = behavior == "Removed";
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::byte_level;
    step.add_prefix_space = node.value("add_prefix_space", false);
    if (node.value("use_regex", true)) step.regex = std::make_shared<Regex>(kGpt2Pattern, false, t.path + ": " + where);
  } else {
    throw Error(t.path + ": " + where + ".type '" + type +
                "' is not supported (Split, ByteLevel, Sequence; for a SentencePiece model such as Llama-2's pass "
                "its tokenizer.model)");
  }
  if (!t.steps.empty() && t.steps.back().kind == PreTokenizerStep::byte_level)
    throw Error(t.path + ": " + where + ": a pre-tokenizer after ByteLevel is not supported");
  t.steps.push_back(std::move(step));
}

void read_post_processor(const json& node, HfTokenizer::Impl& t, const std::string& where) {
  if (node.is_null()) return;
  const std::string type = node.value("type", "");
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const json& list = need(node, "processors", where);
    for (size_t i = 0; i < list.size(); ++i) read_post_processor(list[i], t, where + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (type != "TemplateProcessing")
    throw Error(t.path + ": " + where + ".type '" + type + "' is not supported (TemplateProcessing, ByteLevel, Sequence)");
  const json& specials = node.value("special_tokens", json::object());
  bool after = false;
  for (const auto& item : need(node, "single", t.path + ": " + where)) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    const std::string id = need(need(item, "SpecialToken", t.path + ": " + where + ".single"), "id", where).get<std::string>();
    if (!specials.contains(id)) throw Error(t.path + ": " + where + ".special_tokens has no '" + id + "'");
    for (const auto& v : need(specials[id], "ids", where)) (after ? t.suffix : t.prefix).push_back(v.get<int32_t>());
  }
}

std::unique_ptr<HfTokenizer::Impl> parse(const std::string& path) {
  auto t = std::make_unique<HfTokenizer::Impl>();
  t->path = path;
  const std::string text = read_bytes(path);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(path + ": not JSON: " + e.what());
  }
  if (!root.is_object()) throw Error(path + ": not a tokenizer.json (the top level is not an object)");
  if (!root.value("normalizer", json()).is_null())
    throw Error(path + ": normalizer '" + root["normalizer"].value("type", "?") +
                "' is not supported (byte-level BPE files such as GPT-2's and Llama-3's have none)");
  const json& model = need(root, "model", path);
  if (model.value("type", "") != "BPE")
    throw Error(path + ": model.type '" + model.value("type", "") + "' is not supported (BPE)");
  if (!model.value("dropout", json()).is_null()) throw Error(path + ": model.dropout is not supported");
  if (model.value("byte_fallback", false)) throw Error(path + ": model.byte_fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty())
      throw Error(path + ": model." + key + " is not supported");
  t->ignore_merges = model.value("ignore_merges", false);

  for (const auto& [token, id] : need(model, "vocab", path + ": model").items()) {
    const int32_t v = id.get<int32_t>();
    if (v < 0) throw Error(path + ": model.vocab['" + token + "'] = " + std::to_string(v) + " is negative");
    t->vocab[token] = v;
    t->size = std::max<int64_t>(t->size, int64_t(v) + 1);
  }
  for (const auto& a : root.value("added_tokens", json::array())) {
    const std::string content = need(a, "content", path + ": added_tokens").get<std::string>();
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (a.value(flag, false)) throw Error(path + ": added token '" + content + "' has " + flag + ", which is not supported");
    const int32_t id = need(a, "id", path + ": added_tokens").get<int32_t>();
    if (content.empty()) throw Error(path + ": added token " + std::to_string(id) + " is empty");
    t->added.emplace_back(content, id);
    t->size = std::max<int64_t>(t->size, int64_t(id) + 1);
  }
  std::stable_sort(t->added.begin(), t->added.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

  t->id_text.assign(t->size, std::string());
  t->id_added.assign(t->size, false);
  for (const auto& [token, id] : t->vocab) t->id_text[id] = token;
  for (const auto& [content, id] : t->added) {
    t->id_text[id] = content;
    t->id_added[id] = true;
  }
  t->byte_ids.resize(256);
  for (int b = 0; b < 256; ++b) {
    t->char_byte[t->alphabet[b]] = b;
    auto it = t->vocab.find(t->alphabet[b]);
    if (it == t->vocab.end())
      throw Error(path + ": the vocabulary lacks byte " + std::to_string(b) + " ('" + t->alphabet[b] +
                  "'): not a byte-level BPE");
    t->byte_ids[b] = it->second;
  }
  const json& merges = need(model, "merges", path + ": model");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {  // the older form: "left right"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) throw Error(path + ": model.merges[" + std::to_string(rank) + "] '" + s + "' is not 'left right'");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      throw Error(path + ": model.merges[" + std::to_string(rank) + "] is neither 'left right' nor [left, right]");
    }
    const auto l = t->vocab.find(left), r = t->vocab.find(right), lr = t->vocab.find(left + right);
    if (l == t->vocab.end() || r == t->vocab.end() || lr == t->vocab.end())
      throw Error(path + ": model.merges[" + std::to_string(rank) + "] ('" + left + "', '" + right +
                  "') names a token the vocabulary lacks");
    t->merges.emplace(uint64_t(uint32_t(l->second)) << 32 | uint32_t(r->second),
                      std::make_pair(static_cast<int32_t>(rank), lr->second));
  }

  read_pre_tokenizer(root.value("pre_tokenizer", json()), *t, "pre_tokenizer");
  if (t->steps.empty() || t->steps.back().kind != PreTokenizerStep::byte_level)
    throw Error(path + ": the pre-tokenizer does not end with ByteLevel: not a byte-level BPE");
  const json decoder = root.value("decoder", json());
  if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel")
    throw Error(path + ": decoder.type '" + decoder.value("type", "") + "' is not supported (ByteLevel)");
  read_post_processor(root.value("post_processor", json()), *t, "post_processor");

  // Special tokens as tokenizer_config.json beside it says.
  uint64_t hash = fnv1a(text);
  const std::string config_path = detail::tokenizer_config_beside(path);
  t->files = {path};
  std::ifstream probe(config_path);
  if (probe) {
    t->files.push_back(config_path);
    const std::string config_text = read_bytes(config_path);
    hash = fnv1a(config_text, hash);
    json config;
    try {
      config = json::parse(config_text);
    } catch (const json::exception& e) {
      throw Error(config_path + ": not JSON: " + e.what());
    }
    if (config.contains("bos_token") && !token_text(config["bos_token"]).empty())
      t->bos = t->lookup(token_text(config["bos_token"]), config_path + ": bos_token");
    if (config.contains("eos_token") && !token_text(config["eos_token"]).empty())
      t->eos = t->lookup(token_text(config["eos_token"]), config_path + ": eos_token");
    if (config.value("add_bos_token", false) && t->bos >= 0 && t->prefix.empty()) t->prefix.push_back(t->bos);
    if (config.value("add_eos_token", false) && t->eos >= 0 && t->suffix.empty()) t->suffix.push_back(t->eos);
  }
  t->name = detail::tokenizer_name("hf", t->size, hash);
  return t;
}

}  // namespace

bool hf_tokenizer_available() { return true; }

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) {
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(parse(path)));
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
      t.encode_plain(input.substr(at), out, cache);
      break;
    }
    if (best > at) t.encode_plain(input.substr(at, best - at), out, cache);
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
    if (id < 0 || id >= t.size || t.id_text[id].empty()) {
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
