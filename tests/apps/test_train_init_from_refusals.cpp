// --init-from a directory whose tensors are not weights Stratum may train
// from: a NaN in one tensor (each rank checks the elements it copied; the job
// agrees on the error) and an int8 tensor (a quantized checkpoint: refused,
// never cast). Both stop every rank with a message naming the tensor.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>

#include <torch/torch.h>

#include "train_cli.h"
#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"

namespace {

using namespace stratum::test::train_cli;

const std::string kFixture = std::string(STRATUM_SOURCE_DIR) + "/tests/data/hf/llama2";
const std::string kTensor = "model.layers.1.mlp.down_proj.weight";

// A copy of the llama2 fixture whose kTensor is `replacement`.
void write_fixture_copy(const std::string& dir, const at::Tensor& replacement) {
  stratum::fs::make_directories(dir);
  std::ifstream in(kFixture + "/config.json");
  std::ofstream(dir + "/config.json") << in.rdbuf();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [name, t] : stratum::io::read_safetensors(kFixture + "/model.safetensors"))
    tensors.emplace_back(name, name == kTensor ? replacement : t);
  stratum::io::write_safetensors(dir + "/model.safetensors", tensors);
}

Result init_from(const std::string& from, const std::string& dir) {
  return run(kBin + "/stratum-run --num_procs 2 " + kBin + "/stratum-train --config " + STRATUM_SOURCE_DIR +
             "/configs/default.json --init-from " + from + " --set max_seq_len=32 --data default --cache-dir " + dir +
             "/cache --steps 1 --eval-every 0 --sample-tokens 0 --log-dir " + dir + "/log --save-dir " + dir + "/ckpt");
}

TEST_F(TrainCli, InitFromRefusesNaNWeightsNamingTheTensor) {
  at::Tensor w = stratum::io::read_safetensors(kFixture + "/model.safetensors").at(kTensor).clone();
  w.view(-1)[37] = std::numeric_limits<float>::quiet_NaN();
  write_fixture_copy(dir_ + "/nan", w);
  const Result r = init_from(dir_ + "/nan", dir_);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tensor '" + kTensor + "' holds NaN or infinite values"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir_ + "/nan"), std::string::npos) << r.output;
}

TEST_F(TrainCli, InitFromRefusesAnInt8TensorNamingItsDtype) {
  const at::Tensor w = stratum::io::read_safetensors(kFixture + "/model.safetensors").at(kTensor);
  write_fixture_copy(dir_ + "/int8", torch::ones(w.sizes(), torch::kInt8));
  const Result r = init_from(dir_ + "/int8", dir_);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("'" + kTensor + "' is int8, not a floating-point weight"), std::string::npos) << r.output;
}

}  // namespace
