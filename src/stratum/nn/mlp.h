#pragma once
// The two feed-forward blocks, named as in Hugging Face:
//   GeluMLP   (GPT-2): c_proj(gelu_tanh(c_fc(x))), biases; GPT-2's "gelu_new" is
//                      the tanh approximation of GELU.
//   SwiGLUMLP (LLaMA): down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.
// With `recompute_activation` the activation's output is not kept for
// backward but recomputed there (nn::gelu_mlp, nn::swiglu_linear).
// Their steps are single autograd functions: on a GPU Stratum's kernels
// (nn/fused_elementwise_cuda.cu) and cuBLASLt's GEMM epilogue
// (nn/gemm_epilogue_cuda.cu), elsewhere the ATen composition (the CPU path
// the tests compare against). The weights' gradients go to their sinks
// (nn/linear.h).
// With `tile_tokens` > 0 the MLP runs over tiles of that many tokens (rows of
// the micro-batch's [B x T] tokens; nn/tiled_rows.h): only one tile's [tile,
// FFN] intermediates are alive, the backward recomputing each tile. Under
// tensor parallelism the tiles are of this rank's shard (the gathered
// sequence, this rank's columns of the FFN width); LoRA and NF4 layers run
// untiled.
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "stratum/nn/parameter_modules.h"
#include "stratum/nn/tensor_parallel/mappings.h"

namespace stratum::nn {

namespace float8 {
class Float8Projection;
}

// silu(gate) * up for gate_up = [..., 2F] (gate first, as linear_stacked
// returns it): [..., F]. Saves only gate_up for backward (autograd's chain
// kept silu(gate) as well) and returns the gradient as one [..., 2F] tensor.
// With `amax`: where the GPU kernel runs, set to max |output| (an fp32
// scalar on the device, from the same pass, for an FP8 cast of the output);
// elsewhere left undefined.
at::Tensor swiglu(const at::Tensor& gate_up, at::Tensor* amax = nullptr);

// gelu(h, "tanh"). With `amax`: where the GPU kernel runs, also max |output|
// from the same pass (as swiglu's); elsewhere ATen's GELU, amax undefined.
at::Tensor gelu_tanh(const at::Tensor& h, at::Tensor* amax = nullptr);

// LLaMA's MLP end with the SwiGLU's output not kept for backward (a third of
// the MLP's saved activations): the backward recomputes it in the pass that
// computes its derivative (one more store). Same values as the separate ops.
// swiglu(gate_up) W_downᵀ: saves gate_up.
at::Tensor swiglu_linear(const at::Tensor& gate_up, const at::Tensor& w_down);

// gelu_tanh(x Wᵀ + b): GPT-2's first MLP layer. On a GPU in 16 bits one
// cuBLASLt GEMM computes both; the backward computes the GELU derivative and
// the bias gradient in one pass over the pre-activation.
at::Tensor linear_bias_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// GPT-2's MLP, gelu_tanh(x W1ᵀ + b1) W2ᵀ + b2, as one function: on a GPU in
// 16 bits the forward's GELU runs in the first GEMM's epilogue (cuBLASLt),
// the backward's derivative and b1's gradient in one pass over the
// pre-activation, as linear_bias_gelu's. It saves x and the pre-activation, and
// gelu(h) with `keep_activation`; without it (ffn elements a token and layer
// less, half the MLP's saved activations) the backward recomputes gelu(h).
// Same values as the separate ops. b2 may be undefined (a row-parallel MLP
// adds it after the group's sum).
at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2,
                    const at::Tensor& b2, bool keep_activation = false);

class GeluMLPImpl : public torch::nn::Module {
 public:
  // Under tensor parallelism c_fc is column parallel, c_proj row parallel
  // (this rank's ffn_hidden / size of the inner width).
  GeluMLPImpl(int64_t hidden, int64_t ffn_hidden, double dropout, bool recompute_activation = false,
              tp::TensorParallel tp = {}, c10::Device device = c10::kCPU);
  // x_amax (optional, only where takes_input_amax): max |x| from the kernel
  // that wrote x (the norm before), for the first projection's FP8 cast.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& x_amax = at::Tensor());
  // Whether the first projection's FP8 cast takes its input's amax (nn/tensor_parallel/float8_parallel_linear.h).
  bool takes_input_amax() const;
  // Whether forward runs tiled (tile_tokens > 0 and no adapters or NF4 weights).
  bool tiled() const;

  Linear c_fc{nullptr}, c_proj{nullptr};
  // Set (models/float8_layers.h): that layer's GEMMs in FP8 (the layers then
  // run apart, GELU between them); null: bf16.
  std::shared_ptr<float8::Float8Projection> c_fc_fp8, c_proj_fp8;
  double dropout;
  bool recompute_activation;
  tp::TensorParallel tp;
  int64_t tile_tokens = 0;  // 0: untiled

 private:
  at::Tensor forward_with_adapters(const at::Tensor& x);
  at::Tensor forward_float8(const at::Tensor& x, const at::Tensor& x_amax);
};

class SwiGLUMLPImpl : public torch::nn::Module {
 public:
  // Under tensor parallelism gate and up are column parallel, down row parallel.
  SwiGLUMLPImpl(int64_t hidden, int64_t ffn_hidden, bool recompute_activation = false, tp::TensorParallel tp = {},
                c10::Device device = c10::kCPU);
  // x_amax (optional, only where takes_input_amax): max |x| from the kernel
  // that wrote x (the norm before), for the first projection's FP8 cast.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& x_amax = at::Tensor());
  // Whether the first projection's FP8 cast takes its input's amax (nn/tensor_parallel/float8_parallel_linear.h).
  bool takes_input_amax() const;
  // Whether forward runs tiled (tile_tokens > 0 and no adapters or NF4 weights).
  bool tiled() const;

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  // Set (models/float8_layers.h): gate/up's stacked GEMM, down_proj's, in FP8; null: bf16.
  std::shared_ptr<float8::Float8Projection> gate_up_fp8, down_proj_fp8;
  bool recompute_activation;
  tp::TensorParallel tp;
  int64_t tile_tokens = 0;  // 0: untiled

 private:
  at::Tensor forward_float8(const at::Tensor& x, const at::Tensor& x_amax);
};

}  // namespace stratum::nn
