#include "stratum/checkpoint/host_staging.h"

#include <ATen/ATen.h>

#include "stratum/core/error.h"

namespace stratum {
namespace {
constexpr int64_t kAlign = 256;  // every buffer starts on a 256-byte boundary of the block
}

HostStaging::~HostStaging() { settle(); }

void HostStaging::settle() const {
  if (reserving_.joinable()) reserving_.join();
}

void HostStaging::reserve(int64_t bytes, bool pinned) {
  if (reserving_.joinable() || block_.defined() || !buffers_.empty())
    throw Error("HostStaging::reserve: once, before the first copy");
  if (bytes <= 0) return;
  pinned_ = pinned;
  reserving_ = std::thread([this, bytes, pinned] {
    try {
      block_ = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(pinned));
    } catch (const std::exception&) {
      block_ = at::Tensor();  // no block: each save allocates its buffers, as without a reservation
    }
  });
}

at::Tensor HostStaging::allocate(const at::Tensor& like) {
  const int64_t bytes = like.numel() * static_cast<int64_t>(like.element_size());
  const int64_t start = (block_used_ + kAlign - 1) / kAlign * kAlign;
  if (block_.defined() && start + bytes <= block_.numel()) {
    block_used_ = start + bytes;
    return block_.narrow(0, start, bytes).view(like.scalar_type()).view(like.sizes());
  }
  beyond_block_ += static_cast<uint64_t>(bytes);
  return at::empty(like.sizes(), at::TensorOptions().dtype(like.scalar_type()).pinned_memory(like.is_cuda()));
}

at::Tensor HostStaging::copy(const at::Tensor& src) {
  settle();  // started at start-up: normally long done
  if (next_ == buffers_.size()) buffers_.emplace_back();
  at::Tensor& buf = buffers_[next_++];
  if (!buf.defined() || buf.sizes() != src.sizes() || buf.scalar_type() != src.scalar_type()) buf = allocate(src);
  buf.copy_(src);
  return buf;
}

uint64_t HostStaging::bytes() const {
  settle();
  return (block_.defined() ? static_cast<uint64_t>(block_.numel()) : 0) + beyond_block_;
}

}  // namespace stratum
