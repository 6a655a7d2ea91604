// tokenizer.json and tokenizer_config.json read into HfTokenizer::Impl: every
// value through a checked Node, ids bounded before any table is sized.
#include "stratum/data/hf_tokenizer_impl.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/json_file.h"
#include "stratum/data/json_node.h"
#include "stratum/data/tokenizer_file_util.h"

// Without PCRE2, HfTokenizer::load refuses every file before reading it.
#ifdef STRATUM_WITH_PCRE2

namespace stratum::data {
namespace detail {
namespace {

using json = nlohmann::json;

// The largest token id a file may use: 2^24 ids (vocabularies today stop near
// 260k) keep the id tables under a few hundred MB whatever the file says.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
// Unused ids below the largest: at most as many as the tokens given plus
// this, so ten tokens cannot claim an id table of millions.
constexpr int64_t kMaxUnusedIds = 65536;
// Sequences of pre-tokenizers or post-processors nest one level in real
// files; the JSON depth cap bounds this too, this says it by name.
constexpr int kMaxSequenceDepth = 16;

// GPT-2's ByteLevel pre-tokenizer pattern (use_regex: true).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string shown(const std::string& s) { return "'" + (s.size() > 80 ? s.substr(0, 77) + "..." : s) + "'"; }

// One id of the file, checked against the id space before any table exists.
int32_t checked_id(const Node& node) {
  const int64_t id = node.integer();
  if (id < 0 || id > kMaxTokenId)
    node.fail("id " + std::to_string(id) + " is outside [0, " + std::to_string(kMaxTokenId) +
              "]: not a token id (is this file damaged?)");
  return static_cast<int32_t>(id);
}

void read_vocab(const Node& model, HfTokenizer::Impl& t, int64_t& largest, std::string& largest_where) {
  const Node vocab = model.at("vocab");
  for (const auto& [token, value] : vocab.object().items()) {
    const Node entry = vocab.member(token, value);
    const int32_t id = checked_id(entry);
    t.vocab.emplace(token, id);
    if (id > largest) largest = id, largest_where = entry.path();
  }
}

void read_added_tokens(const Node& root, HfTokenizer::Impl& t, int64_t& largest, std::string& largest_where) {
  const Node list = root.get("added_tokens");
  if (list.is_null()) return;
  std::unordered_map<std::string, int32_t> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const Node item = list.at(i);
    const std::string content = item.at("content").string();
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (item.boolean_or(flag, false))
        item.fail("added token " + shown(content) + " has " + flag + ", which is not supported");
    const int32_t id = checked_id(item.at("id"));
    if (content.empty()) item.fail("added token " + std::to_string(id) + " is empty");
    if (auto [it, fresh] = seen.emplace(content, id); !fresh)
      item.fail("added token " + shown(content) + " is given twice (ids " + std::to_string(it->second) + " and " +
                std::to_string(id) + ")");
    t.added.emplace_back(content, id);
    if (id > largest) largest = id, largest_where = item.path() + ".id";
  }
  std::stable_sort(t.added.begin(), t.added.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

// The id tables, once the ids are known to be few and bounded; every id is
// given once, except an added token that repeats its vocabulary entry.
void build_id_tables(const Node& root, HfTokenizer::Impl& t, int64_t largest, const std::string& largest_where) {
  const int64_t tokens = static_cast<int64_t>(t.vocab.size() + t.added.size());
  t.size = largest + 1;
  if (t.size - tokens > tokens + kMaxUnusedIds)
    throw Error(root.file() + ": " + largest_where + ": id " + std::to_string(largest) + " leaves " +
                std::to_string(t.size - tokens) + " ids unused among " + std::to_string(tokens) +
                " tokens (at most as many as the tokens plus " + std::to_string(kMaxUnusedIds) +
                "): token ids must be (nearly) contiguous from 0");
  t.id_text.assign(static_cast<size_t>(t.size), std::string());
  t.id_used.assign(static_cast<size_t>(t.size), false);
  t.id_added.assign(static_cast<size_t>(t.size), false);
  // The vocabulary in id order, so that which of two duplicates is named does not depend on hashing.
  std::vector<std::pair<int32_t, const std::string*>> by_id;
  by_id.reserve(t.vocab.size());
  for (const auto& [token, id] : t.vocab) by_id.emplace_back(id, &token);
  std::sort(by_id.begin(), by_id.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : *a.second < *b.second; });
  for (const auto& [id, token] : by_id) {
    if (t.id_used[id])
      throw Error(root.file() + ": model.vocab[\"" + *token + "\"]: id " + std::to_string(id) + " is also the id of " +
                  shown(t.id_text[id]) + ": each token needs its own id");
    t.id_text[id] = *token;
    t.id_used[id] = true;
  }
  for (const auto& [content, id] : t.added) {
    if (t.id_added[id])
      throw Error(root.file() + ": added_tokens: id " + std::to_string(id) + " is given to both " +
                  shown(t.id_text[id]) + " and " + shown(content));
    if (t.id_used[id] && t.id_text[id] != content)
      throw Error(root.file() + ": added_tokens: " + shown(content) + " has id " + std::to_string(id) +
                  ", the id of the vocabulary's " + shown(t.id_text[id]) + ": each token needs its own id");
    t.id_text[id] = content;
    t.id_used[id] = true;
    t.id_added[id] = true;
  }
}

void read_byte_ids(const Node& root, HfTokenizer::Impl& t) {
  t.byte_ids.resize(256);
  for (int b = 0; b < 256; ++b) {
    t.char_byte[t.alphabet[b]] = b;
    auto it = t.vocab.find(t.alphabet[b]);
    if (it == t.vocab.end())
      throw Error(root.file() + ": model.vocab lacks byte " + std::to_string(b) + " (" + shown(t.alphabet[b]) +
                  "): not a byte-level BPE");
    t.byte_ids[b] = it->second;
  }
}

void read_merges(const Node& model, HfTokenizer::Impl& t) {
  const Node merges = model.at("merges");
  const size_t count = merges.size();
  if (count > size_t(std::numeric_limits<int32_t>::max())) merges.fail("too many merges");
  t.merges.reserve(count);
  for (size_t rank = 0; rank < count; ++rank) {
    const Node m = merges.at(rank);
    std::string left, right;
    if (m.value().is_string()) {  // the older form: "left right"
      const std::string s = m.string();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) m.fail(shown(s) + " is not 'left right'");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.value().is_array() && m.value().size() == 2) {
      left = m.at(0).string();
      right = m.at(1).string();
    } else {
      m.fail("is neither 'left right' nor [left, right]");
    }
    const auto l = t.vocab.find(left), r = t.vocab.find(right), lr = t.vocab.find(left + right);
    if (l == t.vocab.end() || r == t.vocab.end() || lr == t.vocab.end())
      m.fail("(" + shown(left) + ", " + shown(right) + ") names a token the vocabulary lacks");
    t.merges.emplace(pair_key(l->second, r->second), std::make_pair(static_cast<int32_t>(rank), lr->second));
  }
}

void read_pre_tokenizer(const Node& node, HfTokenizer::Impl& t, int depth) {
  if (node.is_null()) return;
  if (depth > kMaxSequenceDepth) node.fail("Sequences nest deeper than " + std::to_string(kMaxSequenceDepth));
  const std::string type = node.string_or("type", "");
  if (type == "Sequence") {
    const Node list = node.at("pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) read_pre_tokenizer(list.at(i), t, depth + 1);
    return;
  }
  PreTokenizerStep step{};
  if (type == "Split") {
    if (node.boolean_or("invert", false)) node.fail("invert = true is not supported");
    const std::string behavior = node.string_or("behavior", "");
    if (behavior != "Isolated" && behavior != "Removed")
      node.fail("behavior '" + behavior + "' is not supported (Isolated, Removed)");
    const Node pattern = node.at("pattern");
    const bool literal = pattern.has("String");
    const Node text = pattern.at(literal ? "String" : "Regex");
    step.kind = PreTokenizerStep::split;
    step.regex = compile_regex(text.string(), literal, t.path + ": " + text.path());
    step.remove_matches = behavior == "Removed";
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::byte_level;
    step.add_prefix_space = node.boolean_or("add_prefix_space", false);
    if (node.boolean_or("use_regex", true))
      step.regex = compile_regex(kGpt2Pattern, false, t.path + ": " + node.path() + " (GPT-2's pattern)");
  } else {
    throw Error(t.path + ": " + node.path() + ".type '" + type +
                "' is not supported (Split, ByteLevel, Sequence; for a SentencePiece model such as Llama-2's pass "
                "its tokenizer.model)");
  }
  if (!t.steps.empty() && t.steps.back().kind == PreTokenizerStep::byte_level)
    node.fail("a pre-tokenizer after ByteLevel is not supported");
  t.steps.push_back(std::move(step));
}

// The ids a TemplateProcessing special token stands for, each a token of the file.
void read_special_ids(const Node& ids, const HfTokenizer::Impl& t, std::vector<int32_t>& out) {
  for (size_t k = 0; k < ids.size(); ++k) {
    const Node item = ids.at(k);
    const int32_t id = checked_id(item);
    if (id >= t.size || !t.id_used[id]) item.fail("id " + std::to_string(id) + " is not a token of the vocabulary");
    out.push_back(id);
  }
}

void read_post_processor(const Node& node, HfTokenizer::Impl& t, int depth) {
  if (node.is_null()) return;
  if (depth > kMaxSequenceDepth) node.fail("Sequences nest deeper than " + std::to_string(kMaxSequenceDepth));
  const std::string type = node.string_or("type", "");
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const Node list = node.at("processors");
    for (size_t i = 0; i < list.size(); ++i) read_post_processor(list.at(i), t, depth + 1);
    return;
  }
  if (type != "TemplateProcessing")
    throw Error(t.path + ": " + node.path() + ".type '" + type +
                "' is not supported (TemplateProcessing, ByteLevel, Sequence)");
  const Node specials = node.get("special_tokens");
  const Node single = node.at("single");
  bool after = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const Node item = single.at(i);
    if (item.has("Sequence")) {
      after = true;
      continue;
    }
    const std::string id = item.at("SpecialToken").at("id").string();
    if (!specials.has(id)) throw Error(t.path + ": " + specials.path() + " has no '" + id + "'");
    read_special_ids(specials.at(id).at("ids"), t, after ? t.suffix : t.prefix);
  }
}

// bos_token / eos_token: "x", {"content": "x"}, or null.
std::string special_token_text(const Node& node) {
  if (node.is_null()) return {};
  if (node.value().is_string()) return node.string();
  if (node.value().is_object()) return node.at("content").string();
  node.fail("expected a string or {\"content\": \"...\"}, found " + std::string(node.value().type_name()));
}

void read_tokenizer_config(std::string_view text, const std::string& source, HfTokenizer::Impl& t) {
  const json config = parse_json_text(text, source, "a tokenizer_config.json");
  const Node root(config, "", source);
  root.object();
  const std::string bos = special_token_text(root.get("bos_token"));
  const std::string eos = special_token_text(root.get("eos_token"));
  if (!bos.empty()) t.bos = t.lookup(bos, source + ": bos_token");
  if (!eos.empty()) t.eos = t.lookup(eos, source + ": eos_token");
  if (root.boolean_or("add_bos_token", false) && t.bos >= 0 && t.prefix.empty()) t.prefix.push_back(t.bos);
  if (root.boolean_or("add_eos_token", false) && t.eos >= 0 && t.suffix.empty()) t.suffix.push_back(t.eos);
}

void read_model(const Node& root, HfTokenizer::Impl& t) {
  const Node normalizer = root.get("normalizer");
  if (!normalizer.is_null())
    throw Error(t.path + ": normalizer '" + normalizer.string_or("type", "?") +
                "' is not supported (byte-level BPE files such as GPT-2's and Llama-3's have none)");
  const Node model = root.at("model");
  const std::string type = model.string_or("type", "");
  if (type != "BPE") throw Error(t.path + ": model.type '" + type + "' is not supported (BPE)");
  if (!model.get("dropout").is_null()) model.fail("dropout is not supported");
  if (model.boolean_or("byte_fallback", false)) model.fail("byte_fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model.string_or(key, "").empty()) model.fail(std::string(key) + " is not supported");
  t.ignore_merges = model.boolean_or("ignore_merges", false);

  int64_t largest = -1;
  std::string largest_where;
  read_vocab(model, t, largest, largest_where);
  read_added_tokens(root, t, largest, largest_where);
  build_id_tables(root, t, largest, largest_where);
  read_byte_ids(root, t);
  read_merges(model, t);
}

}  // namespace

std::unique_ptr<HfTokenizer::Impl> parse_tokenizer_json(std::string_view text, const std::string& path,
                                                        std::string_view config_text, const std::string& config_path) {
  auto t = std::make_unique<HfTokenizer::Impl>();
  t->path = path;
  const json root_json = parse_json_text(text, path, "a tokenizer.json");
  const Node root(root_json, "", path);
  if (!root_json.is_object()) throw Error(path + ": not a tokenizer.json (the top level is not an object)");
  read_model(root, *t);
  read_pre_tokenizer(root.get("pre_tokenizer"), *t, 0);
  if (t->steps.empty() || t->steps.back().kind != PreTokenizerStep::byte_level)
    throw Error(path + ": the pre-tokenizer does not end with ByteLevel: not a byte-level BPE");
  const Node decoder = root.get("decoder");
  if (!decoder.is_null() && decoder.string_or("type", "") != "ByteLevel")
    throw Error(path + ": decoder.type '" + decoder.string_or("type", "") + "' is not supported (ByteLevel)");
  read_post_processor(root.get("post_processor"), *t, 0);

  uint64_t hash = fnv1a(text);
  t->files = {path};
  if (!config_path.empty()) {  // special tokens as tokenizer_config.json says
    t->files.push_back(config_path);
    hash = fnv1a(config_text, hash);
    read_tokenizer_config(config_text, config_path, *t);
  }
  t->name = tokenizer_name("hf", t->size, hash);
  return t;
}

}  // namespace detail

int32_t HfTokenizer::Impl::lookup(const std::string& token, const std::string& where) const {
  for (const auto& [text, id] : added)
    if (text == token) return id;
  auto it = vocab.find(token);
  if (it == vocab.end()) throw Error(where + " " + detail::shown(token) + " is not a token of the vocabulary");
  return it->second;
}

}  // namespace stratum::data

#endif
