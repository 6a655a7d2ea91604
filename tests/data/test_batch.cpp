// Batches as tensors: shapes, dtype, and targets = tokens shifted by one.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "stratum/core/error.h"
#include "stratum/data/batch.h"
#include "stratum/data/sampler.h"
#include "temp_dir.h"

using namespace stratum;
using namespace stratum::data;

namespace {
class BatchTest : public data::testing::TempDirTest {};
}  // namespace

TEST_F(BatchTest, ShapesAndShiftByOne) {
  std::vector<int32_t> tokens(1000);
  for (int i = 0; i < 1000; ++i) tokens[i] = (i * 7 + 3) % 256;
  write_token_file(path("t.strtok"), tokens, "byte", 256);
  TokenFile file(path("t.strtok"));
  const int64_t seq_len = 16;
  DistributedSampler sampler(Split{0, 1000}, seq_len, 0, 1, 5);
  const auto offsets = sampler.next(4);
  const Batch b = make_batch(file, offsets, seq_len);
  EXPECT_EQ(b.tokens.sizes(), (at::IntArrayRef{4, 16}));
  EXPECT_EQ(b.targets.sizes(), (at::IntArrayRef{4, 16}));
  EXPECT_EQ(b.tokens.scalar_type(), at::kLong);
  EXPECT_EQ(b.targets.scalar_type(), at::kLong);
  EXPECT_TRUE(b.tokens.is_contiguous() && b.targets.is_contiguous());
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < seq_len; ++j) {
      ASSERT_EQ(b.tokens[r][j].item<int64_t>(), tokens[offsets[r] + j]);
      ASSERT_EQ(b.targets[r][j].item<int64_t>(), tokens[offsets[r] + j + 1]);
    }
  EXPECT_TRUE(at::equal(b.targets.slice(1, 0, seq_len - 1), b.tokens.slice(1, 1, seq_len)));
}

TEST_F(BatchTest, LastWindowReachesTheLastTokenAndNoFurther) {
  std::vector<int32_t> tokens(21);
  for (int i = 0; i < 21; ++i) tokens[i] = i;
  write_token_file(path("t.strtok"), tokens, "byte", 256);
  TokenFile file(path("t.strtok"));
  const Batch b = make_batch(file, {10}, 10);
  EXPECT_EQ(b.targets[0][9].item<int64_t>(), 20);
  const auto msg = STRATUM_ERROR_MESSAGE(make_batch(file, {11}, 10));
  EXPECT_NE(msg.find(path("t.strtok") + ": window [11, 22) outside the file's 21 tokens"), std::string::npos) << msg;
}

TEST_F(BatchTest, EmptyOffsetsGiveAnEmptyBatch) {
  write_token_file(path("t.strtok"), {1, 2, 3}, "byte", 256);
  TokenFile file(path("t.strtok"));
  const Batch b = make_batch(file, {}, 2);
  EXPECT_EQ(b.tokens.sizes(), (at::IntArrayRef{0, 2}));
}
