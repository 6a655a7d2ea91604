#include "stratum/data/byte_level_bpe.h"

#include <functional>
#include <queue>

namespace stratum::data::detail {

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

std::vector<std::string> byte_alphabet() {
  std::vector<std::string> chars(256);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    append_utf8(chars[b], printable ? static_cast<uint32_t>(b) : next++);
  }
  return chars;
}

// The symbols in a linked list, the mergeable adjacent pairs in a min-heap of
// (rank, position); the lowest rank merges first, the leftmost on a tie,
// which is what rescanning all pairs after each merge gives.
void bpe_merge(const MergeTable& merges, std::vector<int32_t>& ids) {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1: none
    bool merged_away;
  };
  struct Candidate {
    int32_t rank, pos;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<Symbol> symbols(ids.size());
  for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, false};
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
  ids.clear();
  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace stratum::data::detail
