// stratum-ckpt: what a checkpoint holds, and its export to a consolidated
// safetensors file + Hugging Face config.json that `transformers` loads.
//
//   stratum-ckpt info   CKPT_DIR [--tag global_step100]
//   stratum-ckpt export CKPT_DIR OUT_DIR [--tag ...] [--dtype fp32|bf16]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iostream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/engine/checkpoint.h"
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

int info(const std::string& dir, const std::string& tag) {
  const std::string tag_dir = tag_dir_of(dir, tag);
  ConsolidatedCheckpoint c = read_consolidated_checkpoint(tag_dir, /*with_optimizer_states=*/false);
  const json& m = *c.manifest;
  int64_t numel = 0;
  for (const auto& p : m.at("params")) numel += p.at("numel").get<int64_t>();
  std::cout << "checkpoint    " << tag_dir << "\n"
            << "tag           " << m.at("tag").get<std::string>() << "\n"
            << "steps         " << m.at("global_steps") << " optimizer steps (" << m.at("skipped_steps")
            << " skipped), " << m.at("micro_steps") << " micro-steps\n"
            << "saved by      " << m.at("data_parallel_size") << " data-parallel ranks at ZeRO stage "
            << m.at("zero_stage") << ", model dtype " << m.at("model_dtype").get<std::string>() << "\n"
            << "parameters    " << m.at("params").size() << " tensors, " << numel << " elements (fp32 masters + Adam m, v)\n"
            << "lr scheduler  last_batch_iteration " << m.at("lr_scheduler").at("last_batch_iteration") << "\n"
            << "loss scaler   scale " << m.at("loss_scaler").at("cur_scale") << "\n";
  const json& client = m.value("client_state", json::object());
  if (client.contains("model_preset")) std::cout << "model         " << client.at("model_preset").get<std::string>() << "\n";
  if (client.contains("data")) std::cout << "data position " << client.at("data").dump() << "\n";
  std::cout << "shards\n";
  for (const auto& s : m.at("shards")) {
    const std::string file = s.at("file").get<std::string>();
    auto header = io::read_safetensors_header(tag_dir + "/" + file);
    std::cout << "  " << file << "  " << s.at("fragments").size() << " parameter fragments, " << header.tensors.size()
              << " tensors, " << header.data_length << " bytes\n";
  }
  std::cout << "every shard read and every parameter assembled: OK\n";
  return 0;
}

int export_hf(const std::string& dir, const std::string& out_dir, const std::string& tag, const std::string& dtype) {
  if (dtype != "fp32" && dtype != "bf16") throw Error("--dtype " + dtype + ": expected fp32 or bf16");
  const std::string tag_dir = tag_dir_of(dir, tag);
  ConsolidatedCheckpoint c = read_consolidated_checkpoint(tag_dir, /*with_optimizer_states=*/false);
  const json client = c.manifest->value("client_state", json::object());
  if (!client.contains("model"))
    throw Error(tag_dir + "/manifest.json: no model description in client_state.model (saved by stratum-train?)");
  const models::ModelConfig mcfg = models::model_config_from_hf(client.at("model"), client.value("model_preset", "hf"));
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
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect and export Stratum checkpoints"};
  app.require_subcommand(1);
  std::string dir, out, tag, dtype = "fp32";
  auto* info_cmd = app.add_subcommand("info", "What a checkpoint holds (reads and checks every shard)");
  info_cmd->add_option("checkpoint", dir, "checkpoint directory (with 'latest') or a tag directory")->required();
  info_cmd->add_option("--tag", tag, "tag to read (default: latest)");
  auto* export_cmd = app.add_subcommand("export", "Consolidated safetensors + Hugging Face config.json");
  export_cmd->add_option("checkpoint", dir, "checkpoint directory (with 'latest') or a tag directory")->required();
  export_cmd->add_option("out", out, "output directory")->required();
  export_cmd->add_option("--tag", tag, "tag to export (default: latest)");
  export_cmd->add_option("--dtype", dtype, "fp32 or bf16");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*info_cmd) return info(dir, tag);
    return export_hf(dir, out, tag, dtype);
  } catch (const std::exception& e) {
    std::cerr << "stratum-ckpt: error: " << e.what() << "\n";
    return 1;
  }
}
