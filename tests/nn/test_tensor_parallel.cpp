// Tensor parallelism's paired functions and sharded layers against their
// definitions on whole tensors, over every rank of the job (CTest runs it at
// 1, 2 and 4 ranks) as one tensor-parallel group: MPI on the CPU and, on GPU
// machines, NCCL. Every rank builds the same whole tensors from one seed and
// checks its shard of each result and gradient.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "../distributed/distributed_test_context.h"
#include "stratum/core/error.h"
#include "stratum/nn/tensor_parallel/layers.h"
#include "stratum/nn/tensor_parallel/random.h"

using namespace stratum;
using namespace stratum::nn::tp;
using stratum::test::backends;

namespace {

at::Tensor seeded(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype, c10::Device device) {
  at::manual_seed(seed);
  return at::randn(shape, at::TensorOptions().dtype(at::kDouble)).to(dtype).to(device);
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = (got.cpu().to(at::kDouble) - want.cpu().to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(err, tol) << what << ": max abs error " << err;
}

at::Tensor chunk(const at::Tensor& t, int64_t dim, const TensorParallel& tp) {
  return chunk_along(t, dim, tp.rank(), tp.size());
}

// Rank r's tensor of shape `shape`, and the sum over ranks of them all.
std::pair<at::Tensor, at::Tensor> per_rank(std::vector<int64_t> shape, uint64_t seed, const TensorParallel& tp,
                                           c10::Device device) {
  at::Tensor sum;
  at::Tensor mine;
  for (int64_t r = 0; r < tp.size(); ++r) {
    at::Tensor t = seeded(shape, seed + r, at::kDouble, device);
    sum = sum.defined() ? sum + t : t;
    if (r == tp.rank()) mine = t;
  }
  return {mine, sum};
}

}  // namespace

TEST(TensorParallelMappings, EachPairMatchesItsDefinition) {
  for (const auto& b : backends()) {
    TensorParallel tp{b.world, false};
    const int64_t t = tp.size();
    const std::vector<int64_t> shape = {2, 4 * t, 3 * t};
    const at::Tensor whole = seeded(shape, 1, at::kDouble, b.device);
    const auto [g_mine, g_sum] = per_rank(shape, 100, tp, b.device);
    auto run = [&](auto fn, const at::Tensor& input, const at::Tensor& grad) {
      at::Tensor x = input.clone().requires_grad_(true);
      at::Tensor y = fn(x, tp);
      y.backward(grad);
      return std::make_pair(y.detach(), x.grad());
    };
    {  // identity | all-reduce
      auto [y, gx] = run(copy_to_region, whole, g_mine);
      expect_close(y, whole, 0, b.name + " copy_to_region forward");
      expect_close(gx, g_sum, 1e-12, b.name + " copy_to_region backward");
    }
    {  // all-reduce | identity
      const auto [x_mine, x_sum] = per_rank(shape, 200, tp, b.device);
      auto [y, gx] = run(reduce_from_region, x_mine, g_mine);
      expect_close(y, x_sum, 1e-12, b.name + " reduce_from_region forward");
      expect_close(gx, g_mine, 0, b.name + " reduce_from_region backward");
    }
    {  // own chunk | all-gather, last dimension
      const at::Tensor g_whole = seeded(shape, 300, at::kDouble, b.device);
      auto [y, gx] = run(scatter_to_last, whole, chunk(g_whole, -1, tp));
      expect_close(y, chunk(whole, -1, tp), 0, b.name + " scatter_to_last forward");
      expect_close(gx, g_whole, 0, b.name + " scatter_to_last backward");
    }
    {  // all-gather | own chunk, last dimension
      auto [y, gx] = run(gather_from_last, chunk(whole, -1, tp), g_sum);
      expect_close(y, whole, 0, b.name + " gather_from_last forward");
      expect_close(gx, chunk(g_sum, -1, tp), 0, b.name + " gather_from_last backward");
    }
    {  // own chunk | all-gather, sequence
      const at::Tensor g_whole = seeded(shape, 400, at::kDouble, b.device);
      auto [y, gx] = run(scatter_to_sequence, whole, chunk(g_whole, 1, tp));
      expect_close(y, chunk(whole, 1, tp), 0, b.name + " scatter_to_sequence forward");
      expect_close(gx, g_whole, 0, b.name + " scatter_to_sequence backward");
    }
    {  // all-gather | reduce-scatter, sequence
      auto [y, gx] = run(gather_from_sequence, chunk(whole, 1, tp), g_mine);
      expect_close(y, whole, 0, b.name + " gather_from_sequence forward");
      expect_close(gx, chunk(g_sum, 1, tp), 1e-12, b.name + " gather_from_sequence backward");
    }
    {  // reduce-scatter | all-gather, sequence
      const auto [x_mine, x_sum] = per_rank(shape, 500, tp, b.device);
      const at::Tensor g_whole = seeded(shape, 600, at::kDouble, b.device);
      auto [y, gx] = run(reduce_scatter_to_sequence, x_mine, chunk(g_whole, 1, tp));
      expect_close(y, chunk(x_sum, 1, tp), 1e-12, b.name + " reduce_scatter_to_sequence forward");
      expect_close(gx, g_whole, 0, b.name + " reduce_scatter_to_sequence backward");
    }
  }
}

TEST(TensorParallelMappings, SequenceTheGroupDoesNotDivideNamesTheNumbers) {
  for (const auto& b : backends()) {
    TensorParallel tp{b.world, true};
    if (tp.size() < 2) GTEST_SKIP() << "needs 2 ranks or more";
    const at::Tensor x = at::zeros({2, 2 * tp.size() + 1, 4}, at::TensorOptions().device(b.device));
    try {
      scatter_to_sequence(x, tp);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("of size " + std::to_string(2 * tp.size() + 1)), std::string::npos) << m;
      EXPECT_NE(m.find("tensor-parallel size " + std::to_string(tp.size())), std::string::npos) << m;
    }
  }
}

// gelu(x W1ᵀ + b1) W2ᵀ + b2 as Megatron's MLP: W1 split by rows, W2 by columns.
TEST(TensorParallelLayers, ColumnThenRowMatchesTheWholeMLP) {
  for (const auto& b : backends()) {
    for (bool sequence_parallel : {false, true}) {
      TensorParallel tp{b.world, sequence_parallel};
      const int64_t t = tp.size(), B = 2, T = 2 * t, C = 6, F = 4 * t;
      const auto dev = b.device;
      at::Tensor x = seeded({B, T, C}, 1, at::kDouble, dev), w1 = seeded({F, C}, 2, at::kDouble, dev),
                 b1 = seeded({F}, 3, at::kDouble, dev), w2 = seeded({C, F}, 4, at::kDouble, dev),
                 b2 = seeded({C}, 5, at::kDouble, dev), g = seeded({B, T, C}, 6, at::kDouble, dev);
      // The whole MLP.
      std::vector<at::Tensor> whole = {x, w1, b1, w2, b2};
      for (auto& p : whole) p = p.clone().requires_grad_(true);
      at::Tensor y = at::linear(at::gelu(at::linear(whole[0], whole[1], whole[2]), "tanh"), whole[3], whole[4]);
      y.backward(g);
      // The shards.
      const std::string what = b.name + (sequence_parallel ? " with" : " without") + " sequence parallelism";
      at::Tensor xs = (sequence_parallel ? chunk(x, 1, tp) : x).clone().requires_grad_(true);
      at::Tensor w1s = chunk(w1, 0, tp).requires_grad_(true), b1s = chunk(b1, 0, tp).requires_grad_(true),
                 w2s = chunk(w2, 1, tp).requires_grad_(true), b2s = b2.clone().requires_grad_(true);
      at::Tensor ys =
          row_parallel_linear(at::gelu(column_parallel_linear(xs, w1s, b1s, tp), "tanh"), w2s, b2s, tp);
      ys.backward(sequence_parallel ? chunk(g, 1, tp) : g);
      expect_close(ys, sequence_parallel ? chunk(y.detach(), 1, tp) : y.detach(), 1e-12, what + ": output");
      expect_close(xs.grad(), sequence_parallel ? chunk(whole[0].grad(), 1, tp) : whole[0].grad(), 1e-12,
                   what + ": input gradient");
      expect_close(w1s.grad(), chunk(whole[1].grad(), 0, tp), 1e-12, what + ": W1 gradient");
      expect_close(b1s.grad(), chunk(whole[2].grad(), 0, tp), 1e-12, what + ": b1 gradient");
      expect_close(w2s.grad(), chunk(whole[3].grad(), 1, tp), 1e-12, what + ": W2 gradient");
      // Under sequence parallelism each rank's bias gradient covers its slice of the sequence.
      at::Tensor gb2 = b2s.grad().clone();
      if (sequence_parallel) b.world->all_reduce(gb2, distributed::ReduceOp::sum)->wait();
      expect_close(gb2, whole[4].grad(), 1e-12, what + ": b2 gradient");
    }
  }
}

TEST(TensorParallelLayers, VocabShardsPadToMultiplesOf64TimesTheSize) {
  EXPECT_EQ(padded_vocab_size(50257, 1), 50257);
  EXPECT_EQ(padded_vocab_size(50257, 2), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 8), 50688);
  EXPECT_EQ(padded_vocab_size(128256, 4), 128256);
  const VocabShard last = vocab_shard(50257, 2, 1);
  EXPECT_EQ(last.start, 25152);
  EXPECT_EQ(last.rows, 25152);
  EXPECT_EQ(last.valid, 50257 - 25152);
  EXPECT_EQ(vocab_shard(100, 4, 3).valid, 0);  // a shard of padding only
}

// A vocabulary no group size divides: the padded columns hold large values
// that must not count.
TEST(TensorParallelLayers, VocabParallelCrossEntropyMatchesATen) {
  constexpr int64_t V = 203, N = 12, kIgnore = -100;
  for (const auto& b : backends()) {
    TensorParallel tp{b.world, false};
    const VocabShard shard = vocab_shard(V, tp.size(), tp.rank());
    const at::Tensor logits = seeded({N, V}, 7, at::kFloat, b.device) * 3;
    at::manual_seed(8);
    at::Tensor targets = at::randint(V, {N}, at::TensorOptions().dtype(at::kLong)).to(b.device);
    targets[3] = kIgnore;
    targets[9] = kIgnore;
    targets[0] = V - 1;  // the last real token
    at::Tensor whole = logits.clone().requires_grad_(true);
    at::Tensor want = at::cross_entropy_loss(whole, targets, {}, at::Reduction::Mean, kIgnore);
    want.backward();
    at::Tensor local = at::full({N, shard.rows}, 100.0f, logits.options());
    if (shard.valid > 0) local.narrow(1, 0, shard.valid).copy_(logits.narrow(1, shard.start, shard.valid));
    for (int64_t block_rows : {int64_t{5}, int64_t{4096}}) {
      at::Tensor mine = local.clone().requires_grad_(true);
      at::Tensor loss = vocab_parallel_cross_entropy(mine, targets, shard, tp, kIgnore, block_rows);
      loss.backward();
      const std::string what = b.name + " block_rows " + std::to_string(block_rows);
      EXPECT_TRUE(at::equal(mine.detach(), local)) << what << ": the logits were written to";
      expect_close(loss, want.detach(), 1e-6, what + ": loss");
      if (shard.valid > 0)
        expect_close(mine.grad().narrow(1, 0, shard.valid), whole.grad().narrow(1, shard.start, shard.valid), 1e-6,
                     what + ": gradient");
      if (shard.valid < shard.rows)
        EXPECT_EQ(mine.grad().narrow(1, shard.valid, shard.rows - shard.valid).abs().max().item<float>(), 0.0f)
            << what << ": padded columns got a gradient";
    }
  }
}

TEST(TensorParallelLayers, VocabParallelEmbeddingMatchesTheWholeTable) {
  constexpr int64_t V = 203, H = 8;
  for (const auto& b : backends()) {
    for (bool sequence_parallel : {false, true}) {
      TensorParallel tp{b.world, sequence_parallel};
      const VocabShard shard = vocab_shard(V, tp.size(), tp.rank());
      const at::Tensor table = seeded({V, H}, 9, at::kDouble, b.device);
      at::manual_seed(10);
      const at::Tensor ids = at::randint(V, {2, 2 * tp.size()}, at::TensorOptions().dtype(at::kLong)).to(b.device);
      const at::Tensor g = seeded({2, 2 * tp.size(), H}, 11, at::kDouble, b.device);
      at::Tensor whole = table.clone().requires_grad_(true);
      at::Tensor want = at::embedding(whole, ids);
      want.backward(g);
      at::Tensor local = at::zeros({shard.rows, H}, table.options());
      if (shard.valid > 0) local.narrow(0, 0, shard.valid).copy_(table.narrow(0, shard.start, shard.valid));
      local.requires_grad_(true);
      at::Tensor got = vocab_parallel_embedding(ids, local, shard, tp);
      got.backward(sequence_parallel ? chunk(g, 1, tp) : g);
      const std::string what = b.name + (sequence_parallel ? " with" : " without") + " sequence parallelism";
      expect_close(got, sequence_parallel ? chunk(want.detach(), 1, tp) : want.detach(), 1e-12, what + ": rows");
      // Under sequence parallelism too: the reduce-scatter's backward gathers every token's gradient.
      if (shard.valid > 0)
        expect_close(local.grad().narrow(0, 0, shard.valid), whole.grad().narrow(0, shard.start, shard.valid), 1e-12,
                     what + ": gradient");
    }
  }
}

// Dropout's random streams (tensor_parallel/random.h): inside a split region
// each rank draws its own numbers, outside every rank the same; the default
// generators agree across the group afterwards; the same generator state
// replays the region (as activation checkpointing restores it); and outside
// the regions under sequence parallelism each rank keeps its slice of the
// whole sequence's mask.
TEST(TensorParallelRandom, SplitRegionsDrawPerRankAndReplicatedOnesAlike) {
  for (const auto& b : backends()) {
    TensorParallel tp{b.world, false};
    const int64_t t = tp.size();
    const auto opts = at::TensorOptions().device(b.device);
    auto gather = [&](const at::Tensor& x) { return all_gather_along(x.unsqueeze(0), 0, *b.world); };
    at::manual_seed(7);
    const at::Tensor inside = with_rank_stream(tp, b.device, [&] { return at::rand({64}, opts); });
    const at::Tensor outside = at::rand({64}, opts);
    const at::Tensor all_inside = gather(inside), all_outside = gather(outside);
    for (int64_t r = 1; r < t; ++r) {
      EXPECT_FALSE(at::equal(all_inside[r], all_inside[0])) << b.name << ": rank " << r << " drew rank 0's numbers";
      EXPECT_TRUE(at::equal(all_outside[r], all_outside[0])) << b.name << ": rank " << r << " left the group's stream";
    }
    // Replayed from the same state: the same numbers inside and after.
    at::manual_seed(7);
    const at::Tensor again = with_rank_stream(tp, b.device, [&] { return at::rand({64}, opts); });
    EXPECT_TRUE(at::equal(again, inside)) << b.name;
    EXPECT_TRUE(at::equal(at::rand({64}, opts), outside)) << b.name;

    TensorParallel sp{b.world, true};
    const std::vector<int64_t> shape = {2, 4 * t, 8};
    at::manual_seed(11);
    const at::Tensor whole_mask = at::dropout(at::ones(shape, opts), 0.25, /*train=*/true);
    at::manual_seed(11);
    const at::Tensor mine = dropout_outside_region(at::ones({2, 4, 8}, opts), 0.25, sp);
    expect_close(mine, whole_mask.narrow(kSequenceDim, 4 * sp.rank(), 4), 0.0, b.name + ": sequence-parallel dropout");
  }
}
