#pragma once
// Which hosts and which of their slots (devices) a launch uses: the pool (a
// hostfile, or this machine alone), narrowed by DeepSpeed's --include /
// --exclude ("host1:0,2@host2") or by --num_nodes and --num_gpus/--num_procs.
#include <optional>
#include <string>
#include <vector>

#include "stratum/distributed/launch/hostfile.h"

namespace stratum::distributed::launch {

// A host with its slots; slot i is device `devices[i]` (a CUDA_VISIBLE_DEVICES
// entry: an index, or a UUID when the user's own CUDA_VISIBLE_DEVICES said so).
struct PoolHost {
  std::string name;
  std::vector<std::string> devices;
  int slots() const { return static_cast<int>(devices.size()); }
};

// A host taking part in the launch: the slot indices chosen on it (ascending)
// and their device ids.
struct SelectedHost {
  std::string name;
  std::vector<int> slots;
  std::vector<std::string> devices;
};

struct SelectionRequest {
  std::string include;              // --include, empty if not given
  std::string exclude;              // --exclude, empty if not given
  std::optional<int> num_nodes;     // --num_nodes: the first K hosts
  std::optional<int> per_node;      // --num_gpus / --num_procs: the first N slots of each host
  std::string per_node_flag = "--num_gpus";  // which flag per_node came from (for messages)
};

// The pool of a hostfile: slot i of each host is device "i".
std::vector<PoolHost> pool_from_hostfile(const std::vector<HostfileEntry>& entries);
// One host with `slots` slots; devices default to "0".."slots-1".
PoolHost make_pool_host(std::string name, int slots, std::vector<std::string> devices = {});

// The flag combinations select_resources refuses, without a pool: --include
// and --exclude together; either of them with --num_nodes/--num_gpus (as DeepSpeed).
void check_selection_request(const SelectionRequest& request);

// Applies the request to the pool, in hostfile order. Throws stratum::Error
// naming the flag: --include and --exclude together; either of them together
// with --num_nodes/--num_gpus (as DeepSpeed); an unknown host (known ones are
// listed); a slot out of range or not a number; more nodes or slots per node
// than the pool has; nothing left.
std::vector<SelectedHost> select_resources(const std::vector<PoolHost>& pool, const SelectionRequest& request);

// GPUs on this machine, without CUDA: STRATUM_NUM_GPUS if set (tests), else the
// entries of /proc/driver/nvidia/gpus, else the lines of `nvidia-smi -L`.
// Then CUDA_VISIBLE_DEVICES, when set, narrows (and names) them as CUDA would.
struct LocalGpus {
  std::vector<std::string> devices;  // CUDA_VISIBLE_DEVICES entries to use, one per GPU
  std::string source;                // how they were found, for messages
};
LocalGpus detect_local_gpus();
// The narrowing by a CUDA_VISIBLE_DEVICES value (exposed for tests): entries
// up to the first invalid one (CUDA stops there); numeric ones must be < count.
std::vector<std::string> visible_devices(const std::string& cuda_visible_devices, int count);

}  // namespace stratum::distributed::launch
