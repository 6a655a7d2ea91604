#include "stratum/models/lora.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <set>

#include "stratum/core/error.h"
#include "stratum/nn/deferred_init.h"
#include "stratum/nn/lora_linear.h"
#include "stratum/nn/parameter_modules.h"

namespace stratum::models {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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
  if (arch == "llama") return {"q_proj", "v_proj"};
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
    if (adaptable_layer(path, *m)) materialized = !nn::is_unmaterialized(static_cast<nn::LinearImpl&>(*m).weight);

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
  // QLoRA: every block's linear weight in NF4, adapted or not (as
  // transformers' bitsandbytes loading quantizes every linear but the head).
  if (lora.base_dtype == config::LoraBaseDType::nf4)
    for (const auto& [path, m] : modules) {
      if (!adaptable_layer(path, *m)) continue;
      auto& layer = static_cast<nn::LinearImpl&>(*m);
      layer.nf4_base = true;
      if (nn::is_unmaterialized(layer.weight)) continue;  // drawn or loaded into 4 bits later
      layer.nf4 = std::make_shared<const quant::Nf4Tensor>(quant::quantize_nf4(layer.weight.detach()));
      layer.weight.set_data(nn::unmaterialized(layer.weight.sizes(), layer.weight.scalar_type()));
    }
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    bool trains = is_lora_parameter(item.key());
    for (const auto& path : trained_modules) trains = trains || item.key().rfind(path + ".", 0) == 0;
    item.value().set_requires_grad(trains);
  }
  // A materialized model's new adapters drawn where its weights are.
  if (materialized && !adapted.empty()) {
    const at::Tensor& like = model.named_parameters(/*recurse=*/true).begin()->value();
    nn::materialize(model, like.device(), like.scalar_type(), [](const std::string& name) { return is_lora_parameter(name); });
  }
  return adapted;
}

}  // namespace stratum::models
