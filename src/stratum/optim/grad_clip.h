#pragma once
// Gradient clipping by the global L2 norm (`gradient_clipping`), split so that
// the engine can reduce across ranks in between:
//   local = squared_norm(my grads)           // device tensor, no host sync
//   all-reduce(local, sum) over the ranks holding distinct gradient pieces
//   total_norm = sqrt(local) / loss_scale    // the norm of the unscaled grads
//   coef = clip_coefficient(total_norm, gradient_clipping)
//   adam_step(..., grad_scale = loss_scale / coef)   // unscale and clip in one pass
// The norm is that of the unscaled gradients (DeepSpeed divides the fp16 norm
// by the loss scale before comparing it with gradient_clipping).
#include <vector>

#include <ATen/core/Tensor.h>

namespace stratum::optim {

// The L2 norm of `g` as a 0-dim fp32 tensor on its device, whatever its dtype.
// On a CPU the squares are summed in double: ATen's CPU norm adds a vector
// lane's squares one after another, which loses a few parts in a million over
// a bucket of 1e5 elements and makes the norm depend on how the gradients are
// bucketed (a rank's share at ZeRO or EP against one process's). GPU
// reductions are trees and stay in fp32.
at::Tensor l2_norm(const at::Tensor& g);
// The same into `out` (a 0-dim fp32 tensor on g's device).
void l2_norm_out(at::Tensor& out, const at::Tensor& g);

// Sum of squares of every element of `grads` (their l2_norms squared):
// a 0-dim fp32 tensor on their device (inf or nan when a gradient is).
// Empty `grads`: a CPU zero.
at::Tensor squared_norm(const std::vector<at::Tensor>& grads);

// DeepSpeed's (and torch's clip_grad_norm_'s) factor: min(1, max_norm / (total_norm + 1e-6)).
// max_norm <= 0 turns clipping off (1). A non-finite total_norm gives 1: that
// step is an overflow and must be skipped, not clipped.
double clip_coefficient(double total_norm, double max_norm);
// The same on a 0-dim fp32 tensor, staying on its device (no host sync).
at::Tensor clip_coefficient(const at::Tensor& total_norm, double max_norm);

}  // namespace stratum::optim
