#include "stratum/checkpoint/peft_adapter.h"

#include <cmath>
#include <map>
#include <set>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/json_file.h"
#include "stratum/io/safetensors.h"

namespace stratum {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxConfigBytes = 1 << 20;  // peft's are ~1-2 KB
constexpr int64_t kMaxRank = 1 << 16;        // as the config's lora.r
const std::string kA = ".lora_A.weight", kB = ".lora_B.weight";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string show(const Json& v) { return v.dump(); }

// peft's "off" for a key it adds: None, False, {} or [].
bool is_off(const Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_object() || v.is_array()) && v.empty());
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// --- adapter_config.json ----------------------------------------------------------------

// Reads peft's LoraConfig keys, collecting every problem as "key 'k': ...".
class ConfigReader {
 public:
  explicit ConfigReader(const Json& j) : j_(j) {}

  const Json* get(const std::string& key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  void problem(const std::string& key, const std::string& what) { problems_.push_back("key '" + key + "': " + what); }

  bool boolean(const std::string& key, bool fallback) {
    const Json* v = get(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_boolean()) problem(key, "expected true or false, got " + show(*v));
    return v->is_boolean() ? v->get<bool>() : fallback;
  }
  double number(const std::string& key, double fallback) {
    const Json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number()) problem(key, "expected a number, got " + show(*v));
    return v->is_number() ? v->get<double>() : fallback;
  }
  std::vector<std::string> names(const std::string& key) {
    const Json* v = get(key);
    if (!v || v->is_null()) return {};
    if (v->is_string()) return {v->get<std::string>()};
    std::vector<std::string> out;
    if (!v->is_array()) {
      problem(key, "expected a list of module names, got " + show(*v));
      return out;
    }
    for (size_t i = 0; i < v->size(); ++i) {
      if ((*v)[i].is_string() && !(*v)[i].get<std::string>().empty())
        out.push_back((*v)[i].get<std::string>());
      else
        problem(key + "[" + std::to_string(i) + "]", "expected a module name, got " + show((*v)[i]));
    }
    return out;
  }
  // Refused unless absent or `allowed` (peft's value that changes nothing).
  void only(const std::string& key, const Json& allowed, const std::string& why) {
    const Json* v = get(key);
    if (!v || *v == allowed || (allowed.is_null() && is_off(*v))) return;
    problem(key, "is " + show(*v) + ": " + why + "; Stratum reads only " + show(allowed));
  }
  // Accepted whatever its value: it does not change the adapted model's output.
  void accepted(const std::string& key) { seen_.insert(key); }

  // Keys not asked for: a later peft's, accepted when off.
  void finish() {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key()) && !is_off(it.value()))
        problem(it.key(), "is " + show(it.value()) + ": a key Stratum does not know (only its \"off\" values null, "
                          "false, {} or [] are accepted)");
  }
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  const Json& j_;
  std::set<std::string> seen_;
  std::vector<std::string> problems_;
};

void read_config(const std::string& path, PeftAdapter& out) {
  const Json j = read_json_file(path, kMaxConfigBytes, "a peft adapter_config.json");
  if (!j.is_object()) throw ConfigError(path, {"expected a JSON object (peft's LoraConfig), got " + show(j)});
  ConfigReader c(j);
  config::LoraConfig& l = out.lora;
  l.enabled = true;

  const Json* type = c.get("peft_type");
  if (!type)
    c.problem("peft_type", "missing: peft writes \"LORA\" for a LoRA adapter");
  else if (*type != "LORA")
    c.problem("peft_type", "is " + show(*type) + ": Stratum reads LoRA adapters (\"LORA\") only");
  const Json* task = c.get("task_type");
  if (task && !task->is_null() && *task != "CAUSAL_LM")
    c.problem("task_type", "is " + show(*task) + ": Stratum's models are causal LMs (\"CAUSAL_LM\")");

  const double r = c.number("r", 8);
  if (r != std::floor(r) || r < 1 || r > static_cast<double>(kMaxRank))
    c.problem("r", "is " + show(*c.get("r")) + ": expected an integer in [1, " + std::to_string(kMaxRank) + "]");
  else
    l.r = static_cast<int64_t>(r);
  l.lora_alpha = c.number("lora_alpha", 8);
  if (!(l.lora_alpha > 0)) c.problem("lora_alpha", "must be > 0 (the adapter's scale is alpha / r)");
  l.lora_dropout = c.number("lora_dropout", 0);
  if (!(l.lora_dropout >= 0 && l.lora_dropout < 1)) c.problem("lora_dropout", "must be in [0, 1)");
  l.use_rslora = c.boolean("use_rslora", false);
  out.fan_in_fan_out = c.boolean("fan_in_fan_out", false);
  l.target_modules = c.names("target_modules");
  const Json* tm = c.get("target_modules");
  if (tm && tm->is_string() && *tm != "all-linear")
    c.problem("target_modules", "is " + show(*tm) + ", a regular expression to peft; Stratum takes \"all-linear\" "
                                "or a list of module names");
  l.modules_to_save = c.names("modules_to_save");
  const Json* base = c.get("base_model_name_or_path");
  if (base && base->is_string()) out.base_model_name_or_path = base->get<std::string>();
  else if (base && !base->is_null()) c.problem("base_model_name_or_path", "expected a string, got " + show(*base));

  // Change the adapted model's output in ways Stratum does not implement.
  c.only("use_dora", false, "DoRA scales each output by a learned magnitude");
  c.only("rank_pattern", Json::object(), "ranks per layer");
  c.only("alpha_pattern", Json::object(), "alphas per layer");
  c.only("layers_to_transform", nullptr, "adapters on some layers only");
  c.only("exclude_modules", nullptr, "target modules left out by name");
  c.only("layer_replication", nullptr, "layers repeated in the adapted model");
  c.only("bias", "none", "trained biases are saved with the adapter");
  c.only("lora_bias", false, "lora_B has a bias");
  c.only("use_qalora", false, "QA-LoRA pools the adapter's input");
  c.only("target_parameters", nullptr, "adapters on bare parameters (MoE experts)");
  c.only("trainable_token_indices", nullptr, "embedding rows trained on their own");
  c.only("alora_invocation_tokens", nullptr, "activated LoRA applies the adapter after an invocation only");
  for (const char* variant : {"arrow_config", "kasa_config", "monteclora_config", "use_bdlora"})
    c.only(variant, nullptr, "a LoRA variant with another forward");
  c.only("megatron_config", nullptr, "Megatron's parallel linear layers");
  if (const Json* init = c.get("init_lora_weights"); init && !init->is_boolean()) {
    static const std::set<std::string> start_only = {"gaussian", "eva", "orthogonal"};
    if (!init->is_string() || !start_only.count(init->get<std::string>()))
      c.problem("init_lora_weights", "is " + show(*init) + ": an initialization that changed the base's weights "
                                     "(pissa, olora, corda, loftq, lora_ga) or a variant (mica); convert the "
                                     "adapter to plain LoRA with peft (path_initial_model_for_weight_conversion) "
                                     "first. Read: true, false, \"gaussian\", \"eva\", \"orthogonal\"");
  }
  // Change nothing in the adapted model's output.
  for (const char* key : {"inference_mode", "auto_mapping", "revision", "peft_version", "layers_pattern",
                          "megatron_core", "qalora_group_size", "ensure_weight_tying", "loftq_config", "eva_config",
                          "corda_config", "lora_ga_config", "velora_config"})
    c.accepted(key);
  c.finish();
  if (!c.problems().empty()) throw ConfigError(path, c.problems());
}

Json module_list(const std::vector<std::string>& names) {
  Json out = Json::array();
  for (const auto& n : names) out.push_back(n);
  return out;
}

// The adapted layers' own names ("q_proj", "c_attn"), from the tensors.
std::vector<std::string> adapted_layer_names(const PeftAdapter& a) {
  std::set<std::string> names;
  for (const auto& [name, t] : a.tensors)
    if (ends_with(name, kA)) {
      const std::string module = name.substr(0, name.size() - kA.size());
      names.insert(module.substr(module.rfind('.') == std::string::npos ? 0 : module.rfind('.') + 1));
    }
  return {names.begin(), names.end()};
}

// Every key peft 0.21's LoraConfig writes (peft_version aside: Stratum is not
// peft), with the values of what Stratum runs.
Json config_json(const PeftAdapter& a) {
  const config::LoraConfig& l = a.lora;
  const bool all_linear = l.target_modules.empty() ||
                          (l.target_modules.size() == 1 && l.target_modules[0] == "all-linear");
  Json j = Json::object();
  for (const char* off : {"alora_invocation_tokens", "arrow_config", "auto_mapping", "corda_config", "eva_config",
                          "exclude_modules", "kasa_config", "layer_replication", "layers_pattern",
                          "layers_to_transform", "lora_ga_config", "megatron_config", "monteclora_config", "revision",
                          "target_parameters", "trainable_token_indices", "use_bdlora", "velora_config"})
    j[off] = nullptr;
  j["alpha_pattern"] = Json::object();
  j["rank_pattern"] = Json::object();
  j["loftq_config"] = Json::object();
  j["base_model_name_or_path"] = a.base_model_name_or_path.empty() ? Json(nullptr) : Json(a.base_model_name_or_path);
  j["bias"] = "none";
  j["ensure_weight_tying"] = false;
  j["fan_in_fan_out"] = a.fan_in_fan_out;
  j["inference_mode"] = true;  // as save_pretrained writes it
  j["init_lora_weights"] = true;
  // An integer as peft's (typed int) when it is one.
  if (l.lora_alpha == std::floor(l.lora_alpha) && std::abs(l.lora_alpha) < 9e15)
    j["lora_alpha"] = static_cast<int64_t>(l.lora_alpha);
  else
    j["lora_alpha"] = l.lora_alpha;
  j["lora_bias"] = false;
  j["lora_dropout"] = l.lora_dropout;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = l.modules_to_save.empty() ? Json(nullptr) : module_list(l.modules_to_save);
  j["peft_type"] = "LORA";
  j["qalora_group_size"] = 16;
  j["r"] = l.r;
  j["target_modules"] = module_list(all_linear ? adapted_layer_names(a) : l.target_modules);
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = false;
  j["use_qalora"] = false;
  j["use_rslora"] = l.use_rslora;
  return j;
}

// --- tensors ------------------------------------------------------------------------------

// Whether `name` (Stratum's) is a parameter of a module modules_to_save names:
// its module path equals an entry or ends with "." + it, as peft matches.
bool saved_whole(const std::string& name, const std::vector<std::string>& modules_to_save) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  const std::string module = name.substr(0, dot);
  for (const auto& m : modules_to_save)
    if (module == m || ends_with(module, "." + m)) return true;
  return false;
}

// The checks reading and writing share. `key(name)`: the name as the file has it.
template <class Key>
void check_tensors(const std::string& file, const PeftAdapter& a, Key key) {
  const int64_t r = a.lora.r;
  std::set<std::string> a_of, b_of;
  for (const auto& [name, t] : a.tensors) {
    const std::string where = file + ": tensor '" + key(name) + "'";
    if (!at::isFloatingType(t.scalar_type()))
      throw Error(where + " has dtype " + std::string(c10::toString(t.scalar_type())) +
                  ": adapter weights are floating point (F32, BF16, F16, F64)");
    const bool is_a = ends_with(name, kA), is_b = ends_with(name, kB);
    if (!is_a && !is_b) {
      if (saved_whole(name, a.lora.modules_to_save)) continue;
      throw Error(where + " is neither a LoRA adapter's weight ('<module>.lora_A.weight', '<module>.lora_B.weight') "
                  "nor a parameter of modules_to_save [" + join(a.lora.modules_to_save) +
                  "] (DoRA magnitudes, LoRA biases, embedding adapters and keys that keep peft's adapter name are "
                  "not read)");
    }
    if (t.dim() != 2 || t.size(is_a ? 0 : 1) != r)
      throw Error(where + " has shape " + c10::str(t.sizes()) + "; with r = " + std::to_string(r) + " a LoRA " +
                  (is_a ? "A is [r, in] = [" + std::to_string(r) + ", in]" : "B is [out, r] = [out, " + std::to_string(r) + "]"));
    (is_a ? a_of : b_of).insert(name.substr(0, name.size() - kA.size()));
  }
  for (const auto& m : a_of)
    if (!b_of.count(m)) throw Error(file + ": tensor '" + key(m + kA) + "' has no '" + key(m + kB) + "' beside it");
  for (const auto& m : b_of)
    if (!a_of.count(m)) throw Error(file + ": tensor '" + key(m + kB) + "' has no '" + key(m + kA) + "' beside it");
}

std::string file_key(const std::string& name) { return kPeftKeyPrefix + name; }

}  // namespace

PeftAdapter read_peft_adapter(const std::string& dir) {
  const std::string config_path = dir + "/adapter_config.json", tensors_path = dir + "/adapter_model.safetensors";
  if (!fs::exists(tensors_path) && fs::exists(dir + "/adapter_model.bin"))
    throw Error(dir + "/adapter_model.bin: a pickled adapter (which can run code when loaded) is not read; convert "
                "it to safetensors (peft: model.save_pretrained(dir, safe_serialization=True))");
  if (!fs::exists(config_path))
    throw Error(config_path + ": missing: a peft adapter directory holds adapter_config.json");
  if (!fs::exists(tensors_path))
    throw Error(tensors_path + ": missing: a peft adapter directory holds adapter_model.safetensors");
  PeftAdapter out;
  read_config(config_path, out);
  const std::string prefix = kPeftKeyPrefix;
  for (auto& [key, t] : io::read_safetensors(tensors_path)) {
    if (key.compare(0, prefix.size(), prefix) != 0 || key.size() == prefix.size())
      throw Error(tensors_path + ": tensor '" + key + "' does not start with peft's '" + prefix + "'");
    out.tensors.emplace_back(key.substr(prefix.size()), t);
  }
  check_tensors(tensors_path, out, file_key);
  return out;
}

void write_peft_adapter(const std::string& dir, const PeftAdapter& adapter) {
  const std::string tensors_path = dir + "/adapter_model.safetensors";
  check_tensors(tensors_path, adapter, [](const std::string& name) { return name; });
  fs::make_directories(dir);
  std::vector<std::pair<std::string, at::Tensor>> keyed;
  keyed.reserve(adapter.tensors.size());
  for (const auto& [name, t] : adapter.tensors) keyed.emplace_back(file_key(name), t);
  io::write_safetensors(tensors_path, keyed);
  // Last: the file that makes DIR an adapter to peft.
  fs::write_file_atomically(dir + "/adapter_config.json", config_json(adapter).dump(2), "a peft adapter_config.json");
}

}  // namespace stratum
