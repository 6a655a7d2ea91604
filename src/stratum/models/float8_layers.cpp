#include "stratum/models/float8_layers.h"

#include <set>

#include "stratum/core/error.h"
#include "stratum/models/causal_lm.h"
#include "stratum/nn/attention.h"
#include "stratum/nn/mlp.h"
#include "stratum/nn/tensor_parallel/float8_parallel_linear.h"

namespace stratum::models {
namespace {

// '*' any run of characters; everything else literal.
bool glob(const char* p, const char* s) {
  if (*p == '\0') return *s == '\0';
  if (*p == '*') return glob(p + 1, s) || (*s != '\0' && glob(p, s + 1));
  return *s == *p && glob(p + 1, s + 1);
}

using nn::float8::Float8Projection;

struct Applier {
  nn::float8::Recipe recipe;
  const std::vector<std::string>& exclude;
  Float8Layers out;
  std::set<size_t> used_patterns;

  bool excluded(const std::string& path) {
    bool any = false;
    for (size_t i = 0; i < exclude.size(); ++i)
      if (fp8_pattern_matches(exclude[i], path)) {
        used_patterns.insert(i);
        any = true;
      }
    return any;
  }

  // One GEMM over `layers` (their paths): a projection, or null when any is excluded.
  std::shared_ptr<Float8Projection> site(const std::string& prefix, const std::vector<std::string>& layers,
                                         const std::vector<const nn::LinearImpl*>& linears) {
    for (size_t i = 0; i < linears.size(); ++i) {
      const std::string path = prefix + layers[i];
      if (linears[i]->has_lora() || linears[i]->nf4_base)
        throw Error("fp8: layer " + path + " has a LoRA adapter or an NF4 base; FP8 layers with those are not built");
    }
    bool skip = false;
    for (const std::string& l : layers) skip = excluded(prefix + l) || skip;
    std::string name = prefix + layers.front();
    for (size_t i = 1; i < layers.size(); ++i) name += "+" + layers[i];
    if (skip) {
      out.excluded.push_back(name);
      return nullptr;
    }
    out.fp8.push_back(name);
    auto projection = std::make_shared<Float8Projection>(name, recipe, out.cache);
    Float8Layers::Site site{projection, {}};
    for (const std::string& l : layers) site.weights.push_back(prefix + l + ".weight");
    out.sites.push_back(std::move(site));
    return projection;
  }
};

// A column- (output) or row-parallel (contraction) projection's amax
// reductions over its tensor-parallel group (none without one). Blockwise
// scales reduce nothing, so a shard must hold whole blocks: refused here,
// naming the layer, rather than at its first GEMM.
std::shared_ptr<Float8Projection> split(std::shared_ptr<Float8Projection> p, nn::float8::SplitAxis axis,
                                        const nn::tp::TensorParallel& tp,
                                        const std::vector<const nn::LinearImpl*>& linears) {
  if (!p) return p;
  if (tp.enabled() && nn::float8::is_blockwise(p->recipe().scaling)) {
    const bool column = axis == nn::float8::SplitAxis::output;
    int64_t width = 0;  // the split dimension of the stacked shard: N (column-parallel) or K (row-parallel)
    for (const nn::LinearImpl* l : linears) width = column ? width + l->weight.size(0) : l->weight.size(1);
    if (width % nn::float8::kBlock != 0)
      throw Error("fp8.recipe \"blockwise\": layer " + p->name() + " is split over " + std::to_string(tp.size()) +
                  " tensor-parallel ranks into shards " + std::to_string(width) + (column ? " rows" : " columns") +
                  " wide, not whole 128-wide blocks (blockwise scales are not reduced over the group); use a "
                  "tensor-parallel size that leaves multiples of 128, or \"tensorwise\" / \"rowwise\"");
  }
  nn::tp::share_float8_amax(*p, axis, tp);
  return p;
}
constexpr auto kColumn = nn::float8::SplitAxis::output;
constexpr auto kRow = nn::float8::SplitAxis::contraction;

}  // namespace

bool fp8_pattern_matches(const std::string& pattern, const std::string& path) {
  return glob(pattern.c_str(), path.c_str()) || glob(("*." + pattern).c_str(), path.c_str());
}

nn::float8::Recipe fp8_recipe(const config::Fp8Config& fp8) {
  switch (fp8.recipe) {
    case config::Fp8Recipe::tensorwise: return nn::float8::tensorwise_recipe();
    case config::Fp8Recipe::rowwise: return nn::float8::rowwise_recipe();
    case config::Fp8Recipe::blockwise: return nn::float8::blockwise_recipe();
  }
  throw Error("fp8.recipe: unknown recipe");
}

Float8Layers apply_float8(torch::nn::Module& model, nn::float8::Recipe recipe,
                          const std::vector<std::string>& exclude) {
  Applier a{recipe, exclude, {}, {}};
  a.out.cache = std::make_shared<nn::float8::WeightCache>();
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const std::string prefix = item.key() + ".";
    torch::nn::Module* m = item.value().get();
    if (auto* attn = dynamic_cast<nn::FusedQKVAttentionImpl*>(m)) {
      attn->c_attn_fp8 = split(a.site(prefix, {"c_attn"}, {attn->c_attn.get()}), kColumn, attn->tp, {attn->c_attn.get()});
      attn->c_proj_fp8 = split(a.site(prefix, {"c_proj"}, {attn->c_proj.get()}), kRow, attn->tp, {attn->c_proj.get()});
    } else if (auto* gqa = dynamic_cast<nn::GroupedQueryAttentionImpl*>(m)) {
      const std::vector<const nn::LinearImpl*> qkv{gqa->q_proj.get(), gqa->k_proj.get(), gqa->v_proj.get()};
      gqa->qkv_fp8 = split(a.site(prefix, {"q_proj", "k_proj", "v_proj"}, qkv), kColumn, gqa->tp, qkv);
      gqa->o_proj_fp8 = split(a.site(prefix, {"o_proj"}, {gqa->o_proj.get()}), kRow, gqa->tp, {gqa->o_proj.get()});
    } else if (auto* gelu = dynamic_cast<nn::GeluMLPImpl*>(m)) {
      if (gelu->tile_tokens > 0 || gelu->recompute_activation)
        throw Error("fp8: " + item.key() + " runs tiled (tiled_mlp_tokens) or recomputes its activation "
                    "(recompute_mlp_activation); FP8 MLPs with those are not built");
      gelu->c_fc_fp8 = split(a.site(prefix, {"c_fc"}, {gelu->c_fc.get()}), kColumn, gelu->tp, {gelu->c_fc.get()});
      gelu->c_proj_fp8 = split(a.site(prefix, {"c_proj"}, {gelu->c_proj.get()}), kRow, gelu->tp, {gelu->c_proj.get()});
    } else if (auto* swiglu = dynamic_cast<nn::SwiGLUMLPImpl*>(m)) {
      if (swiglu->tile_tokens > 0 || swiglu->recompute_activation)
        throw Error("fp8: " + item.key() + " runs tiled (tiled_mlp_tokens) or recomputes its activation "
                    "(recompute_mlp_activation); FP8 MLPs with those are not built");
      const std::vector<const nn::LinearImpl*> gate_up{swiglu->gate_proj.get(), swiglu->up_proj.get()};
      swiglu->gate_up_fp8 = split(a.site(prefix, {"gate_proj", "up_proj"}, gate_up), kColumn, swiglu->tp, gate_up);
      swiglu->down_proj_fp8 =
          split(a.site(prefix, {"down_proj"}, {swiglu->down_proj.get()}), kRow, swiglu->tp, {swiglu->down_proj.get()});
    }
  }
  for (size_t i = 0; i < exclude.size(); ++i)
    if (!a.used_patterns.count(i))
      throw Error("fp8.exclude[" + std::to_string(i) + "]: \"" + exclude[i] +
                  "\" names no attention or MLP projection of the model (names look like " +
                  (a.out.fp8.empty() ? std::string("layers.0.attn.c_attn") : a.out.fp8.front()) + ")");
  return std::move(a.out);
}

Fp8Coverage fp8_coverage(const ModelConfig& config, const std::vector<std::string>& exclude) {
  auto params_of = [&](const std::vector<std::string>& patterns) {
    const std::shared_ptr<CausalLMImpl> skeleton = construct_model(config, {}, c10::kMeta);
    const Float8Layers layers = apply_float8(*skeleton, nn::float8::tensorwise_recipe(), patterns);
    const auto named = skeleton->named_parameters();
    int64_t n = 0;
    for (const Float8Layers::Site& site : layers.sites)
      for (const std::string& weight : site.weights) n += named[weight].numel();
    return n;
  };
  return {params_of(exclude), params_of({})};
}

}  // namespace stratum::models
