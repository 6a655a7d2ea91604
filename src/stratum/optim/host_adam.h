#pragma once
// The optimizer step of ZeRO-Offload (offload_optimizer.device = cpu): Adam
// on the host over a segment whose fp32 masters and Adam states live in host
// memory while its gradients are on the device. Gradients come down in chunks
// (converted to fp32 on the device, into a ring of two pinned buffers) while
// the CPU Adam (optim/cpu_adam) updates the chunk before, so the copies overlap
// the host compute. The same pass writes the updated parameters rounded to the
// model dtype into the segment's params16 buffer, which is what goes back up.
#include <optional>

#include <ATen/core/Tensor.h>

#include "stratum/config/sections.h"
#include "stratum/optim/adam.h"

namespace stratum::optim {

class HostAdam {
 public:
  // `cores_perc`: offload_optimizer.cpuadam_cores_perc (share of the host's
  // threads), split between the `ranks_per_node` ranks on this host.
  HostAdam(config::OptimizerConfig optimizer, double cores_perc, int ranks_per_node = 1,
           int64_t chunk_elems = int64_t{1} << 24);

  // One step in place. master: fp32 on the host; grad: model dtype, anywhere;
  // params16: undefined or a host tensor in bf16/fp16 of master's size;
  // state: make_adam_state(master) (its step counts applied steps).
  void step(at::Tensor& master, const at::Tensor& grad, const at::Tensor& params16, AdamState& state, double lr,
            std::optional<double> beta1_override, double grad_scale);

  int threads() const { return threads_; }

 private:
  config::OptimizerConfig optimizer_;
  int threads_;
  int64_t chunk_elems_;
  at::Tensor ring_[2];  // pinned fp32 chunk buffers, made on first use with a device gradient
};

}  // namespace stratum::optim
