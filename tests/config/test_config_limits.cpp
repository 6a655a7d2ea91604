// Configs that cost too much to read: FIFOs and devices, huge files, deep
// nesting, megabyte keys, a million unknown keys, sizes whose product
// overflows 64 bits. Each is refused quickly, with a message that names the
// file, key or number.
#include <gtest/gtest.h>

#include <limits>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>

#include "../common/fifo_deadline.h"
#include "stratum/config/config.h"
#include "stratum/config/json_source.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"

using stratum::Config;
using stratum::ConfigError;

namespace {

std::string error_of_text(const std::string& text) {
  try {
    Config::from_string(text, "limits.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string error_of_file(const std::string& path) {
  try {
    Config::from_file(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

double seconds_of(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

class ConfigLimits : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = stratum::fs::make_temp_directory("stratum_cfg_limits_"); }
  void TearDown() override { stratum::fs::remove_tree(dir_); }
  std::string dir_;
};

// Reading a FIFO used to block until a writer came (forever, for stratum-config check).
TEST_F(ConfigLimits, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = dir_ + "/config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string e;
  ASSERT_TRUE(stratum::test::returns_without_blocking(fifo, [&] { e = error_of_file(fifo); }))
      << "reading a FIFO as a config blocked";
  EXPECT_NE(e.find(fifo), std::string::npos) << e;
  EXPECT_NE(e.find("must be a regular file, but this is a FIFO"), std::string::npos) << e;
}

TEST_F(ConfigLimits, DevZeroIsRefused) {
  const std::string e = error_of_file("/dev/zero");
  EXPECT_NE(e.find("/dev/zero: 1 problem"), std::string::npos) << e;
  EXPECT_NE(e.find("must be a regular file, but this is a character device"), std::string::npos) << e;
}

TEST_F(ConfigLimits, HugeFileIsRefusedBeforeReading) {
  const std::string path = dir_ + "/huge.json";
  ASSERT_EQ(::close(::open(path.c_str(), O_WRONLY | O_CREAT, 0600)), 0);
  ASSERT_EQ(::truncate(path.c_str(), 17 << 20), 0);  // sparse: 17 MB of nothing
  std::string e;
  EXPECT_LT(seconds_of([&] { e = error_of_file(path); }), 1.0);
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("a ds_config.json is 17.8 MB, over the limit of 16.8 MB"), std::string::npos) << e;
}

// 64k levels took 13 s in the parser (a path built per level), 100k levels 72 s.
TEST_F(ConfigLimits, DeepNestingIsRefusedQuicklyWithItsPlace) {
  for (int depth : {65'536, 100'000}) {
    const std::string text = "{\n  \"train_batch_size\": 8,\n  \"x\": " + nested(depth) + "\n}";
    std::string e;
    EXPECT_LT(seconds_of([&] { e = error_of_text(text); }), 0.5) << depth;
    // The top object is level 1, so the 64th '[' (line 3, column 8 + 63) opens level 65.
    EXPECT_NE(e.find("limits.json:3:71: 1 problem"), std::string::npos) << e;
    EXPECT_NE(e.find("JSON nested deeper than 64 levels"), std::string::npos) << e;
  }
  const std::string ok = R"({"train_batch_size": 8, "x": )" + nested(63) + "}";  // 64 levels with the top object
  EXPECT_EQ(error_of_text(ok).find("nested deeper"), std::string::npos);
}

// A 1 MB unknown key took 10 s (the did-you-mean's edit distances) and was echoed whole.
TEST_F(ConfigLimits, MegabyteKeyIsShortenedAndGetsNoSuggestion) {
  const std::string key = "train_batch_size" + std::string(1 << 20, 'x');
  std::string e;
  EXPECT_LT(seconds_of([&] { e = error_of_text("{\"train_batch_size\": 8, \"" + key + "\": 1}"); }), 1.0);
  EXPECT_NE(e.find("train_batch_sizexxxxxxxxxxxxxxxxxxxxxxxx... (1048592 characters): unknown key"),
            std::string::npos)
      << e.substr(0, 300);
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e.substr(0, 300);
  EXPECT_LT(e.size(), 300u);
  // Short keys keep their suggestion.
  EXPECT_NE(error_of_text(R"({"train_batch_size": 8, "gradient_clippin": 1})").find("did you mean 'gradient_clipping'"),
            std::string::npos);
}

TEST_F(ConfigLimits, LongKeysAreShortenedInPathsAndRepeats) {
  const std::string key(100'000, 'k');
  std::string e = error_of_text("{\"train_batch_size\": 8, \"zero_optimization\": {\"" + key + "\": 1}}");
  EXPECT_NE(e.find("zero_optimization.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk... (100000 characters): unknown key"),
            std::string::npos)
      << e.substr(0, 300);
  e = error_of_text("{\"" + key + "\": 1, \"" + key + "\": 2}");
  EXPECT_NE(e.find("... (100000 characters): given more than once"), std::string::npos) << e.substr(0, 300);
  EXPECT_LT(e.size(), 300u);
  // Cut before a UTF-8 character, never inside one; a long value is cut before it is shown.
  std::string accents;
  for (int i = 0; i < 50; ++i) accents += "\xc3\xa9";  // é
  e = error_of_text("{\"train_batch_size\": 8, \"" + std::string(39, 'a') + accents + "\": 1}");
  EXPECT_NE(e.find("\n  " + std::string(39, 'a') + "... (139 characters): unknown key"), std::string::npos) << e;
  e = error_of_text("{\"train_batch_size\": 8, \"prescale_gradients\": \"" + std::string(55, 'a') + accents + "\"}");
  EXPECT_NE(e.find("prescale_gradients: expected true or false, got \"" + std::string(55, 'a') + "..."),
            std::string::npos)
      << e;
  e = error_of_text("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"" + key + "\"}}");
  EXPECT_NE(e.find("unknown optimizer \"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk... (100000 characters)\""),
            std::string::npos)
      << e.substr(0, 300);
}

// Every unknown key was listed (and given a did-you-mean): a million of them made a 60 MB message.
TEST_F(ConfigLimits, ManyProblemsAreCountedNotListed) {
  std::string text = "{\"train_batch_size\": 8";
  for (int i = 0; i < 200'000; ++i) text += ", \"k" + std::to_string(i) + "\": 1";
  text += "}";
  try {
    EXPECT_LT(seconds_of([&] { Config::from_string(text, "many.json"); }), 5.0);
    FAIL() << "accepted unknown keys";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 101u);
    EXPECT_EQ(e.problems().back(), "... and 199900 more problems (only the first 100 are listed)");
  }
  text = "{\"train_batch_size\": 8";
  for (int i = 0; i < 1000; ++i) text += ", \"k\": 1";
  const std::string e = error_of_text(text + "}");
  EXPECT_NE(e.find("... and 899 more keys given more than once"), std::string::npos) << e.substr(e.size() - 200);
}

// micro near 2^63 (or micro x accumulation x data-parallel size over 2^63)
// resolved train_batch_size to -2 or 0, and stratum-config check said OK. Each
// count is now at most int's maximum on its own (refused by name beyond it);
// their product with the world size can still pass 2^63.
TEST_F(ConfigLimits, BatchProductOverflowIsAnError) {
  const std::string big = std::to_string(std::numeric_limits<int32_t>::max());
  auto resolve_error = [](const std::string& json, int64_t world) {
    try {
      Config::from_string(json, "batch.json").resolve_batch(world);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string e = resolve_error(R"({"train_micro_batch_size_per_gpu": 9223372036854775807})", 2);
  EXPECT_NE(e.find("train_micro_batch_size_per_gpu: expected 1..2147483647, got 9223372036854775807"),
            std::string::npos)
      << e;
  e = resolve_error(R"({"train_micro_batch_size_per_gpu": )" + big + R"(, "gradient_accumulation_steps": )" + big + "}",
                    4);
  EXPECT_NE(e.find("train_micro_batch_size_per_gpu 2147483647 x gradient_accumulation_steps 2147483647 x "
                   "data-parallel size 4 is over the 64-bit limit"),
            std::string::npos)
      << e;
  e = error_of_text(R"({"train_batch_size": 8, "pipeline": {"stages": 4611686018427387904}})");
  EXPECT_NE(e.find("pipeline.stages: expected 1..4096, got 4611686018427387904"), std::string::npos) << e;
  // The largest products that fit are fine.
  EXPECT_EQ(resolve_error(R"({"train_micro_batch_size_per_gpu": )" + big + R"(, "gradient_accumulation_steps": )" +
                              big + "}",
                          1),
            "");
}

// Floats were converted when under 9.2e18 and refused as "expected an
// integer" above it; 2^63 itself converts to an undefined value.
TEST_F(ConfigLimits, BucketSizesOutOfRangeAreNamed) {
  std::string e = error_of_text(R"({"train_batch_size": 8, "zero_optimization": {"reduce_bucket_size": 1e19}})");
  EXPECT_NE(e.find("zero_optimization.reduce_bucket_size: integer 1e+19 does not fit in 64 bits"), std::string::npos)
      << e;
  e = error_of_text(R"({"train_batch_size": 8, "zero_optimization": {"allgather_bucket_size": 9.223372036854775808e18}})");
  EXPECT_NE(e.find("zero_optimization.allgather_bucket_size: integer"), std::string::npos) << e;
  EXPECT_NE(e.find("does not fit in 64 bits"), std::string::npos) << e;
  const Config c = Config::from_string(
      R"({"train_batch_size": 8, "zero_optimization": {"reduce_bucket_size": 9.2e18, "stage3_prefetch_bucket_size": 5e7}})",
      "ok.json");
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 9'200'000'000'000'000'000);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 50'000'000);
}

// Found by fuzz_config: a number past double's range threw nlohmann's
// out_of_range, not a ConfigError (stratum-config printed the raw exception,
// without a place).
TEST_F(ConfigLimits, NumberOutOfRangeIsAConfigError) {
  const std::string e = error_of_text("{\"train_batch_size\": 8,\n \"gradient_clipping\": 5e85555555555555555555555}");
  EXPECT_NE(e.find("limits.json:2:23: 1 problem"), std::string::npos) << e;
  EXPECT_NE(e.find("invalid JSON: the number 5e85555555555555555555555 is out of range"), std::string::npos) << e;
}

}  // namespace
