// GPT-2 and LLaMA built sharded over every rank of the job (CTest: 1, 2 and 4
// ranks) against the same model built whole from the same seed: the loss,
// the gathered logits and every parameter's gradient (each rank's shard of
// the whole gradient), with and without sequence parallelism. LLaMA's tiny
// preset has 2 key/value heads: at 4 ranks each is shared by 2 ranks.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "../distributed/distributed_test_context.h"
#include "stratum/core/error.h"
#include "stratum/models/hf_state_dict.h"
#include "stratum/models/tensor_parallel_plan.h"

using namespace stratum;
using namespace stratum::models;

namespace {

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const double scale = std::max(want.abs().max().item<double>(), 1e-30);
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() / scale;
}

struct Case {
  std::string preset;
  bool sequence_parallel;
};

void check_against_whole(const Case& k) {
  const auto& world = test::context().cpu_world;
  nn::tp::TensorParallel tp{world, k.sequence_parallel};
  const int64_t t = tp.size();
  const ModelConfig config = make_model_config(k.preset, {{"tie_embeddings", k.preset == "tiny-gpt2" ? "1" : "0"}});
  at::manual_seed(0);
  auto whole = build_model(config, c10::kCPU);
  at::manual_seed(0);
  auto sharded = build_model(config, c10::kCPU, tp);
  at::manual_seed(1);
  const at::Tensor tokens = at::randint(config.vocab_size, {2, 4 * t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor targets = at::randint(config.vocab_size, {2, 4 * t}, at::TensorOptions().dtype(at::kLong));
  targets[0][1] = -100;
  const at::Tensor want = whole->forward(tokens, targets);
  want.backward();
  const at::Tensor got = sharded->forward(tokens, targets);
  got.backward();
  const std::string what = k.preset + (k.sequence_parallel ? " with" : " without") + " sequence parallelism at " +
                           std::to_string(t) + " ranks";
  EXPECT_LE(rel_err(got.detach(), want.detach()), 1e-5) << what << ": loss " << got.item<double>() << " vs "
                                                          << want.item<double>();
  {
    at::NoGradGuard no_grad;
    EXPECT_LE(rel_err(sharded->logits(tokens), whole->logits(tokens)), 1e-5) << what << ": logits";
  }
  int64_t held = 0;
  for (const auto& p : sharded->parameters()) held += p.numel();
  EXPECT_EQ(held, tensor_parallel_param_count(config, t)) << what << ": parameters a rank holds";
  const auto whole_params = whole->named_parameters();
  // Ranks sharing a key/value head (fewer of them than ranks): their gradients are parts of one sum.
  std::shared_ptr<distributed::Communicator> kv_group;
  if (config.arch == "llama" && config.kv_heads < t) {
    std::vector<std::vector<int64_t>> groups(config.kv_heads);
    for (int64_t r = 0; r < t; ++r) groups[r / (t / config.kv_heads)].push_back(r);
    kv_group = world->split(groups, "kv");
  }
  for (const auto& item : sharded->named_parameters()) {
    const at::Tensor& whole_grad = whole_params[item.key()].grad();
    const auto spec = shard_spec(config, item.key(), t, tp.rank());
    at::Tensor grad = item.value().grad().clone();
    ASSERT_TRUE(grad.defined()) << what << ": " << item.key() << " got no gradient";
    // Replicated parameters under sequence parallelism see their slice of the sequence.
    if (!spec && k.sequence_parallel) world->all_reduce(grad, distributed::ReduceOp::sum)->wait();
    if (spec && spec->replicas(t) > 1) kv_group->all_reduce(grad, distributed::ReduceOp::sum)->wait();
    const at::Tensor expected = spec ? nn::tp::take_shard(whole_grad, *spec) : whole_grad;
    EXPECT_LE(rel_err(grad, expected), 1e-5) << what << ": gradient of " << item.key();
  }
}

}  // namespace

TEST(TensorParallelModels, Gpt2MatchesTheWholeModel) {
  check_against_whole({"tiny-gpt2", false});
  check_against_whole({"tiny-gpt2", true});
}

TEST(TensorParallelModels, LlamaWithSharedKeyValueHeadsMatchesTheWholeModel) {
  check_against_whole({"tiny-llama", false});
  check_against_whole({"tiny-llama", true});
}

TEST(TensorParallelModels, ShapesTheGroupCannotSplitNameTheirNumbers) {
  nn::tp::TensorParallel tp{test::context().cpu_world, false};
  if (tp.size() < 2) GTEST_SKIP() << "needs 2 ranks or more";
  const ModelConfig c = make_model_config("tiny-llama", {{"heads", "6"}, {"kv_heads", "3"}, {"hidden", "48"},
                                                         {"ffn_hidden", "99"}});
  try {
    validate_tensor_parallel(c, 4);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* part : {"heads 6 is not divisible by the tensor-parallel size 4", "ffn_hidden 99",
                             "kv_heads 3 and the tensor-parallel size 4"})
      EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  }
}

// Sequence parallelism at a length the group does not divide (generation's
// growing prompt): padded on the right and the padding ignored, so the loss
// and logits are the whole model's.
TEST(TensorParallelModels, SequenceParallelTakesALengthTheGroupDoesNotDivide) {
  const auto& world = test::context().cpu_world;
  nn::tp::TensorParallel tp{world, true};
  const int64_t t = tp.size();
  if (t < 2) GTEST_SKIP() << "needs 2 ranks or more";
  for (const std::string preset : {"tiny-gpt2", "tiny-llama"}) {
    const ModelConfig config = make_model_config(preset);
    at::manual_seed(0);
    auto whole = build_model(config, c10::kCPU);
    at::manual_seed(0);
    auto sharded = build_model(config, c10::kCPU, tp);
    at::manual_seed(1);
    const at::Tensor tokens = at::randint(config.vocab_size, {2, 2 * t + 1}, at::TensorOptions().dtype(at::kLong));
    const at::Tensor targets = at::randint(config.vocab_size, {2, 2 * t + 1}, at::TensorOptions().dtype(at::kLong));
    at::NoGradGuard no_grad;
    EXPECT_LE(rel_err(sharded->forward(tokens, targets), whole->forward(tokens, targets)), 1e-5) << preset;
    EXPECT_LE(rel_err(sharded->logits(tokens), whole->logits(tokens)), 1e-5) << preset;
  }
}

// A Hugging Face state dict (whole tensors, GPT-2's Conv1D weights
// transposed) loaded into a sharded model: each rank keeps its shards, and
// the logits are the whole model's. Writing one from a sharded model is
// refused (its ranks hold shards).
TEST(TensorParallelModels, HuggingFaceWeightsLoadIntoShards) {
  const auto& world = test::context().cpu_world;
  nn::tp::TensorParallel tp{world, false};
  for (const std::string preset : {"tiny-gpt2", "tiny-llama"}) {
    const ModelConfig config = make_model_config(preset, {{"vocab_size", "300"}});
    at::manual_seed(0);
    auto whole = build_model(config, c10::kCPU);
    std::map<std::string, at::Tensor> file;
    for (auto& [name, t] : to_hf_state_dict(*whole)) file[name] = t.clone();
    at::manual_seed(5);  // other weights, overwritten by the load
    auto sharded = build_model(config, c10::kCPU, tp);
    load_hf_state_dict(*sharded, file, "model.safetensors");
    at::manual_seed(1);
    const at::Tensor tokens = at::randint(256, {2, 8}, at::TensorOptions().dtype(at::kLong));
    at::NoGradGuard no_grad;
    EXPECT_LE(rel_err(sharded->logits(tokens), whole->logits(tokens)), 1e-5) << preset;
    if (tp.enabled()) {
      EXPECT_THROW(to_hf_state_dict(*sharded), Error) << preset;
      file.begin()->second = at::zeros({3, 3});
      try {
        load_hf_state_dict(*sharded, file, "model.safetensors");
        ADD_FAILURE() << preset << ": a mis-shaped tensor loaded";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("has shape [3, 3], expected"), std::string::npos) << e.what();
      }
    }
  }
}
