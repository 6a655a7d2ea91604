#include "stratum/data/sentencepiece_model_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "stratum/core/error.h"

namespace stratum::data {
namespace {

const char* const kRedownload = "the file is damaged or not a SentencePiece model; download it again";

[[noreturn]] void refuse(const std::string& source, const std::string& field, const std::string& problem) {
  throw Error(source + ": " + field + ": " + problem + "; " + kRedownload);
}

// ---- Protobuf wire format: only what ModelProto uses ----------------------

enum WireType : int { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

struct WireField {
  uint32_t number = 0;
  int wire_type = 0;
  uint64_t varint = 0;     // kVarint
  uint32_t fixed32 = 0;    // kFixed32
  std::string_view bytes;  // kLengthDelimited
};

// Reads one message's fields in order; every read is bounds-checked. Groups
// (wire types 3 and 4, deprecated, never in a ModelProto) are refused: the
// protobuf library would recurse into them.
class WireReader {
 public:
  // `message` names it in errors, with "[index]" when index >= 0 (built only
  // on an error: a model has up to millions of pieces).
  WireReader(std::string_view bytes, const std::string& source, const char* message, int64_t index = -1)
      : bytes_(bytes), source_(source), message_(message), index_(index) {}

  bool done() const { return pos_ == bytes_.size(); }

  WireField next() {
    const size_t start = pos_;
    const uint64_t key = read_varint("a field key", 0);
    WireField f;
    f.wire_type = static_cast<int>(key & 7);
    if ((key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF)
      fail("field number " + std::to_string(key >> 3) + " at byte " + std::to_string(start) + " is not valid");
    f.number = static_cast<uint32_t>(key >> 3);
    switch (f.wire_type) {
      case kVarint: f.varint = read_varint("field", f.number); break;
      case kFixed64: take(8, f.number); break;
      case kFixed32: {
        const std::string_view b = take(4, f.number);
        f.fixed32 = static_cast<uint32_t>(static_cast<unsigned char>(b[0])) |
                    static_cast<uint32_t>(static_cast<unsigned char>(b[1])) << 8 |
                    static_cast<uint32_t>(static_cast<unsigned char>(b[2])) << 16 |
                    static_cast<uint32_t>(static_cast<unsigned char>(b[3])) << 24;
        break;
      }
      case kLengthDelimited: {
        const uint64_t length = read_varint("the length of field", f.number);
        if (length > bytes_.size() - pos_)
          fail("field " + std::to_string(f.number) + " at byte " + std::to_string(start) + " says " +
               std::to_string(length) + " bytes, but only " + std::to_string(bytes_.size() - pos_) + " remain");
        f.bytes = take(static_cast<size_t>(length), f.number);
        break;
      }
      default:
        fail("field " + std::to_string(f.number) + " at byte " + std::to_string(start) + " has wire type " +
             std::to_string(f.wire_type) + ", which no SentencePiece model uses");
    }
    return f;
  }

  [[noreturn]] void fail(const std::string& problem) const { refuse(source_, name(), problem); }

  // A known field with the wrong wire type: the protobuf library would keep
  // it as an unknown field and the model would silently differ from the file.
  void expect(const WireField& f, int wire_type, const char* name) const {
    if (f.wire_type != wire_type)
      refuse(source_, this->name() + "." + name,
             "has wire type " + std::to_string(f.wire_type) + ", expected " + std::to_string(wire_type));
  }

 private:
  // `what` and `number` name the varint in errors ("field 3"; number 0: none).
  uint64_t read_varint(const char* what, uint32_t number) {
    auto name = [&] {
      std::string out = what;
      if (number != 0) out += ' ' + std::to_string(number);
      return out;
    };
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ == bytes_.size()) fail(name() + " is cut off at byte " + std::to_string(pos_));
      const auto byte = static_cast<unsigned char>(bytes_[pos_++]);
      if (shift == 63 && byte > 1) fail(name() + " at byte " + std::to_string(pos_ - 1) + " overflows 64 bits");
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail(name() + " at byte " + std::to_string(pos_) + " is a varint longer than 10 bytes");
  }

  std::string_view take(size_t n, uint32_t number) {
    if (n > bytes_.size() - pos_)
      fail("field " + std::to_string(number) + " is cut off at byte " + std::to_string(pos_));
    const std::string_view out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  std::string name() const {
    return index_ < 0 ? std::string(message_) : std::string(message_) + "[" + std::to_string(index_) + "]";
  }

  std::string_view bytes_;
  size_t pos_ = 0;
  const std::string& source_;
  const char* message_;
  int64_t index_;
};

// ---- ModelProto, as far as the library depends on it ----------------------
// A singular field given twice keeps the last value and a singular message
// given twice is merged field by field, as protobuf parses them: each
// occurrence below overwrites what the earlier ones set.

struct Piece {
  std::string_view piece;
  float score = 0;
  int32_t type = 1;  // NORMAL
};

struct Trainer {
  int64_t model_type = 1;  // UNIGRAM
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  bool byte_fallback = false;
};

struct Normalizer {
  bool present = false;
  std::string_view charsmap;
};

struct Model {
  std::vector<Piece> pieces;
  Trainer trainer;
  Normalizer normalizer, denormalizer;
};

Piece read_piece(std::string_view bytes, const std::string& source, int64_t index) {
  Piece p;
  WireReader r(bytes, source, "pieces", index);
  while (!r.done()) {
    const WireField f = r.next();
    if (f.number == 1) {
      r.expect(f, kLengthDelimited, "piece");
      p.piece = f.bytes;
    } else if (f.number == 2) {
      r.expect(f, kFixed32, "score");
      std::memcpy(&p.score, &f.fixed32, sizeof p.score);
    } else if (f.number == 3) {
      r.expect(f, kVarint, "type");
      p.type = static_cast<int32_t>(f.varint);
    }
  }
  return p;
}

void read_trainer(std::string_view bytes, const std::string& source, Trainer& t) {
  WireReader r(bytes, source, "trainer_spec");
  while (!r.done()) {
    const WireField f = r.next();
    auto int32_field = [&](const char* name, int32_t& out) {
      r.expect(f, kVarint, name);
      out = static_cast<int32_t>(static_cast<uint32_t>(f.varint));  // protobuf keeps the low 32 bits
    };
    switch (f.number) {
      case 3: r.expect(f, kVarint, "model_type"); t.model_type = static_cast<int32_t>(f.varint); break;
      case 35: r.expect(f, kVarint, "byte_fallback"); t.byte_fallback = f.varint != 0; break;
      case 40: int32_field("unk_id", t.unk_id); break;
      case 41: int32_field("bos_id", t.bos_id); break;
      case 42: int32_field("eos_id", t.eos_id); break;
      case 43: int32_field("pad_id", t.pad_id); break;
      default: break;
    }
  }
}

void read_normalizer(std::string_view bytes, const std::string& source, const char* name, Normalizer& n) {
  n.present = true;
  WireReader r(bytes, source, name);
  while (!r.done()) {
    const WireField f = r.next();
    if (f.number == 2) {
      r.expect(f, kLengthDelimited, "precompiled_charsmap");
      n.charsmap = f.bytes;
    }
  }
}

Model read_model(std::string_view bytes, const std::string& source) {
  Model m;
  WireReader r(bytes, source, "ModelProto");
  while (!r.done()) {
    const WireField f = r.next();
    switch (f.number) {
      case 1:
        r.expect(f, kLengthDelimited, "pieces");
        if (static_cast<int64_t>(m.pieces.size()) >= kMaxSentencePiecePieces)
          refuse(source, "pieces", "more than " + std::to_string(kMaxSentencePiecePieces) + " pieces");
        m.pieces.push_back(read_piece(f.bytes, source, static_cast<int64_t>(m.pieces.size())));
        break;
      case 2: r.expect(f, kLengthDelimited, "trainer_spec"); read_trainer(f.bytes, source, m.trainer); break;
      case 3:
        r.expect(f, kLengthDelimited, "normalizer_spec");
        read_normalizer(f.bytes, source, "normalizer_spec", m.normalizer);
        break;
      case 5:
        r.expect(f, kLengthDelimited, "denormalizer_spec");
        read_normalizer(f.bytes, source, "denormalizer_spec", m.denormalizer);
        break;
      default: break;  // self_test_data (4) and unknown fields: skipped whole, as protobuf keeps them
    }
  }
  return m;
}

// ---- Checks ---------------------------------------------------------------

std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 40)) {
    if (c >= 0x20 && c != 0x7F && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return "\"" + out + (s.size() > 40 ? "...\"" : "\"");
}

void check_pieces(const std::vector<Piece>& pieces, const std::string& source) {
  if (pieces.empty()) refuse(source, "pieces", "the model has no pieces");
  std::unordered_set<std::string_view> seen;
  seen.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    auto field = [i](const char* name) { return "pieces[" + std::to_string(i) + "]." + name; };
    if (p.piece.empty()) refuse(source, field("piece"), "is empty");
    // The library builds its tries from the pieces as C strings.
    if (p.piece.find('\0') != std::string_view::npos)
      refuse(source, field("piece"), printable(p.piece) + " contains a NUL byte");
    if (!seen.insert(p.piece).second) refuse(source, field("piece"), printable(p.piece) + " is given twice");
    if (!std::isfinite(p.score))
      refuse(source, field("score"), std::to_string(p.score) + " for " + printable(p.piece) + " is not finite");
    if (p.type < 1 || p.type > 6)
      refuse(source, field("type"),
             std::to_string(p.type) + " for " + printable(p.piece) +
                 " is not a piece type (1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE)");
  }
}

void check_trainer(const Trainer& t, int64_t pieces, const std::string& source) {
  if (t.model_type < 1 || t.model_type > 4)
    refuse(source, "trainer_spec.model_type",
           std::to_string(t.model_type) + " is not a model type (1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR)");
  const std::pair<const char*, int32_t> ids[] = {
      {"unk_id", t.unk_id}, {"bos_id", t.bos_id}, {"eos_id", t.eos_id}, {"pad_id", t.pad_id}};
  for (size_t i = 0; i < 4; ++i) {
    const auto& [name, id] = ids[i];
    if (id < -1 || id >= pieces)
      refuse(source, std::string("trainer_spec.") + name,
             std::to_string(id) + " is outside the model's " + std::to_string(pieces) + " pieces (-1 means none)");
    for (size_t j = 0; j < i; ++j)
      if (id >= 0 && id == ids[j].second)
        refuse(source, std::string("trainer_spec.") + name,
               std::to_string(id) + " is also trainer_spec." + ids[j].first + "; each special token needs its own id");
  }
}

// ---- The charsmap trie ----------------------------------------------------

uint32_t load_u32le(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 | static_cast<uint32_t>(b[2]) << 16 |
         static_cast<uint32_t>(b[3]) << 24;
}

// Darts-clone's DoubleArrayUnit accessors (third_party/darts_clone/darts.h).
bool unit_has_leaf(uint32_t u) { return ((u >> 8) & 1) == 1; }
uint32_t unit_value(uint32_t u) { return u & ((1U << 31) - 1); }
uint32_t unit_label(uint32_t u) { return u & ((1U << 31) | 0xFF); }
uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1U << 9)) >> 6); }

// Walks the trie from unit 0 as commonPrefixSearch does for every possible
// input, finding its strongly connected components (Tarjan's algorithm,
// iterative) so that a cycle through a leaf, and the most leaves on any
// path, are found in one pass over the reachable units.
class CharsmapTrieWalk {
 public:
  CharsmapTrieWalk(std::string_view trie, std::string_view normalized, const std::string& source,
                   const std::string& field)
      : trie_(trie),
        normalized_(normalized),
        units_(trie.size() / 4),
        source_(source),
        field_(field),
        index_(units_, 0),
        low_(units_, 0),
        leaves_below_(units_, 0),
        state_(units_, kUnvisited) {}

  void run() {
    visit(0);
    while (!frames_.empty()) {
      Frame& f = frames_.back();
      uint32_t byte = f.next_byte;
      while (byte < 256 && unit_label(unit(f.base ^ byte)) != byte) ++byte;  // most bytes lead nowhere
      if (byte < 256) {
        f.next_byte = byte + 1;
        follow(f.pos, f.base ^ byte);  // may push a frame: f is not used after this
        continue;
      }
      const uint32_t pos = f.pos;
      frames_.pop_back();
      if (low_[pos] == index_[pos]) close_component(pos);
      if (!frames_.empty()) {
        const uint32_t parent = frames_.back().pos;
        if (state_[pos] == kOnStack) {
          low_[parent] = std::min(low_[parent], low_[pos]);
        } else {
          leaves_below_[parent] = std::max(leaves_below_[parent], leaves_below_[pos]);
        }
      }
    }
  }

 private:
  enum State : uint8_t { kUnvisited, kOnStack, kDone };
  struct Frame {
    uint32_t pos, base, next_byte;
  };

  uint32_t unit(uint32_t pos) const { return load_u32le(trie_.data() + 4 * size_t{pos}); }

  [[noreturn]] void fail(const std::string& problem) const { refuse(source_, field_, problem); }

  void follow(uint32_t from, uint32_t child) {
    if (state_[child] == kUnvisited) {
      visit(child);
    } else if (state_[child] == kOnStack) {
      low_[from] = std::min(low_[from], index_[child]);
    } else {
      leaves_below_[from] = std::max(leaves_below_[from], leaves_below_[child]);
    }
  }

  // Checks what the library reads from this unit: its 256 children and its leaf.
  void visit(uint32_t pos) {
    const uint32_t u = unit(pos);
    const uint64_t base = pos ^ unit_offset(u);
    if ((base | 0xFF) >= units_)
      fail("trie unit " + std::to_string(pos) + " points to unit " + std::to_string(base | 0xFF) +
           ", beyond the trie's " + std::to_string(units_) + " units");
    if (unit_has_leaf(u)) check_leaf(pos, static_cast<uint32_t>(base));
    index_[pos] = low_[pos] = next_index_++;
    state_[pos] = kOnStack;
    stack_.push_back(pos);
    frames_.push_back({pos, static_cast<uint32_t>(base), 0});
  }

  void check_leaf(uint32_t pos, uint32_t leaf) const {
    const uint32_t value = unit_value(unit(leaf));
    if (value >= normalized_.size())
      fail("trie unit " + std::to_string(pos) + "'s leaf (unit " + std::to_string(leaf) + ") points to byte " +
           std::to_string(value) + " of the normalized strings, beyond their " +
           std::to_string(normalized_.size()) + " bytes");
    if (normalized_.find('\0', value) == std::string_view::npos)
      fail("the normalized string at byte " + std::to_string(value) + " (trie unit " + std::to_string(pos) +
           "'s leaf) has no terminating NUL within the charsmap's " + std::to_string(normalized_.size()) +
           " bytes of normalized strings");
  }

  // Pops the component whose first unit is `root`: its leaves plus the most
  // leaves below it. A component that is a cycle must have no leaf, else one
  // input position could match without end.
  void close_component(uint32_t root) {
    const size_t first = stack_.size() - 1 - static_cast<size_t>(std::find(stack_.rbegin(), stack_.rend(), root) -
                                                                  stack_.rbegin());
    const bool cycle = stack_.size() - first > 1 || self_loop_in(root);
    int leaves = 0, below = 0;
    for (size_t i = first; i < stack_.size(); ++i) {
      const uint32_t pos = stack_[i];
      if (unit_has_leaf(unit(pos))) {
        if (cycle)
          fail("trie unit " + std::to_string(pos) + " has a leaf and lies on a cycle of trie units: one input "
               "position would match without end");
        ++leaves;
      }
      below = std::max<int>(below, leaves_below_[pos]);
    }
    const int total = leaves + below;
    if (total > kMaxCharsmapLeavesPerPath)
      fail("a path through the trie passes " + std::to_string(total) + " leaves (at trie unit " +
           std::to_string(root) + "); libsentencepiece keeps at most " +
           std::to_string(kMaxCharsmapLeavesPerPath) + " matches per position");
    for (size_t i = first; i < stack_.size(); ++i) {
      state_[stack_[i]] = kDone;
      leaves_below_[stack_[i]] = static_cast<uint8_t>(total);
    }
    stack_.resize(first);
  }

  // A unit is its own child on the byte equal to its offset (pos ^ offset ^ byte == pos).
  bool self_loop_in(uint32_t pos) const {
    const uint32_t u = unit(pos);
    return unit_offset(u) < 256 && unit_label(u) == unit_offset(u);
  }

  std::string_view trie_, normalized_;
  uint32_t units_;
  const std::string& source_;
  const std::string& field_;
  std::vector<uint32_t> index_, low_;
  std::vector<uint8_t> leaves_below_;  // at most kMaxCharsmapLeavesPerPath
  std::vector<uint8_t> state_;
  std::vector<uint32_t> stack_;
  std::vector<Frame> frames_;
  uint32_t next_index_ = 0;
};

}  // namespace

void check_precompiled_charsmap(std::string_view blob, const std::string& source, const std::string& field) {
  if (blob.empty()) return;
  if (blob.size() > kMaxPrecompiledCharsmapBytes)
    refuse(source, field,
           std::to_string(blob.size()) + " bytes, over the limit of " + std::to_string(kMaxPrecompiledCharsmapBytes));
  if (blob.size() <= 4) refuse(source, field, std::to_string(blob.size()) + " bytes cannot hold a trie size and trie");
  const uint32_t trie_bytes = load_u32le(blob.data());
  if (trie_bytes == 0 || trie_bytes % 4 != 0)
    refuse(source, field, "the trie size " + std::to_string(trie_bytes) + " is not a positive multiple of 4 bytes");
  if (trie_bytes > blob.size() - 4)
    refuse(source, field,
           "the trie size " + std::to_string(trie_bytes) + " is beyond the charsmap's " +
               std::to_string(blob.size() - 4) + " bytes after the size field");
  CharsmapTrieWalk(blob.substr(4, trie_bytes), blob.substr(4 + trie_bytes), source, field).run();
}

SentencePieceModelFacts check_sentencepiece_model(std::string_view bytes, const std::string& source) {
  if (bytes.size() > kMaxSentencePieceModelBytes)
    refuse(source, "ModelProto",
           std::to_string(bytes.size()) + " bytes, over the limit of " + std::to_string(kMaxSentencePieceModelBytes));
  const Model m = read_model(bytes, source);
  check_pieces(m.pieces, source);
  const auto pieces = static_cast<int64_t>(m.pieces.size());
  check_trainer(m.trainer, pieces, source);
  check_precompiled_charsmap(m.normalizer.charsmap, source, "normalizer_spec.precompiled_charsmap");
  check_precompiled_charsmap(m.denormalizer.charsmap, source, "denormalizer_spec.precompiled_charsmap");
  SentencePieceModelFacts facts;
  facts.pieces = pieces;
  facts.model_type = static_cast<int>(m.trainer.model_type);
  facts.byte_fallback = m.trainer.byte_fallback;
  facts.normalizer_charsmap_bytes = m.normalizer.charsmap.size();
  facts.denormalizer_charsmap_bytes = m.denormalizer.charsmap.size();
  return facts;
}

}  // namespace stratum::data
