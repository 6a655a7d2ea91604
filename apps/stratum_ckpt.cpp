// stratum-ckpt: what a checkpoint holds, and its export to a consolidated
// safetensors file + Hugging Face config.json that `transformers` loads.
//
//   stratum-ckpt info   CKPT_DIR [--tag global_step100] [--verify]
//   stratum-ckpt export CKPT_DIR OUT_DIR [--tag ...] [--dtype fp32|bf16]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "stratum/checkpoint/checkpoint.h"
#include "stratum/checkpoint/manifest.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/distributed/job.h"
#include "stratum/io/safetensors.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/hf_state_dict.h"

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

int export_hf(const std::string& dir, const std::string& out_dir, const std::string& tag, const std::string& dtype) {
  if (dtype != "fp32" && dtype != "bf16") throw Error("--dtype " + dtype + ": expected fp32 or bf16");
  const std::string tag_dir = tag_dir_of(dir, tag);
  ConsolidatedCheckpoint c = read_consolidated_checkpoint(tag_dir, /*with_optimizer_states=*/false);
  const json& client = c.manifest->client_state;
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
  auto model = models::build_model(mcfg);
  {
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
  std::string dir, out, tag, dtype = "fp32";
  bool verify = false;
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
  export_cmd->add_option("--dtype", dtype, "fp32 or bf16");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*info_cmd) return info(dir, tag, verify);
    return export_hf(dir, out, tag, dtype);
  } catch (const std::exception& e) {
    std::cerr << "stratum-ckpt: error: " << distributed::describe_exception(e) << "\n";
    return 1;
  }
}
