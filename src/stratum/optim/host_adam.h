#pragma once
// The optimizer step of ZeRO-Offload (offload_optimizer.device = cpu): Adam
// or Lamb on the host over a segment whose fp32 masters and Adam states live
// in host memory while its gradients are on the device. Gradients come down in
// chunks (converted to fp32 on the device, into a ring of two pinned buffers)
// while the CPU kernels (optim/cpu_adam, optim/cpu_lamb) update the chunk
// before, so the copies overlap the host compute. The pass that writes the
// masters also writes the updated parameters rounded to the model dtype into
// the segment's params16 buffer, which is what goes back up.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/config/sections.h"
#include "stratum/optim/adam.h"
#include "stratum/optim/param_run.h"

namespace stratum::optim {

class HostAdam {
 public:
  // `cores_perc`: offload_optimizer.cpuadam_cores_perc (share of the host's
  // threads), split between the `ranks_per_node` ranks on this host.
  HostAdam(config::OptimizerConfig optimizer, double cores_perc, int ranks_per_node = 1,
           int64_t chunk_elems = int64_t{1} << 24);

  // One Adam step in place. master: fp32 on the host; grad: model dtype, anywhere;
  // params16: undefined or a host tensor in bf16/fp16 of master's size;
  // state: make_adam_state(master) (its step counts applied steps).
  void step(at::Tensor& master, const at::Tensor& grad, const at::Tensor& params16, AdamState& state, double lr,
            std::optional<double> beta1_override, double grad_scale);

  // Lamb (optim/lamb.h), in two passes like the device path. Pass 1: moments,
  // and each run's sums of p^2 and u^2 added into sq_params[run.param] and
  // sq_updates[run.param] (the runs: optim::ParamRun of this segment, offsets
  // into master); state.step counts this step.
  void lamb_moments(at::Tensor& master, const at::Tensor& grad, AdamState& state, const std::vector<ParamRun>& runs,
                    std::optional<double> beta1_override, double grad_scale, double* sq_params, double* sq_updates);
  // Pass 2, with every parameter's trust ratio (summed over the ranks, see
  // lamb_trust_ratios): p -= lr r u; params16 as in step().
  void lamb_update(at::Tensor& master, const at::Tensor& params16, const AdamState& state,
                   const std::vector<ParamRun>& runs, double lr, std::optional<double> beta1_override,
                   const double* trust_ratios);

  int threads() const { return threads_; }

 private:
  void check(const at::Tensor& master, const at::Tensor* grad) const;
  // fn(offset, length, fp32 host gradient of those elements) over the segment
  // in chunks, the next copies from the device in flight meanwhile.
  void for_each_grad_chunk(const at::Tensor& grad, const std::function<void(int64_t, int64_t, const float*)>& fn);

  config::OptimizerConfig optimizer_;
  int threads_;
  int64_t chunk_elems_;
  at::Tensor ring_[2];  // pinned fp32 chunk buffers, made on first use with a device gradient
};

}  // namespace stratum::optim
