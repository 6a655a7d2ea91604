// Packed rows (nn/sequence_layout.h) against each example run alone: a row
// holding several examples, with their segment and position ids in the
// stack's layout slot, gives every example the logits it has alone and the
// same parameter gradients (fp32, GPT-2's learned positions and LLaMA's RoPE
// with grouped key/value heads), including padding at the row's end.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "stratum/core/error.h"
#include "stratum/models/causal_lm.h"
#include "stratum/nn/segment_runs.h"
#include "stratum/nn/sequence_layout.h"

using namespace stratum;
using namespace stratum::models;

namespace {

std::shared_ptr<CausalLMImpl> tiny(const std::string& preset) {
  torch::manual_seed(7);
  ModelConfig c = make_model_config(preset, {{"layers", "2"}, {"max_seq_len", "32"}, {"vocab_size", "64"}});
  c.dropout = 0;
  return build_model(c);
}

struct Packed {
  at::Tensor tokens;  // [1, T]
  nn::SequenceLayout layout;
  std::vector<at::Tensor> examples;  // each [1, n]
};

// Examples of `lengths` tokens one after another in a row of `row` tokens, the rest padding.
Packed pack(const std::vector<int64_t>& lengths, int64_t row, int64_t vocab) {
  torch::manual_seed(11);
  Packed p;
  p.tokens = torch::zeros({1, row}, torch::kLong);
  at::Tensor segments = torch::full({1, row}, -1, torch::kInt);
  at::Tensor positions = torch::zeros({1, row}, torch::kLong);
  int64_t at = 0;
  for (size_t e = 0; e < lengths.size(); ++e) {
    const at::Tensor ids = torch::randint(1, vocab, {1, lengths[e]}, torch::kLong);
    p.examples.push_back(ids);
    p.tokens.narrow(1, at, lengths[e]).copy_(ids);
    segments.narrow(1, at, lengths[e]).fill_(static_cast<int>(e));
    positions.narrow(1, at, lengths[e]).copy_(torch::arange(lengths[e]).unsqueeze(0));
    at += lengths[e];
  }
  p.layout = {segments, positions};
  return p;
}

class PackedRows : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedRows, LogitsEqualEachExampleAlone) {
  auto model = tiny(GetParam());
  const Packed p = pack({5, 9, 3}, 20, model->config().vocab_size);
  c10::AutoGradMode no_grad(false);
  at::Tensor packed;
  {
    nn::SequenceLayoutScope scope(model->sequence_layout().get(), p.layout);
    packed = model->logits(p.tokens);
  }
  EXPECT_EQ(model->sequence_layout()->get(), nullptr) << "the scope clears the slot";
  int64_t at = 0;
  for (const at::Tensor& ex : p.examples) {
    const at::Tensor alone = model->logits(ex);
    EXPECT_TRUE(torch::allclose(packed.narrow(1, at, ex.size(1)), alone, 1e-5, 1e-5))
        << GetParam() << ": example at " << at << " differs by "
        << (packed.narrow(1, at, ex.size(1)) - alone).abs().max().item<double>();
    at += ex.size(1);
  }
  // Without the layout the second example reads the first: the test can fail.
  const at::Tensor unpacked = model->logits(p.tokens);
  EXPECT_FALSE(torch::allclose(unpacked.narrow(1, 5, 9), model->logits(p.examples[1]), 1e-3, 1e-3));
}

TEST_P(PackedRows, GradientsEqualTheSumOverExamplesAlone) {
  auto model = tiny(GetParam());
  const Packed p = pack({6, 4, 7}, 18, model->config().vocab_size);
  // Targets: each example's next tokens, -100 across boundaries and on padding.
  at::Tensor targets = torch::full({1, 18}, -100, torch::kLong);
  int64_t at = 0;
  for (const at::Tensor& ex : p.examples) {
    targets.narrow(1, at, ex.size(1) - 1).copy_(ex.narrow(1, 1, ex.size(1) - 1));
    at += ex.size(1);
  }
  const int64_t counted = targets.ne(-100).sum().item<int64_t>();
  auto grads = [&] {
    std::map<std::string, at::Tensor> g;
    for (const auto& item : model->named_parameters()) g[item.key()] = item.value().grad().clone();
    model->zero_grad();
    return g;
  };
  {
    nn::SequenceLayoutScope scope(model->sequence_layout().get(), p.layout);
    model->forward(p.tokens, targets).backward();
  }
  const auto packed = grads();
  // Alone: each example's summed token losses, over the packed row's count.
  for (const at::Tensor& ex : p.examples) {
    const int64_t n = ex.size(1) - 1;
    (model->forward(ex.narrow(1, 0, n), ex.narrow(1, 1, n)) * (static_cast<double>(n) / counted)).backward();
  }
  const auto alone = grads();
  for (const auto& [name, g] : packed)
    EXPECT_TRUE(torch::allclose(g, alone.at(name), 1e-5, 1e-6))
        << GetParam() << " " << name << " differs by " << (g - alone.at(name)).abs().max().item<double>();
}

// The CUDA path: SDPA's masked kernel with k/v repeated per query head, the
// rotary kernel reading each row's own positions; fp32 to 1e-4, and bf16
// within its rounding.
TEST_P(PackedRows, OnTheGpuLogitsAndGradientsEqualEachExampleAlone) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    torch::manual_seed(7);
    ModelConfig c = make_model_config(GetParam(), {{"layers", "2"}, {"max_seq_len", "64"}, {"vocab_size", "64"},
                                                   {"hidden", "128"}, {"heads", "4"}});
    c.dropout = 0;
    auto model = build_model(c, torch::kCUDA);
    model->to(dtype);
    Packed p = pack({13, 30, 9}, 60, c.vocab_size);
    p.tokens = p.tokens.cuda();
    // With the runs: variable-length flash attention in bf16, the mask in fp32.
    p.layout = {p.layout.segment_ids.cuda(), p.layout.position_ids.cuda(),
                std::make_shared<const nn::SegmentRuns>(p.layout.segment_ids)};
    at::Tensor packed;
    {
      nn::SequenceLayoutScope scope(model->sequence_layout().get(), p.layout);
      packed = model->logits(p.tokens).to(at::kFloat);
      packed.narrow(1, 0, 52).sum().backward();  // the examples' positions, not the padding's
    }
    std::map<std::string, at::Tensor> packed_grads;
    for (const auto& item : model->named_parameters()) packed_grads[item.key()] = item.value().grad().to(at::kFloat).clone();
    model->zero_grad();
    const double tol = dtype == at::kFloat ? 1e-4 : 3e-2;
    int64_t at = 0;
    for (const at::Tensor& ex : p.examples) {
      const at::Tensor alone = model->logits(ex.cuda()).to(at::kFloat);
      alone.sum().backward();
      const double diff = (packed.narrow(1, at, ex.size(1)) - alone).abs().max().item<double>();
      EXPECT_LT(diff, tol * std::max(1.0, alone.abs().max().item<double>())) << GetParam() << " " << dtype;
      at += ex.size(1);
    }
    // bf16's summed gradients differ by their rounding alone.
    const double grad_tol = dtype == at::kFloat ? 1e-3 : 5e-2;
    for (const auto& item : model->named_parameters()) {
      const at::Tensor alone = item.value().grad().to(at::kFloat);
      const at::Tensor& g = packed_grads.at(item.key());
      EXPECT_LT((g - alone).abs().max().item<double>(), grad_tol * std::max(1.0, alone.abs().max().item<double>()))
          << GetParam() << " " << dtype << " " << item.key();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BuiltInModels, PackedRows, ::testing::Values("tiny-gpt2", "tiny-llama"));

TEST(PackedRowsLayout, BadLayoutsAreRefusedByName) {
  nn::SequenceLayoutSlot slot;
  EXPECT_THROW(slot.set({torch::zeros({1, 4}, torch::kLong), torch::zeros({1, 4}, torch::kLong)}), Error);
  EXPECT_THROW(slot.set({torch::zeros({1, 4}, torch::kInt), torch::zeros({1, 3}, torch::kLong)}), Error);
  EXPECT_THROW(slot.set({torch::zeros({4}, torch::kInt), torch::zeros({4}, torch::kLong)}), Error);
  try {
    slot.set({torch::zeros({1, 4}, torch::kInt), at::Tensor()});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("segment_ids and position_ids come together"), std::string::npos);
  }
}

TEST(PackedRowsLayout, SegmentRunsGiveEachExamplesAndThePaddingsOffsets) {
  const at::Tensor segments = torch::tensor({0, 0, 1, 1, 1, -1, 0, 1, 2, 2, 2, 2}, torch::kInt).view({2, 6});
  const nn::SegmentRuns runs(segments);
  EXPECT_TRUE(runs.contiguous());
  const nn::VarlenSequences& own = runs.sequences(6, torch::kCPU);
  EXPECT_TRUE(torch::equal(own.cu_seqlens, torch::tensor({0, 2, 5, 6, 7, 8, 12}, torch::kInt))) << own.cu_seqlens;
  EXPECT_EQ(own.max_length, 4);
  // Padded to 8 (sequence parallelism): row 0's padding grows, row 1 gains a padding run.
  const nn::VarlenSequences& padded = runs.sequences(8, torch::kCPU);
  EXPECT_TRUE(torch::equal(padded.cu_seqlens, torch::tensor({0, 2, 5, 8, 9, 10, 14, 16}, torch::kInt)))
      << padded.cu_seqlens;
  EXPECT_THROW(runs.sequences(5, torch::kCPU), Error);
  // A segment in two runs apart: one segment to a mask, two to runs, so the mask is kept.
  EXPECT_FALSE(nn::SegmentRuns(torch::tensor({0, 1, 0}, torch::kInt).view({1, 3})).contiguous());
}

TEST(PackedRowsLayout, MaskKeepsSegmentsApartAndPaddingReadsItself) {
  const at::Tensor segments = torch::tensor({0, 0, 1, 1, -1}, torch::kInt).unsqueeze(0);
  const at::Tensor mask = nn::segment_causal_mask(segments).squeeze();
  const at::Tensor want = torch::tensor({{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {0, 0, 1, 0, 0}, {0, 0, 1, 1, 0},
                                         {0, 0, 0, 0, 1}}, torch::kBool);
  EXPECT_TRUE(torch::equal(mask, want)) << mask;
}

}  // namespace
