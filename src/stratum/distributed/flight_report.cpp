#include "stratum/distributed/flight_report.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "stratum/core/binary_bytes.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::distributed {
namespace {

constexpr size_t kMaxFileBytes = 4 << 20;
// A file this much older than the newest of its directory: its rank stopped
// rewriting it (files are rewritten every second while operations run).
constexpr double kStaleSeconds = 2.5;

std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string duration_text(double seconds) {
  char buf[32];
  if (seconds < 0) seconds = 0;
  if (seconds < 1) std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1000);
  else std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  return buf;
}

bool is_p2p(const std::string& op) { return op == "send" || op == "recv" || op == "batch_p2p"; }

// A group as every rank names it: its name and members.
std::string group_key(const FlightGroupState& g) { return g.backend + " " + g.name + "[" + ranks_text(g.ranks) + "]"; }

const FlightGroupState* group_of(const RankFlight& r, int index) {
  return index >= 0 && static_cast<size_t>(index) < r.groups.size() ? &r.groups[index] : nullptr;
}

const FlightGroupState* find_group(const RankFlight& r, const std::string& key) {
  for (const auto& g : r.groups)
    if (group_key(g) == key) return &g;
  return nullptr;
}

double parse_number(const std::string& word, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  if (word.empty() || *end != '\0') throw Error(where + ": expected a number, got '" + word + "'");
  return v;
}

std::string describe_op(const FlightOp& op, const RankFlight& r, double now) {
  const FlightGroupState* g = group_of(r, op.group);
  std::string out = op.op + " #" + std::to_string(op.seq) + " on '" + (g ? g->name : "?") + "'";
  if (op.bytes > 0) out += " " + binary_bytes_text(op.bytes);
  if (op.peer >= 0) out += (op.op == "send" ? " to rank " : op.op == "recv" ? " from rank " : " with rank ") +
                           std::to_string(op.peer);
  if (op.end) out += ": done in " + duration_text(*op.end - op.start) + ", " + duration_text(now - *op.end) + " ago";
  else if (op.wait) out += ": OPEN, blocked in it for " + duration_text(now - *op.wait);
  else out += ": OPEN, issued " + duration_text(now - op.start) + " ago, not waited on yet";
  return out;
}

}  // namespace

double flight_now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

RankFlight parse_flight_file(const std::string& text, const std::string& path) {
  RankFlight r;
  r.path = path;
  std::istringstream lines(text);
  std::string line;
  int lineno = 0;
  bool header = false, who = false;
  while (std::getline(lines, line)) {
    ++lineno;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(lineno);
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    auto word = [&](const char* expected) {
      std::string w;
      if (expected) {
        words >> w;
        if (w != expected) throw Error(where + ": expected '" + expected + "', got '" + w + "'");
      }
      words >> w;
      if (words.fail()) throw Error(where + ": the line ends early");
      return w;
    };
    if (kind == "stratum-flight") {
      if (word(nullptr) != "1") throw Error(where + ": unknown version of the flight-recorder format");
      header = true;
    } else if (kind == "rank") {
      std::string w;
      words >> w;
      r.rank = static_cast<int>(parse_number(w, where));
      r.world_size = static_cast<int>(parse_number(word("world"), where));
      r.pid = static_cast<int64_t>(parse_number(word("pid"), where));
      r.host = word("host");
      who = true;
    } else if (kind == "written") {
      r.written = parse_number(word(nullptr), where);
      r.reason = word(nullptr);
    } else if (kind == "group") {
      FlightGroupState g;
      const auto index = static_cast<size_t>(parse_number(word(nullptr), where));
      if (index != r.groups.size()) throw Error(where + ": groups out of order");
      g.issued = static_cast<uint64_t>(parse_number(word("issued"), where));
      g.completed = static_cast<uint64_t>(parse_number(word("completed"), where));
      g.backend = word("backend");
      std::stringstream ranks(word("ranks"));
      for (std::string x; std::getline(ranks, x, ',');) g.ranks.push_back(static_cast<int64_t>(parse_number(x, where)));
      std::string label;
      words >> label;
      if (label != "name") throw Error(where + ": expected 'name', got '" + label + "'");
      std::getline(words >> std::ws, g.name);
      if (g.name.empty()) throw Error(where + ": the group has no name");
      r.groups.push_back(std::move(g));
    } else if (kind == "p2p") {
      const auto index = static_cast<size_t>(parse_number(word(nullptr), where));
      if (index >= r.groups.size())
        throw Error(where + ": group " + std::to_string(index) + " is not listed before it");
      FlightGroupState::P2P c;
      c.peer = static_cast<int64_t>(parse_number(word("peer"), where));
      c.sent = static_cast<uint64_t>(parse_number(word("sent"), where));
      c.received = static_cast<uint64_t>(parse_number(word("received"), where));
      r.groups[index].p2p.push_back(c);
    } else if (kind == "op") {
      FlightOp op;
      op.id = static_cast<uint64_t>(parse_number(word(nullptr), where));
      op.group = static_cast<int>(parse_number(word("group"), where));
      if (op.group < 0 || static_cast<size_t>(op.group) >= r.groups.size())
        throw Error(where + ": group " + std::to_string(op.group) + " is not listed before it");
      op.seq = static_cast<uint64_t>(parse_number(word("seq"), where));
      op.op = word(nullptr);
      op.bytes = static_cast<int64_t>(parse_number(word("bytes"), where));
      op.peer = static_cast<int64_t>(parse_number(word("peer"), where));
      op.sent = static_cast<uint64_t>(parse_number(word("sent"), where));
      op.received = static_cast<uint64_t>(parse_number(word("received"), where));
      op.start = parse_number(word("start"), where);
      const std::string wait = word("wait");
      if (wait != "-") op.wait = parse_number(wait, where);
      const std::string end = word("end");
      if (end != "-") op.end = parse_number(end, where);
      r.ops.push_back(std::move(op));
    } else {
      throw Error(where + ": unknown record '" + kind + "'");
    }
  }
  if (!header || !who) throw Error(path + ": not a flight-recorder file (no header)");
  return r;
}

FlightDir read_flight_dir(const std::string& dir) {
  FlightDir out;
  out.dir = dir;
  for (const std::string& name : fs::list_directory(dir)) {
    // rank<N>.txt only: the writers' temporaries end otherwise.
    if (name.size() < 9 || name.rfind("rank", 0) != 0 || name.substr(name.size() - 4) != ".txt") continue;
    const std::string digits = name.substr(4, name.size() - 8);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string path = dir + "/" + name;
    try {
      RankFlight r = parse_flight_file(fs::read_regular_file(path, kMaxFileBytes, "flight-recorder file"), path);
      out.world_size = std::max(out.world_size, r.world_size);
      out.ranks.push_back(std::move(r));
    } catch (const std::exception& e) {
      out.problems.push_back(e.what());
    }
  }
  std::sort(out.ranks.begin(), out.ranks.end(),
            [](const RankFlight& a, const RankFlight& b) { return a.rank < b.rank; });
  return out;
}

std::vector<Stall> find_stalls(const std::vector<RankFlight>& ranks, int world_size) {
  std::map<int, const RankFlight*> by_rank;
  for (const auto& r : ranks) by_rank[r.rank] = &r;
  (void)world_size;

  // Collectives: group key -> seq -> the ranks with it open.
  struct Open {
    const FlightGroupState* group;
    std::string op;
    std::vector<int> ranks;
    double since;
  };
  std::map<std::string, std::map<uint64_t, Open>> open;
  std::vector<Stall> out;
  for (const auto& r : ranks) {
    for (const FlightOp& op : r.ops) {
      if (op.end) continue;
      const FlightGroupState* g = group_of(r, op.group);
      if (!g) continue;
      if (!is_p2p(op.op)) {
        auto& o = open[group_key(*g)][op.seq];
        const double since = op.wait ? *op.wait : op.start;
        if (!o.group) o = Open{g, op.op, {}, since};
        o.ranks.push_back(r.rank);
        o.since = std::min(o.since, since);
        continue;
      }
      // Point-to-point, blocked on: the partner, when its file shows it short
      // of the sends (receives) this op waits for.
      if (op.peer < 0 || !op.wait) continue;
      Stall s{g->name, g->backend, g->ranks, op.op, op.seq, {r.rank}, *op.wait, {}, {}, op.peer};
      const auto it = by_rank.find(static_cast<int>(op.peer));
      if (it == by_rank.end()) {
        s.no_file.push_back(static_cast<int>(op.peer));
        out.push_back(std::move(s));
        continue;
      }
      const RankFlight& partner = *it->second;
      const FlightGroupState* pg = find_group(partner, group_key(*g));
      FlightGroupState::P2P totals;
      if (pg)
        for (const auto& c : pg->p2p)
          if (c.peer == r.rank) totals = c;
      std::string detail;
      const std::string who = "rank " + std::to_string(r.rank);
      if (op.received > totals.sent)
        detail = "had sent " + std::to_string(totals.sent) + " of the " + std::to_string(op.received) +
                 " messages " + who + " waits for";
      else if (op.sent > totals.received)
        detail = "had posted " + std::to_string(totals.received) + " of the " + std::to_string(op.sent) +
                 " receives " + who + "'s send waits for";
      if (detail.empty()) continue;  // the partner issued its side: in flight, or stuck inside it
      s.behind.push_back({partner.rank, pg ? pg->issued : 0, detail + " on this group when it last wrote its file"});
      out.push_back(std::move(s));
    }
  }
  for (const auto& [key, by_seq] : open) {
    for (const auto& [seq, o] : by_seq) {
      Stall s{o.group->name, o.group->backend, o.group->ranks, o.op, seq, o.ranks, o.since, {}, {}, -1};
      for (int64_t member : o.group->ranks) {
        const auto it = by_rank.find(static_cast<int>(member));
        if (it == by_rank.end()) {
          s.no_file.push_back(static_cast<int>(member));
          continue;
        }
        const FlightGroupState* g = find_group(*it->second, key);
        const uint64_t issued = g ? g->issued : 0;
        if (issued < seq)
          s.behind.push_back({static_cast<int>(member), issued,
                              issued ? "at #" + std::to_string(issued) + " when it last wrote its file"
                                     : "no op on this group when it last wrote its file"});
      }
      if (s.behind.empty() && s.no_file.empty()) continue;  // all arrived: still moving, or a later op stalls
      out.push_back(std::move(s));
      break;  // the lowest such number on this group: the later ones wait behind it
    }
  }
  return out;
}

std::string hang_report(const FlightDir& dir, const std::vector<int>& suspects, double now, size_t last) {
  const int world = dir.world_size;
  std::string out = "flight recorder: files of " + std::to_string(dir.ranks.size()) + " of " +
                    (world > 0 ? std::to_string(world) : std::string("?")) + " ranks in " + dir.dir + "\n";
  for (const std::string& p : dir.problems) out += "  unreadable: " + p + "\n";
  std::map<int, const RankFlight*> by_rank;
  for (const auto& r : dir.ranks) by_rank[r.rank] = &r;

  std::set<int> named(suspects.begin(), suspects.end());
  const std::vector<Stall> stalls = find_stalls(dir.ranks, world);
  for (const Stall& s : stalls) {
    std::vector<int64_t> waiting(s.waiting.begin(), s.waiting.end());
    out += "  " + s.op + " #" + std::to_string(s.seq) + " on " + s.backend + " group '" + s.group + "' [ranks " +
           ranks_text(s.members) +
           "]: rank" + (waiting.size() == 1 ? " " : "s ") + ranks_text(waiting) +
           (waiting.size() == 1 ? " waits" : " wait") +
           " in it (for " + duration_text(now - s.waiting_since) + ")";
    if (s.peer >= 0) out += " for rank " + std::to_string(s.peer);
    std::string not_arrived;
    for (const auto& b : s.behind) {
      not_arrived += (not_arrived.empty() ? "" : ", ") + std::string("rank ") + std::to_string(b.rank) + " (" +
                     b.detail + ")";
      named.insert(b.rank);
    }
    for (int r : s.no_file) {
      not_arrived += (not_arrived.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (no file)";
      named.insert(r);
    }
    out += "; not arrived: " + not_arrived + "\n";
    // How far each member got on this group.
    std::string reached;
    for (int64_t m : s.members) {
      const auto it = by_rank.find(static_cast<int>(m));
      const FlightGroupState* g = nullptr;
      if (it != by_rank.end())
        for (const auto& x : it->second->groups)
          if (x.name == s.group && x.backend == s.backend && x.ranks == s.members) g = &x;
      reached += (reached.empty() ? "" : ", ") + std::string("rank ") + std::to_string(m) +
                 (it == by_rank.end() ? " ?" : " #" + std::to_string(g ? g->issued : 0) +
                                                   (g && g->completed < g->issued ? " (open)" : ""));
    }
    out += "    highest number reached on '" + s.group + "': " + reached + "\n";
  }
  if (stalls.empty()) {
    // Every member reached what the others wait in (a rank stopped inside the
    // operation itself looks so): what each waits in, and the ranks whose file
    // stopped being rewritten while the others' were.
    out += "  no operation that some ranks wait in and others have not reached\n";
    double newest = 0;
    for (const auto& r : dir.ranks) newest = std::max(newest, r.written);
    for (const auto& r : dir.ranks) {
      for (const FlightOp& op : r.ops)
        if (!op.end && op.wait) {
          const FlightGroupState* g = group_of(r, op.group);
          out += "  rank " + std::to_string(r.rank) + " waits in " + op.op + " #" + std::to_string(op.seq) + " on " +
                 (g ? g->backend + " group '" + g->name + "' [ranks " + ranks_text(g->ranks) + "]" : "?") +
                 " (for " + duration_text(now - *op.wait) + ")\n";
        }
      if (newest - r.written > kStaleSeconds) {
        out += "  rank " + std::to_string(r.rank) + "'s file stopped being rewritten " +
               duration_text(newest - r.written) + " before the newest one (stopped or stuck?)\n";
        named.insert(r.rank);
      }
    }
  }

  for (int r : named) {
    const auto it = by_rank.find(r);
    if (it == by_rank.end()) {
      out += "  no report from rank " + std::to_string(r) +
             " (stopped or dead before it wrote its file, or on another host)\n";
      continue;
    }
    out += "  " + last_operations(*it->second, now, last) + "\n";
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string last_operations(const RankFlight& f, double now, size_t last) {
  const size_t n = std::min(last, f.ops.size());
  std::string out = "rank " + std::to_string(f.rank) + " (host " + f.host + ", pid " + std::to_string(f.pid) + "; " +
                    f.path + " written " + duration_text(now - f.written) + " ago, " + f.reason + "): its last " +
                    std::to_string(n) + (n == 1 ? " operation" : " operations") + (n ? ":" : "");
  for (size_t i = f.ops.size() - n; i < f.ops.size(); ++i) out += "\n    " + describe_op(f.ops[i], f, now);
  return out;
}

}  // namespace stratum::distributed
