// stratum-ckpt: what a checkpoint holds, and its export to a consolidated
// safetensors file + Hugging Face config.json that `transformers` loads.
//
//   stratum-ckpt info   CKPT_DIR [--tag global_step100] [--verify]
//   stratum-ckpt export CKPT_DIR OUT_DIR [--tag ...] [--dtype fp32|bf16]
//       (a LoRA run's checkpoint: its adapters as a peft adapter directory;
//        with --merge-lora [--base HF_DIR] the base with the adapters merged)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "stratum/checkpoint/checkpoint.h"
#include "stratum/checkpoint/manifest.h"
#include "stratum/checkpoint/peft_adapter.h"
#include "stratum/config/config.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/distributed/job.h"
#include "stratum/io/safetensors.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/hf_state_dict.h"
#include "stratum/models/lora.h"
#include "stratum/nn/parameter_modules.h"
#include "stratum/quant/nf4.h"

using namespace stratum;
using nlohmann::json;

namespace {

std::string tag_dir_of(const std::string& dir, const std::string& tag) {
  if (!tag.empty()) return dir + "/" + tag;
  if (fs::exists(dir + "/manifest.json")) return dir;  // a tag directory itself
  auto latest = latest_checkpoint_tag(dir);
  if (!latest) throw Error(dir + ": no 'latest' file and no manifest.json; pass --tag");
  return dir + "/" + *latest;
}

int info(const std::string& dir, const std::string& tag, bool verify) {
  const std::string tag_dir = tag_dir_of(dir, tag);
  ConsolidatedCheckpoint c = read_consolidated_checkpoint(tag_dir, /*with_optimizer_states=*/false);
  const CheckpointManifest& m = *c.manifest;
  std::cout << "checkpoint    " << tag_dir << "\n"
            << "tag           " << m.tag << "\n"
            << "steps         " << m.global_steps << " optimizer steps (" << m.skipped_steps << " skipped), "
            << m.micro_steps << " micro-steps\n"
            << "saved by      " << m.data_parallel_size << " data-parallel ranks"
            << (m.pipeline_stages > 1 ? " x " + std::to_string(m.pipeline_stages) + " pipeline stages" : "")
            << (m.tensor_parallel_size > 1 ? " x " + std::to_string(m.tensor_parallel_size) + " tensor-parallel ranks"
                                           : "")
            << " at ZeRO stage " << m.zero_stage
            << (m.offload_param       ? " with the optimizer and parameters offloaded"
                : m.offload_optimizer ? " with the optimizer offloaded"
                                      : "")
            << ", model dtype " << m.model_dtype << "\n"
            << "parameters    " << m.params.size() << " tensors, " << m.total_numel()
            << " elements (fp32 masters + Adam m, v)\n"
            << "lr scheduler  last_batch_iteration " << m.lr_last_batch_iteration << "\n"
            << "loss scaler   scale " << m.loss_scaler.cur_scale << "\n"
            << "checksums     " << (m.has_checksums() ? "CRC-32C per tensor" : "none (checkpoint format 1)") << "\n";
  const json& client = m.client_state;
  if (client.contains("model_preset") && client["model_preset"].is_string())
    std::cout << "model         " << client["model_preset"].get<std::string>() << "\n";
  if (client.contains("data")) std::cout << "data position " << client["data"].dump() << "\n";
  std::cout << "shards\n";
  for (const auto& s : m.shards) {
    auto header = io::read_safetensors_header(tag_dir + "/" + s.file);
    std::cout << "  " << s.file << "  " << s.fragments.size() << " parameter fragments, " << header.tensors.size()
              << " tensors, " << header.data_length << " bytes\n";
  }
  std::cout << "every parameter assembled from the shards" << (m.has_checksums() ? ", checksums match" : "") << ": OK\n";
  if (verify) {
    const CheckpointVerification v = verify_checkpoint(tag_dir);
    char line[256];
    std::snprintf(line, sizeof line, "verified      %d shards, %lld tensors, %s in %.2f s (%s, finite values, coverage): OK\n",
                  v.shards, static_cast<long long>(v.tensors), fs::describe_bytes(v.bytes).c_str(), v.seconds,
                  v.checksums ? "every checksum" : "no checksums stored");
    std::cout << line;
  }
  return 0;
}

// The lora section a LoRA run saved in its checkpoint (stratum-train's client_state.lora).
config::LoraConfig saved_lora(const json& lora, const std::string& where) {
  json cfg = {{"train_batch_size", 1}, {"lora", lora}};
  if (lora.is_object() && lora.value("base_dtype", "") == "bf16") cfg["bf16"] = {{"enabled", true}};
  return Config::from_json(cfg, where + ": client_state").lora;
}

// A LoRA checkpoint's adapters as a peft adapter directory.
int export_adapter(const ConsolidatedCheckpoint& c, const std::string& tag_dir, const std::string& out_dir,
                   const std::string& dtype, const models::ModelConfig& mcfg) {
  const json& lora = c.manifest->client_state.at("lora");
  PeftAdapter a;
  a.lora = saved_lora(lora, tag_dir + "/manifest.json");
  a.fan_in_fan_out = mcfg.arch == "gpt2";
  a.base_model_name_or_path = lora.value("base_model_name_or_path", std::string());
  const at::ScalarType st = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  for (const auto& [name, t] : c.tensors) a.tensors.emplace_back(name, t.to(st).contiguous());
  write_peft_adapter(out_dir, a);
  std::cout << "wrote the peft adapter " << out_dir << "/adapter_model.safetensors (" << a.tensors.size()
            << " tensors, " << dtype << ") and adapter_config.json from " << tag_dir << "\n";
  return 0;
}

int export_hf(const std::string& dir, const std::string& out_dir, const std::string& tag, std::string dtype,
              bool merge_lora, std::string base) {
  if (dtype.empty()) dtype = merge_lora ? "bf16" : "fp32";
  if (dtype != "fp32" && dtype != "bf16") throw Error("--dtype " + dtype + ": expected fp32 or bf16");
  const std::string tag_dir = tag_dir_of(dir, tag);
  ConsolidatedCheckpoint c = read_consolidated_checkpoint(tag_dir, /*with_optimizer_states=*/false);
  const json& client = c.manifest->client_state;
  const bool lora = client.contains("lora");
  if (merge_lora && !lora) throw Error("--merge-lora: " + tag_dir + " is not a LoRA run's checkpoint (no client_state.lora)");
  if (!client.contains("model"))
    throw Error(tag_dir + "/manifest.json: no model description in client_state.model (saved by stratum-train?)");
  models::ModelConfig mcfg;
  try {
    const std::string preset =
        client.contains("model_preset") && client["model_preset"].is_string() ? client["model_preset"].get<std::string>() : "hf";
    mcfg = models::model_config_from_hf(client.at("model"), preset);
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();  // "[json.exception.type_error.302] type must be ..."
    if (const auto b = why.find("] "); b != std::string::npos) why = why.substr(b + 2);
    throw Error(tag_dir + "/manifest.json: client_state.model: " + why);
  }
  if (lora && !merge_lora) return export_adapter(c, tag_dir, out_dir, dtype, mcfg);
  auto model = models::build_model(mcfg);
  if (merge_lora) {
    // The base from its Hugging Face directory; under QLoRA the values it
    // trained against (dequantized NF4 of the base in the training dtype);
    // the adapters merged in fp32; nothing quantized again.
    const config::LoraConfig l = saved_lora(client.at("lora"), tag_dir + "/manifest.json");
    if (base.empty()) base = client.at("lora").value("base_model_name_or_path", std::string());
    if (base.empty())
      throw Error("--merge-lora: the run had no --init-from; pass --base with the base model's directory");
    // A base stored in bitsandbytes' NF4 gives its codes as stored (what the run trained against).
    const models::HfParameters stored = models::hf_parameters(*model, models::read_hf_checkpoint(base), base);
    const bool nf4_base = l.base_dtype == config::LoraBaseDType::nf4;
    const at::ScalarType trained = c.manifest->model_dtype == "BFloat16" ? at::kBFloat16
                                   : c.manifest->model_dtype == "Half"   ? at::kHalf
                                                                         : at::kFloat;
    {
      c10::AutoGradMode no_grad(false);
      for (auto& item : model->named_parameters(/*recurse=*/true)) {
        if (auto it = stored.whole.find(item.key()); it != stored.whole.end()) item.value().copy_(it->second);
        if (auto q = stored.nf4.find(item.key()); q != stored.nf4.end()) {
          quant::Nf4Tensor as_trained = q->second;
          as_trained.dtype = nf4_base ? trained : at::kFloat;
          item.value().copy_(quant::dequantize_nf4(as_trained));
        }
      }
    }
    if (nf4_base) {
      c10::AutoGradMode no_grad(false);
      const auto& names = models::lora_linear_names(mcfg.arch);
      for (const auto& item : model->named_modules("", false))
        if (auto* lin = dynamic_cast<nn::LinearImpl*>(item.value().get());
            lin && !stored.nf4.count(item.key() + ".weight") &&
            std::find(names.begin(), names.end(), item.key().substr(item.key().rfind('.') + 1)) != names.end())
          lin->weight.copy_(quant::dequantize_nf4(quant::quantize_nf4(lin->weight.to(trained))));
    }
    models::merge_lora(*model, l, c.tensors);
    std::cout << "merged " << c.tensors.size() << " adapter tensors into " << base
              << (l.base_dtype == config::LoraBaseDType::nf4 ? " (dequantized NF4, as trained)" : "") << "\n";
  }
  if (!merge_lora) {
    c10::AutoGradMode no_grad(false);
    for (auto& item : model->named_parameters()) {
      auto it = c.tensors.find(item.key());
      if (it == c.tensors.end()) throw Error(tag_dir + ": parameter '" + item.key() + "' is missing from the checkpoint");
      if (it->second.sizes() != item.value().sizes())
        throw Error(tag_dir + ": parameter '" + item.key() + "' has another shape than model " + mcfg.name + " expects");
      item.value().copy_(it->second);
    }
  }
  const at::ScalarType st = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [name, t] : models::to_hf_state_dict(*model)) tensors.emplace_back(name, t.to(st).contiguous());
  fs::make_directories(out_dir);
  io::write_safetensors(out_dir + "/model.safetensors", tensors, {{"format", "pt"}});
  std::ofstream(out_dir + "/config.json") << models::hf_config_json(mcfg, dtype == "bf16" ? "bfloat16" : "float32").dump(2)
                                          << "\n";
  std::cout << "wrote " << out_dir << "/model.safetensors (" << tensors.size() << " tensors, " << dtype << ") and "
            << out_dir << "/config.json from " << tag_dir << "\n";
  // The tokenizer stratum-train kept in the checkpoint goes with the model.
  std::string copied;
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"}) {
    const std::string from = tag_dir + "/" + name;
    if (!fs::exists(from)) continue;
    fs::write_file_atomically(out_dir + "/" + name, fs::read_regular_file(from, size_t{1} << 30, "tokenizer file"),
                              std::string("the tokenizer's ") + name);
    copied += (copied.empty() ? "" : ", ") + std::string(name);
  }
  const std::string tokenizer = client.value("tokenizer", std::string());
  if (!copied.empty())
    std::cout << "wrote the tokenizer (" << tokenizer << "): " << copied << "\n";
  else if (!tokenizer.empty() && tokenizer != "byte")
    std::cout << "note: no tokenizer files in " << tag_dir << " (its tokenizer " << tokenizer
              << " is not a Hugging Face or SentencePiece one, or the checkpoint predates them): copy them by hand\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect and export Stratum checkpoints"};
  app.require_subcommand(1);
  std::string dir, out, tag, dtype, base;
  bool verify = false, merge_lora = false;
  auto* info_cmd = app.add_subcommand("info", "What a checkpoint holds (reads and checks every shard)");
  info_cmd->add_option("checkpoint", dir, "checkpoint directory (with 'latest') or a tag directory")->required();
  info_cmd->add_option("--tag", tag, "tag to read (default: latest)");
  info_cmd->add_flag("--verify", verify,
                     "also read every stored tensor (optimizer states and RNG too): checksums, finite values, "
                     "nothing missing or extra");
  auto* export_cmd = app.add_subcommand("export", "Consolidated safetensors + Hugging Face config.json");
  export_cmd->add_option("checkpoint", dir, "checkpoint directory (with 'latest') or a tag directory")->required();
  export_cmd->add_option("out", out, "output directory")->required();
  export_cmd->add_option("--tag", tag, "tag to export (default: latest)");
  export_cmd->add_option("--dtype", dtype, "fp32 or bf16 (default fp32; bf16 with --merge-lora)");
  export_cmd->add_flag("--merge-lora", merge_lora,
                       "a LoRA run's checkpoint: the base model with the adapters merged (W + scale B A in fp32), not "
                       "the adapter alone");
  export_cmd->add_option("--base", base, "with --merge-lora: the base model's Hugging Face directory (default: the "
                                         "run's --init-from)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*info_cmd) return info(dir, tag, verify);
    return export_hf(dir, out, tag, dtype, merge_lora, base);
  } catch (const std::exception& e) {
    std::cerr << "stratum-ckpt: error: " << distributed::describe_exception(e) << "\n";
    return 1;
  }
}
