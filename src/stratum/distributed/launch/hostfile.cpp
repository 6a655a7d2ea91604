#include "stratum/distributed/launch/hostfile.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/shorten.h"

namespace stratum::distributed::launch {
namespace {

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\r') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// Shows a name safely inside an error message (control characters escaped,
// one longer than any host name shortened).
std::string quoted(std::string_view name) {
  const std::string s = shorten_for_message(name, 253);
  std::string out = "'";
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

}  // namespace

bool is_ipv6_literal(std::string_view name) {
  if (name.empty() || name.size() >= INET6_ADDRSTRLEN || name.find(':') == std::string_view::npos) return false;
  in6_addr addr{};
  return inet_pton(AF_INET6, std::string(name).c_str(), &addr) == 1;
}

namespace {

// A label inet_aton would read as a number: decimal digits, or 0x and hex digits.
bool is_numeric_label(std::string_view label) {
  size_t i = 0;
  bool hex = false;
  if (label.size() >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X')) hex = true, i = 2;
  for (; i < label.size(); ++i) {
    const char c = label[i];
    const bool digit = c >= '0' && c <= '9';
    if (!digit && !(hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))) return false;
  }
  return true;
}

bool is_ipv4_dotted_quad(std::string_view name) {
  if (name.size() >= INET_ADDRSTRLEN) return false;
  in_addr addr{};
  return inet_pton(AF_INET, std::string(name).c_str(), &addr) == 1;  // exactly a.b.c.d, 0-255, no leading zeros
}

// Labels well formed; `numeric` tells whether every label is a number.
bool labels_valid(std::string_view name, bool& numeric) {
  numeric = true;
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    std::string_view label = name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > 63) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
      if (!is_alnum(c) && c != '-') return false;
    numeric = numeric && is_numeric_label(label);
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

}  // namespace

bool is_valid_hostname(std::string_view name) {
  if (is_ipv6_literal(name)) return true;
  if (name.empty() || name.size() > 253) return false;
  bool numeric = false;
  if (!labels_valid(name, numeric)) return false;
  return !numeric || is_ipv4_dotted_quad(name);
}

std::string this_host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !is_valid_hostname(buf)) return "127.0.0.1";
  return buf;
}

void check_hostname(std::string_view name, const std::string& what) {
  if (is_valid_hostname(name)) return;
  bool numeric = false;
  if (!name.empty() && name.size() <= 253 && labels_valid(name, numeric) && numeric)
    throw Error(what + ": " + quoted(name) +
                " is not a valid IPv4 address (a name of numbers only is read as one: give a.b.c.d, each 0-255)");
  throw Error(what + ": " + quoted(name) +
              " is not a valid host name (letters, digits, '-' and '.', labels of 1-63 characters, "
              "or an IP address)");
}

void check_launch_host(std::string_view name, const std::string& what) {
  check_hostname(name, what);
  if (is_ipv6_literal(name))
    throw Error(what + ": host '" + std::string(name) + "': Open MPI's mpirun does not take IPv6 literals; use a host name");
  if (name.size() > kMaxMpirunHostName)
    throw Error(what + ": host " + quoted(name) + " has " + std::to_string(name.size()) +
                " characters; Open MPI 4.1's mpirun aborts (stack smashing) on host names of " +
                std::to_string(kMaxMpirunHostName + 1) + " or more, so use a name of at most " +
                std::to_string(kMaxMpirunHostName) + " (an alias in /etc/hosts or ssh's config) or the IP address");
}

std::vector<HostfileEntry> parse_hostfile(std::string_view text, const std::string& source) {
  std::vector<HostfileEntry> entries;
  std::map<std::string, int> first_line;  // host -> line it was first seen on
  int line_no = 0, total_slots = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    if (nl == std::string_view::npos && line.empty() && line_no > 0) break;  // after the last newline
    if (++line_no > kMaxHostfileLines)
      throw Error(source + ": more than " + std::to_string(kMaxHostfileLines) +
                  " lines; a hostfile has one line per host (is this the right file?)");
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;

    const size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    const auto words = split_ws(line);
    if (words.empty()) continue;

    const std::string where = source + ":" + std::to_string(line_no);
    if (words.size() != 2 || words[1].rfind("slots=", 0) != 0) {
      if (words.size() == 1)
        throw Error(where + ": missing slots: expected 'hostname slots=N', got " + quoted(words[0]));
      std::string got(words[0]);
      for (size_t i = 1; i < words.size(); ++i) {
        got += ' ';
        got += words[i];
      }
      throw Error(where + ": expected 'hostname slots=N', got " + quoted(got));
    }
    check_launch_host(words[0], where);
    const std::string_view count = words[1].substr(6);
    int slots = 0;
    const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), slots);
    if (count.empty() || ec != std::errc() || end != count.data() + count.size() || slots < 0)
      throw Error(where + ": slots must be a positive whole number, got " + quoted(words[1]));
    if (slots == 0) throw Error(where + ": slots=0 for host '" + std::string(words[0]) + "'; give at least 1 slot or remove the line");
    if (slots > kMaxSlotsPerHost)
      throw Error(where + ": slots=" + std::to_string(slots) + " for host '" + std::string(words[0]) +
                  "' is over the limit of " + std::to_string(kMaxSlotsPerHost) + " slots per host");
    total_slots += slots;  // <= kMaxHostfileLines x kMaxSlotsPerHost: no overflow
    if (total_slots > kMaxTotalSlots)
      throw Error(where + ": the hosts up to this line have " + std::to_string(total_slots) +
                  " slots in all, over the limit of " + std::to_string(kMaxTotalSlots));

    const std::string name(words[0]);
    if (auto it = first_line.find(name); it != first_line.end())
      throw Error(where + ": host '" + name + "' is listed twice (lines " + std::to_string(it->second) + " and " +
                  std::to_string(line_no) + ")");
    first_line.emplace(name, line_no);
    entries.push_back({name, slots, line_no});
  }
  if (entries.empty()) throw Error(source + ": the hostfile lists no hosts (expected lines 'hostname slots=N')");
  return entries;
}

std::vector<HostfileEntry> read_hostfile(const std::string& path) {
  std::string text;
  try {
    text = fs::read_regular_file(path, kMaxHostfileBytes, "hostfile");
  } catch (const Error& e) {
    throw Error(std::string("--hostfile ") + e.what());
  }
  return parse_hostfile(text, path);
}

}  // namespace stratum::distributed::launch
