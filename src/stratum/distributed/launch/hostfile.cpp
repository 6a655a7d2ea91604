#include "stratum/distributed/launch/hostfile.h"

#include <arpa/inet.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "stratum/core/error.h"

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

// Shows a name safely inside an error message (control characters escaped).
std::string quoted(std::string_view s) {
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

bool is_valid_hostname(std::string_view name) {
  if (is_ipv6_literal(name)) return true;
  if (name.empty() || name.size() > 253) return false;
  // Dotted labels (an IPv4 dotted quad is such a name too).
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    std::string_view label = name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > 63) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
      if (!is_alnum(c) && c != '-') return false;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

void check_hostname(std::string_view name, const std::string& what) {
  if (is_valid_hostname(name)) return;
  throw Error(what + ": " + quoted(name) +
              " is not a valid host name (letters, digits, '-' and '.', labels of 1-63 characters, "
              "or an IP address)");
}

std::vector<HostfileEntry> parse_hostfile(std::string_view text, const std::string& source) {
  std::vector<HostfileEntry> entries;
  std::map<std::string, int> first_line;  // host -> line it was first seen on
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    ++line_no;
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
    check_hostname(words[0], where);
    const std::string_view count = words[1].substr(6);
    int slots = 0;
    const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), slots);
    if (count.empty() || ec != std::errc() || end != count.data() + count.size() || slots < 0)
      throw Error(where + ": slots must be a positive whole number, got " + quoted(words[1]));
    if (slots == 0) throw Error(where + ": slots=0 for host '" + std::string(words[0]) + "'; give at least 1 slot or remove the line");

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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("--hostfile " + path + ": cannot read it: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

}  // namespace stratum::distributed::launch
