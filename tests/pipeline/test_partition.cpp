// Pipeline partitioning by DeepSpeed's partition_method: contiguous, non-empty
// parts; "parameters" minimises the heaviest part; "uniform" gives the first
// parts the extra layer (DeepSpeed's partition_uniform); "type:" balances the
// matching layers; bad requests name their numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "../common/error_of.h"
#include "stratum/pipeline/partition.h"

using namespace stratum::pipeline;
using stratum::test::error_of;

namespace {
// GPT-2's layer list: embedding, `blocks` blocks, final norm, tied head.
std::vector<LayerWeight> gpt2_layers(int blocks, int64_t embedding = 1000, int64_t block = 100) {
  std::vector<LayerWeight> l{{"GPT2Embedding", embedding}};
  for (int i = 0; i < blocks; ++i) l.push_back({"GPT2Block", block});
  l.push_back({"GPT2FinalNorm", 2});
  l.push_back({"LMHead", 0});
  return l;
}

int64_t part_weight(const std::vector<LayerWeight>& l, const Partition& p, int k) {
  int64_t s = 0;
  for (size_t i = p.begin(k); i < p.end(k); ++i) s += l[i].parameters;
  return s;
}
}  // namespace

TEST(PipelinePartition, UniformGivesTheFirstPartsTheExtraLayer) {
  std::vector<LayerWeight> l(10, LayerWeight{"Block", 1});
  const Partition p = partition_layers(l, 4, "uniform");
  EXPECT_EQ(p.bounds, (std::vector<size_t>{0, 3, 6, 8, 10}));
  EXPECT_EQ(describe(p), "0-2 | 3-5 | 6-7 | 8-9");
  EXPECT_EQ(p.part_of(0), 0);
  EXPECT_EQ(p.part_of(9), 3);
}

TEST(PipelinePartition, ParametersMinimiseTheHeaviestStageAgainstEveryCut) {
  for (int blocks : {2, 3, 6, 8, 13})
    for (int parts = 1; parts <= std::min(blocks + 3, 6); ++parts)
      for (int64_t embedding : {0, 50, 100, 1000}) {
        const auto l = gpt2_layers(blocks, embedding);
        const Partition p = partition_layers(l, parts, "parameters");
        ASSERT_EQ(p.parts(), parts);
        ASSERT_EQ(p.begin(0), 0u);
        ASSERT_EQ(p.end(parts - 1), l.size());
        int64_t heaviest = 0;
        for (int k = 0; k < parts; ++k) {
          ASSERT_LT(p.begin(k), p.end(k)) << "empty part " << k;
          heaviest = std::max(heaviest, part_weight(l, p, k));
        }
        // Brute force over every cut into `parts` non-empty ranges (small n).
        const size_t n = l.size();
        int64_t best = INT64_MAX;
        std::vector<size_t> cut(parts + 1, 0);
        cut[parts] = n;
        std::function<void(int, size_t)> rec = [&](int k, size_t from) {
          if (k == parts) {
            int64_t worst = 0;
            for (int q = 0; q < parts; ++q) {
              int64_t s = 0;
              for (size_t i = cut[q]; i < cut[q + 1]; ++i) s += l[i].parameters;
              worst = std::max(worst, s);
            }
            best = std::min(best, worst);
            return;
          }
          for (size_t b = from + 1; b + (parts - k - 1) <= n; ++b) {
            if (k == parts - 1 && b != n) continue;
            cut[k + 1] = b;
            rec(k + 1, b);
          }
        };
        rec(0, 0);
        ASSERT_EQ(heaviest, best) << blocks << " blocks, " << parts << " parts, embedding " << embedding << ": "
                                  << describe(p);
      }
}

TEST(PipelinePartition, EmbeddingOnTheFirstStageHeadOnTheLast) {
  const auto l = gpt2_layers(8, /*embedding=*/400);
  const Partition p = partition_layers(l, 4, "parameters");
  EXPECT_EQ(p.part_of(0), 0);
  EXPECT_EQ(p.part_of(l.size() - 1), 3);
  EXPECT_EQ(p.part_of(l.size() - 2), 3);
  // 400 embedding weighs as much as 4 blocks: it sits alone.
  EXPECT_EQ(p.end(0), 1u) << describe(p);
}

TEST(PipelinePartition, TypeRegexBalancesTheMatchingLayers) {
  const auto l = gpt2_layers(8);
  const Partition p = partition_layers(l, 4, "type:gpt2block");  // case-insensitive, as DeepSpeed
  for (int k = 0; k < 4; ++k) {
    int blocks = 0;
    for (size_t i = p.begin(k); i < p.end(k); ++i) blocks += l[i].kind == "GPT2Block";
    EXPECT_EQ(blocks, 2) << describe(p);
  }
  EXPECT_EQ(p.part_of(0), 0);
  EXPECT_EQ(p.part_of(l.size() - 1), 3);
  // A regex searches anywhere in the kind.
  EXPECT_EQ(partition_layers(l, 2, "type:Block").bounds, (std::vector<size_t>{0, 5, 11}));
}

TEST(PipelinePartition, BadRequestsNameTheirNumbers) {
  const auto l = gpt2_layers(2);  // 5 layers
  EXPECT_NE(error_of([&] { partition_layers(l, 6, "parameters"); }).find("the model has 5 layers but 6 pipeline stages"),
            std::string::npos);
  EXPECT_NE(error_of([&] { partition_layers(l, 2, "type:Attention"); }).find("matches none of the model's 5 layers "
                                                                             "(their kinds: GPT2Embedding, GPT2Block, "
                                                                             "GPT2FinalNorm, LMHead)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { partition_layers(l, 3, "type:GPT2Block"); }).find("matches 2 layers, fewer than the 3 "
                                                                             "pipeline stages"),
            std::string::npos);
  EXPECT_NE(error_of([&] { partition_layers(l, 2, "balanced"); }).find("got \"balanced\""), std::string::npos);
  EXPECT_NE(error_of([&] { partition_layers(std::vector<LayerWeight>(3, {"X", 0}), 2, "parameters"); })
                .find("has none; use \"uniform\""),
            std::string::npos);
}
