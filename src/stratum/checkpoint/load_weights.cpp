#include "stratum/checkpoint/load_weights.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <set>

#include "stratum/core/error.h"
#include "stratum/distributed/agreement.h"
#include "stratum/engine/param_runs.h"
#include "stratum/models/hf_state_dict.h"
#include "stratum/models/lora.h"
#include "stratum/nn/deferred_init.h"

namespace stratum {
namespace {

// Elements [start, start + numel) of `t` in row-major order, reading only the
// rows of its first dimension that hold them (`t` may be a strided view, as a
// transposed Conv1D weight is).
at::Tensor flat_range(const at::Tensor& t, int64_t start, int64_t numel) {
  if (t.is_contiguous() || t.dim() < 2) return t.reshape(-1).narrow(0, start, numel);
  const int64_t row = t.numel() / t.size(0);
  const int64_t first = start / row, last = (start + numel - 1) / row;
  return t.narrow(0, first, last - first + 1).contiguous().view(-1).narrow(0, start - first * row, numel);
}

void check_weight_dtype(const std::string& what, const std::string& name, const at::Tensor& t) {
  if (!models::is_weight_dtype(t.scalar_type())) throw Error(what + ": tensor " + models::not_a_weight(name, t));
}

// After the copy: what this rank took must be finite (a float64 beyond
// float32's range arrives as infinity too). `first`: the piece's first
// element's index in the tensor (or in the tensor-parallel piece).
void check_finite(const std::string& what, const std::string& name, const at::Tensor& copied, int64_t first,
                  bool tensor_parallel) {
  if (at::isfinite(copied).all().item<bool>()) return;
  const int64_t at = at::logical_not(at::isfinite(copied)).nonzero().select(1, 0)[0].item<int64_t>();
  throw Error(what + ": tensor '" + name + "' holds NaN or infinite values (first at element " + std::to_string(first + at) +
              (tensor_parallel ? " of this rank's tensor-parallel piece" : "") +
              " as float32): a corrupt or diverged checkpoint");
}

}  // namespace

WeightLoadReport load_whole_weights(EngineCore& engine, const std::map<std::string, at::Tensor>& whole,
                                    distributed::Communicator& world, c10::Device world_device,
                                    const std::string& what) {
  auto& strategy = engine.strategy();
  const auto& layout = strategy.layout();
  const auto& mp = engine.model_parallel();
  const auto pieces = strategy.owned_pieces();
  WeightLoadReport report;
  distributed::agree_on_success(world, world_device, what, [&] {
    c10::AutoGradMode no_grad(false);
    for (size_t i = 0; i < layout.specs().size(); ++i) {
      const std::string& name = layout.specs()[i].name;
      auto it = whole.find(name);
      if (it == whole.end()) {
        if (models::is_lora_parameter(name)) continue;  // a base model's file has no adapters: they keep their draw
        throw Error("no tensor for parameter '" + name + "'");
      }
      const std::optional<nn::tp::ShardSpec> spec =
          mp && i < mp->tp_specs.size() ? mp->tp_specs[i] : std::nullopt;
      const at::Tensor& w = it->second;
      check_weight_dtype(what, name, w);
      const std::vector<int64_t> shape = layout.specs()[i].shape;
      const auto mine = param_pieces(layout, pieces, static_cast<int>(i));
      report.parameters += 1;
      report.bytes_whole += static_cast<int64_t>(w.nbytes());
      if (mine.empty()) continue;
      // A tensor-parallel piece is cut whole first (its rows or columns), then narrowed.
      const at::Tensor local = spec ? nn::tp::take_shard(w, *spec) : w;
      if (local.sizes().vec() != shape)
        throw Error("parameter '" + name + "' has shape " + c10::str(at::IntArrayRef(shape)) + " on this rank, its tensor " +
                    c10::str(local.sizes()));
      if (spec) report.bytes_copied += static_cast<int64_t>(local.nbytes());
      for (const ParamPiece& p : mine) {
        const at::Tensor src = flat_range(local, p.param_offset, p.numel);
        if (!spec) report.bytes_copied += p.numel * static_cast<int64_t>(src.element_size());
        at::Tensor dst = strategy.segments()[static_cast<size_t>(p.segment)].master.narrow(0, p.segment_offset, p.numel);
        dst.copy_(src);
        check_finite(what, name, dst, p.param_offset, spec.has_value());
      }
    }
  });
  // The rounded copy the optimizer keeps (offload's host buffer) follows the masters.
  for (auto& seg : strategy.segments())
    if (seg.params16.defined() && !seg.params16.is_same(seg.master)) seg.params16.copy_(seg.master);
  strategy.publish_params();  // collective over data parallel: the model takes the masters
  strategy.wait_params();
  return report;
}

int64_t load_frozen_weights(torch::nn::Module& model, const nn::tp::ShardedModule* sharded,
                            const std::map<std::string, at::Tensor>& whole, distributed::Communicator& world,
                            c10::Device world_device, const std::string& what,
                            const std::map<std::string, quant::Nf4Tensor>& nf4, zero::FrozenUnits* frozen) {
  int64_t bytes = 0;
  distributed::agree_on_success(world, world_device, what, [&] {
    c10::AutoGradMode no_grad(false);
    const bool tp = sharded && sharded->tensor_parallel().enabled();
    auto* source = dynamic_cast<nn::DeferredInit*>(&model);
    int open = -1;  // the partitioned layer being written (its weights come one after another)
    std::set<int> written;
    for (auto& item : model.named_parameters(/*recurse=*/true)) {
      at::Tensor& p = item.value();
      // Trainable ones are the engine's (load_whole_weights); another stage's are freed or never drawn.
      const std::string& name = item.key();
      if (const int layer = frozen && !p.requires_grad() ? frozen->layer_of(name) : -1; layer != open && layer >= 0) {
        if (open >= 0) frozen->partition(static_cast<size_t>(open));
        // Opened unset: every weight of the layer must be written before it is partitioned again.
        if (!written.insert(layer).second)
          throw Error(what + ": frozen parameter '" + name + "' comes apart from the rest of its layer " +
                      std::to_string(layer) + "'s weights");
        frozen->open(static_cast<size_t>(layer));
        open = layer;
      }
      // A weight held apart (NF4): this rank's piece quantized straight from the file, if it holds it.
      const bool apart = source && source->held_apart(name);
      if (p.requires_grad() || (nn::is_unmaterialized(p) && !apart) || p.numel() == 0) continue;
      const auto spec = tp ? sharded->shard_spec(name, sharded->tensor_parallel().rank()) : std::nullopt;
      at::Tensor stored;
      if (auto q = nf4.find(name); q != nf4.end()) {
        // Stored in NF4: taken as stored where the layer holds the whole weight in NF4.
        if (apart && !spec) {
          if (source->set_apart_nf4(name, q->second)) bytes += q->second.nbytes();
          continue;
        }
        quant::Nf4Tensor in_fp32 = q->second;
        in_fp32.dtype = at::kFloat;
        stored = quant::dequantize_nf4(in_fp32);
      } else {
        auto it = whole.find(name);
        if (it == whole.end()) throw Error("no tensor for frozen parameter '" + name + "'");
        check_weight_dtype(what, name, it->second);
        stored = it->second;
      }
      const at::Tensor local = spec ? nn::tp::take_shard(stored, *spec) : stored;
      if (apart) {
        if (!at::isfinite(local).all().item<bool>())
          throw Error(what + ": tensor '" + name + "' holds NaN or infinite values: a corrupt checkpoint");
        if (source->set_apart(name, local)) bytes += static_cast<int64_t>(local.nbytes());
        continue;
      }
      if (local.sizes() != p.sizes())
        throw Error("frozen parameter '" + name + "' has shape " + c10::str(p.sizes()) + " on this rank, its tensor " +
                    c10::str(local.sizes()));
      p.copy_(local);
      check_finite(what, name, p, 0, spec.has_value());
      bytes += static_cast<int64_t>(local.nbytes());
    }
    if (open >= 0) frozen->partition(static_cast<size_t>(open));
  });
  return bytes;
}

}  // namespace stratum
