// The distributed sampler: a deterministic permutation per (seed, epoch),
// disjoint equal shares per DP rank, epoch rollover, and exact resume, also at
// another DP size.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "stratum/core/error.h"
#include "stratum/data/sampler.h"
#include "temp_dir.h"

using namespace stratum;
using namespace stratum::data;

namespace {

// Runs every rank of a DP group through `steps` calls of next(micro) and
// returns the windows in global stream order (what the group consumed).
std::vector<int64_t> run_group(std::vector<DistributedSampler>& ranks, int64_t micro, int steps) {
  const int dp = static_cast<int>(ranks.size());
  std::vector<int64_t> stream;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<int64_t>> got;
    for (auto& r : ranks) got.push_back(r.next(micro));
    for (int64_t i = 0; i < micro; ++i)
      for (int r = 0; r < dp; ++r) stream.push_back(got[r][i]);
  }
  return stream;
}

std::vector<DistributedSampler> make_group(Split split, int64_t seq_len, int dp, uint64_t seed) {
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < dp; ++r) ranks.emplace_back(split, seq_len, r, dp, seed);
  return ranks;
}

}  // namespace

TEST(Shuffle, IsAPermutationFixedBySeedAndEpoch) {
  const auto a = shuffled_indices(1000, 42, 0);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(a, shuffled_indices(1000, 42, 0));
  EXPECT_NE(a, shuffled_indices(1000, 43, 0));
  EXPECT_NE(a, shuffled_indices(1000, 42, 1));
  EXPECT_EQ(shuffled_indices(1, 42, 0), std::vector<int64_t>{0});
  EXPECT_TRUE(shuffled_indices(0, 42, 0).empty());
}

// The exact order, pinned: a change here changes every run's data order (and
// breaks resuming old checkpoints), so it must be deliberate. The values were
// also computed by an independent Python implementation of MT19937-64 with the
// same mixing, Fisher-Yates and rejection draw, so they do not depend on
// libstdc++.
TEST(Shuffle, GoldenOrder) {
  EXPECT_EQ(shuffled_indices(12, 1234, 0), (std::vector<int64_t>{1, 11, 2, 8, 10, 6, 3, 7, 9, 0, 5, 4}));
  EXPECT_EQ(shuffled_indices(12, 1234, 1), (std::vector<int64_t>{0, 5, 10, 11, 8, 7, 1, 4, 3, 9, 2, 6}));
}

TEST(Sampler, WindowsAreSeqLenApartAndStayInTheSplit) {
  const Split split{1000, 2001};  // 1001 tokens: (1001 - 1) / 10 = 100 windows
  DistributedSampler s(split, 10, 0, 1, 7);
  EXPECT_EQ(s.num_windows(), 100);
  auto order = s.epoch_order(0);
  std::sort(order.begin(), order.end());
  for (int64_t k = 0; k < 100; ++k) ASSERT_EQ(order[k], 1000 + 10 * k);
  EXPECT_LE(order.back() + 10 + 1, split.end);  // the last window's target is the split's last token
}

TEST(Sampler, SameSeedSameOrderOtherSeedOtherOrder) {
  const Split split{0, 5001};
  DistributedSampler a(split, 10, 0, 1, 1), b(split, 10, 0, 1, 1), c(split, 10, 0, 1, 2);
  const auto xa = a.next(64), xb = b.next(64), xc = c.next(64);
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
}

TEST(Sampler, RanksAreDisjointEqualAndCoverTheEpoch) {
  const Split split{0, 1001};  // 100 windows of seq_len 10
  const int dp = 3;
  auto ranks = make_group(split, 10, dp, 99);
  EXPECT_EQ(ranks[0].samples_per_epoch(), 99);  // one window dropped so that ranks get 33 each
  EXPECT_EQ(ranks[0].samples_per_rank_per_epoch(), 33);
  std::set<int64_t> seen;
  for (auto& r : ranks) {
    const auto mine = r.next(33);
    EXPECT_EQ(mine.size(), 33u);
    for (int64_t o : mine) EXPECT_TRUE(seen.insert(o).second) << "window " << o << " given twice";
    EXPECT_EQ(r.state().epoch, 0);
  }
  EXPECT_EQ(seen.size(), 99u);
  const auto order = ranks[0].epoch_order(0);
  EXPECT_EQ(seen.count(order.back()), 0u);  // the dropped one is the stream's last
  for (int r = 0; r < dp; ++r) EXPECT_EQ(ranks[r].rank_epoch_offsets(0).size(), 33u);
}

TEST(Sampler, StreamIsTheEpochPermutationAndRollsOver) {
  const Split split{0, 101};  // 10 windows of seq_len 10
  auto ranks = make_group(split, 10, 2, 5);
  // 4 steps of 2 windows per rank = 16 windows: all 10 of epoch 0, 6 of epoch 1.
  const auto stream = run_group(ranks, 2, 4);
  auto expected = ranks[0].epoch_order(0);
  const auto epoch1 = ranks[0].epoch_order(1);
  expected.insert(expected.end(), epoch1.begin(), epoch1.begin() + 6);
  EXPECT_EQ(stream, expected);
  EXPECT_NE(ranks[0].epoch_order(0), epoch1);
  EXPECT_EQ(ranks[1].state(), (SamplerState{5, 1, 6}));
}

TEST(Sampler, OddTailIsDroppedAtTheEpochEnd) {
  const Split split{0, 71};  // 7 windows, 2 ranks: 6 used, 1 dropped
  auto ranks = make_group(split, 10, 2, 11);
  const auto stream = run_group(ranks, 1, 4);  // 8 windows: 6 of epoch 0, 2 of epoch 1
  auto e0 = ranks[0].epoch_order(0), e1 = ranks[0].epoch_order(1);
  std::vector<int64_t> expected(e0.begin(), e0.begin() + 6);
  expected.insert(expected.end(), e1.begin(), e1.begin() + 2);
  EXPECT_EQ(stream, expected);
}

TEST(Sampler, ResumeMidEpochEqualsUninterrupted) {
  const Split split{0, 10001};  // 1000 windows of seq_len 10
  auto uninterrupted = make_group(split, 10, 2, 2024);
  const auto full = run_group(uninterrupted, 4, 200);  // 1600 windows: into epoch 1

  auto first = make_group(split, 10, 2, 2024);
  auto part1 = run_group(first, 4, 70);
  const SamplerState saved = first[1].state();
  EXPECT_EQ(saved, first[0].state());  // the state is global: every rank holds the same
  EXPECT_EQ(saved, (SamplerState{2024, 0, 560}));

  auto resumed = make_group(split, 10, 2, /*seed: the checkpoint's wins*/ 1);
  for (auto& r : resumed) r.load_state(saved);
  const auto part2 = run_group(resumed, 4, 130);
  part1.insert(part1.end(), part2.begin(), part2.end());
  EXPECT_EQ(part1, full);
  EXPECT_EQ(resumed[0].state(), uninterrupted[0].state());
}

TEST(Sampler, ResumeAtAnotherDpSizeContinuesTheGlobalStream) {
  const Split split{0, 10001};  // 1000 windows
  // DP 4, micro 2, 3 steps: 24 windows; a checkpoint; DP 2, micro 4 (same
  // global batch of 8) goes on.
  auto dp4 = make_group(split, 10, 4, 77);
  auto stream = run_group(dp4, 2, 3);
  const SamplerState saved = dp4[0].state();
  EXPECT_EQ(saved.position, 24);

  auto dp2 = make_group(split, 10, 2, 77);
  for (auto& r : dp2) r.load_state(saved);
  const auto more = run_group(dp2, 4, 10);
  stream.insert(stream.end(), more.begin(), more.end());
  const auto order = dp4[0].epoch_order(0);
  EXPECT_EQ(stream, std::vector<int64_t>(order.begin(), order.begin() + 104));

  // Step by step, each global batch holds the same windows as an
  // uninterrupted DP 4 run's (dealt to ranks differently).
  auto reference = make_group(split, 10, 4, 77);
  const auto ref = run_group(reference, 2, 13);
  for (size_t step = 0; step < 13; ++step) {
    std::set<int64_t> a(stream.begin() + 8 * step, stream.begin() + 8 * (step + 1));
    std::set<int64_t> b(ref.begin() + 8 * step, ref.begin() + 8 * (step + 1));
    EXPECT_EQ(a, b) << "step " << step;
  }
}

TEST(Sampler, ResumeAtLargerDpSizeFromAnUnalignedPosition) {
  const Split split{0, 101};  // 10 windows
  auto dp1 = make_group(split, 10, 1, 3);
  auto stream = run_group(dp1, 1, 5);  // position 5
  auto dp4 = make_group(split, 10, 4, 3);
  for (auto& r : dp4) r.load_state(dp1[0].state());
  // Windows 5..8 of epoch 0; then only 1 is left for 4 ranks: epoch 1 starts.
  const auto more = run_group(dp4, 1, 2);
  const auto e0 = dp1[0].epoch_order(0), e1 = dp1[0].epoch_order(1);
  std::vector<int64_t> expected(e0.begin(), e0.begin() + 9);
  expected.insert(expected.end(), e1.begin(), e1.begin() + 4);
  stream.insert(stream.end(), more.begin(), more.end());
  EXPECT_EQ(stream, expected);
}

TEST(Sampler, UnshuffledKeepsFileOrder) {
  const Split split{500, 541};  // 4 windows of seq_len 10
  DistributedSampler r0(split, 10, 0, 2, 1, /*shuffle=*/false), r1(split, 10, 1, 2, 1, false);
  EXPECT_EQ(r0.rank_epoch_offsets(0), (std::vector<int64_t>{500, 520}));
  EXPECT_EQ(r1.rank_epoch_offsets(0), (std::vector<int64_t>{510, 530}));
  EXPECT_EQ(r0.rank_epoch_offsets(3), r0.rank_epoch_offsets(0));
  EXPECT_EQ(r1.next(3), (std::vector<int64_t>{510, 530, 510}));
}

TEST(Sampler, StateJsonRoundTrip) {
  const SamplerState s{0xFEDCBA9876543210ull, 3, 12345};
  const nlohmann::json j = s;
  EXPECT_EQ(j.dump(), R"({"epoch":3,"position":12345,"seed":18364758544493064720})");
  EXPECT_EQ(j.get<SamplerState>(), s);
  EXPECT_EQ(to_string(s), "seed 18364758544493064720, epoch 3, position 12345");
  const auto msg = STRATUM_ERROR_MESSAGE(nlohmann::json::parse(R"({"seed":1,"epoch":0})").get<SamplerState>());
  EXPECT_NE(msg.find("data sampler state: missing 'position'"), std::string::npos) << msg;
  EXPECT_THROW(nlohmann::json::parse(R"({"seed":1,"epoch":"0","position":0})").get<SamplerState>(), Error);
}

TEST(Sampler, Errors) {
  const Split split{0, 31};  // 3 windows of seq_len 10
  auto msg = STRATUM_ERROR_MESSAGE(DistributedSampler(split, 10, 0, 4, 1));
  EXPECT_NE(msg.find("holds 3 windows of seq_len + 1 = 11 tokens, fewer than the 4 data-parallel ranks"),
            std::string::npos)
      << msg;
  EXPECT_THROW(DistributedSampler(split, 10, 2, 2, 1), Error);
  EXPECT_THROW(DistributedSampler(split, 0, 0, 1, 1), Error);
  DistributedSampler s(split, 10, 0, 1, 1);
  EXPECT_THROW(s.next(0), Error);
  msg = STRATUM_ERROR_MESSAGE(s.load_state({1, 0, 4}));
  EXPECT_NE(msg.find("cannot resume at seed 1, epoch 0, position 4: this split has 3 windows"), std::string::npos)
      << msg;
  s.load_state({1, 0, 3});  // the end of an epoch is a valid place to stop
  EXPECT_EQ(s.next(1).size(), 1u);
  EXPECT_EQ(s.state(), (SamplerState{1, 1, 1}));
}
