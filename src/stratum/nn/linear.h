#pragma once
// y = x Wᵀ + b, with a backward that saves the weight parameter itself rather
// than a view of it (at::linear saves weight.t(), which keeps the weight's
// storage alive). ZeRO-3 swaps a parameter's storage out after its layer runs
// and back in before the layer's backward; a saved view would pin the old
// storage (no memory freed) while the saved parameter follows the swap.
// Every layer in nn/ uses this linear, so the same math runs at every stage.
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace stratum::nn {

// x: [..., in], weight: [out, in], bias: [out] or undefined.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = at::Tensor());

// x [W0; W1; ...]ᵀ without bias, the weights stacked along the output
// dimension: one GEMM (and one input-gradient GEMM) for projections of the
// same input; split the result along the last dimension. Weights: [out_i, in].
at::Tensor linear_stacked(const at::Tensor& x, const std::vector<at::Tensor>& weights);

// A linear without bias for wide outputs whose width is not a multiple of 64
// (GPT-2's 50257-token vocabulary): the product runs on the weight padded
// with zero rows to a multiple of 64 and returns the [..., out] view of the
// wider result. The backward reads a gradient laid out in such rows in place
// (nn::chunked_cross_entropy writes it so), its last out % 64 columns through
// a small padded block; any other gradient it pads as a whole. cuBLAS picks
// its fast Hopper kernels only for aligned shapes: at 50257 it fell back to
// sm75 kernels about 4x slower, a fifth of a GPT-2 1.3B step. Same values as
// linear() (the padding contributes exact zeros).
at::Tensor linear_padded_rows(const at::Tensor& x, const at::Tensor& weight);

// Megatron's gradient-accumulation fusion: where a sink is registered for a
// weight (any ZeRO stage), the weight-gradient GEMM of linear(),
// linear_stacked() and nn::float8's FP8 linears (write_weight_grads) writes
// (or adds) its product straight into the sink's destination in the
// destination's dtype (fp32 flat gradients; a 16-bit product into fp32 needs
// CUDA, an FP8 one not), instead of a 16-bit gradient the sink would
// widen and copy. Autograd then gets an uninitialized stand-in for that
// gradient, so its accumulate-grad hooks still fire once per backward. The
// contract (StackLayer::linear_weights_fusable): a weight with a sink reaches
// the loss through one nn::linear (or FP8 linear) call and nothing else, since autograd would
// add any other gradient of it to the stand-in.
class WeightGradSink {
 public:
  virtual ~WeightGradSink() = default;
  // The [out, in] tensor `weight`'s gradient goes into, and whether to add to
  // it (set `accumulate`); undefined: autograd's path. It may allocate the
  // destination (a staging buffer), nothing else.
  virtual at::Tensor weight_grad_destination(const at::Tensor& weight, bool* accumulate) = 0;
  // The product into the destination is queued (on the current stream).
  virtual void weight_grad_written(const at::Tensor& weight) = 0;
};

// The gradient g2ᵀ x2 of `weight` [out, in] (g2 [rows, out], x2 [rows, in])
// for an autograd function's backward: written into the weight's sink where
// one is registered (returning autograd's stand-in), else the product. For
// fused functions outside this file that run a linear themselves.
at::Tensor weight_grad(const at::Tensor& weight, const at::Tensor& g2, const at::Tensor& x2);

// One weight-gradient GEMM, given to write_weight_grads as functions so that
// any product (a 16-bit mm, an FP8 _scaled_mm) takes the same fusion and
// deferral. They hold their operands: under DeferWeightGrads those stay
// alive until W.
struct WeightGradGemm {
  // dest [Σ out, in] = the product (accumulate: dest += it) in dest's dtype;
  // false, nothing written, where this build cannot make it in that dtype.
  std::function<bool(at::Tensor dest, bool accumulate)> into;
  // The product in the gradient's own dtype: autograd's gradient, or what is
  // widened into a destination `into` refused when the GEMM was deferred.
  std::function<at::Tensor()> product;
};

// The fusion for weights whose gradients one GEMM makes, stacked along the
// output dimension (q/k/v, gate/up): where the first has a sink and each next
// one's destination follows the previous one in the same buffer (ZeRO's flat
// gradient keeps a layer's weights side by side), the GEMM writes that block
// once, or is queued for W under DeferWeightGrads (where `into` is tried
// then, the widened product the fallback), and the sink is told. Returns
// autograd's stand-ins, one a weight; empty (no sink, destinations apart,
// `into` refused): nothing written, the caller returns the product to autograd.
std::vector<at::Tensor> write_weight_grads(const std::vector<at::Tensor>& weights, const WeightGradGemm& gemm);

// The bias gradient of a linear: the column sums of g [rows, out], fp32 sums
// rounded to g's dtype (not an autograd function; backward passes call it).
at::Tensor bias_grad(const at::Tensor& g);

// While registered, the weight gradient of `weight` (the parameter, by
// identity) from linear(), linear_stacked() and write_weight_grads' callers
// (nn::float8's FP8 linears) goes to `sink`. One sink a weight.
void register_weight_grad_sink(const at::Tensor& weight, WeightGradSink* sink);
void unregister_weight_grad_sink(const at::Tensor& weight, const WeightGradSink* sink);

// Whether a 16-bit product can be written into fp32 on this build's torch
// (ATen's addmm with out_dtype, CUDA only).
bool fp32_product_of_16bit_available();

}  // namespace stratum::nn
