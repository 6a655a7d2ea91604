#include "stratum/nn/mlp.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>
#include <string>

#include "stratum/core/error.h"
#include "stratum/nn/tensor_parallel/float8_parallel_linear.h"
#include "stratum/nn/linear.h"
#include "stratum/nn/lora_linear.h"
#include "stratum/nn/tensor_parallel/layers.h"
#include "stratum/nn/tensor_parallel/random.h"
#include "stratum/nn/tiled_rows.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include "stratum/nn/gemm_epilogue_cuda.h"
#include "stratum/nn/kernel_launch.h"
#endif

namespace stratum::nn {
namespace {

// t's sizes with the last one replaced.
std::vector<int64_t> with_last(const at::Tensor& t, int64_t last) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes.back() = last;
  return sizes;
}

// silu(gate) * up of gate_up = [..., 2F]: [..., F]; with `amax`, where the
// kernel runs, also max |output| from the same pass (see swiglu in mlp.h).
at::Tensor swiglu_value(const at::Tensor& gate_up, [[maybe_unused]] at::Tensor* amax = nullptr) {
  const int64_t f = gate_up.size(-1) / 2;
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (cuda::use_kernels({&gate_up})) {
    c10::cuda::CUDAGuard guard(gate_up.device());
    at::Tensor out = at::empty(with_last(gate_up, f), gate_up.options());
    if (amax) *amax = at::zeros({}, gate_up.options().dtype(at::kFloat));
    cuda::check_launch(cuda::launch_swiglu_forward(cuda::matrix_of(gate_up), cuda::dtype_of(gate_up), out.data_ptr(),
                                                   cuda::current_stream(), amax ? amax->data_ptr<float>() : nullptr),
                       "fused elementwise kernel: swiglu forward");
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
  if (cuda::use_kernels({&gate_up, &d_out})) {
    c10::cuda::CUDAGuard guard(gate_up.device());
    at::Tensor d_gate_up = at::empty_like(gate_up);
    if (value) *value = at::empty(with_last(gate_up, f), gate_up.options());
    cuda::check_launch(cuda::launch_swiglu_backward(cuda::matrix_of(gate_up), d_out.const_data_ptr(),
                                                    cuda::dtype_of(gate_up), d_gate_up.data_ptr(),
                                                    value ? value->data_ptr() : nullptr, cuda::current_stream()),
                       "fused elementwise kernel: swiglu backward");
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

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SwiGLU : torch::autograd::Function<SwiGLU> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up, at::Tensor* amax) {
    ctx->save_for_backward({gate_up});
    return swiglu_value(gate_up, amax);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {swiglu_grad(ctx->get_saved_variables()[0], grads[0], nullptr), at::Tensor()};
  }
};

// tanh-GELU whose forward, where the kernel runs, also gives max |output|
// from the same pass (see gelu_tanh in mlp.h); the backward is ATen's.
struct GeluTanh : torch::autograd::Function<GeluTanh> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, [[maybe_unused]] at::Tensor* amax) {
    ctx->save_for_backward({h});
#ifdef STRATUM_WITH_CUDA_KERNELS
    if (amax && cuda::use_kernels({&h})) {
      c10::cuda::CUDAGuard guard(h.device());
      const at::Tensor in = h.contiguous();
      at::Tensor out = at::empty_like(in);
      *amax = at::zeros({}, in.options().dtype(at::kFloat));
      cuda::check_launch(cuda::launch_gelu_tanh_forward(in.const_data_ptr(), in.numel(), cuda::dtype_of(in),
                                                        out.data_ptr(), cuda::current_stream(),
                                                        amax->data_ptr<float>()),
                         "fused elementwise kernel: gelu forward");
      return out;
    }
#endif
    return at::gelu(h, "tanh");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {at::gelu_backward(grads[0], ctx->get_saved_variables()[0], "tanh"), at::Tensor()};
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
  if (cuda::use_kernels({&h, &dy})) {
    c10::cuda::CUDAGuard guard(h.device());
    g.dh = in_place ? dy : at::empty_like(h);
    g.db = at::empty({f}, h.options());
    if (recompute) g.act = at::empty_like(h);
    const at::Tensor workspace = cuda::column_sum_workspace(h, rows, f);
    cuda::check_launch(cuda::launch_gelu_tanh_backward_bias(dy.const_data_ptr(), h.const_data_ptr(), rows, f,
                                                            cuda::dtype_of(h), g.dh.data_ptr(),
                                                            recompute ? g.act.data_ptr() : nullptr,
                                                            workspace.data_ptr<float>(), g.db.data_ptr(),
                                                            cuda::current_stream()),
                       "fused elementwise kernel: gelu backward");
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
  if (!enabled || !cuda::use_kernels(ts) || (*ts.begin())->scalar_type() == at::kFloat) return false;
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
  // One op for observers (the engine's flops profiler, torch's profiler): on a
  // GPU its GEMM is cuBLASLt's, which no ATen op records; elsewhere it holds
  // the aten::linear it runs. Free without a callback installed.
  RECORD_FUNCTION("stratum::linear_bias_gelu", std::vector<c10::IValue>({x, w, b}));
#ifdef STRATUM_WITH_CUDA_KERNELS
  const int64_t in = x.size(-1), out = w.size(0), rows = in == 0 ? 0 : x.numel() / in;
  if (epilogue_gemm({&x, &w, &b}, {in, out})) {
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor h = at::empty(with_last(x, out), x.options()), act = at::empty_like(h), workspace;
    if (cuda::gemm_bias_gelu(x.const_data_ptr(), w.const_data_ptr(), b.const_data_ptr(), rows, in, out,
                             cuda::dtype_of(x), h.data_ptr(), act.data_ptr(), gemm_workspace(x, workspace),
                             cuda::current_stream()))
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
    // An empty b2 stands for none (autograd functions take no undefined tensors).
    ctx->saved_data["b2"] = b2.numel() > 0;
    auto [h, act] = linear_bias_gelu_values(x, w1, b1);
    // The weight parameters themselves (see nn/linear.h).
    if (keep_activation) ctx->save_for_backward({x, w1, h, w2, act});
    else ctx->save_for_backward({x, w1, h, w2});
    return at::linear(act, w2, b2.numel() > 0 ? b2 : at::Tensor());
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
    if (ctx->needs_input_grad(4) && ctx->saved_data["b2"].toBool()) out[4] = bias_grad(dy2);
    act.reset();  // a recomputed one freed before the products below allocate theirs
    if (ctx->needs_input_grad(0)) out[0] = dh.mm(w1).view(x.sizes());
    if (ctx->needs_input_grad(1)) out[1] = weight_grad(w1, dh, x.reshape({rows, x.size(-1)}));
    if (ctx->needs_input_grad(2)) out[2] = db1;
    return out;
  }
};

}  // namespace

at::Tensor swiglu(const at::Tensor& gate_up, at::Tensor* amax) {
  if (!gate_up.defined() || gate_up.dim() < 1 || gate_up.size(-1) % 2 != 0)
    throw Error("swiglu: gate_up must be [..., 2F] (gate and up stacked along the last dimension), got " +
                (gate_up.defined() ? c10::str(gate_up.sizes()) : std::string("an undefined tensor")));
  if (amax) *amax = at::Tensor();
  return SwiGLU::apply(gate_up, amax);
}

at::Tensor gelu_tanh(const at::Tensor& h, at::Tensor* amax) {
  if (!amax) return at::gelu(h, "tanh");
  *amax = at::Tensor();
  return GeluTanh::apply(h, amax);
}

at::Tensor swiglu_linear(const at::Tensor& gate_up, const at::Tensor& w_down) {
  if (!gate_up.defined() || gate_up.dim() < 1 || gate_up.size(-1) % 2 != 0 || !w_down.defined() ||
      w_down.dim() != 2 || w_down.size(1) * 2 != gate_up.size(-1))
    throw Error("swiglu_linear: need gate_up [..., 2F] and w_down [C, F]; got gate_up " +
                (gate_up.defined() ? c10::str(gate_up.sizes()) : std::string("undefined")) + ", w_down " +
                (w_down.defined() ? c10::str(w_down.sizes()) : std::string("undefined")));
  return SwiGLULinear::apply(gate_up, w_down);
}

at::Tensor linear_bias_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!bias.defined()) throw Error("linear_bias_gelu: the bias is undefined (use at::gelu(nn::linear(x, w)))");
  return LinearBiasGelu::apply(x, weight, bias);
}

at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2,
                    const at::Tensor& b2, bool keep_activation) {
  const auto shape = [](const at::Tensor& t) { return t.defined() ? c10::str(t.sizes()) : std::string("undefined"); };
  if (!x.defined() || !w1.defined() || !b1.defined() || !w2.defined() || x.dim() < 1 ||
      w1.dim() != 2 || w2.dim() != 2 || w1.size(1) != x.size(-1) || b1.dim() != 1 || b1.size(0) != w1.size(0) ||
      w2.size(1) != w1.size(0) || (b2.defined() && (b2.dim() != 1 || b2.size(0) != w2.size(0))))
    throw Error("gelu_mlp: need x [..., C], w1 [F, C], b1 [F], w2 [C', F], b2 [C']; got x " + shape(x) + ", w1 " +
                shape(w1) + ", b1 " + shape(b1) + ", w2 " + shape(w2) + ", b2 " + shape(b2));
  return GeluMLP::apply(x, w1, b1, w2, b2.defined() ? b2 : at::empty({0}, w2.options()), keep_activation);
}

GeluMLPImpl::GeluMLPImpl(int64_t hidden, int64_t ffn_hidden, double dropout, bool recompute_activation,
                         tp::TensorParallel tp, c10::Device device)
    : torch::nn::Module("GeluMLP"), dropout(dropout), recompute_activation(recompute_activation), tp(std::move(tp)) {
  c_fc = register_module("c_fc", Linear(hidden, ffn_hidden / this->tp.size(), /*bias=*/true, device));
  c_proj = register_module("c_proj", Linear(ffn_hidden / this->tp.size(), hidden, /*bias=*/true, device));
}

bool GeluMLPImpl::tiled() const {
  return tile_tokens > 0 && !(c_fc->has_lora() || c_proj->has_lora() || c_fc->nf4_base || c_proj->nf4_base);
}

bool GeluMLPImpl::takes_input_amax() const { return tp::column_input_takes_amax(c_fc_fp8.get(), tp); }

at::Tensor GeluMLPImpl::forward(const at::Tensor& x, const at::Tensor& x_amax) {
  if (c_fc_fp8 || c_proj_fp8) return forward_float8(x, x_amax);
  if (c_fc->has_lora() || c_proj->has_lora() || c_fc->nf4_base || c_proj->nf4_base) return forward_with_adapters(x);
  // Under tensor parallelism both GEMMs run on this rank's columns of the
  // inner width, as one function; c_proj's bias comes after the group's sum.
  // The function reads the parameters when it runs (tiled: again in backward).
  GeluMLPImpl* self = this;
  const RowFunction mlp = [self](const at::Tensor& in) {
    return nn::gelu_mlp(in, self->c_fc->weight, self->c_fc->bias, self->c_proj->weight,
                        self->tp.enabled() ? at::Tensor() : self->c_proj->bias,
                        /*keep_activation=*/!self->recompute_activation);
  };
  const at::Tensor partial = tp::through_region(x, tp, [&](const at::Tensor& in) {
    if (!tiled()) return mlp(in);
    return tiled_rows(mlp, in, {c_fc->weight, c_fc->bias, c_proj->weight, tp.enabled() ? at::Tensor() : c_proj->bias},
                      tile_tokens);
  });
  const at::Tensor y = tp.enabled() ? tp::leave_region(partial, tp) + c_proj->bias : partial;
  return is_training() ? tp::dropout_outside_region(y, dropout, tp) : y;
}

// FP8 layers run apart (no fused GELU epilogue): each GEMM in FP8 or bf16 as
// set, column- and row-parallel under tensor parallelism.
at::Tensor GeluMLPImpl::forward_float8(const at::Tensor& x, const at::Tensor& x_amax) {
  const at::Tensor h = c_fc_fp8 ? tp::column_parallel_float8_linear(x, {c_fc->weight}, c_fc->bias, *c_fc_fp8, tp, x_amax)
                                : tp::column_parallel_linear(x, c_fc->weight, c_fc->bias, tp);
  at::Tensor act_amax;
  const at::Tensor act = gelu_tanh(h, tp::row_input_takes_amax(c_proj_fp8.get()) ? &act_amax : nullptr);
  const at::Tensor y =
      c_proj_fp8 ? tp::row_parallel_float8_linear(act, c_proj->weight, c_proj->bias, *c_proj_fp8, tp, act_amax)
                 : tp::row_parallel_linear(act, c_proj->weight, c_proj->bias, tp);
  return is_training() ? tp::dropout_outside_region(y, dropout, tp) : y;
}

// The adapters' terms join between the GEMMs, and NF4 weights are read by
// their own GEMMs: the layers run apart (GELU after c_fc's term is added), as
// peft's model runs them.
at::Tensor GeluMLPImpl::forward_with_adapters(const at::Tensor& x) {
  const bool training = is_training();
  at::Tensor h = tp::through_region(x, tp, [&](const at::Tensor& in) { return frozen_linear(in, *c_fc, c_fc->bias); });
  if (c_fc->has_lora()) h = h + column_parallel_lora(x, *c_fc, tp, training);
  const at::Tensor act = at::gelu(h, "tanh");
  at::Tensor y = tp.enabled() ? tp::leave_region(frozen_linear(act, *c_proj), tp) + c_proj->bias
                              : frozen_linear(act, *c_proj, c_proj->bias);
  if (c_proj->has_lora()) y = y + row_parallel_lora(act, *c_proj, tp, training);
  return training ? tp::dropout_outside_region(y, dropout, tp) : y;
}

SwiGLUMLPImpl::SwiGLUMLPImpl(int64_t hidden, int64_t ffn_hidden, bool recompute_activation, tp::TensorParallel tp,
                             c10::Device device)
    : torch::nn::Module("SwiGLUMLP"), recompute_activation(recompute_activation), tp(std::move(tp)) {
  auto linear = [device](int64_t in, int64_t out) { return Linear(in, out, /*bias=*/false, device); };
  const int64_t local = ffn_hidden / this->tp.size();
  gate_proj = register_module("gate_proj", linear(hidden, local));
  up_proj = register_module("up_proj", linear(hidden, local));
  down_proj = register_module("down_proj", linear(local, hidden));
}

bool SwiGLUMLPImpl::tiled() const {
  return tile_tokens > 0 && !(gate_proj->has_lora() || up_proj->has_lora() || down_proj->has_lora() ||
                              gate_proj->nf4_base || up_proj->nf4_base || down_proj->nf4_base);
}

bool SwiGLUMLPImpl::takes_input_amax() const { return tp::column_input_takes_amax(gate_up_fp8.get(), tp); }

at::Tensor SwiGLUMLPImpl::forward(const at::Tensor& x, const at::Tensor& x_amax) {
  if (gate_up_fp8 || down_proj_fp8) return forward_float8(x, x_amax);
  if (tiled()) {
    // The whole MLP a tile at a time (this rank's shard under tensor parallelism).
    SwiGLUMLPImpl* self = this;
    const RowFunction mlp = [self](const at::Tensor& in) {
      const at::Tensor gate_up = nn::linear_stacked(in, {self->gate_proj->weight, self->up_proj->weight});
      return self->recompute_activation ? nn::swiglu_linear(gate_up, self->down_proj->weight)
                                        : nn::linear(nn::swiglu(gate_up), self->down_proj->weight);
    };
    return tp::leave_region(tp::through_region(x, tp,
                                               [&](const at::Tensor& in) {
                                                 return tiled_rows(mlp, in,
                                                                   {gate_proj->weight, up_proj->weight,
                                                                    down_proj->weight},
                                                                   tile_tokens);
                                               }),
                            tp);
  }
  // Gate and up projections as one GEMM over the stacked weights (4-bit ones
  // dequantized side by side), and one each way for their adapters.
  const bool nf4 = gate_proj->nf4_base || up_proj->nf4_base || down_proj->nf4_base;
  const std::vector<const LinearImpl*> gate_and_up{gate_proj.get(), up_proj.get()};
  at::Tensor gate_up =
      tp::through_region(x, tp, [&](const at::Tensor& in) { return frozen_linear_stacked(in, gate_and_up); });
  if (!tp.enabled()) {
    gate_up = add_lora_terms(gate_up, x, gate_and_up, is_training());
  } else if (gate_proj->has_lora() || up_proj->has_lora()) {
    // The adapters' terms in gate_up's layout ([gate | up]), zeros where a projection has none.
    const bool training = is_training();
    auto term = [&](const LinearImpl& layer, int64_t half) {
      return layer.has_lora() ? column_parallel_lora(x, layer, tp, training)
                              : at::zeros_like(gate_up.narrow(-1, half * gate_up.size(-1) / 2, gate_up.size(-1) / 2));
    };
    gate_up = gate_up + at::cat({term(*gate_proj, 0), term(*up_proj, 1)}, -1);
  }
  if (down_proj->has_lora() || nf4) {
    const at::Tensor act = nn::swiglu(gate_up);
    const at::Tensor y = tp::leave_region(frozen_linear(act, *down_proj), tp);
    if (!down_proj->has_lora()) return y;
    return tp.enabled() ? y + row_parallel_lora(act, *down_proj, tp, is_training())
                        : add_lora_terms(y, act, {down_proj.get()}, is_training());
  }
  return tp::leave_region(recompute_activation ? nn::swiglu_linear(gate_up, down_proj->weight)
                                               : nn::linear(nn::swiglu(gate_up), down_proj->weight),
                          tp);
}

// FP8 layers: gate/up as one GEMM, SwiGLU between, down; each in FP8 or bf16
// as set, column- and row-parallel under tensor parallelism.
at::Tensor SwiGLUMLPImpl::forward_float8(const at::Tensor& x, const at::Tensor& x_amax) {
  const at::Tensor gate_up =
      gate_up_fp8 ? tp::column_parallel_float8_linear(x, {gate_proj->weight, up_proj->weight}, at::Tensor(),
                                                      *gate_up_fp8, tp, x_amax)
                  : tp::through_region(x, tp, [&](const at::Tensor& in) {
                      return nn::linear_stacked(in, {gate_proj->weight, up_proj->weight});
                    });
  at::Tensor act_amax;
  const at::Tensor act = nn::swiglu(gate_up, tp::row_input_takes_amax(down_proj_fp8.get()) ? &act_amax : nullptr);
  return down_proj_fp8
             ? tp::row_parallel_float8_linear(act, down_proj->weight, at::Tensor(), *down_proj_fp8, tp, act_amax)
             : tp::row_parallel_linear(act, down_proj->weight, at::Tensor(), tp);
}

}  // namespace stratum::nn
