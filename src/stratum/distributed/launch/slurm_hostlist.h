#pragma once
// SLURM hostlists ("node[01-03,07],gpu5"): the names srun and SLURM_JOB_NODELIST
// use. Torch-free. A list is parsed whole before any name is given out, and
// every name it expands to can be visited, so a malformed or hostile tail
// ("a[1-9999],b;rm -rf") is found however far into the list it sits.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace stratum::distributed::launch {

// More names than any cluster has nodes: a list expanding past it is refused
// before anything is enumerated ("n[0-999999999]" is a mistake or an attack).
inline constexpr size_t kMaxSlurmHostlistNames = size_t{1} << 20;

// Calls visit(name) for each host of `hostlist` in order (zero padding kept;
// several bracket groups, "r[1-2]-n[1-2]", vary the last fastest) until visit
// returns false. Throws stratum::Error naming `what` when the list is
// malformed (unbalanced or nested brackets, a range that is not lo-hi with
// lo <= hi, an empty name) or expands to more than kMaxSlurmHostlistNames.
void for_each_slurm_host(const std::string& hostlist, const std::string& what,
                         const std::function<bool(const std::string&)>& visit);

// Every name of the list, each checked as a host name (check_hostname).
std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist, const std::string& what);

// "node[01-03,07],gpu5" -> "node01", checked as a host name. The whole list is
// parsed; throws as for_each_slurm_host, or when it names no host.
std::string first_slurm_host(const std::string& hostlist, const std::string& what);

}  // namespace stratum::distributed::launch
