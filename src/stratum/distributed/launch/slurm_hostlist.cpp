#include "stratum/distributed/launch/slurm_hostlist.h"

#include "stratum/core/error.h"
#include "stratum/core/shorten.h"
#include "stratum/distributed/launch/hostfile.h"

namespace stratum::distributed::launch {
namespace {

std::string quoted(const std::string& text) {
  std::string out(1, '\'');  // appended, not "'" + ...: GCC 12 warns falsely (-Wrestrict) on that form
  out += shorten_for_message(text, 200);
  out += '\'';
  return out;
}

// Splits at `sep` outside brackets: "a[1,2],b" -> "a[1,2]", "b".
std::vector<std::string> split_outside_brackets(const std::string& text, char sep, const std::string& what) {
  std::vector<std::string> out(1);
  bool open = false;
  for (char c : text) {
    if (c == '[') {
      if (open) throw Error(what + ": " + quoted(text) + " has a '[' inside brackets");
      open = true;
    } else if (c == ']') {
      if (!open) throw Error(what + ": " + quoted(text) + " has a ']' without its '['");
      open = false;
    }
    if (c == sep && !open) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  if (open) throw Error(what + ": " + quoted(text) + " has a '[' without its ']'");
  return out;
}

struct Range {
  unsigned long lo = 0, hi = 0;
  size_t width = 0;  // digits of lo as written: "01-03" keeps two
};

// A literal run of the name, or a bracket group's numbers.
struct Segment {
  std::string literal;
  std::vector<Range> ranges;  // empty: a literal
  size_t count = 1;           // names this segment contributes
};

unsigned long parse_number(const std::string& s, const std::string& group, const std::string& what) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    throw Error(what + ": " + quoted("[" + group + "]") + " is not a list of numbers and lo-hi ranges");
  return std::stoul(s);
}

size_t capped_product(size_t a, size_t b) {
  if (a == 0 || b == 0) return 0;
  return a > (kMaxSlurmHostlistNames + 1) / b ? kMaxSlurmHostlistNames + 1 : a * b;
}

Segment parse_group(const std::string& group, const std::string& what) {
  Segment s;
  s.count = 0;
  for (const auto& item : split_outside_brackets(group, ',', what)) {
    const size_t dash = item.find('-');
    Range r;
    const std::string lo = item.substr(0, dash);
    r.lo = parse_number(lo, group, what);
    r.hi = dash == std::string::npos ? r.lo : parse_number(item.substr(dash + 1), group, what);
    r.width = lo.size();
    if (r.hi < r.lo) throw Error(what + ": range " + quoted(item) + " in " + quoted("[" + group + "]") + " runs backwards");
    s.count = std::min(s.count + (r.hi - r.lo + 1), kMaxSlurmHostlistNames + 1);
    s.ranges.push_back(r);
  }
  return s;
}

// One item without top-level commas ("r[1-2]-n[01-02]") as its segments.
std::vector<Segment> parse_item(const std::string& item, const std::string& what) {
  std::vector<Segment> out;
  size_t at = 0;
  while (at < item.size()) {
    const size_t open = item.find('[', at);
    if (open != at) out.push_back(Segment{item.substr(at, open - at), {}, 1});
    if (open == std::string::npos) break;
    const size_t close = item.find(']', open);  // balanced: split_outside_brackets checked
    out.push_back(parse_group(item.substr(open + 1, close - open - 1), what));
    at = close + 1;
  }
  return out;
}

std::string padded(unsigned long n, size_t width) {
  std::string s = std::to_string(n);
  return s.size() < width ? std::string(width - s.size(), '0') + s : s;
}

// The k-th number of a group (k < count).
std::string nth(const Segment& s, size_t k) {
  for (const Range& r : s.ranges) {
    const size_t size = r.hi - r.lo + 1;
    if (k < size) return padded(r.lo + k, r.width);
    k -= size;
  }
  return {};
}

// Visits the names of one parsed item, the last group varying fastest.
bool visit_item(const std::vector<Segment>& segments, const std::function<bool(const std::string&)>& visit) {
  std::vector<size_t> index(segments.size(), 0);
  while (true) {
    std::string name;
    for (size_t i = 0; i < segments.size(); ++i)
      name += segments[i].ranges.empty() ? segments[i].literal : nth(segments[i], index[i]);
    if (!visit(name)) return false;
    size_t i = segments.size();
    while (i > 0) {
      --i;
      if (++index[i] < segments[i].count) break;
      index[i] = 0;
      if (i == 0) return true;
    }
    if (segments.empty()) return true;
  }
}

}  // namespace

void for_each_slurm_host(const std::string& hostlist, const std::string& what,
                         const std::function<bool(const std::string&)>& visit) {
  // Parsed whole first: a malformed item anywhere fails before any name is used.
  std::vector<std::vector<Segment>> items;
  size_t total = 0;
  for (const auto& item : split_outside_brackets(hostlist, ',', what)) {
    if (item.empty()) throw Error(what + ": " + quoted(hostlist) + " has an empty host name");
    items.push_back(parse_item(item, what));
    size_t names = 1;
    for (const Segment& s : items.back()) names = capped_product(names, s.count);
    total = std::min(total + names, kMaxSlurmHostlistNames + 1);
    if (total > kMaxSlurmHostlistNames)
      throw Error(what + ": " + quoted(hostlist) + " names more than " + std::to_string(kMaxSlurmHostlistNames) +
                  " hosts; no cluster has that many (is a range mistyped?)");
  }
  for (const auto& segments : items)
    if (!visit_item(segments, visit)) return;
}

std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist, const std::string& what) {
  std::vector<std::string> out;
  for_each_slurm_host(hostlist, what, [&](const std::string& name) {
    check_hostname(name, what);
    out.push_back(name);
    return true;
  });
  return out;
}

std::string first_slurm_host(const std::string& hostlist, const std::string& what) {
  std::string first;
  for_each_slurm_host(hostlist, what, [&](const std::string& name) {
    first = name;
    return false;
  });
  if (first.empty()) throw Error(what + ": " + quoted(hostlist) + " names no host");
  check_hostname(first, what);
  return first;
}

}  // namespace stratum::distributed::launch
