#include "stratum/data/hf_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/json_file.h"
#include "stratum/data/tokenizer_file_util.h"

#ifdef STRATUM_WITH_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace stratum::data {

#ifndef STRATUM_WITH_PCRE2

struct HfTokenizer::Impl {};
bool hf_tokenizer_available() { return false; }
namespace {
[[noreturn]] void no_pcre2(const std::string& path) {
  throw Error(path + ": this build of Stratum has no PCRE2, which tokenizer.json's regular expressions need; install "
                     "libpcre2-dev (Debian/Ubuntu) and rebuild");
}
}  // namespace
std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) { no_pcre2(path); }
std::unique_ptr<HfTokenizer> HfTokenizer::load_from_text(std::string_view, const std::string& source, std::string_view,
                                                         const std::string&) {
  no_pcre2(source);
}
std::vector<std::string> split_by_pattern(const std::string&, std::string_view, size_t, const std::string& source) {
  no_pcre2(source);
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

// The largest token id a file may use: 2^24 ids (vocabularies today stop near
// 260k) keep the id tables under a few hundred MB whatever the file says.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
// Unused ids below the largest: at most as many as the tokens given plus
// this, so ten tokens cannot claim an id table of millions.
constexpr int64_t kMaxUnusedIds = 65536;
// Sequences of pre-tokenizers or post-processors nest one level in real
// files; the JSON depth cap bounds this too, this says it by name.
constexpr int kMaxSequenceDepth = 16;
// Regular expressions from the file: pattern size, parenthesis nesting, and
// what one pcre2_match call may spend: backtracking steps (a base plus some
// per byte of its window, as a run of n spaces costs ~n steps in a pattern
// like Llama-3's \s*[\r\n]+), depth and heap KiB.
constexpr size_t kMaxPatternBytes = 64 * 1024;
constexpr uint32_t kMaxPatternParens = 64;
constexpr uint64_t kMatchLimitBase = 20'000;
constexpr uint64_t kMatchLimitPerByte = 16;
constexpr uint32_t kMatchDepthLimit = 100'000;
constexpr uint32_t kMatchHeapKiB = 64 * 1024;
// The budget of one encode() for its regular expressions: the bytes each
// match call may read, summed, at most kBudgetPerByte per byte split plus
// kBudgetBaseBytes. Real patterns read ~1-3 bytes per byte (see the tests); a
// pattern that reads ahead to the end of the text at every match needs ~n^2.
constexpr uint64_t kBudgetPerByte = 16;
constexpr uint64_t kBudgetBaseBytes = uint64_t{1} << 20;

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

std::string shown(const std::string& s) { return "'" + (s.size() > 80 ? s.substr(0, 77) + "..." : s) + "'"; }

// ---------------------------------------------------------------------------
// A value of a file with its key path, so that every error names the file and
// the key ("pre_tokenizer.pretokenizers[1].pattern.Regex") and says what was
// expected and what is there. No nlohmann getter runs on unchecked file data.
class Node {
 public:
  Node(const json& value, std::string path, const std::string& file)
      : value_(&value), path_(std::move(path)), file_(&file) {}

  const json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return *file_; }
  bool is_null() const { return value_->is_null(); }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(*file_ + ": " + (path_.empty() ? std::string() : path_ + ": ") + what);
  }

  // The member `key`, which must be there (an object is required).
  Node at(const std::string& key) const {
    object();
    auto it = value_->find(key);
    if (it == value_->end()) fail("has no \"" + key + "\"");
    return Node(*it, child_path(key), *file_);
  }
  // The member `key`, or null when it is absent.
  Node get(const std::string& key) const {
    static const json null;
    object();
    auto it = value_->find(key);
    return Node(it == value_->end() ? null : *it, child_path(key), *file_);
  }
  bool has(const std::string& key) const { return value_->is_object() && value_->contains(key); }
  Node at(size_t i) const { return Node((*value_)[i], path_ + "[" + std::to_string(i) + "]", *file_); }
  Node member(const std::string& key, const json& v) const {
    return Node(v, path_ + "[\"" + key + "\"]", *file_);
  }

  const json& object() const {
    if (!value_->is_object()) expected("an object");
    return *value_;
  }
  const json& array() const {
    if (!value_->is_array()) expected("an array");
    return *value_;
  }
  size_t size() const { return array().size(); }
  std::string string() const {
    if (!value_->is_string()) expected("a string");
    return value_->get_ref<const std::string&>();
  }
  bool boolean() const {
    if (!value_->is_boolean()) expected("true or false");
    return value_->get<bool>();
  }
  // An integer, never a float truncated: 5.7 and 5.0 are refused alike.
  int64_t integer() const {
    if (!value_->is_number_integer()) expected("an integer");
    if (value_->is_number_unsigned()) {
      const uint64_t v = value_->get<uint64_t>();
      if (v > uint64_t(std::numeric_limits<int64_t>::max())) fail("the integer " + value_->dump() + " is too large");
      return static_cast<int64_t>(v);
    }
    return value_->get<int64_t>();
  }
  // Optional members: absent or null gives the fallback, another type fails.
  std::string string_or(const std::string& key, const std::string& fallback) const {
    const Node n = get(key);
    return n.is_null() ? fallback : n.string();
  }
  bool boolean_or(const std::string& key, bool fallback) const {
    const Node n = get(key);
    return n.is_null() ? fallback : n.boolean();
  }

 private:
  std::string child_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  [[noreturn]] void expected(const std::string& what) const {
    std::string found = value_->dump();
    if (found.size() > 40) found = found.substr(0, 37) + "...";
    fail("expected " + what + ", found " + std::string(value_->type_name()) + " " + found);
  }

  const json* value_;
  std::string path_;
  const std::string* file_;
};

// ---------------------------------------------------------------------------
// Regular expressions from the file, compiled and matched under limits.
struct Regex {
  pcre2_code* code = nullptr;
  pcre2_match_context* limits = nullptr;
  std::string where;  // "<file>: <key path>", for messages

  Regex(const std::string& pattern, bool literal, std::string where_) : where(std::move(where_)) {
    if (pattern.size() > kMaxPatternBytes)
      throw Error(where + ": the regular expression is " + std::to_string(pattern.size()) + " bytes, over the limit of " +
                  std::to_string(kMaxPatternBytes));
    pcre2_compile_context* compile = pcre2_compile_context_create(nullptr);
    pcre2_set_parens_nest_limit(compile, kMaxPatternParens);
    pcre2_set_max_pattern_length(compile, kMaxPatternBytes);
    int error = 0;
    PCRE2_SIZE offset = 0;
    // PCRE2_LITERAL refuses PCRE2_UCP, which a literal does not need.
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset,
                         compile);
    pcre2_compile_context_free(compile);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw Error(where + ": the regular expression does not compile at offset " + std::to_string(offset) + ": " +
                  reinterpret_cast<const char*>(message));
    }
    // Where JIT is unavailable the interpreter runs, under the same limits.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
    limits = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(limits, kMatchLimitBase);
    pcre2_set_depth_limit(limits, kMatchDepthLimit);
    pcre2_set_heap_limit(limits, kMatchHeapKiB);
  }
  ~Regex() {
    pcre2_match_context_free(limits);
    pcre2_code_free(code);
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
};

// The bytes the regular expressions of one encode() may read, summed.
struct WorkBudget {
  uint64_t limit = kBudgetBaseBytes, used = 0;
};

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

size_t next_character(std::string_view text, size_t at) {
  ++at;
  while (at < text.size() && continuation_byte(text[at])) ++at;
  return at;
}

// Matches one regular expression over a text window by window, so that the
// bytes each match call may read are known and charged to the budget.
//
// A call sees text[0, end) and starts at `from` (earlier text stays visible
// to lookbehind) with PCRE2_PARTIAL_HARD unless end is the text's end: a
// complete match is then exactly the whole text's match (no path before it
// reached the window's end), NOMATCH means no match starts before `end`, and
// a partial match at p means the attempt at p needs more text; p alone is
// then retried anchored in doubling windows. Unanchored calls are charged the
// bytes they advance over (each reads at most a window past its start),
// anchored ones their whole window.
class WindowedMatcher {
 public:
  WindowedMatcher(const Regex& regex, std::string_view text, size_t window, WorkBudget& budget)
      : regex_(regex), text_(text), window_(std::max<size_t>(window, 1)), budget_(budget),
        match_(pcre2_match_data_create_from_pattern(regex.code, nullptr)),
        limits_(pcre2_match_context_copy(regex.limits)) {
    if (!match_ || !limits_) throw Error(regex.where + ": out of memory for a regular expression match");
  }
  ~WindowedMatcher() {
    pcre2_match_context_free(limits_);
    pcre2_match_data_free(match_);
  }
  WindowedMatcher(const WindowedMatcher&) = delete;
  WindowedMatcher& operator=(const WindowedMatcher&) = delete;

  // The first match starting at or after `from`: true and [begin, end), or false.
  bool find(size_t from, size_t& begin, size_t& end) {
    while (from <= text_.size()) {
      const size_t stop = window_end(from, window_);
      const int rc = run(from, stop, 0);
      if (rc >= 0) {
        read_match(begin, end);
        charge(std::max(end, begin) - std::min(from, begin), begin);
        return true;
      }
      if (rc == PCRE2_ERROR_NOMATCH) {
        charge(stop - from, from);
        if (stop == text_.size()) return false;
        from = stop;
        continue;
      }
      // Partial: the attempt at p reached the window's end.
      const size_t p = std::clamp<size_t>(pcre2_get_ovector_pointer(match_)[0], from, stop);
      charge(p - from, p);
      if (resolve_at(p, stop, begin, end)) return true;
      if (p >= text_.size()) return false;
      from = next_character(text_, p);
    }
    return false;
  }

 private:
  // Min(text end, from + size), moved forward to a character boundary.
  size_t window_end(size_t from, size_t size) const {
    size_t stop = size >= text_.size() - from ? text_.size() : from + size;
    while (stop < text_.size() && continuation_byte(text_[stop])) ++stop;
    return stop;
  }

  int run(size_t from, size_t stop, uint32_t options) {
    if (stop < text_.size()) options |= PCRE2_PARTIAL_HARD;
    const uint64_t steps = kMatchLimitBase + kMatchLimitPerByte * (stop - from);
    pcre2_set_match_limit(limits_, static_cast<uint32_t>(std::min<uint64_t>(steps, UINT32_MAX)));
    const int rc = pcre2_match(regex_.code, reinterpret_cast<PCRE2_SPTR>(text_.data()), stop, from,
                               options | PCRE2_NO_UTF_CHECK, match_, limits_);
    if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) return rc;
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof message);
    throw Error(regex_.where + ": the regular expression failed at byte " + std::to_string(from) + " of a " +
                std::to_string(text_.size()) + "-byte piece of the text: " + reinterpret_cast<const char*>(message) +
                " (it backtracks too much: simplify the pattern)");
  }

  // The attempt at p alone, in windows doubling from twice `stop - p`.
  bool resolve_at(size_t p, size_t stop, size_t& begin, size_t& end) {
    size_t size = std::max<size_t>(2 * (stop - p), 2 * window_);
    while (true) {
      const size_t limit = window_end(p, size);
      const int rc = run(p, limit, PCRE2_ANCHORED);
      charge(limit - p, p);
      if (rc >= 0) {
        read_match(begin, end);
        return true;
      }
      if (rc == PCRE2_ERROR_NOMATCH) return false;
      size = size > text_.size() ? text_.size() : 2 * size;
    }
  }

  void read_match(size_t& begin, size_t& end) const {
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_);
    begin = std::min<size_t>(ov[0], text_.size());
    end = std::clamp<size_t>(ov[1], begin, text_.size());  // \K may put the start after the end
  }

  void charge(uint64_t bytes, size_t at) {
    budget_.used += bytes;
    if (budget_.used <= budget_.limit) return;
    throw Error(regex_.where + ": the regular expression needs more work than the text allows: " +
                std::to_string(budget_.used) + " bytes read for a text of " + std::to_string(text_.size()) +
                " bytes (limit " + std::to_string(budget_.limit) + "), at byte " + std::to_string(at) +
                "; the pattern reads ahead to the end of the text at every match (e.g. an unbounded lookahead or "
                "a repetition followed by something the text lacks): bound it");
  }

  const Regex& regex_;
  std::string_view text_;
  size_t window_;
  WorkBudget& budget_;
  pcre2_match_data* match_;
  pcre2_match_context* limits_;  // the regex's, with a match limit for each call's window
};

// Cuts `text` at the regular expression's matches: the text between them,
// and the matches themselves unless `remove`. Empty matches cut nothing.
void split_regex(const Regex& regex, bool remove, std::string_view text, size_t window, WorkBudget& budget,
                 std::vector<std::string_view>& out) {
  budget.limit += kBudgetPerByte * text.size();
  WindowedMatcher matcher(regex, text, window, budget);
  size_t start = 0, last = 0, b = 0, e = 0;
  while (start < text.size() && matcher.find(start, b, e)) {
    if (e == b) {  // an empty match: step over one character
      start = next_character(text, std::max(b, start));
      continue;
    }
    if (b > last) out.push_back(text.substr(last, b - last));
    if (!remove) out.push_back(text.substr(b, e - b));
    last = start = e;
  }
  if (last < text.size()) out.push_back(text.substr(last));
}

struct PreTokenizerStep {
  enum Kind { split, byte_level } kind;
  std::shared_ptr<Regex> regex;  // split; byte_level with use_regex
  bool remove_matches = false;   // split: behaviour Removed
  bool add_prefix_space = false;  // byte_level
};

// (left << 32 | right) for a merge table key.
uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

}  // namespace

struct HfTokenizer::Impl {
  std::string path, name;
  std::vector<std::string> files;  // tokenizer.json, and its tokenizer_config.json if any
  std::vector<std::string> alphabet = byte_alphabet();
  std::unordered_map<std::string, int> char_byte;  // alphabet character -> byte
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // pair_key -> (rank, merged id)
  std::vector<int32_t> byte_ids;                                     // byte -> id of its alphabet character
  std::vector<std::string> id_text;                                  // id -> token text (alphabet or added)
  std::vector<bool> id_used;                                         // id names a token (ids may have holes)
  std::vector<bool> id_added;
  std::vector<std::pair<std::string, int32_t>> added;  // added tokens, longest first
  std::vector<PreTokenizerStep> steps;
  size_t regex_window = kRegexWindowBytes;
  bool ignore_merges = false;
  std::vector<int32_t> prefix, suffix;  // what the post-processor puts around a text
  int32_t bos = -1, eos = -1;
  int64_t size = 0;

  void pre_tokenize(std::string_view text, WorkBudget& budget, std::vector<std::string>& pieces) const;
  void bpe(const std::string& piece, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, WorkBudget& budget, std::vector<int32_t>& out,
                    std::unordered_map<std::string, std::vector<int32_t>>& cache) const;
  int32_t lookup(const std::string& token, const std::string& where) const;
};

void HfTokenizer::Impl::pre_tokenize(std::string_view text, WorkBudget& budget,
                                     std::vector<std::string>& pieces) const {
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
      split_regex(*step.regex, step.remove_matches, piece, regex_window, budget, cut);
      for (auto v : cut) next.emplace_back(v);
    }
    current.swap(next);
  }
  for (auto& p : current)
    if (!p.empty()) pieces.push_back(std::move(p));
}

// BPE as Hugging Face tokenizers' Word::merge_all does it: the symbols in a
// linked list, the mergeable adjacent pairs in a min-heap of (rank, position);
// the lowest rank merges first, the leftmost on a tie, which is what
// rescanning all pairs after each merge gives, in O(n log n).
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
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1: none
    bool merged_away;
  };
  struct Candidate {
    int32_t rank, pos;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  if (piece.size() > size_t(std::numeric_limits<int32_t>::max()))
    throw Error(path + ": a piece of " + std::to_string(piece.size()) + " bytes is too long to tokenize");
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(piece.size());
  for (int32_t i = 0; i < n; ++i)
    symbols[i] = {byte_ids[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1, false};
  auto rank_of = [&](int32_t pos) -> int32_t {  // the rank of the pair starting at pos, or -1
    const int32_t right = symbols[pos].next;
    if (right < 0) return -1;
    auto it = merges.find(pair_key(symbols[pos].id, symbols[right].id));
    return it == merges.end() ? -1 : it->second.first;
  };
  std::vector<Candidate> initial;
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const int32_t rank = rank_of(i); rank >= 0) initial.push_back({rank, i});
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap(std::greater<Candidate>(),
                                                                                       std::move(initial));
  auto offer = [&](int32_t pos) {
    if (const int32_t rank = rank_of(pos); rank >= 0) heap.push({rank, pos});
  };
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    // Stale when either symbol changed since: the pair there now has another rank (or none).
    if (symbols[top.pos].merged_away || rank_of(top.pos) != top.rank) continue;
    Symbol& left = symbols[top.pos];
    Symbol& right = symbols[left.next];
    left.id = merges.at(pair_key(left.id, right.id)).second;
    right.merged_away = true;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) offer(left.prev);
    offer(top.pos);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) out.push_back(symbols[i].id);
}

void HfTokenizer::Impl::encode_plain(std::string_view text, WorkBudget& budget, std::vector<int32_t>& out,
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

int32_t HfTokenizer::Impl::lookup(const std::string& token, const std::string& where) const {
  for (const auto& [text, id] : added)
    if (text == token) return id;
  auto it = vocab.find(token);
  if (it == vocab.end()) throw Error(where + " " + shown(token) + " is not a token of the vocabulary");
  return it->second;
}

namespace {

using detail::fnv1a;

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
    step.regex = std::make_shared<Regex>(text.string(), literal, t.path + ": " + text.path());
    step.remove_matches = behavior == "Removed";
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::byte_level;
    step.add_prefix_space = node.boolean_or("add_prefix_space", false);
    if (node.boolean_or("use_regex", true))
      step.regex = std::make_shared<Regex>(kGpt2Pattern, false, t.path + ": " + node.path() + " (GPT-2's pattern)");
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

std::unique_ptr<HfTokenizer::Impl> parse(std::string_view text, const std::string& path, std::string_view config_text,
                                         const std::string& config_path) {
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
  t->name = detail::tokenizer_name("hf", t->size, hash);
  return t;
}

}  // namespace

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
    return std::unique_ptr<HfTokenizer>(new HfTokenizer(parse(text, source, config_text, config_source)));
  } catch (const nlohmann::json::exception& e) {  // a check missed above: still name the file
    throw Error(source + ": " + e.what());
  }
}

std::vector<std::string> split_by_pattern(const std::string& pattern, std::string_view text, size_t window_bytes,
                                          const std::string& source) {
  const Regex regex(pattern, false, source);
  WorkBudget budget;
  std::vector<std::string_view> cut;
  split_regex(regex, false, text, window_bytes, budget, cut);
  return std::vector<std::string>(cut.begin(), cut.end());
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
  WorkBudget budget;
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
