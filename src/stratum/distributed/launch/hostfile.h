#pragma once
// DeepSpeed's hostfile: one `hostname slots=N` per line, `#` starts a comment,
// blank lines are skipped. Host names are checked before anything else sees
// them, so nothing that is not a plain host name reaches mpirun or ssh.
#include <string>
#include <string_view>
#include <vector>

namespace stratum::distributed::launch {

struct HostfileEntry {
  std::string name;
  int slots = 0;
  int line = 0;  // 1-based line in the hostfile
};

// True for an RFC 1123 host name (dot-separated labels of letters, digits and
// inner hyphens, 1..63 characters each, 253 in all), an IPv4 dotted quad or an
// IPv6 literal.
bool is_valid_hostname(std::string_view name);
bool is_ipv6_literal(std::string_view name);

// Throws stratum::Error "<what>: 'name' is not a valid host name (...)" unless
// is_valid_hostname(name). `what` says where the name came from.
void check_hostname(std::string_view name, const std::string& what);

// Parses hostfile text; `source` names it in errors ("path:line: ...").
// Errors: a line that is not `hostname slots=N`, slots=0 or not a number,
// an invalid host name, the same host on two lines (both line numbers), no
// host at all.
std::vector<HostfileEntry> parse_hostfile(std::string_view text, const std::string& source);

// Reads and parses the file at `path` (error if it cannot be read).
std::vector<HostfileEntry> read_hostfile(const std::string& path);

}  // namespace stratum::distributed::launch
