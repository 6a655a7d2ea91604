// nn::checkpoint against the same computation without it: GPT-2 blocks with
// dropout (so the recomputation must replay the forward's random masks), the
// caller's RNG stream afterwards, host offload of the input, post-accumulate-grad
// hooks in the nested backward, the plain path, graph size and misuse errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>  // Node, for walking the graph
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/models/causal_lm.h"
#include "stratum/nn/checkpoint.h"

using namespace stratum;

namespace {

using Layer = std::function<at::Tensor(const at::Tensor&)>;

// tiny-gpt2 (2 blocks, hidden 64) with dropout on embedding, attention weights and residuals.
std::shared_ptr<models::CausalLMImpl> tiny_gpt2(double dropout = 0.3) {
  at::manual_seed(0);
  auto model = models::build_model(models::make_model_config("tiny-gpt2", {{"dropout", std::to_string(dropout)}}));
  model->train();
  return model;
}

Layer layer_fn(const std::shared_ptr<models::CausalLMImpl>& model, size_t i) {
  auto layer = model->layer_ptr(i);
  return [layer](const at::Tensor& x) { return layer->forward(x); };
}

struct Step {
  at::Tensor loss, input_grad, next_rand;
  std::vector<at::Tensor> grads;
};

// Seeded forward + backward of the whole model, its transformer blocks
// checkpointed or not; input_grad is the gradient of the embedding output.
Step train_step(const std::shared_ptr<models::CausalLMImpl>& model, bool use_checkpoint, bool offload = false) {
  const at::Device device = model->parameters().front().device();
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::manual_seed(7);
  const at::Tensor tokens = at::randint(256, {2, 16}, opts);
  const at::Tensor targets = at::randint(256, {2, 16}, opts);
  for (auto& p : model->parameters()) p.mutable_grad().reset();

  at::manual_seed(123);
  at::Tensor embedded = model->layer(0).forward(tokens);
  embedded.retain_grad();
  at::Tensor h = embedded;
  for (size_t i = 1; i + 2 < model->size(); ++i)
    h = use_checkpoint ? nn::checkpoint(layer_fn(model, i), h, offload) : model->layer(i).forward(h);
  for (size_t i = model->size() - 2; i < model->size(); ++i) h = model->layer(i).forward(h);
  Step s;
  s.loss = models::causal_lm_loss(h, targets).detach();
  models::causal_lm_loss(h, targets).backward();
  s.input_grad = embedded.grad();
  for (auto& p : model->parameters()) s.grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  s.next_rand = at::rand({4}, at::TensorOptions().device(device));
  return s;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

void expect_same_step(const Step& a, const Step& b) {
  // Not bit-equal on a GPU: under no-grad SDPA may take another kernel.
  EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), 1e-6 * std::abs(a.loss.item<double>()));
  ASSERT_TRUE(a.input_grad.defined() && b.input_grad.defined());
  EXPECT_LE(max_diff(a.input_grad, b.input_grad), 1e-6);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_TRUE(a.grads[i].defined() && b.grads[i].defined()) << "parameter " << i;
    EXPECT_LE(max_diff(a.grads[i], b.grads[i]), 1e-6) << "parameter " << i;
  }
}

// Counts, per parameter, how often autograd finished accumulating its gradient.
class CountingHook : public torch::autograd::PostAccumulateGradHook {
 public:
  CountingHook(std::map<size_t, int>* counts, size_t index) : counts_(counts), index_(index) {}
  void operator()(const torch::autograd::Variable& p) override {
    EXPECT_TRUE(p.grad().defined());
    ++(*counts_)[index_];
  }

 private:
  std::map<size_t, int>* counts_;
  size_t index_;
};

// Autograd nodes reachable from t's grad_fn (each node holds what it saved).
size_t graph_nodes(const at::Tensor& t) {
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{t.grad_fn().get()};
  while (!todo.empty()) {
    auto* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  return seen.size();
}

}  // namespace

TEST(Checkpoint, DropoutActuallyDrawsNewMasksEachCall) {
  // Without the RNG replay the recomputation would see other masks than the forward did.
  auto model = tiny_gpt2();
  const at::Tensor x = at::randn({2, 16, 64});
  EXPECT_FALSE(at::equal(model->layer(1).forward(x), model->layer(1).forward(x)));
}

TEST(Checkpoint, GPT2BlocksWithDropoutMatchWithoutCheckpoint) {
  auto model = tiny_gpt2();
  const Step plain = train_step(model, false);
  const Step ckpt = train_step(model, true);
  expect_same_step(plain, ckpt);
}

TEST(Checkpoint, CallerRngStreamUnchanged) {
  auto model = tiny_gpt2();
  const Step plain = train_step(model, false);
  const Step ckpt = train_step(model, true);
  EXPECT_TRUE(at::equal(plain.next_rand, ckpt.next_rand)) << plain.next_rand << ckpt.next_rand;
}

TEST(Checkpoint, OffloadedInputGivesSameGradients) {
  auto model = tiny_gpt2();
  expect_same_step(train_step(model, false), train_step(model, true, /*offload=*/true));
}

// The host copy goes down in pieces (the caching host allocator rounds each
// block to a power of two) and comes back whole, the last piece short.
TEST(Checkpoint, HostPiecesHoldTheInputExactly) {
  const at::Tensor x = at::randn({3, 5, 7}).to(at::kBFloat16);  // 105 elements, 210 bytes
  const std::vector<at::Tensor> pieces = stratum::nn::to_host_pieces(x, 64);
  ASSERT_EQ(pieces.size(), 4u);  // 32 + 32 + 32 + 9 elements
  EXPECT_EQ(pieces.back().numel(), 9);
  for (const at::Tensor& p : pieces) EXPECT_NE(p.data_ptr(), x.data_ptr());  // copies, not views
  EXPECT_TRUE(at::equal(stratum::nn::from_host_pieces(pieces, x.sizes(), at::kCPU), x));
  EXPECT_THROW(stratum::nn::from_host_pieces(pieces, {3, 5, 8}, at::kCPU), stratum::Error);
  EXPECT_THROW(stratum::nn::to_host_pieces(x, 1), stratum::Error);
  if (at::hasCUDA()) {
    const at::Tensor g = x.to(at::kCUDA);
    const std::vector<at::Tensor> host = stratum::nn::to_host_pieces(g, 64);
    EXPECT_TRUE(host.front().is_pinned());
    EXPECT_TRUE(at::equal(stratum::nn::from_host_pieces(host, g.sizes(), g.device()), g));
  }
}

TEST(Checkpoint, CudaOffloadAndCudaRngReplay) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA";
  auto model = tiny_gpt2();
  model->to(at::Device(at::kCUDA, 0));
  const Step plain = train_step(model, false);
  for (bool offload : {false, true}) {
    const Step ckpt = train_step(model, true, offload);
    expect_same_step(plain, ckpt);
    EXPECT_TRUE(at::equal(plain.next_rand, ckpt.next_rand)) << "offload " << offload;
  }
}

TEST(Checkpoint, PostAccumulateGradHooksFireOncePerParameter) {
  auto model = tiny_gpt2();
  std::map<size_t, int> counts;
  auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(params[i], std::make_unique<CountingHook>(&counts, i));
  // Only the checkpointed block runs under autograd: its hooks can fire only in the nested backward.
  auto block = model->layer_ptr(1);
  std::set<const void*> block_params;
  for (const auto& p : block->parameters()) block_params.insert(p.unsafeGetTensorImpl());
  const at::Tensor x = at::randn({2, 16, 64}).requires_grad_(true);
  nn::checkpoint(layer_fn(model, 1), x).square().sum().backward();
  ASSERT_FALSE(block_params.empty());
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(counts[i], block_params.count(params[i].unsafeGetTensorImpl()) ? 1 : 0) << "parameter " << i;
  for (auto& p : params) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

TEST(Checkpoint, PlainCallWithoutGradOrWithoutInputGrad) {
  auto model = tiny_gpt2();
  const Layer fn = layer_fn(model, 1);
  const at::Tensor x = at::randn({2, 16, 64});
  at::manual_seed(5);
  const at::Tensor expected = fn(x).detach();
  {
    c10::AutoGradMode no_grad(false);
    at::manual_seed(5);
    const at::Tensor out = nn::checkpoint(fn, x.clone().requires_grad_(true));
    EXPECT_FALSE(out.requires_grad());
    EXPECT_EQ(out.grad_fn(), nullptr);
    EXPECT_TRUE(at::equal(out, expected));
  }
  // Input without grad, no parameters: nothing to record.
  const at::Tensor y = nn::checkpoint([](const at::Tensor& t) { return at::gelu(t) * 2; }, x);
  EXPECT_EQ(y.grad_fn(), nullptr);
  // Input without grad, parameters with grad: fn's own graph (no checkpoint node), so parameters still train.
  at::manual_seed(5);
  const at::Tensor z = nn::checkpoint(fn, x);
  ASSERT_NE(z.grad_fn(), nullptr);
  EXPECT_EQ(z.grad_fn()->name().find("CheckpointFunction"), std::string::npos) << z.grad_fn()->name();
  EXPECT_TRUE(at::equal(z.detach(), expected));
  // With grad: one checkpoint node.
  const at::Tensor w = nn::checkpoint(fn, x.clone().requires_grad_(true));
  EXPECT_NE(w.grad_fn()->name().find("CheckpointFunction"), std::string::npos) << w.grad_fn()->name();
}

TEST(Checkpoint, ChainKeepsOnlyOneNodePerLayer) {
  auto model = tiny_gpt2(0.0);
  const int n = 4;
  const at::Tensor x = at::randn({2, 16, 64}).requires_grad_(true);
  at::Tensor plain = x, ckpt = x;
  for (int i = 0; i < n; ++i) {
    plain = model->layer(1).forward(plain);
    ckpt = nn::checkpoint(layer_fn(model, 1), ckpt);
  }
  // Checkpointed: n checkpoint nodes and x's AccumulateGrad; the blocks' graphs (and activations) are gone.
  EXPECT_EQ(graph_nodes(ckpt), static_cast<size_t>(n) + 1);
  EXPECT_GT(graph_nodes(plain), static_cast<size_t>(10 * n));
  EXPECT_LE(max_diff(plain, ckpt), 1e-6);
}

TEST(Checkpoint, MisuseIsNamed) {
  const at::Tensor x = at::randn({3}).requires_grad_(true);
  try {
    nn::checkpoint([](const at::Tensor&) { return at::Tensor(); }, x);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("undefined tensor"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::checkpoint(Layer(), x), Error);
  // A function that is not the same in the recomputation is caught in backward
  // (the engine rethrows backward's own exception, type included).
  auto calls = std::make_shared<int>(0);
  const at::Tensor y = nn::checkpoint([calls](const at::Tensor& t) { return ++*calls == 1 ? t * 2 : t.repeat({2}); }, x);
  try {
    y.sum().backward();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint: fn returned shape [6]"), std::string::npos) << e.what();
  }
  // A detached output cannot be backpropagated through.
  const at::Tensor z = nn::checkpoint([](const at::Tensor& t) { return t.detach() * 2; }, x);
  try {
    z.sum().backward();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not require grad"), std::string::npos) << e.what();
  }
}
