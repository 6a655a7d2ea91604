#include "stratum/models/hf_state_dict.h"

#include "stratum/models/lora.h"

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <set>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"
#include "stratum/io/safetensors_index.h"

namespace stratum::models {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HF buffers that old checkpoints carry and that are no parameters.
bool is_hf_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
         ends_with(name, "rotary_emb.inv_freq");
}

std::string shape_str(at::IntArrayRef s) { return c10::str(s); }

// torch's name ("int8", not c10's "Char").
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

}  // namespace

bool is_weight_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf || t == at::kDouble;
}

std::string not_a_weight(const std::string& name, const at::Tensor& t) {
  return "'" + name + "' is " + dtype_name(t.scalar_type()) +
         ", not a floating-point weight (a quantized checkpoint? Stratum loads F32, BF16, F16 or F64 tensors)";
}


bool is_hf_conv1d_weight(const ModelConfig& config, const std::string& name) {
  return config.arch == "gpt2" && (ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_proj.weight") ||
                                   ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_proj.weight"));
}

std::vector<std::pair<std::string, at::Tensor>> to_hf_state_dict(const CausalLMImpl& model) {
  if (model.tensor_parallel().enabled())
    throw Error("to_hf_state_dict: model '" + model.config().name + "' is sharded over " +
                std::to_string(model.tensor_parallel().size()) + " tensor-parallel ranks; save a checkpoint and "
                "export it (stratum-ckpt export), which assembles every tensor whole");
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (is_lora_parameter(item.key())) continue;  // the base's tensors only (adapters: PEFT's files)
    at::Tensor t = item.value().detach();
    if (is_hf_conv1d_weight(model.config(), item.key())) t = t.t();
    out.emplace_back(item.key(), t.contiguous());
  }
  return out;
}

std::map<std::string, at::Tensor> hf_whole_parameters(const CausalLMImpl& model,
                                                     const std::map<std::string, at::Tensor>& tensors,
                                                     const std::string& source, const HfChecks& checks) {
  HfParameters p = hf_parameters(model, tensors, source, checks);
  if (!p.nf4.empty())
    throw Error((source.empty() ? "" : source + ": ") + "'" + p.nf4.begin()->first + "' and " +
                std::to_string(p.nf4.size() - 1) + " more weights are stored in bitsandbytes' 4-bit NF4: a quantized "
                "checkpoint loads as the frozen base of LoRA (a \"lora\" section), not as weights that train");
  return std::move(p.whole);
}

HfParameters hf_parameters(const CausalLMImpl& model, const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source, const HfChecks& checks) {
  const ModelConfig& c = model.config();
  const std::string where = source.empty() ? "" : source + ": ";
  std::vector<std::string> problems;
  std::map<std::string, bool> used;
  for (const auto& [name, t] : tensors) used[name] = false;

  // GPT-2 files saved from GPT2Model lack the "transformer." prefix.
  auto lookup = [&](const std::string& name) {
    auto it = tensors.find(name);
    if (it == tensors.end() && c.arch == "gpt2" && name.rfind("transformer.", 0) == 0)
      it = tensors.find(name.substr(12));
    return it;
  };
  auto find = [&](const std::string& name) -> const at::Tensor* {
    const auto it = lookup(name);
    if (it == tensors.end()) return nullptr;
    used[it->first] = true;
    return &it->second;
  };
  auto has = [&](const std::string& name) { return lookup(name) != tensors.end(); };

  HfParameters result;
  std::map<std::string, at::Tensor>& out = result.whole;
  const nn::tp::TensorParallel& tp = model.tensor_parallel();
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (is_lora_parameter(name)) continue;  // adapters are not the base's: drawn, or read from an adapter file
    const at::Tensor* t = find(name);
    if (!t) {
      problems.push_back("missing '" + name + "'");
      continue;
    }
    const bool conv1d = is_hf_conv1d_weight(c, name);
    const at::Tensor& src = *t;
    // A tensor-parallel rank's parameter is a shard: the file holds the whole tensor.
    const auto spec = tp.enabled() ? model.shard_spec(name, tp.rank()) : std::nullopt;
    const std::vector<int64_t> shape = item.value().sizes().vec();
    const std::vector<int64_t> want = spec ? nn::tp::whole_shape(shape, *spec) : shape;
    // Stored in bitsandbytes' NF4: read as stored, its quant state beside it (transformers'
    // Linear4bit keeps [out, in], GPT-2's Conv1D included).
    if (has(name + ".quant_state.bitsandbytes__nf4") || has(name + ".quant_state.bitsandbytes__fp4")) {
      try {
        quant::Nf4Tensor q = quant::nf4_from_bitsandbytes(
            name, [&](const std::string& n) { const at::Tensor* x = find(n); return x ? *x : at::Tensor(); },
            "stored in bitsandbytes' 4 bits");
        if (q.shape != want)
          problems.push_back("'" + name + "' is stored in NF4 with shape " + shape_str(q.shape) + ", expected " +
                             shape_str(want));
        else
          result.nf4.emplace(name, std::move(q));
      } catch (const Error& e) {
        problems.push_back(e.what());
      }
      continue;
    }
    if (!is_weight_dtype(src.scalar_type())) {
      problems.push_back(not_a_weight(name, src));
      continue;
    }
    const bool fits = conv1d ? (src.dim() == 2 && src.size(0) == want[1] && src.size(1) == want[0])
                             : src.sizes().vec() == want;
    if (!fits) {
      const std::vector<int64_t> expected = conv1d ? std::vector<int64_t>{want[1], want[0]} : want;
      problems.push_back("'" + name + "' has shape " + shape_str(src.sizes()) + ", expected " + shape_str(expected));
      continue;
    }
    out.emplace(name, conv1d ? src.t() : src);
  }

  // Tied embeddings: HF drops lm_head.weight; if a file has it, it must be the embedding.
  if (c.tie_embeddings) {
    if (auto it = tensors.find("lm_head.weight"); it != tensors.end()) {
      used[it->first] = true;
      if (!is_weight_dtype(it->second.scalar_type())) problems.push_back(not_a_weight(it->first, it->second));
      const at::Tensor* emb = find(c.arch == "gpt2" ? "transformer.wte.weight" : "model.embed_tokens.weight");
      const bool comparable = emb && is_weight_dtype(it->second.scalar_type()) && is_weight_dtype(emb->scalar_type());
      if (comparable && (it->second.sizes() != emb->sizes() ||
                         (checks.compare_tied_head && !at::equal(it->second.to(emb->dtype()), *emb))))
        problems.push_back("'lm_head.weight' differs from the token embedding, but the model ties them "
                           "(tie_embeddings=false to load it untied)");
    }
  }
  for (const auto& [name, was_used] : used)
    if (!was_used && !is_hf_buffer(name) && !model.expert_held_elsewhere(name))
      problems.push_back("unexpected '" + name + "'");

  if (problems.empty()) return result;
  std::string msg = where + "cannot load into model '" + c.name + "': ";
  constexpr size_t kShown = 20;
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) msg += (i ? "; " : "") + problems[i];
  if (problems.size() > kShown) msg += "; and " + std::to_string(problems.size() - kShown) + " more";
  throw Error(msg);
}

void load_hf_state_dict(CausalLMImpl& model, const std::map<std::string, at::Tensor>& tensors,
                        const std::string& source) {
  const auto whole = hf_whole_parameters(model, tensors, source);
  const nn::tp::TensorParallel& tp = model.tensor_parallel();
  c10::AutoGradMode no_grad(false);
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    if (is_lora_parameter(item.key())) continue;
    const auto spec = tp.enabled() ? model.shard_spec(item.key(), tp.rank()) : std::nullopt;
    const at::Tensor& w = whole.at(item.key());
    item.value().copy_(spec ? nn::tp::take_shard(w, *spec) : w);
  }
}

std::map<std::string, at::Tensor> read_hf_checkpoint(const std::string& dir) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (fs::exists(single)) return io::map_safetensors(single);
  if (!fs::exists(index)) throw Error(dir + ": neither model.safetensors nor model.safetensors.index.json");
  std::map<std::string, at::Tensor> out;
  for (const auto& [shard, names] : io::read_safetensors_index(index)) {
    const std::string file = dir + "/" + shard;
    auto tensors = io::map_safetensors(file);
    for (const auto& n : names) {
      auto it = tensors.find(n);
      if (it == tensors.end()) throw Error(file + ": no tensor '" + n + "' in the file (" + index + " names it)");
      out.emplace(n, it->second);
      tensors.erase(it);
    }
    // transformers loads a shard whole, extras included (a second copy of a
    // tensor in another shard would replace the first): refused, not guessed.
    if (!tensors.empty())
      throw Error(file + ": holds tensor '" + tensors.begin()->first + "'" +
                  (tensors.size() > 1 ? " (and " + std::to_string(tensors.size() - 1) + " more)" : "") +
                  " that " + index + " does not list for it; the index and the shards disagree");
  }
  return out;
}

}  // namespace stratum::models
