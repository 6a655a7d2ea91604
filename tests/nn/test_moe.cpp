// The mixture-of-experts layer against references written here from the
// definitions: the router (softmax / sigmoid, normalised top-k, bias on the
// choice only, group-limited routing), the balancing terms (auxiliary loss
// global and per sequence, z-loss) and their gradients' scale, the grouped
// GEMM against one GEMM per row, the whole layer against a token-by-token
// loop (dropless and with capacity dropping), the expert bias update.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/nn/linear.h"
#include "stratum/nn/lora_linear.h"
#include "stratum/nn/moe/grouped_linear.h"
#include "stratum/nn/moe/load_balancing.h"
#include "stratum/nn/moe/router.h"
#include "stratum/nn/moe/sparse_moe.h"
#include "stratum/quant/nf4.h"

using namespace stratum;
using namespace stratum::nn::moe;

namespace {

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Token t's top-k experts by `choice` (ties: lower index), as a list.
std::vector<int64_t> top_k_of(const at::Tensor& choice_row, int64_t k) {
  std::vector<int64_t> idx(choice_row.size(0));
  std::iota(idx.begin(), idx.end(), 0);
  auto acc = choice_row.accessor<float, 1>();
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return acc[a] > acc[b]; });
  idx.resize(k);
  return idx;
}

}  // namespace

TEST(MoERouter, SoftmaxTopKNormalisedMatchesItsDefinition) {
  torch::manual_seed(0);
  const at::Tensor logits = torch::randn({9, 6});
  RouterOptions o;
  o.num_experts = 6;
  o.top_k = 2;
  const Routing r = route(logits, {}, o);
  const at::Tensor p = torch::softmax(logits, -1);
  for (int64_t t = 0; t < 9; ++t) {
    const auto chosen = top_k_of(p[t], 2);
    const double sum = p[t][chosen[0]].item<double>() + p[t][chosen[1]].item<double>();
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(r.experts[t][j].item<int64_t>(), chosen[j]);
      EXPECT_NEAR(r.weights[t][j].item<double>(), p[t][chosen[j]].item<double>() / sum, 1e-6);
    }
  }
  o.normalize_top_k = false;
  o.scaling = 2.5;
  const Routing raw = route(logits, {}, o);
  EXPECT_LT(max_diff(raw.weights, p.gather(1, raw.experts) * 2.5), 1e-6);
}

TEST(MoERouter, SigmoidBiasMovesTheChoiceNotTheWeights) {
  torch::manual_seed(1);
  const at::Tensor logits = torch::randn({7, 8});
  RouterOptions o;
  o.num_experts = 8;
  o.top_k = 3;
  o.score = ScoreFunction::sigmoid;
  const at::Tensor bias = torch::linspace(-1, 1, 8);
  const Routing r = route(logits, bias, o);
  const at::Tensor s = torch::sigmoid(logits);
  for (int64_t t = 0; t < 7; ++t) {
    const auto chosen = top_k_of(s[t] + bias, 3);
    double sum = 0;
    for (int64_t e : chosen) sum += s[t][e].item<double>();
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(r.experts[t][j].item<int64_t>(), chosen[j]);
      EXPECT_NEAR(r.weights[t][j].item<double>(), s[t][chosen[j]].item<double>() / sum, 1e-6);
    }
  }
}

TEST(MoERouter, GroupLimitedRoutingPicksOnlyFromTheBestGroups) {
  torch::manual_seed(2);
  const at::Tensor logits = torch::randn({11, 12});
  RouterOptions o;
  o.num_experts = 12;
  o.top_k = 3;
  o.score = ScoreFunction::sigmoid;
  o.groups = 4;      // 3 experts a group
  o.top_groups = 2;  // a token chooses within its 2 best
  const Routing r = route(logits, {}, o);
  const at::Tensor s = torch::sigmoid(logits);
  for (int64_t t = 0; t < 11; ++t) {
    std::vector<std::pair<double, int64_t>> groups;
    for (int64_t g = 0; g < 4; ++g) {
      std::vector<double> v;
      for (int64_t i = 0; i < 3; ++i) v.push_back(s[t][g * 3 + i].item<double>());
      std::sort(v.rbegin(), v.rend());
      groups.push_back({v[0] + v[1], g});
    }
    std::stable_sort(groups.begin(), groups.end(), [](auto& a, auto& b) { return a.first > b.first; });
    at::Tensor masked = s[t].clone();
    for (int64_t g = 0; g < 4; ++g)
      if (g != groups[0].second && g != groups[1].second) masked.narrow(0, g * 3, 3).fill_(-INFINITY);
    const auto chosen = top_k_of(masked, 3);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(r.experts[t][j].item<int64_t>(), chosen[j]) << "token " << t;
  }
}

TEST(MoERouter, BadOptionsAreNamed) {
  RouterOptions o;
  o.num_experts = 4;
  o.top_k = 5;
  try {
    check(o);
    ADD_FAILURE() << "top_k > experts accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_k 5 must be between 1 and num_experts (4)"), std::string::npos) << e.what();
  }
  o.top_k = 2;
  o.groups = 3;
  EXPECT_THROW(check(o), Error);
}

TEST(MoEBalancing, AuxLossMatchesItsDefinitionAndIsOneWhenEven) {
  torch::manual_seed(3);
  const int64_t T = 10, E = 5, k = 2;
  const at::Tensor scores = torch::softmax(torch::randn({T, E}), -1);
  const at::Tensor experts = std::get<1>(scores.topk(k, -1));
  double want = 0;
  for (int64_t e = 0; e < E; ++e) {
    const double c = (experts == e).sum().item<double>();
    want += c * scores.select(1, e).sum().item<double>();
  }
  want *= static_cast<double>(E) / (k * T * T);
  EXPECT_NEAR(aux_loss(scores, experts, E, false).item<double>(), want, 1e-6);
  // An even router: every expert k T / E tokens, every score 1 / E.
  const at::Tensor even_scores = torch::full({T, E}, 1.0 / E);
  const at::Tensor even_experts = torch::arange(T * k).remainder(E).view({T, k});
  EXPECT_NEAR(aux_loss(even_scores, even_experts, E, false).item<double>(), 1.0, 1e-6);
}

TEST(MoEBalancing, SequenceAuxLossIsTheMeanOfEachSequencesLoss) {
  torch::manual_seed(4);
  const int64_t S = 3, L = 6, E = 4, k = 2;
  const at::Tensor scores = torch::sigmoid(torch::randn({S * L, E}));
  const at::Tensor experts = std::get<1>(scores.topk(k, -1));
  double want = 0;
  for (int64_t s = 0; s < S; ++s) {
    const at::Tensor sc = scores.narrow(0, s * L, L), ex = experts.narrow(0, s * L, L);
    const at::Tensor norm = sc / sc.sum(-1, true);
    double loss = 0;
    for (int64_t e = 0; e < E; ++e) loss += (ex == e).sum().item<double>() * norm.select(1, e).sum().item<double>();
    want += loss * E / (k * L * L);
  }
  want /= S;
  EXPECT_NEAR(sequence_aux_loss(scores, experts, E, S, true).item<double>(), want, 1e-6);
  EXPECT_THROW(sequence_aux_loss(scores, experts, E, 4, true), Error);  // 18 tokens are not 4 sequences
}

TEST(MoEBalancing, ZLossIsTheMeanSquaredLogSumExp) {
  torch::manual_seed(5);
  const at::Tensor logits = torch::randn({6, 4}) * 3;
  double want = 0;
  for (int64_t t = 0; t < 6; ++t) {
    double s = 0;
    for (int64_t e = 0; e < 4; ++e) s += std::exp(logits[t][e].item<double>());
    want += std::log(s) * std::log(s);
  }
  EXPECT_NEAR(z_loss(logits).item<double>(), want / 6, 1e-5);
}

// Sequence parallelism's split: 3 sequences of 8 tokens cut into 2 slices of
// 4 (rank r holds tokens [4 r, 4 r + 4) of every sequence). Each slice's
// shares, from the whole micro-batch's counts, sum to the whole terms, and the
// slices' gradients of the scores and logits are the whole terms' gradients.
TEST(MoEBalancing, SharesOfASequenceSplitSumToTheWholeTermsAndTheirGradients) {
  torch::manual_seed(6);
  const int64_t S = 3, L = 8, n = 2, E = 4, k = 2;
  const at::Tensor logits = (torch::randn({S * L, E}) * 2).requires_grad_();
  const at::Tensor scores = torch::softmax(logits, -1);
  const at::Tensor experts = std::get<1>(scores.detach().topk(k, -1));
  const at::Tensor whole = aux_loss(scores, experts, E, false) + sequence_aux_loss(scores, experts, E, S, false) +
                           z_loss(logits);
  const at::Tensor want = torch::autograd::grad({whole}, {logits})[0];

  const at::Tensor counts = tokens_per_expert(experts, E);
  const at::Tensor per_sequence = tokens_per_sequence_and_expert(experts, E, S);
  EXPECT_TRUE(per_sequence.sum(0).equal(counts));
  double sum = 0;
  at::Tensor got = torch::zeros_like(logits);
  for (int64_t r = 0; r < n; ++r) {
    // The slice's rows: tokens [r L / n, (r + 1) L / n) of each sequence, in sequence order.
    const at::Tensor rows = (torch::arange(S).unsqueeze(1) * L + r * (L / n) + torch::arange(L / n)).reshape({-1});
    const at::Tensor part = logits.detach().index_select(0, rows).requires_grad_();
    const at::Tensor part_scores = torch::softmax(part, -1);
    const at::Tensor share = aux_loss_share(part_scores, counts, S * L, k, false) +
                             sequence_aux_loss_share(part_scores, per_sequence, L, k, false) +
                             z_loss_share(part, S * L);
    sum += share.item<double>();
    got.index_add_(0, rows, torch::autograd::grad({share}, {part})[0]);
  }
  EXPECT_NEAR(sum, whole.item<double>(), 1e-6 * whole.item<double>());
  EXPECT_LE((got - want).abs().max().item<double>(), 1e-6 * want.abs().max().item<double>());
  EXPECT_THROW(aux_loss_share(scores, counts, S * L - 1, k, false), Error);  // fewer tokens in all than here
  EXPECT_THROW(sequence_aux_loss_share(scores, per_sequence.narrow(1, 0, 3), L, k, false), Error);
}

TEST(MoEBalancing, AnAttachedTermGetsTheLossFactorAsItsGradient) {
  const at::Tensor x = torch::randn({3, 2}, torch::requires_grad());
  const at::Tensor w = torch::tensor({2.0}, torch::requires_grad());
  const at::Tensor term = (w * w).sum();  // d term / dw = 2w = 4
  const at::Tensor factor = torch::full({}, 0.25, torch::kDouble);
  const at::Tensor y = attach_aux_loss(x, term, factor);
  factor.fill_(0.5);  // read when the backward runs
  (y.sum() * 3).backward();
  EXPECT_TRUE(torch::allclose(x.grad(), torch::full({3, 2}, 3.0)));
  EXPECT_NEAR(w.grad().item<double>(), 0.5 * 4.0, 1e-12);
}

TEST(MoEGroupedLinear, MatchesOneGemmARowWithGradients) {
  torch::manual_seed(6);
  const std::vector<int64_t> counts{3, 0, 5, 2};
  const int64_t rows = 10, in = 8, out0 = 6, out1 = 6;
  const at::Tensor x = torch::randn({rows, in}, torch::requires_grad());
  std::vector<std::vector<at::Tensor>> blocks(2);
  for (int b = 0; b < 2; ++b)
    for (int e = 0; e < 4; ++e) blocks[b].push_back(torch::randn({b ? out1 : out0, in}, torch::requires_grad()));
  const at::Tensor y = grouped_linear(x, counts, blocks);
  // The reference: each row by its own expert's blocks, through autograd.
  std::vector<at::Tensor> want;
  int64_t row = 0;
  for (int e = 0; e < 4; ++e)
    for (int64_t i = 0; i < counts[e]; ++i, ++row)
      want.push_back(torch::cat({torch::mv(blocks[0][e], x[row]), torch::mv(blocks[1][e], x[row])}));
  const at::Tensor ref = torch::stack(want);
  EXPECT_LT(max_diff(y, ref), 1e-5);
  const at::Tensor g = torch::randn_like(ref);
  auto grads = torch::autograd::grad({y}, {x, blocks[0][0], blocks[1][2], blocks[0][1]}, {g});
  auto ref_grads = torch::autograd::grad({ref}, {x, blocks[0][0], blocks[1][2]}, {g});
  EXPECT_LT(max_diff(grads[0], ref_grads[0]), 1e-5);
  EXPECT_LT(max_diff(grads[1], ref_grads[1]), 1e-5);
  EXPECT_LT(max_diff(grads[2], ref_grads[2]), 1e-5);
  EXPECT_EQ(grads[3].abs().max().item<double>(), 0.0);  // expert 1 had no rows
  EXPECT_LT(max_diff(grouped_linear_loop(x, counts, blocks), ref), 1e-5);
  EXPECT_STREQ(grouped_linear_path(x, counts, blocks), "loop");
}

TEST(MoEGroupedLinear, WeightsLyingInOneBufferGiveTheSameValues) {
  // As ZeRO's flat parameters hold them: expert e's gate, up, down one after another.
  torch::manual_seed(7);
  const int64_t in = 4, f = 6, experts = 3;
  const at::Tensor flat = torch::randn({experts * 3 * f * in});
  std::vector<std::vector<at::Tensor>> views(2), copies(2);
  for (int64_t e = 0; e < experts; ++e)
    for (int b = 0; b < 2; ++b) {
      at::Tensor v = flat.narrow(0, (e * 3 + b) * f * in, f * in).view({f, in});
      views[b].push_back(v);
      copies[b].push_back(v.clone());
    }
  const at::Tensor x = torch::randn({7, in});
  const std::vector<int64_t> counts{2, 4, 1};
  EXPECT_LT(max_diff(grouped_linear(x, counts, views), grouped_linear(x, counts, copies)), 1e-6);
}

namespace {

MoEOptions small_options(int64_t experts, int64_t k) {
  MoEOptions o;
  o.hidden = 8;
  o.ffn_hidden = 12;
  o.router.num_experts = experts;
  o.router.top_k = k;
  o.balancing = Balancing::none;
  return o;
}

// A layer's weight as a plain matrix: its 4-bit base dequantized, plus
// scale·B·A where it has an adapter (LoRA merged, with A's and B's gradients).
at::Tensor effective_weight(const stratum::nn::LinearImpl& l) {
  const at::Tensor base = l.nf4_base ? stratum::quant::dequantize_nf4(*l.nf4) : l.weight;
  return l.has_lora() ? base + l.lora_scale * torch::mm(l.lora_B->weight, l.lora_A->weight) : base;
}

// The layer token by token: each token's chosen experts (the same router),
// weighted; dropped assignments (keep[t][j] false) add nothing.
at::Tensor token_by_token(SparseMoEImpl& moe, const at::Tensor& x2, const std::vector<std::vector<bool>>* keep = nullptr) {
  const Routing r = route(torch::mm(x2, moe.gate->weight.t()), moe.expert_bias(), moe.options().router);
  std::vector<at::Tensor> rows;
  for (int64_t t = 0; t < x2.size(0); ++t) {
    at::Tensor acc = torch::zeros({x2.size(1)});
    for (int64_t j = 0; j < r.experts.size(1); ++j) {
      if (keep && !(*keep)[t][j]) continue;
      const auto& ex = *moe.expert_list[r.experts[t][j].item<int64_t>()];
      const at::Tensor h =
          torch::silu(torch::mv(effective_weight(*ex.gate), x2[t])) * torch::mv(effective_weight(*ex.up), x2[t]);
      acc = acc + r.weights[t][j] * torch::mv(effective_weight(*ex.down), h);
    }
    rows.push_back(acc);
  }
  return torch::stack(rows);
}

}  // namespace

TEST(SparseMoE, DroplessMatchesTheTokenByTokenLayerWithGradients) {
  torch::manual_seed(8);
  auto record = std::make_shared<RoutingRecord>();
  SparseMoEImpl moe(small_options(4, 2), 0, record);
  moe.gate->weight.data().mul_(5);  // decisive routing
  const at::Tensor x = torch::randn({2, 5, 8}, torch::requires_grad());
  const at::Tensor y = moe.forward(x);
  const at::Tensor ref = token_by_token(moe, x.view({10, 8})).view({2, 5, 8});
  EXPECT_LT(max_diff(y, ref), 1e-5);
  const at::Tensor g = torch::randn_like(ref);
  const std::vector<at::Tensor> wrt{x, moe.gate->weight, moe.expert_list[1]->up->weight, moe.expert_list[3]->down->weight};
  auto got = torch::autograd::grad({y}, wrt, {g}, true);
  auto want = torch::autograd::grad({ref}, wrt, {g}, true);
  for (size_t i = 0; i < wrt.size(); ++i) EXPECT_LT(max_diff(got[i], want[i]), 1e-5) << "gradient " << i;
  const auto loads = record->take();
  ASSERT_EQ(loads.count(0), 1u);
  EXPECT_EQ(loads.at(0).tokens.sum().item<int64_t>(), 20);
  EXPECT_EQ(loads.at(0).dropped, 0);
}

// LoRA on the experts (Mixtral's w1/w3/w2 as peft adapts them): each
// expert's adapted projections add scale·x·Aᵀ·Bᵀ, as the merged weight
// W + scale·B·A would; only the adapters and the input get gradients; an
// expert no token chose runs on no rows and gets a zero gradient. With the
// experts' bases in NF4 (QLoRA) the same against the dequantized weights.
TEST(SparseMoE, ExpertAdaptersAddTheirLowRankTermsAsMergedWeightsWould) {
  for (const bool nf4 : {false, true}) {
    torch::manual_seed(12);
    MoEOptions o = small_options(4, 1);
    o.hidden = 64, o.ffn_hidden = 32;  // NF4's blocks of 64
    o.expert_bias_rate = 0.001;        // a choice bias: expert 3 is never chosen
    SparseMoEImpl moe(o, 0, nullptr);
    moe.gate->weight.data().mul_(5);
    moe.set_expert_bias(torch::tensor({0.0f, 0.0f, 0.0f, -1e4f}));
    for (auto& ex : moe.expert_list)
      for (auto* l : {ex->gate.get(), ex->up.get(), ex->down.get()}) {
        l->weight.set_requires_grad(false);
        if (nf4) {
          l->nf4 = std::make_shared<const stratum::quant::Nf4Tensor>(stratum::quant::quantize_nf4(l->weight.detach()));
          l->nf4_base = true;
        }
        if (l == ex->up.get()) continue;  // adapters on gate and down only
        l->add_lora(2, 1.5, 0.0);
        l->lora_A->weight.set_data(torch::randn(l->lora_A->weight.sizes()) * 0.3);
        l->lora_B->weight.set_data(torch::randn(l->lora_B->weight.sizes()) * 0.3);
      }
    const at::Tensor x = torch::randn({3, 5, 64}, torch::requires_grad());
    const at::Tensor y = moe.forward(x);
    const at::Tensor ref = token_by_token(moe, x.view({15, 64})).view({3, 5, 64});
    EXPECT_LT(max_diff(y, ref), 1e-5) << (nf4 ? "nf4" : "dense");
    const at::Tensor g = torch::randn_like(ref);
    const auto& e0 = *moe.expert_list[0];
    const auto& e3 = *moe.expert_list[3];
    const std::vector<at::Tensor> wrt{x, e0.gate->lora_A->weight, e0.down->lora_B->weight, e3.gate->lora_A->weight};
    auto got = torch::autograd::grad({y}, wrt, {g}, true, false, /*allow_unused=*/true);
    auto want = torch::autograd::grad({ref}, wrt, {g}, true, false, /*allow_unused=*/true);
    for (size_t i = 0; i < 3; ++i) EXPECT_LT(max_diff(got[i], want[i]), 1e-5) << "gradient " << i;
    ASSERT_TRUE(got[3].defined()) << "an expert without tokens still gives its adapters a gradient";
    EXPECT_EQ(got[3].abs().max().item<double>(), 0.0);
    EXPECT_GT(got[1].abs().max().item<double>(), 0.0);
  }
}

TEST(SparseMoE, SharedExpertsAddTheirMlpForEveryToken) {
  torch::manual_seed(11);
  MoEOptions o = small_options(4, 1);
  o.shared_ffn_hidden = 6;
  o.router.score = ScoreFunction::sigmoid;  // DeepSeek's
  SparseMoEImpl moe(o, 0, nullptr);
  moe.gate->weight.data().mul_(5);
  const at::Tensor x2 = torch::randn({7, 8});
  const auto& s = *moe.shared_experts;
  const at::Tensor shared =
      torch::mm(torch::silu(torch::mm(x2, s.gate_proj->weight.t())) * torch::mm(x2, s.up_proj->weight.t()),
                s.down_proj->weight.t());
  EXPECT_LT(max_diff(moe.forward(x2), token_by_token(moe, x2) + shared), 1e-5);
  EXPECT_EQ(s.gate_proj->weight.size(0), 6);
}

TEST(SparseMoE, CapacityDropsTheLowestWeightedAssignmentsAndCountsThem) {
  torch::manual_seed(9);
  auto record = std::make_shared<RoutingRecord>();
  MoEOptions o = small_options(4, 2);
  o.capacity_factor = 0.5;  // ceil(0.5 * 12 * 2 / 4) = 3 assignments an expert
  SparseMoEImpl moe(o, 3, record);
  moe.gate->weight.data().mul_(5);
  const at::Tensor x2 = torch::randn({12, 8});
  const Routing r = route(torch::mm(x2, moe.gate->weight.t()), {}, o.router);
  // Keep each expert's 3 highest-weighted assignments (ties: the earlier one).
  std::vector<std::vector<bool>> keep(12, std::vector<bool>(2, false));
  int64_t dropped = 0;
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<std::pair<int64_t, int64_t>> mine;
    for (int64_t t = 0; t < 12; ++t)
      for (int64_t j = 0; j < 2; ++j)
        if (r.experts[t][j].item<int64_t>() == e) mine.push_back({t, j});
    std::stable_sort(mine.begin(), mine.end(), [&](auto& a, auto& b) {
      return r.weights[a.first][a.second].item().toFloat() > r.weights[b.first][b.second].item().toFloat();
    });
    for (size_t i = 0; i < mine.size(); ++i) keep[mine[i].first][mine[i].second] = i < 3;
    dropped += std::max<int64_t>(0, static_cast<int64_t>(mine.size()) - 3);
  }
  ASSERT_GT(dropped, 0);
  const at::Tensor y = moe.forward(x2);
  EXPECT_LT(max_diff(y, token_by_token(moe, x2, &keep)), 1e-5);
  EXPECT_EQ(record->take().at(3).dropped, dropped);
}

TEST(SparseMoE, TheAuxiliaryLossTrainsTheRouterAtTheLossFactor) {
  torch::manual_seed(10);
  auto record = std::make_shared<RoutingRecord>();
  MoEOptions o = small_options(4, 2);
  SparseMoEImpl plain(o, 0, nullptr);
  o.balancing = Balancing::aux_loss;
  o.aux_loss_coeff = 0.1;
  SparseMoEImpl balanced(o, 0, record);
  torch::NoGradGuard no_grad;
  for (auto& p : balanced.named_parameters()) p.value().copy_(plain.named_parameters()[p.key()]);
  torch::AutoGradMode grad(true);
  const at::Tensor x = torch::randn({2, 6, 8});
  record->set_backward_factor(0.5);
  plain.forward(x).sum().backward();
  balanced.forward(x).sum().backward();
  const at::Tensor logits = torch::mm(x.view({12, 8}), balanced.gate->weight.t());
  const Routing r = route(logits, {}, o.router);
  const at::Tensor aux_grad = torch::autograd::grad({aux_loss(r.scores, r.experts, 4, false)}, {balanced.gate->weight})[0];
  EXPECT_LT(max_diff(balanced.gate->weight.grad(), plain.gate->weight.grad() + 0.5 * 0.1 * aux_grad), 1e-5);
  EXPECT_GT(aux_grad.abs().max().item<double>(), 1e-4);
}

TEST(SparseMoE, ExpertBiasMovesTowardsTheLessLoadedExperts) {
  MoEOptions o = small_options(4, 1);
  o.expert_bias_rate = 0.01;
  SparseMoEImpl moe(o, 0, nullptr);
  moe.update_expert_bias(torch::tensor({10, 2, 4, 4}, torch::kLong));
  EXPECT_TRUE(torch::allclose(moe.expert_bias(), torch::tensor({-0.01f, 0.01f, 0.01f, 0.01f})));
  EXPECT_THROW(moe.set_expert_bias(torch::zeros({3})), Error);
}
