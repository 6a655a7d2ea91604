#pragma once
// The DistContext of a multi-rank test process (set up by mpi_test_main.cpp),
// and the backends to run each collective test over.
#include <string>
#include <vector>

#include "stratum/distributed/init.h"

namespace stratum::test {

const distributed::DistContext& context();

struct Backend {
  std::string name;  // "mpi" or "nccl"
  std::shared_ptr<distributed::Communicator> world;
  c10::Device device;
};

// MPI with CPU tensors always; NCCL with CUDA tensors when the build and machine have GPUs.
inline std::vector<Backend> backends() {
  std::vector<Backend> out{{"mpi", context().cpu_world, c10::Device(c10::kCPU)}};
  if (context().gpu_world)
    out.push_back({"nccl", context().gpu_world, c10::Device(c10::kCUDA, context().cuda_device)});
  return out;
}

}  // namespace stratum::test
