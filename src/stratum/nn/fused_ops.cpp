#include "stratum/nn/fused_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>
#include <string>

#include "stratum/core/error.h"
#include "stratum/nn/linear.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "stratum/nn/fused_elementwise_cuda.h"
#include "stratum/nn/gemm_epilogue_cuda.h"
#include "stratum/nn/kernel_launch.h"
#endif

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// t's sizes with the last one replaced.
std::vector<int64_t> with_last(const at::Tensor& t, int64_t last) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes.back() = last;
  return sizes;
}

#ifdef STRATUM_WITH_CUDA_KERNELS
bool kernel_dtype(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf || t == at::kFloat; }

// GPU tensors in one floating dtype the kernels know.
bool on_gpu_in_one_dtype(std::initializer_list<const at::Tensor*> ts) {
  const at::Tensor& first = **ts.begin();
  for (const at::Tensor* t : ts)
    if (!t->defined() || !t->is_cuda() || t->scalar_type() != first.scalar_type()) return false;
  return kernel_dtype(first.scalar_type());
}

// Most kernels also take their tensors contiguous.
bool use_kernels(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts)
    if (!t->defined() || !t->is_contiguous()) return false;
  return on_gpu_in_one_dtype(ts);
}

cuda::Matrix matrix_of(const at::Tensor& t) {  // contiguous [..., cols]
  const int64_t cols = t.size(-1);
  return cuda::Matrix{t.const_data_ptr(), cols == 0 ? 0 : t.numel() / cols, cols, cols};
}

using cuda::dtype_of;

void check_launch(cudaError_t e, const char* what) {
  cuda::check_launch(e, std::string("fused elementwise kernel: ") + what);
}

cudaStream_t stream() { return cuda::current_stream(); }

at::Tensor column_sum_workspace(const at::Tensor& like, int64_t rows, int64_t cols) {
  return at::empty({cuda::column_sum_workspace_floats(rows, cols)}, like.options().dtype(at::kFloat));
}

#endif

// silu(gate) * up of gate_up = [..., 2F]: [..., F].
at::Tensor swiglu_value(const at::Tensor& gate_up) {
  const int64_t f = gate_up.size(-1) / 2;
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (use_kernels({&gate_up})) {
    c10::cuda::CUDAGuard guard(gate_up.device());
    at::Tensor out = at::empty(with_last(gate_up, f), gate_up.options());
    check_launch(cuda::launch_swiglu_forward(matrix_of(gate_up), dtype_of(gate_up), out.data_ptr(), stream()),
                 "swiglu forward");
    return out;
  }
#endif
  return at::silu(gate_up.narrow(-1, 0, f)) * gate_up.narrow(-1, f, f);
}

// The gradient [..., 2F] of swiglu_value at gate_up for d_out [..., F]; with
// `value`, also sets *value to swiglu_value(gate_up) (on a GPU from the same
// pass: one more store).
at::Tensor swiglu_grad(const at::Tensor& gate_up, const at::Tensor& d_out_any, at::Tensor* value) {
  const at::Tensor d_out = d_out_any.contiguous();
  const int64_t f = gate_up.size(-1) / 2;
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (use_kernels({&gate_up, &d_out})) {
    c10::cuda::CUDAGuard guard(gate_up.device());
    at::Tensor d_gate_up = at::empty_like(gate_up);
    if (value) *value = at::empty(with_last(gate_up, f), gate_up.options());
    check_launch(cuda::launch_swiglu_backward(matrix_of(gate_up), d_out.const_data_ptr(), dtype_of(gate_up),
                                              d_gate_up.data_ptr(), value ? value->data_ptr() : nullptr, stream()),
                 "swiglu backward");
    return d_gate_up;
  }
#endif
  if (value) *value = swiglu_value(gate_up);
  // In fp32, rounded once per output: what the kernel computes.
  const at::Tensor g = gate_up.narrow(-1, 0, f).to(at::kFloat), u = gate_up.narrow(-1, f, f).to(at::kFloat);
  const at::Tensor d = d_out.to(at::kFloat), s = at::sigmoid(g);
  const at::Tensor d_gate = d * u * s * (1 + g * (1 - s)), d_up = d * g * s;
  return at::cat({d_gate, d_up}, -1).to(gate_up.scalar_type());
}

struct SwiGLU : torch::autograd::Function<SwiGLU> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up) {
    ctx->save_for_backward({gate_up});
    return swiglu_value(gate_up);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {swiglu_grad(ctx->get_saved_variables()[0], grads[0], nullptr)};
  }
};

// swiglu(gate_up) W_downᵀ saving gate_up and the weight, not swiglu's output:
// the backward recomputes that in the pass of swiglu's gradient, for W_down's.
struct SwiGLULinear : torch::autograd::Function<SwiGLULinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up, const at::Tensor& w) {
    ctx->save_for_backward({gate_up, w});  // the weight parameter itself (see nn/linear.h)
    return at::linear(swiglu_value(gate_up), w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &gate_up = saved[0], &w = saved[1];
    const at::Tensor dy2 = grads[0].reshape({-1, grads[0].size(-1)}).contiguous();
    at::Tensor value;  // [..., F]
    const at::Tensor d_gate_up = swiglu_grad(gate_up, dy2.mm(w).view(with_last(gate_up, w.size(1))), &value);
    const at::Tensor dw = ctx->needs_input_grad(1) ? weight_grad(w, dy2, value.reshape({-1, w.size(1)})) : at::Tensor();
    return {d_gate_up, dw};
  }
};

struct GeluGrads {
  at::Tensor dh, db, act;
};

// h's gradient dh = dy * gelu_tanh'(h) and the bias gradient (dh summed over
// rows) in one pass on a GPU; with `recompute`, gelu_tanh(h) too (from the
// same pass). `in_place`: dh is written over dy (a buffer the caller owns).
GeluGrads gelu_tanh_backward(const at::Tensor& dy, const at::Tensor& h, bool in_place, bool recompute) {
  const int64_t f = h.size(-1), rows = f == 0 ? 0 : h.numel() / f;
  GeluGrads g;
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (use_kernels({&h, &dy})) {
    c10::cuda::CUDAGuard guard(h.device());
    g.dh = in_place ? dy : at::empty_like(h);
    g.db = at::empty({f}, h.options());
    if (recompute) g.act = at::empty_like(h);
    const at::Tensor workspace = column_sum_workspace(h, rows, f);
    check_launch(cuda::launch_gelu_tanh_backward_bias(dy.const_data_ptr(), h.const_data_ptr(), rows, f, dtype_of(h),
                                                      g.dh.data_ptr(), recompute ? g.act.data_ptr() : nullptr,
                                                      workspace.data_ptr<float>(), g.db.data_ptr(), stream()),
                 "gelu backward");
    return g;
  }
#endif
  (void)in_place;  // ATen's backward writes a new tensor
  g.dh = at::gelu_backward(dy, h, "tanh");
  g.db = bias_grad(g.dh.reshape({rows, f}));
  if (recompute) g.act = at::gelu(h, "tanh");
  return g;
}

#ifdef STRATUM_WITH_CUDA_KERNELS
// Whether cuBLASLt's epilogues may take these: 16-bit GPU tensors in one
// dtype, contiguous, every leading dimension a multiple of 8 (16 bytes).
// STRATUM_GEMM_EPILOGUES=0 runs the separate GEMMs and GELU kernels instead
// (a diagnostic switch, read once: the same math, for side-by-side timing).
bool epilogue_gemm(std::initializer_list<const at::Tensor*> ts, std::initializer_list<int64_t> lds) {
  static const bool enabled = [] {
    const char* v = std::getenv("STRATUM_GEMM_EPILOGUES");
    return v == nullptr || std::string(v) != "0";
  }();
  if (!enabled || !use_kernels(ts) || (*ts.begin())->scalar_type() == at::kFloat) return false;
  for (int64_t ld : lds)
    if (ld % 8 != 0) return false;
  return true;
}

cuda::GemmWorkspace gemm_workspace(const at::Tensor& like, at::Tensor& holder) {
  holder = at::empty({static_cast<int64_t>(cuda::kGemmWorkspaceBytes)}, like.options().dtype(at::kByte));
  return {holder.data_ptr(), cuda::kGemmWorkspaceBytes};
}
#endif

// (h, gelu_tanh(h)) for h = x wᵀ + b: on a GPU one GEMM writing both
// (cuBLASLt's GELU_AUX_BIAS epilogue), else the linear and the GELU.
std::pair<at::Tensor, at::Tensor> linear_bias_gelu_values(const at::Tensor& x, const at::Tensor& w,
                                                          const at::Tensor& b) {
#ifdef STRATUM_WITH_CUDA_KERNELS
  const int64_t in = x.size(-1), out = w.size(0), rows = in == 0 ? 0 : x.numel() / in;
  if (epilogue_gemm({&x, &w, &b}, {in, out})) {
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor h = at::empty(with_last(x, out), x.options()), act = at::empty_like(h), workspace;
    if (cuda::gemm_bias_gelu(x.const_data_ptr(), w.const_data_ptr(), b.const_data_ptr(), rows, in, out, dtype_of(x),
                             h.data_ptr(), act.data_ptr(), gemm_workspace(x, workspace), stream()))
      return {h, act};
  }
#endif
  at::Tensor h = at::linear(x, w, b);
  at::Tensor act = at::gelu(h, "tanh");
  return {h, act};
}

struct LinearBiasGelu : torch::autograd::Function<LinearBiasGelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    auto [h, act] = linear_bias_gelu_values(x, w, b);
    ctx->save_for_backward({x, w, h});  // the weight parameter itself (see nn/linear.h)
    return act;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &h = saved[2];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t f = h.size(-1), rows = f == 0 ? 0 : h.numel() / f;
    const auto [dh, db, unused] = gelu_tanh_backward(dy, h, /*in_place=*/false, /*recompute=*/false);
    const at::Tensor dh2 = dh.reshape({rows, f});
    at::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) gx = dh.matmul(w);
    if (ctx->needs_input_grad(1)) gw = dh2.t().mm(x.reshape({rows, x.size(-1)}));
    return {gx, gw, ctx->needs_input_grad(2) ? db : at::Tensor()};
  }
};

// GPT-2's MLP, gelu_tanh(x W1ᵀ + b1) W2ᵀ + b2, saving x, h = x W1ᵀ + b1,
// the weights and, with `keep_activation`, gelu(h). Without it the backward
// recomputes gelu(h) for W2's gradient: on a GPU in the pass that turns
// gelu(h)'s gradient into h's (in place) and sums b1's. On a GPU in 16 bits
// the forward's first GEMM writes h and gelu(h) (cuBLASLt's epilogue,
// nn/gemm_epilogue_cuda.h): no elementwise pass in the forward.
struct GeluMLP : torch::autograd::Function<GeluMLP> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1,
                            const at::Tensor& w2, const at::Tensor& b2, bool keep_activation) {
    auto [h, act] = linear_bias_gelu_values(x, w1, b1);
    // The weight parameters themselves (see nn/linear.h).
    if (keep_activation) ctx->save_for_backward({x, w1, h, w2, act});
    else ctx->save_for_backward({x, w1, h, w2});
    return at::linear(act, w2, b2);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w1 = saved[1], &w2 = saved[3];
    const bool kept = saved.size() == 5;
    const int64_t f = saved[2].size(-1), rows = f == 0 ? 0 : saved[2].numel() / f;
    const at::Tensor h = saved[2].reshape({rows, f});
    const at::Tensor dy2 = grads[0].reshape({rows, grads[0].size(-1)}).contiguous();
    // gelu(h)'s gradient dy2 W2, turned into h's in place (gelu(h) recomputed when not kept).
    auto [dh, db1, act] = gelu_tanh_backward(dy2.mm(w2), h, /*in_place=*/true, /*recompute=*/!kept);
    if (kept) act = saved[4].reshape({rows, f});
    variable_list out(6);
    if (ctx->needs_input_grad(3)) out[3] = weight_grad(w2, dy2, act);
    if (ctx->needs_input_grad(4)) out[4] = bias_grad(dy2);
    act.reset();  // a recomputed one freed before the products below allocate theirs
    if (ctx->needs_input_grad(0)) out[0] = dh.mm(w1).view(x.sizes());
    if (ctx->needs_input_grad(1)) out[1] = weight_grad(w1, dh, x.reshape({rows, x.size(-1)}));
    if (ctx->needs_input_grad(2)) out[2] = db1;
    return out;
  }
};

// x * cos + rotate_half(x) * sin, or with `transpose` the rotation's transpose
// (the gradient): dy * cos + cat((dy * sin)[D/2:], -(dy * sin)[:D/2]).
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool transpose) {
  const int64_t d = x.size(-1), half = d / 2;
#ifdef STRATUM_WITH_CUDA_KERNELS
  // x may be strided (a transposed view of the q/k projection); cos and sin contiguous.
  if (x.dim() == 4 && x.stride(3) == 1 && on_gpu_in_one_dtype({&x, &cos, &sin}) && use_kernels({&cos, &sin}) &&
      cos.dim() == 2 && cos.size(0) == x.size(2) && cos.size(1) == d && sin.sizes() == cos.sizes()) {
    c10::cuda::CUDAGuard guard(x.device());
    // [B, T, H, D] in memory, as the ATen composition left it for attention.
    at::Tensor y = at::empty({x.size(0), x.size(2), x.size(1), d}, x.options()).transpose(1, 2);
    cuda::Rotary r;
    r.x = x.const_data_ptr();
    r.cos = cos.const_data_ptr();
    r.sin = sin.const_data_ptr();
    r.y = y.data_ptr();
    for (int i = 0; i < 4; ++i) {
      r.size[i] = x.size(i);
      r.x_stride[i] = x.stride(i);
      r.y_stride[i] = y.stride(i);
    }
    r.transpose = transpose;
    check_launch(cuda::launch_rotary(r, dtype_of(x), stream()), "rotary");
    return y;
  }
#endif
  if (!transpose) return x * cos + at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * sin;
  const at::Tensor ds = x * sin;
  return x * cos + at::cat({ds.narrow(-1, half, half), -ds.narrow(-1, 0, half)}, -1);
}

struct Rotary : torch::autograd::Function<Rotary> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotate(x, cos, sin, /*transpose=*/false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {rotate(grads[0], saved[0], saved[1], /*transpose=*/true), at::Tensor(), at::Tensor()};
  }
};

struct LayerNormGrads {
  at::Tensor input, weight, bias;
};

// LayerNorm's backward at its input h (saved mean and rstd from
// native_layer_norm), with `dh_ext` (the gradient h also gets from the
// residual stream; may be undefined) added to the input gradient in the same
// pass on a GPU. The weight and bias gradients are column sums.
LayerNormGrads layer_norm_backward(const at::Tensor& h, const at::Tensor& dy, const at::Tensor& dh_ext,
                                   const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& mean,
                                   const at::Tensor& rstd, bool weight_grad, bool bias_grad) {
  const int64_t cols = h.size(-1);
#ifdef STRATUM_WITH_CUDA_KERNELS
  const int64_t rows = cols == 0 ? 0 : h.numel() / cols;
  if (use_kernels({&h, &dy, &weight, &bias}) && (!dh_ext.defined() || use_kernels({&h, &dh_ext})) &&
      mean.scalar_type() == at::kFloat && rstd.scalar_type() == at::kFloat && mean.is_contiguous() &&
      rstd.is_contiguous()) {
    c10::cuda::CUDAGuard guard(h.device());
    cuda::LayerNormBackward a;
    a.h = h.const_data_ptr();
    a.dy = dy.const_data_ptr();
    a.dh_ext = dh_ext.defined() ? dh_ext.const_data_ptr() : nullptr;
    a.gamma = weight.const_data_ptr();
    a.mean = mean.const_data_ptr<float>();
    a.rstd = rstd.const_data_ptr<float>();
    a.rows = rows;
    a.cols = cols;
    LayerNormGrads g{at::empty_like(h)};
    a.dh = g.input.data_ptr();
    check_launch(cuda::launch_layer_norm_backward_input(a, dtype_of(h), stream()), "layer norm backward");
    if (weight_grad || bias_grad) {
      g.weight = at::empty_like(weight);
      g.bias = at::empty_like(bias);
      const at::Tensor workspace = column_sum_workspace(h, rows, cols);
      check_launch(cuda::launch_layer_norm_backward_params(a, dtype_of(h), workspace.data_ptr<float>(),
                                                           g.weight.data_ptr(), g.bias.data_ptr(), stream()),
                   "layer norm parameter gradients");
    }
    return g;
  }
#endif
  auto [dx, dgamma, dbeta] =
      at::native_layer_norm_backward(dy, h, {cols}, mean, rstd, weight, bias, {true, weight_grad, bias_grad});
  return {dh_ext.defined() ? dx + dh_ext : dx, dgamma, dbeta};
}

// y = LayerNorm(x) with the backward above (ATen's weight/bias gradient
// kernel took three times as long as the column sums on an H200).
struct LayerNorm : torch::autograd::Function<LayerNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps) {
    const at::Tensor xc = x.contiguous();
    auto [y, mean, rstd] = at::native_layer_norm(xc, {xc.size(-1)}, weight, bias, eps);
    ctx->save_for_backward({xc, weight, bias, mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const LayerNormGrads g = layer_norm_backward(saved[0], grads[0].contiguous(), at::Tensor(), saved[1], saved[2],
                                                 saved[3], saved[4], ctx->needs_input_grad(1),
                                                 ctx->needs_input_grad(2));
    return {g.input, g.weight, g.bias, at::Tensor()};
  }
};

// h = x + branch and y = LayerNorm(h): the residual add and the next norm of a
// block. The backward adds h's own gradient (from the residual stream after
// it) to LayerNorm's input gradient in the same pass: autograd would run
// LayerNorm's backward, then an add.
struct AddLayerNorm : torch::autograd::Function<AddLayerNorm> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& branch,
                               const at::Tensor& weight, const at::Tensor& bias, double eps) {
    const at::Tensor h = x + branch;
    auto [y, mean, rstd] = at::native_layer_norm(h, {h.size(-1)}, weight, bias, eps);
    ctx->save_for_backward({h, weight, bias, mean, rstd});
    return {h, y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor dh_ext = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    if (!grads[1].defined()) return {dh_ext, dh_ext, at::Tensor(), at::Tensor(), at::Tensor()};
    const LayerNormGrads g = layer_norm_backward(saved[0], grads[1].contiguous(), dh_ext, saved[1], saved[2],
                                                 saved[3], saved[4], ctx->needs_input_grad(2),
                                                 ctx->needs_input_grad(3));
    return {g.input, g.input, g.weight, g.bias, at::Tensor()};
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& branch,
                                                 const at::Tensor& weight, const at::Tensor& bias, double eps) {
  if (!weight.defined() || !bias.defined() || weight.dim() != 1 || weight.size(0) != x.size(-1) ||
      bias.sizes() != weight.sizes() || x.sizes() != branch.sizes())
    throw Error("add_layer_norm: need x and branch of one shape [..., C] and weight, bias [C]; got x " +
                c10::str(x.sizes()) + ", branch " + c10::str(branch.sizes()) + ", weight " +
                (weight.defined() ? c10::str(weight.sizes()) : std::string("undefined")));
  auto out = AddLayerNorm::apply(x, branch, weight, bias, eps);
  return {out[0], out[1]};
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  if (!weight.defined() || !bias.defined() || weight.dim() != 1 || x.dim() < 1 || weight.size(0) != x.size(-1) ||
      bias.sizes() != weight.sizes())
    throw Error("layer_norm: need x [..., C] and weight, bias [C]; got x " + c10::str(x.sizes()) + ", weight " +
                (weight.defined() ? c10::str(weight.sizes()) : std::string("undefined")) + ", bias " +
                (bias.defined() ? c10::str(bias.sizes()) : std::string("undefined")));
  return LayerNorm::apply(x, weight, bias, eps);
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (!x.defined() || x.dim() < 2 || x.size(-1) % 2 != 0)
    throw Error("rotary: x must be [..., seq, head_dim] with an even head_dim, got " +
                (x.defined() ? c10::str(x.sizes()) : std::string("an undefined tensor")));
  return Rotary::apply(x, cos, sin);
}

at::Tensor swiglu(const at::Tensor& gate_up) {
  if (!gate_up.defined() || gate_up.dim() < 1 || gate_up.size(-1) % 2 != 0)
    throw Error("swiglu: gate_up must be [..., 2F] (gate and up stacked along the last dimension), got " +
                (gate_up.defined() ? c10::str(gate_up.sizes()) : std::string("an undefined tensor")));
  return SwiGLU::apply(gate_up);
}

at::Tensor linear_bias_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!bias.defined()) throw Error("linear_bias_gelu: the bias is undefined (use at::gelu(nn::linear(x, w)))");
  return LinearBiasGelu::apply(x, weight, bias);
}

at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2,
                    const at::Tensor& b2, bool keep_activation) {
  const auto shape = [](const at::Tensor& t) { return t.defined() ? c10::str(t.sizes()) : std::string("undefined"); };
  if (!x.defined() || !w1.defined() || !b1.defined() || !w2.defined() || !b2.defined() || x.dim() < 1 ||
      w1.dim() != 2 || w2.dim() != 2 || w1.size(1) != x.size(-1) || b1.dim() != 1 || b1.size(0) != w1.size(0) ||
      w2.size(1) != w1.size(0) || b2.dim() != 1 || b2.size(0) != w2.size(0))
    throw Error("gelu_mlp: need x [..., C], w1 [F, C], b1 [F], w2 [C', F], b2 [C']; got x " + shape(x) + ", w1 " +
                shape(w1) + ", b1 " + shape(b1) + ", w2 " + shape(w2) + ", b2 " + shape(b2));
  return GeluMLP::apply(x, w1, b1, w2, b2, keep_activation);
}

at::Tensor swiglu_linear(const at::Tensor& gate_up, const at::Tensor& w_down) {
  if (!gate_up.defined() || gate_up.dim() < 1 || gate_up.size(-1) % 2 != 0 || !w_down.defined() ||
      w_down.dim() != 2 || w_down.size(1) * 2 != gate_up.size(-1))
    throw Error("swiglu_linear: need gate_up [..., 2F] and w_down [C, F]; got gate_up " +
                (gate_up.defined() ? c10::str(gate_up.sizes()) : std::string("undefined")) + ", w_down " +
                (w_down.defined() ? c10::str(w_down.sizes()) : std::string("undefined")));
  return SwiGLULinear::apply(gate_up, w_down);
}

at::Tensor bias_grad(const at::Tensor& g) {
  if (g.dim() != 2) throw Error("bias_grad: g must be [rows, out], got " + c10::str(g.sizes()));
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (use_kernels({&g})) {
    c10::cuda::CUDAGuard guard(g.device());
    at::Tensor out = at::empty({g.size(1)}, g.options());
    const at::Tensor workspace = column_sum_workspace(g, g.size(0), g.size(1));
    check_launch(cuda::launch_column_sum(matrix_of(g), dtype_of(g), workspace.data_ptr<float>(), out.data_ptr(),
                                         stream()),
                 "bias gradient");
    return out;
  }
#endif
  return g.sum(0);
}

}  // namespace stratum::nn
