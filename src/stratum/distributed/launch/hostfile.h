#pragma once
// DeepSpeed's hostfile: one `hostname slots=N` per line, `#` starts a comment,
// blank lines are skipped. Host names are checked before anything else sees
// them, so nothing that is not a plain host name reaches mpirun or ssh.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace stratum::distributed::launch {

// Bounds that keep a mistaken or hostile hostfile from costing gigabytes
// (every slot becomes a device entry and an mpirun argument).
inline constexpr size_t kMaxHostfileBytes = 1u << 20;
inline constexpr int kMaxHostfileLines = 4096;
inline constexpr int kMaxSlotsPerHost = 1024;
inline constexpr int kMaxTotalSlots = 65536;
// Open MPI 4.1's mpirun aborts ("stack smashing detected") on a remote host
// name of 57 or more characters, as it uses it: the whole name, since
// Stratum keeps names whole (it was the first label when mpirun cut them).
inline constexpr size_t kMaxMpirunHostName = 56;

struct HostfileEntry {
  std::string name;
  int slots = 0;
  int line = 0;  // 1-based line in the hostfile
};

// True for an RFC 1123 host name (dot-separated labels of letters, digits and
// inner hyphens, 1..63 characters each, 253 in all), an IPv4 dotted quad or an
// IPv6 literal. A name whose labels are all numbers (999.999.999.999, 10.1,
// 0x7f.1) is what resolvers read as an IPv4 address, so it must be a valid
// dotted quad a.b.c.d (each 0-255, no leading zeros).
bool is_valid_hostname(std::string_view name);
bool is_ipv6_literal(std::string_view name);
// This machine's name (gethostname), or "127.0.0.1" when that is not a valid host name.
std::string this_host_name();

// Throws stratum::Error "<what>: 'name' is not a valid host name (...)" unless
// is_valid_hostname(name). `what` says where the name came from.
void check_hostname(std::string_view name, const std::string& what);
// check_hostname, and what mpirun cannot take as a host: a name over
// kMaxMpirunHostName characters, an IPv6 literal.
void check_launch_host(std::string_view name, const std::string& what);

// Parses hostfile text; `source` names it in errors ("path:line: ...").
// Errors: a line that is not `hostname slots=N`, slots=0 or not a number,
// slots over kMaxSlotsPerHost (or kMaxTotalSlots in all), more than
// kMaxHostfileLines lines, a host check_launch_host refuses, the same host on
// two lines (both line numbers), no host at all.
std::vector<HostfileEntry> parse_hostfile(std::string_view text, const std::string& source);

// Reads and parses the file at `path`: an error if it cannot be read, is not a
// regular file (a FIFO or device is refused without blocking) or is over
// kMaxHostfileBytes.
std::vector<HostfileEntry> read_hostfile(const std::string& path);

}  // namespace stratum::distributed::launch
