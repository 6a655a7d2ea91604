#include "stratum/nn/tiled_rows.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward needs besides the saved input: the function and the
// parameters it reads (the parameters themselves, not views: ZeRO-3 swaps
// their storage in and out around the layer's passes).
struct TileState : torch::CustomClassHolder {
  RowFunction fn;
  std::vector<at::Tensor> params;
  int64_t tile_rows = 0;
};

at::Tensor rows_of(const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

struct TiledRows : torch::autograd::Function<TiledRows> {
  // params is the state's list again, as inputs: autograd routes their gradients.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList params,
                            c10::intrusive_ptr<TileState> state) {
    const at::Tensor x2 = rows_of(x);
    const int64_t n = x2.size(0), tile = state->tile_rows;
    std::vector<int64_t> out_sizes = x.sizes().vec();
    at::Tensor y;
    for (int64_t r = 0; r < n; r += tile) {
      const int64_t len = std::min(tile, n - r);
      const at::Tensor yt = state->fn(x2.narrow(0, r, len));
      if (!y.defined()) y = at::empty({n, yt.size(-1)}, yt.options());
      y.narrow(0, r, len).copy_(yt);
    }
    out_sizes.back() = y.size(-1);
    ctx->save_for_backward({x});  // x itself (a gathered input may be released and restored in place)
    ctx->saved_data["state"] = at::IValue::make_capsule(std::move(state));
    (void)params;
    return y.view(out_sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder = ctx->saved_data.at("state").toCapsule();
    const TileState& s = *static_cast<const TileState*>(holder.get());
    const at::Tensor x2 = rows_of(ctx->get_saved_variables().at(0));
    const at::Tensor dy = rows_of(grads.at(0));
    const int64_t n = x2.size(0), np = static_cast<int64_t>(s.params.size());
    const bool want_x = ctx->needs_input_grad(0);
    at::Tensor gx = want_x ? at::empty_like(x2) : at::Tensor();
    std::vector<at::Tensor> acc(np);
    std::vector<int64_t> wanted;  // indices of params whose gradient is needed
    for (int64_t i = 0; i < np; ++i)
      if (ctx->needs_input_grad(1 + i)) wanted.push_back(i);
    for (int64_t r = 0; r < n; r += s.tile_rows) {
      const int64_t len = std::min(s.tile_rows, n - r);
      const at::Tensor xt = x2.narrow(0, r, len).detach().requires_grad_(want_x);
      at::Tensor yt;
      {
        c10::AutoGradMode enable(true);
        yt = s.fn(xt);
      }
      variable_list inputs;
      if (want_x) inputs.push_back(xt);
      for (int64_t i : wanted) inputs.push_back(s.params[i]);
      if (inputs.empty()) break;
      const variable_list g = torch::autograd::grad({yt}, inputs, {dy.narrow(0, r, len)}, /*retain_graph=*/false,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
      yt.reset();
      size_t k = 0;
      if (want_x) {
        at::Tensor out = gx.narrow(0, r, len);
        if (g[k].defined()) out.copy_(g[k]);
        else out.zero_();
        ++k;
      }
      for (int64_t i : wanted) {
        const at::Tensor& gi = g[k++];
        if (!gi.defined()) continue;
        if (!acc[i].defined()) {
          // The sum in fp32 for 16-bit parameters: one rounding at the end, as one GEMM over all rows.
          acc[i] = gi.scalar_type() == at::kFloat || gi.scalar_type() == at::kDouble ? gi.clone()
                                                                                     : gi.to(at::kFloat);
        } else {
          acc[i].add_(gi);
        }
      }
    }
    variable_list out(1 + np + 1);  // x, each parameter, the state
    if (want_x) out[0] = gx.view(ctx->get_saved_variables().at(0).sizes());
    for (int64_t i : wanted)
      if (acc[i].defined()) out[1 + i] = acc[i].to(s.params[i].scalar_type());
    return out;
  }
};

}  // namespace

at::Tensor tiled_rows(const RowFunction& fn, const at::Tensor& x, const std::vector<at::Tensor>& params,
                      int64_t tile_rows) {
  if (!x.defined() || x.dim() < 1) throw Error("tiled_rows: x must be a tensor [..., C]");
  const int64_t rows = x.size(-1) == 0 ? 0 : x.numel() / x.size(-1);
  if (tile_rows <= 0 || tile_rows >= rows) return fn(x);
  auto state = c10::make_intrusive<TileState>();
  state->fn = fn;
  state->tile_rows = tile_rows;
  for (const auto& p : params)
    if (p.defined() && p.requires_grad()) state->params.push_back(p);
  const std::vector<at::Tensor> inputs = state->params;
  return TiledRows::apply(x, at::TensorList(inputs), std::move(state));
}

}  // namespace stratum::nn
