#pragma once
// The host buffers an asynchronous save copies a rank's states into, kept
// from save to save (each save takes them in the same order). For a GPU's
// states they are pinned, so that the copy runs at the bus's speed. Pinning
// is slow (seconds for the 15 GB of a 1B model's ZeRO-2 states), so the
// buffers are carved from one block reserved on a background thread at
// start-up (reserve); without it, or beyond it, a save allocates its own.
#include <cstdint>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

namespace stratum {

class HostStaging {
 public:
  HostStaging() = default;
  ~HostStaging();  // waits for a reservation under way
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Starts reserving `bytes` of host memory (pinned when `pinned`) in the
  // background; later buffers come from it while it lasts. Once, before the
  // first copy.
  void reserve(int64_t bytes, bool pinned);
  // The next copy takes the first buffer again.
  void rewind() { next_ = 0; }
  // The next buffer, of src's shape and dtype, holding src's values.
  at::Tensor copy(const at::Tensor& src);
  // Host memory held: the reserved block and the buffers allocated beyond it.
  uint64_t bytes() const;

 private:
  at::Tensor allocate(const at::Tensor& like);
  void settle() const;  // waits for the reservation

  mutable std::thread reserving_;
  at::Tensor block_;  // uint8, reserved
  int64_t block_used_ = 0;
  bool pinned_ = false;
  uint64_t beyond_block_ = 0;
  std::vector<at::Tensor> buffers_;
  size_t next_ = 0;
};

}  // namespace stratum
