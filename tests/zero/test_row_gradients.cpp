// Row gradients ("sparse_gradients"): a token embedding's lookup gradient
// travels as rows at ZeRO stages 0-2 and trains as the dense gradient does,
// also with different row counts per rank; the rows' CUDA kernel equals ATen's.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "../distributed/distributed_test_context.h"
#include "../engine/dp_groups.h"
#include "../engine/tiny_lm_training.h"
#include "stratum/engine/engine.h"
#include "stratum/models/causal_lm.h"
#include "stratum/nn/embedding.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "stratum/zero/row_scatter_cuda.h"
#endif

using namespace stratum;
using namespace stratum::test::tiny_lm;
using stratum::test::groups_of;
using stratum::test::rel_diff;

// A token embedding's lookup gradient travels as rows (nn/embedding.h),
// untied (the whole gradient) or tied (added to the LM head's reduced dense
// part) with "sparse_gradients": stages 0-2 over 2 and 4 ranks train as
// stage 0 on one rank (which reduces nothing and takes the dense gradient),
// with and without gradient accumulation, and the embedding has a bucket of
// its own. Without the key the gradient stays dense.
TEST(RowGradients, MatchOneRank) {
  const int world = test::context().cpu_world->size();
  if (world < 2) GTEST_SKIP() << "needs 2 or more ranks";
  for (const std::string model : {"tiny-llama", "tiny-gpt2"})
    for (const std::string tied : {"false", "true"})
      for (int gas : {1, 2}) {
        Options ref_opts{model, {{"tie_embeddings", tied}}, 0, gas};
        TrainRun ref = train(ref_opts, groups_of(1));
        for (int stage : {0, 1, 2})
          for (int dp = 2; dp <= world; dp *= 2) {
            Options o = ref_opts;
            o.stage = stage;
            o.top_extra = R"("sparse_gradients": true,)";
            expect_same_training(train(o, dp == world ? test::context().cpu_world : groups_of(dp)), ref, 1e-5,
                                 "rows: " + model + " tied " + tied + " gas " + std::to_string(gas) + " stage " +
                                     std::to_string(stage) + " dp " + std::to_string(dp));
          }
      }
  // Only "sparse_gradients": true hands the lookup's gradient to the strategy
  // (a second sink for the weight is refused while the strategy's is there).
  struct NoSink : nn::RowGradientSink {
    void take_rows(const at::Tensor&, const at::Tensor&, const at::Tensor&) override {}
  } probe;
  for (const bool rows : {false, true}) {
    Options o{"tiny-llama", {{"tie_embeddings", "false"}}, 1};
    if (rows) o.top_extra = R"("sparse_gradients": true,)";
    Config config = Config::from_string(config_json(o), "rows");
    auto model = models::build_model(models::make_model_config("tiny-llama", o.overrides));
    auto engine = initialize(config, model, test::context().cpu_world, c10::Device(c10::kCPU));
    const at::Tensor embedding = model->parameters().front();  // model.embed_tokens.weight
    if (rows) {
      EXPECT_ANY_THROW(nn::register_row_gradient_sink(embedding, &probe)) << "no sink for the embedding";
      const auto& layout = engine.core().strategy().layout();
      const auto& slot = layout.params().front();
      EXPECT_EQ(layout.buckets()[slot.bucket].params.size(), 1u) << "the embedding shares its bucket";
    } else {
      EXPECT_NO_THROW(nn::register_row_gradient_sink(embedding, &probe)) << "dense gradients by default";
      nn::unregister_row_gradient_sink(embedding, &probe);
    }
  }
}

// Ranks may look up different numbers of rows (here sequences of different
// lengths): the exchanged gradient is still the mean of every rank's dense
// one, which an engine on each rank alone (dense gradients) gives.
TEST(RowGradients, UnevenRowCountsAcrossRanks) {
  if (test::context().cpu_world->size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  for (const auto& backend : test::backends())
    for (const std::string tied : {"false", "true"}) {
      const std::vector<std::pair<std::string, std::string>> overrides = {{"tie_embeddings", tied}};
      const auto& world = backend.world;
      if (world->size() < 2) continue;
      const int r = world->rank();
      auto embedding_grad = [&](const std::shared_ptr<distributed::Communicator>& dp) {
        Options o{"tiny-llama", overrides, 0};
        o.top_extra = R"("sparse_gradients": true,)";
        Config config = Config::from_string(config_json(o), "rows");
        torch::manual_seed(42);
        auto engine =
            initialize(config, models::build_model(models::make_model_config("tiny-llama", overrides)), dp, backend.device);
        auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + r);
        const int64_t len = kSeq - 4 * (r % 3);  // 16, 12, 8, 16 tokens
        at::Tensor tokens =
            at::randint(256, {2, len + 1}, gen, at::TensorOptions().dtype(at::kLong)).to(backend.device);
        engine.backward(engine.forward(tokens.narrow(1, 0, len), tokens.narrow(1, 1, len)));
        auto& strategy = engine.core().strategy();
        strategy.wait_gradients();
        const auto& slot = strategy.layout().params().front();
        return strategy.segments().front().grad.narrow(0, slot.offset, slot.numel).clone();
      };
      const at::Tensor exchanged = embedding_grad(world);
      at::Tensor expected = embedding_grad(groups_of(1, world));
      world->all_reduce(expected, distributed::ReduceOp::avg)->wait();
      EXPECT_GT(expected.abs().sum().item<double>(), 0.0) << backend.name << " tied " << tied;
      EXPECT_LE(rel_diff(exchanged.cpu(), expected.cpu()), 1e-6) << backend.name << " tied " << tied;
    }
}

// The exchanged rows' kernel equals ATen's dense embedding gradient, scaled,
// on every window of the flattened weight (whole, one rank's slice starting
// mid-row, one partial row, empty), with repeated ids, for 16-bit and fp32 rows.
TEST(RowGradients, ScatterKernelMatchesAtenOnAGpu) {
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const auto on_gpu = torch::TensorOptions().device(torch::kCUDA);
  const int64_t vocab = 300, hidden = 72, n = 1000;
  const at::Tensor ids = torch::randint(40, {n}, on_gpu.dtype(torch::kLong)) * 7;  // ~25 repeats an id
  for (const auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    const at::Tensor rows = torch::randn({n, hidden}, on_gpu).to(dtype);
    const at::Tensor dense = at::embedding_dense_backward(rows.to(torch::kFloat), ids, vocab, -1, false).reshape({-1});
    const auto [sorted, order] = at::sort(ids, /*stable=*/true, 0, false);
    const auto kind = dtype == torch::kBFloat16 ? zero::cuda::Dtype::bf16
                      : dtype == torch::kHalf   ? zero::cuda::Dtype::f16
                                                : zero::cuda::Dtype::f32;
    for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
             {0, vocab * hidden}, {vocab * hidden / 2 + 5, vocab * hidden}, {7 * hidden + 3, 7 * hidden + 50}, {9, 9}}) {
      at::Tensor dest = torch::ones({end - begin + 1}, on_gpu);  // one more: nothing written past end
      ASSERT_EQ(zero::cuda::launch_add_sorted_rows(sorted.const_data_ptr<int64_t>(), order.const_data_ptr<int64_t>(), n,
                                                   rows.const_data_ptr(), kind, hidden, 0.5f, dest.data_ptr<float>(),
                                                   begin, end, c10::cuda::getCurrentCUDAStream().stream()),
                cudaSuccess);
      const at::Tensor expected = torch::cat({dense.narrow(0, begin, end - begin) * 0.5 + 1, torch::ones({1}, on_gpu)});
      EXPECT_LE((dest - expected).abs().max().item<double>(), 1e-4) << dtype << " [" << begin << ", " << end << ")";
    }
  }
#else
  GTEST_SKIP() << "built without the CUDA kernels";
#endif
}
