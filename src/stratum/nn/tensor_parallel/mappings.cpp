#include "stratum/nn/tensor_parallel/mappings.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "stratum/core/error.h"

namespace stratum::nn::tp {
namespace {

using distributed::Communicator;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t normalized(int64_t dim, const at::Tensor& x) { return dim < 0 ? dim + x.dim() : dim; }

void check_divisible(const at::Tensor& x, int64_t dim, int64_t parts, const char* what) {
  if (dim < 0 || dim >= x.dim())
    throw Error(std::string("tensor parallel: ") + what + " " + c10::str(x.sizes()) + " has no dimension " +
                std::to_string(dim));
  if (x.size(dim) % parts != 0)
    throw Error(std::string("tensor parallel: ") + what + " " + c10::str(x.sizes()) + ": dimension " +
                std::to_string(dim) + " of size " + std::to_string(x.size(dim)) +
                " is not divisible by the tensor-parallel size " + std::to_string(parts));
}

at::Tensor all_reduced(const at::Tensor& x, Communicator& group) {
  at::Tensor out = x.contiguous().clone();
  group.all_reduce(out, distributed::ReduceOp::sum)->wait();
  return out;
}

// The group travels through autograd's saved data as an address: the model
// that built the graph holds the communicator (see mappings.h).
void save_group(AutogradContext* ctx, Communicator* group) {
  ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
}
Communicator& saved_group(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

// forward(x) and backward(g) as plain functions of the group: one autograd
// function per pairing.
enum class Map { identity, all_reduce, keep_chunk, all_gather, reduce_scatter };

at::Tensor apply_map(Map m, const at::Tensor& x, int64_t dim, Communicator& group, const char* what) {
  switch (m) {
    case Map::identity: return x;
    case Map::all_reduce: return all_reduced(x, group);
    case Map::keep_chunk: return chunk_along(x, dim, group.rank(), group.size(), what);
    case Map::all_gather: return all_gather_along(x, dim, group);
    case Map::reduce_scatter: return reduce_scatter_along(x, dim, group, what);
  }
  return x;
}

template <Map Forward, Map Backward>
struct Paired : torch::autograd::Function<Paired<Forward, Backward>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group_address, int64_t dim) {
    Communicator& group = *reinterpret_cast<Communicator*>(static_cast<intptr_t>(group_address));
    save_group(ctx, &group);
    ctx->saved_data["dim"] = dim;
    // The identity's output must be a new tensor for autograd (a view of the input).
    at::Tensor y = apply_map(Forward, x, dim, group, "activation");
    return Forward == Map::identity ? y.view_as(y) : y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& group = saved_group(ctx);
    return {apply_map(Backward, grads[0], ctx->saved_data["dim"].toInt(), group, "gradient"), at::Tensor(),
            at::Tensor()};
  }
};

template <Map Forward, Map Backward>
at::Tensor paired(const at::Tensor& x, const TensorParallel& tp, int64_t dim) {
  if (!tp.enabled()) return x;
  if (!x.defined()) throw Error("tensor parallel: an undefined activation");
  return Paired<Forward, Backward>::apply(x, static_cast<int64_t>(reinterpret_cast<intptr_t>(tp.group.get())),
                                          normalized(dim, x));
}

}  // namespace

at::Tensor all_gather_along(const at::Tensor& x, int64_t dim, Communicator& group) {
  dim = normalized(dim, x);
  const int64_t t = group.size();
  if (t == 1) return x;
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty({t * in.numel()}, in.options());
  group.all_gather(out, in.view(-1))->wait();
  std::vector<int64_t> stacked = {t};
  for (int64_t s : in.sizes()) stacked.push_back(s);
  // [t, ..., n, ...] -> [..., t n, ...]: chunk r of the result is rank r's.
  at::Tensor parts = out.view(stacked).movedim(0, dim);
  std::vector<int64_t> merged = in.sizes().vec();
  merged[dim] *= t;
  return parts.reshape(merged);
}

at::Tensor reduce_scatter_along(const at::Tensor& x, int64_t dim, Communicator& group, const char* what) {
  dim = normalized(dim, x);
  const int64_t t = group.size();
  if (t == 1) return x;
  check_divisible(x, dim, t, what);
  std::vector<int64_t> split = x.sizes().vec();
  split[dim] /= t;
  split.insert(split.begin() + dim, t);
  // [..., t n, ...] -> [t, ..., n, ...], contiguous: chunk r is rank r's block.
  const at::Tensor in = x.reshape(split).movedim(dim, 0).contiguous();
  std::vector<int64_t> chunk = x.sizes().vec();
  chunk[dim] /= t;
  at::Tensor out = at::empty(chunk, x.options());
  at::Tensor flat = out.view(-1);
  group.reduce_scatter(flat, in.view(-1), distributed::ReduceOp::sum)->wait();
  return out;
}

at::Tensor chunk_along(const at::Tensor& x, int64_t dim, int64_t rank, int64_t parts, const char* what) {
  dim = normalized(dim, x);
  if (parts == 1) return x;
  check_divisible(x, dim, parts, what);
  const int64_t n = x.size(dim) / parts;
  return x.narrow(dim, rank * n, n).contiguous();
}

at::Tensor copy_to_region(const at::Tensor& x, const TensorParallel& tp) {
  return paired<Map::identity, Map::all_reduce>(x, tp, 0);
}
at::Tensor reduce_from_region(const at::Tensor& x, const TensorParallel& tp) {
  return paired<Map::all_reduce, Map::identity>(x, tp, 0);
}
at::Tensor scatter_to_last(const at::Tensor& x, const TensorParallel& tp) {
  return paired<Map::keep_chunk, Map::all_gather>(x, tp, -1);
}
at::Tensor gather_from_last(const at::Tensor& x, const TensorParallel& tp) {
  return paired<Map::all_gather, Map::keep_chunk>(x, tp, -1);
}
at::Tensor scatter_to_sequence(const at::Tensor& x, const TensorParallel& tp) {
  return paired<Map::keep_chunk, Map::all_gather>(x, tp, kSequenceDim);
}
at::Tensor gather_from_sequence(const at::Tensor& x, const TensorParallel& tp) {
  return paired<Map::all_gather, Map::reduce_scatter>(x, tp, kSequenceDim);
}
at::Tensor reduce_scatter_to_sequence(const at::Tensor& x, const TensorParallel& tp) {
  return paired<Map::reduce_scatter, Map::all_gather>(x, tp, kSequenceDim);
}

at::Tensor enter_region(const at::Tensor& x, const TensorParallel& tp) {
  return tp.sequence_parallel ? gather_from_sequence(x, tp) : copy_to_region(x, tp);
}

at::Tensor through_region(const at::Tensor& x, const TensorParallel& tp,
                          const std::function<at::Tensor(const at::Tensor&)>& fn) {
  if (!tp.enabled() || !tp.sequence_parallel || !c10::GradMode::is_enabled()) return fn(enter_region(x, tp));
  at::Tensor gathered = gather_from_sequence(x, tp);
  at::Tensor y = fn(gathered);
  if (!y.requires_grad()) return y;
  // The same tensor object fn saved: rebinding its data (as ZeRO-3 rebinds
  // parameters) frees the gathered copy and later restores it.
  const std::vector<int64_t> shape = gathered.sizes().vec();
  gathered.set_data(at::empty({0}, gathered.options()));
  const at::Tensor slice = x.detach();
  distributed::Communicator* group = tp.group.get();
  y.register_hook([gathered, slice, group, shape](const at::Tensor& grad) {
    if (gathered.numel() == 0) gathered.set_data(all_gather_along(slice, kSequenceDim, *group).view(shape));
    return grad;
  });
  return y;
}
at::Tensor leave_region(const at::Tensor& partial, const TensorParallel& tp) {
  return tp.sequence_parallel ? reduce_scatter_to_sequence(partial, tp) : reduce_from_region(partial, tp);
}

}  // namespace stratum::nn::tp
