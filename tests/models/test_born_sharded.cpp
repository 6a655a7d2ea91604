// Models born sharded (nn/deferred_init.h): a skeleton (construct_model for
// the meta device) allocates nothing, even at 70B parameters, and has the whole model's
// parameters, names and shapes; drawing any subset of its parameters, in any
// order, gives exactly the values build_model gives them; the values depend
// on the seed and the name alone, not on the device order or what was drawn
// before; torch's global generator is not drawn from.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <set>

#include "../common/error_of.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/model_config.h"
#include "stratum/nn/deferred_init.h"

using namespace stratum;

namespace {
models::ModelConfig tiny(const std::string& arch) {
  return models::make_model_config(arch == "gpt2" ? "tiny-gpt2" : "tiny-llama", {{"layers", "3"}});
}
}  // namespace

TEST(BornSharded, SkeletonOfLlama70bAllocatesNothingAndCountsEveryParameter) {
  const auto config = models::make_model_config("llama-70b", {});
  const auto started = std::chrono::steady_clock::now();
  auto skeleton = models::construct_model(config, {}, c10::kMeta);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  int64_t count = 0;
  for (const auto& p : skeleton->parameters()) {
    ASSERT_TRUE(nn::is_unmaterialized(p));
    ASSERT_LE(p.storage().nbytes(), 16u);
    count += p.numel();
  }
  EXPECT_EQ(count, models::parameter_count(config));
  EXPECT_GT(count, int64_t{69'000'000'000});
  EXPECT_LT(seconds, 5.0) << "a skeleton is shapes only";
}

TEST(BornSharded, AnySubsetDrawnMatchesTheWholeBuild) {
  for (const std::string arch : {"gpt2", "llama"}) {
    torch::manual_seed(7);
    const auto whole = models::build_model(tiny(arch));
    const auto expected = whole->named_parameters();
    auto skeleton = models::construct_model(tiny(arch), {}, c10::kMeta);
    // Every other parameter, from the last to the first.
    std::vector<std::string> names;
    for (const auto& p : skeleton->named_parameters()) names.push_back(p.key());
    std::set<std::string> chosen;
    for (size_t i = names.size(); i-- > 0;)
      if (i % 2 == 1) chosen.insert(names[i]);
    nn::materialize(*skeleton, c10::kCPU, at::kFloat, [&](const std::string& n) { return chosen.count(n) > 0; });
    for (const auto& p : skeleton->named_parameters()) {
      if (!chosen.count(p.key())) {
        EXPECT_TRUE(nn::is_unmaterialized(p.value())) << arch << " " << p.key();
        continue;
      }
      EXPECT_TRUE(at::equal(p.value(), *expected.find(p.key()))) << arch << " " << p.key();
    }
    nn::materialize(*skeleton, c10::kCPU, at::kFloat);  // the rest
    for (const auto& p : skeleton->named_parameters())
      EXPECT_TRUE(at::equal(p.value(), *expected.find(p.key()))) << arch << " " << p.key();
  }
}

TEST(BornSharded, ValuesFollowTheSeedAndNotTheGenerator) {
  torch::manual_seed(7);
  const auto a = models::build_model(tiny("gpt2"));
  const at::Tensor after_build = torch::rand({4});
  torch::manual_seed(7);
  const at::Tensor untouched = torch::rand({4});
  EXPECT_TRUE(at::equal(after_build, untouched)) << "building draws nothing from torch's global generator";
  torch::manual_seed(7);
  const auto b = models::build_model(tiny("gpt2"));
  torch::manual_seed(8);
  const auto c = models::build_model(tiny("gpt2"));
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  const std::string w = "transformer.h.1.attn.c_attn.weight";
  EXPECT_TRUE(at::equal(*pa.find(w), *pb.find(w)));
  EXPECT_FALSE(at::equal(*pa.find(w), *pc.find(w)));
  // Two parameters of one shape are drawn from streams of their own.
  EXPECT_FALSE(at::equal(*pa.find("transformer.h.0.attn.c_attn.weight"), *pa.find(w)));
  // GPT-2's initialization: residual projections at init_std / sqrt(2 layers), biases 0, norms 1.
  const auto& cfg = a->config();
  const at::Tensor proj = *pa.find("transformer.h.0.mlp.c_proj.weight");
  EXPECT_NEAR(proj.std().item<double>(), cfg.init_std / std::sqrt(2.0 * cfg.layers), 0.2 * cfg.init_std);
  EXPECT_TRUE(at::equal(*pa.find("transformer.h.0.mlp.c_proj.bias"), at::zeros_like(*pa.find("transformer.h.0.mlp.c_proj.bias"))));
  EXPECT_TRUE(at::equal(*pa.find("transformer.ln_f.weight"), at::ones_like(*pa.find("transformer.ln_f.weight"))));
}

TEST(BornSharded, ASkeletonOfAnotherModuleIsRefusedByName) {
  struct Plain : torch::nn::Module {
    Plain() { register_parameter("w", nn::unmaterialized({2, 2}, at::kFloat)); }
  } plain;
  EXPECT_NE(test::error_of([&] { nn::materialize(plain, c10::kCPU, at::kFloat); }).find("parameter 'w' is not drawn yet"),
            std::string::npos);
}
