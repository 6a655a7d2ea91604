// Logits of a Hugging Face-format model directory (what `stratum-ckpt export`
// writes) on a fixed input, computed by Stratum's own model code, saved as
// safetensors for bench/hf_compare.py to hold against `transformers`.
// Usage: dump_logits HF_DIR OUT.safetensors
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "stratum/models/causal_lm.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/hf_state_dict.h"
#include "stratum/models/safetensors.h"

int main(int argc, char** argv) {
  CLI::App app{"Logits of a Hugging Face-format model directory on a fixed input, by Stratum's model code"};
  std::string dir, out;
  app.add_option("hf_dir", dir, "model directory (config.json, safetensors)")->required();
  app.add_option("out", out, "the safetensors file to write (tokens, logits)")->required();
  CLI11_PARSE(app, argc, argv);
  std::ifstream in(dir + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  auto config = stratum::models::model_config_from_hf(nlohmann::json::parse(text.str()), "export");
  auto model = stratum::models::build_model(config);
  auto weights = stratum::models::read_hf_checkpoint(dir);
  for (auto& [name, t] : weights) t = t.to(torch::kFloat);
  stratum::models::load_hf_state_dict(*model, weights, dir);
  model->eval();
  torch::NoGradGuard no_grad;
  at::Tensor tokens = torch::arange(64, torch::kLong).remainder(config.vocab_size).view({1, 64}) * 7 % config.vocab_size;
  at::Tensor logits = model->logits(tokens).to(torch::kFloat).contiguous();
  stratum::models::write_safetensors(out, {{"tokens", tokens}, {"logits", logits}});
  std::cout << "wrote " << out << " logits " << logits.sizes() << "\n";
  return 0;
}
