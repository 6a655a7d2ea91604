#include "stratum/models/lora.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <set>

#include "stratum/core/error.h"
#include "stratum/nn/deferred_init.h"
#include "stratum/nn/lora_linear.h"
#include "stratum/nn/moe/sparse_moe.h"
#include "stratum/nn/parameter_modules.h"

namespace stratum::models {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Under expert parallelism a rank holds some of each layer's experts: for
// every mixture-of-experts layer, "<path>.experts.", the indices here and
// the layer's number of experts.
struct HeldExperts {
  std::string prefix;
  int64_t first = 0, end = 0, experts = 0;
};

std::vector<HeldExperts> held_experts(const CausalLMImpl& model) {
  std::vector<HeldExperts> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    if (const auto* moe = dynamic_cast<const nn::moe::SparseMoEImpl*>(item.value().get()))
      out.push_back({item.key() + ".experts.", moe->first_expert(),
                     moe->first_expert() + static_cast<int64_t>(moe->expert_list.size()),
                     moe->options().router.num_experts});
  return out;
}

// Whether `name` is a parameter of an expert of the layer that another
// expert-parallel rank holds (one the layer does not have is no rank's).
bool another_ranks_expert(const std::vector<HeldExperts>& held, const std::string& name) {
  for (const HeldExperts& h : held) {
    if (name.compare(0, h.prefix.size(), h.prefix) != 0) continue;
    const size_t dot = name.find('.', h.prefix.size());
    const std::string index = name.substr(h.prefix.size(), dot - h.prefix.size());
    if (index.empty() || index.size() > 18 || index.find_first_not_of("0123456789") != std::string::npos) return false;
    const int64_t e = std::stoll(index);
    return e < h.experts && (e < h.first || e >= h.end);
  }
  return false;
}

// peft's rule (check_target_module_exists): the key is the whole path or its tail after a dot.
bool names(const std::string& path, const std::string& key) { return path == key || ends_with(path, "." + key); }

std::string last_part(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

const std::vector<std::string>& lora_linear_names(const std::string& arch) {
  const std::vector<std::string>& names = config::lora_target_names(arch);
  if (names.empty()) throw Error("LoRA: no linear layers known for architecture '" + arch + "'");
  return names;
}

std::vector<std::string> default_lora_targets(const std::string& arch) {
  if (arch == "gpt2") return {"c_attn"};
  if (arch == "llama" || arch == "mixtral" || arch == "qwen3_moe") return {"q_proj", "v_proj"};
  throw Error("LoRA: no default target_modules for architecture '" + arch + "'; list them");
}

bool is_lora_parameter(const std::string& name) {
  return ends_with(name, ".lora_A.weight") || ends_with(name, ".lora_B.weight");
}

std::vector<std::string> apply_lora(CausalLMImpl& model, const config::LoraConfig& lora) {
  const std::string& arch = model.config().arch;
  const std::vector<std::string>& adaptable = lora_linear_names(arch);
  const std::vector<std::string> targets = lora.target_modules.empty() ? default_lora_targets(arch) : lora.target_modules;
  const bool all_linear = targets.size() == 1 && targets[0] == "all-linear";
  const std::string where = "lora.target_modules: ";

  // Every module by path, and which of them LoRA can adapt.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) modules.emplace_back(item.key(), item.value());
  auto adaptable_layer = [&](const std::string& path, const torch::nn::Module& m) {
    return dynamic_cast<const nn::LinearImpl*>(&m) != nullptr &&
           std::find(adaptable.begin(), adaptable.end(), last_part(path)) != adaptable.end();
  };

  // A materialized model (not a skeleton) gets its adapters drawn here.
  bool materialized = false;
  for (const auto& [path, m] : modules)
    materialized = materialized ||
                   (adaptable_layer(path, *m) && !nn::is_unmaterialized(static_cast<nn::LinearImpl&>(*m).weight));

  std::vector<std::string> adapted;
  std::set<std::string> used;
  const double scale = nn::lora_scale(lora.r, lora.lora_alpha, lora.use_rslora);
  for (const auto& [path, m] : modules) {
    bool named = all_linear;
    for (const auto& t : targets)
      if (!all_linear && names(path, t)) {
        named = true;
        used.insert(t);
      }
    if (!named) continue;
    if (!adaptable_layer(path, *m)) {
      if (all_linear) continue;
      throw Error(where + "'" + path + "' is not a linear layer LoRA adapts in a " + arch + " model (those are " +
                  joined(adaptable) + "); list a module in lora.modules_to_save to train it whole");
    }
    static_cast<nn::LinearImpl&>(*m).add_lora(lora.r, scale, lora.lora_dropout);
    adapted.push_back(path);
  }
  for (const auto& t : targets)
    if (!all_linear && !used.count(t))
      throw Error(where + "'" + t + "' names no module of model '" + model.config().name + "' (its linear layers: " +
                  joined(adaptable) + ")");

  // Freeze all but the adapters and modules_to_save.
  std::set<std::string> trained_modules;
  for (const auto& key : lora.modules_to_save) {
    bool found = false;
    for (const auto& [path, m] : modules)
      if (names(path, key)) {
        if (m->parameters(/*recurse=*/true).empty())
          throw Error("lora.modules_to_save: '" + key + "' (" + path + ") holds no parameters of its own" +
                      (last_part(path) == "lm_head" || key == "lm_head"
                           ? " (the head is tied to the token embedding: list the embedding)"
                           : ""));
        trained_modules.insert(path);
        found = true;
      }
    if (!found && key == "lm_head" && model.config().tie_embeddings)
      throw Error("lora.modules_to_save: 'lm_head' is tied to the token embedding in model '" + model.config().name +
                  "' (no weight of its own); list " + (arch == "gpt2" ? "'wte'" : "'embed_tokens'") + " instead");
    if (!found) throw Error("lora.modules_to_save: '" + key + "' names no module of model '" + model.config().name + "'");
  }
  c10::AutoGradMode no_grad(false);
  auto trains_whole = [&](const std::string& path) {
    for (const auto& t : trained_modules)
      if (path == t || path.rfind(t + ".", 0) == 0) return true;
    return false;
  };
  // QLoRA: every block's linear weight in NF4, adapted or not (as
  // transformers' bitsandbytes loading quantizes every linear but the head),
  // except those modules_to_save trains whole.
  if (lora.base_dtype == config::LoraBaseDType::nf4)
    for (const auto& [path, m] : modules) {
      if (!adaptable_layer(path, *m) || trains_whole(path)) continue;
      auto& layer = static_cast<nn::LinearImpl&>(*m);
      layer.nf4_base = true;
      model.hold_in_nf4(path + ".weight", &layer);
      if (nn::is_unmaterialized(layer.weight)) continue;  // drawn or loaded into 4 bits later
      layer.nf4 = std::make_shared<const quant::Nf4Tensor>(quant::quantize_nf4(layer.weight.detach()));
      layer.weight.set_data(nn::unmaterialized(layer.weight.sizes(), layer.weight.scalar_type()));
    }
  for (auto& item : model.named_parameters(/*recurse=*/true))
    item.value().set_requires_grad(is_lora_parameter(item.key()) || trains_whole(item.key()));
  // A materialized model's new adapters drawn where its weights are.
  if (materialized && !adapted.empty()) {
    const at::Tensor& like = model.named_parameters(/*recurse=*/true).begin()->value();
    nn::materialize(model, like.device(), like.scalar_type(), [](const std::string& name) { return is_lora_parameter(name); });
  }
  return adapted;
}

std::vector<std::string> adapter_mismatches(const CausalLMImpl& model, const config::LoraConfig& run,
                                            const config::LoraConfig& adapter,
                                            const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<std::string> out;
  const double want = nn::lora_scale(run.r, run.lora_alpha, run.use_rslora);
  const double got = nn::lora_scale(adapter.r, adapter.lora_alpha, adapter.use_rslora);
  if (run.r != adapter.r) out.push_back("r " + std::to_string(adapter.r) + ", the config's lora.r " + std::to_string(run.r));
  if (std::abs(want - got) > 1e-12 * std::abs(want))
    out.push_back("scale " + std::to_string(got) + " (lora_alpha " + c10::str(adapter.lora_alpha) +
                  (adapter.use_rslora ? ", rsLoRA" : "") + "), the config's " + std::to_string(want));
  std::map<std::string, std::vector<int64_t>> trained;
  const nn::tp::TensorParallel& tp = model.tensor_parallel();
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    const auto spec = tp.enabled() ? model.shard_spec(item.key(), tp.rank()) : std::nullopt;
    trained[item.key()] = spec ? nn::tp::whole_shape(item.value().sizes().vec(), *spec) : item.value().sizes().vec();
  }
  const std::vector<HeldExperts> held = held_experts(model);
  for (const auto& [name, t] : tensors) {
    auto it = trained.find(name);
    if (it == trained.end() && another_ranks_expert(held, name)) continue;  // that rank's to load
    if (it == trained.end()) {
      out.push_back("'" + name + "' is not a parameter the config's lora section trains");
    } else {
      if (t.sizes().vec() != it->second)
        out.push_back("'" + name + "' is " + c10::str(t.sizes()) + ", the model's " + c10::str(at::IntArrayRef(it->second)));
      trained.erase(it);
    }
  }
  for (const auto& [name, shape] : trained) out.push_back("no tensor for '" + name + "'");
  return out;
}

void merge_lora(CausalLMImpl& base, const config::LoraConfig& lora, const std::map<std::string, at::Tensor>& adapters) {
  const double scale = nn::lora_scale(lora.r, lora.lora_alpha, lora.use_rslora);
  const auto params = base.named_parameters(/*recurse=*/true);
  c10::AutoGradMode no_grad(false);
  for (const auto& [name, a] : adapters) {
    const std::string tail = ".lora_A.weight";
    if (!ends_with(name, tail)) continue;
    const std::string layer = name.substr(0, name.size() - tail.size());
    auto b = adapters.find(layer + ".lora_B.weight");
    const at::Tensor* w = params.find(layer + ".weight");
    if (b == adapters.end() || !w) throw Error("merging LoRA: no layer '" + layer + "' (or no lora_B) to merge into");
    const at::Tensor delta = b->second.to(at::kFloat).mm(a.to(at::kFloat)) * scale;
    if (delta.sizes() != w->sizes())
      throw Error("merging LoRA: '" + layer + "': B·A is " + c10::str(delta.sizes()) + ", the weight " + c10::str(w->sizes()));
    w->copy_(w->to(at::kFloat) + delta);
  }
  // modules_to_save: their trained values replace the base's.
  for (const auto& [name, t] : adapters)
    if (!is_lora_parameter(name))
      if (const at::Tensor* p = params.find(name)) p->copy_(t);
}

}  // namespace stratum::models
