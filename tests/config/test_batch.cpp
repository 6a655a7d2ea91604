// The batch triple, resolved as DeepSpeed resolves it, with errors that print the numbers.
#include <gtest/gtest.h>

#include "stratum/config/config.h"
#include "stratum/core/error.h"

using stratum::Config;
using stratum::ConfigError;
using stratum::config::BatchSizes;

namespace {

BatchSizes resolve(const std::string& json, int64_t world) {
  return Config::from_string(json, "batch.json").resolve_batch(world);
}

std::string error_of(const std::string& json, int64_t world) {
  try {
    resolve(json, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(BatchTriple, AllThreeGivenAndConsistent) {
  BatchSizes b = resolve(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                             "gradient_accumulation_steps": 2})", 4);
  EXPECT_EQ(b.train_batch_size, 32);
  EXPECT_EQ(b.micro_batch_per_gpu, 4);
  EXPECT_EQ(b.gradient_accumulation_steps, 2);
  EXPECT_EQ(b.data_parallel_size, 4);
}

TEST(BatchTriple, AllThreeGivenButWrongWorld) {
  std::string e = error_of(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                               "gradient_accumulation_steps": 2})", 2);
  EXPECT_NE(e.find("train_batch_size 32 != train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 2 x "
                   "data-parallel size 2 = 16"), std::string::npos) << e;
}

TEST(BatchTriple, TrainAndMicroGiveAccumulation) {
  BatchSizes b = resolve(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8})", 2);
  EXPECT_EQ(b.gradient_accumulation_steps, 4);
}

TEST(BatchTriple, TrainAndMicroThatDoNotDivide) {
  std::string e = error_of(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8})", 3);
  EXPECT_NE(e.find("train_batch_size 64 is not divisible by train_micro_batch_size_per_gpu 8 x data-parallel size 3 = 24"),
            std::string::npos) << e;
}

TEST(BatchTriple, TrainAndAccumulationGiveMicro) {
  BatchSizes b = resolve(R"({"train_batch_size": 64, "gradient_accumulation_steps": 2})", 4);
  EXPECT_EQ(b.micro_batch_per_gpu, 8);
}

TEST(BatchTriple, TrainAndAccumulationThatDoNotDivide) {
  std::string e = error_of(R"({"train_batch_size": 64, "gradient_accumulation_steps": 3})", 2);
  EXPECT_NE(e.find("gradient_accumulation_steps 3 x data-parallel size 2 = 6"), std::string::npos) << e;
}

TEST(BatchTriple, MicroAndAccumulationGiveTrain) {
  BatchSizes b = resolve(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5})", 7);
  EXPECT_EQ(b.train_batch_size, 105);
}

TEST(BatchTriple, TrainAloneMeansNoAccumulation) {
  BatchSizes b = resolve(R"({"train_batch_size": 12})", 3);
  EXPECT_EQ(b.micro_batch_per_gpu, 4);
  EXPECT_EQ(b.gradient_accumulation_steps, 1);
  std::string e = error_of(R"({"train_batch_size": 2})", 4);
  EXPECT_NE(e.find("train_batch_size 2 is not divisible by the data-parallel size 4"), std::string::npos) << e;
}

TEST(BatchTriple, MicroAloneMeansNoAccumulation) {
  BatchSizes b = resolve(R"({"train_micro_batch_size_per_gpu": 2})", 8);
  EXPECT_EQ(b.train_batch_size, 16);
  EXPECT_EQ(b.gradient_accumulation_steps, 1);
}

TEST(BatchTriple, ModelParallelismDividesTheWorld) {
  // 16 ranks = dp 2 x pp 4 x tp 2.
  BatchSizes b = resolve(R"({"train_batch_size": 64, "gradient_accumulation_steps": 4,
                             "pipeline": {"stages": 4}, "tensor_parallel": {"autotp_size": 2}})", 16);
  EXPECT_EQ(b.data_parallel_size, 2);
  EXPECT_EQ(b.micro_batch_per_gpu, 8);
  std::string e = error_of(R"({"train_batch_size": 64, "pipeline": {"stages": 4}, "tensor_parallel": {"autotp_size": 2}})", 12);
  EXPECT_NE(e.find("world size 12 is not a multiple of pipeline.stages (4) x tensor_parallel size (2) = 8"),
            std::string::npos) << e;
}

TEST(BatchTriple, ErrorNamesTheFile) {
  std::string e = error_of(R"({"train_batch_size": 7})", 2);
  EXPECT_EQ(e.rfind("batch.json", 0), 0u) << e;
}

}  // namespace
