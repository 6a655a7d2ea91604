#pragma once
// A fresh directory every rank of the test job sees (rank 0 makes it).
#include <cstring>
#include <string>

#include <ATen/ATen.h>

#include "../distributed/distributed_test_context.h"
#include "stratum/core/fs.h"

namespace stratum::test {

inline std::string shared_temp_dir(const std::string& prefix) {
  auto world = context().cpu_world;
  at::Tensor name = at::zeros({256}, at::kByte);
  if (world->rank() == 0) {
    const std::string dir = fs::make_temp_directory(prefix);
    std::memcpy(name.data_ptr(), dir.c_str(), dir.size());
  }
  world->broadcast(name, 0)->wait();
  return std::string(static_cast<const char*>(name.data_ptr()));
}

}  // namespace stratum::test
