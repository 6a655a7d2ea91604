// Megatron's weighted blend (--data 0.75 a 0.25 b): windows drawn from each
// source in the weights' proportions, in a deterministic order, a short source
// starting over; bad blends named by their argument.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/blend.h"
#include "stratum/data/token_file.h"

using namespace stratum;
using namespace stratum::data;

namespace {
std::string error_of(const std::vector<std::string>& args) {
  try {
    parse_blend(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(Blend, WindowsFollowTheWeights) {
  const std::string dir = fs::make_temp_directory("stratum_blend_");
  write_token_file(dir + "/a.strtok", std::vector<int32_t>(64, 1), "byte", 256);  // 8 windows of 8
  write_token_file(dir + "/b.strtok", std::vector<int32_t>(24, 2), "byte", 256);  // 3 windows
  const auto sources = parse_blend({"3", dir + "/a.strtok", "1", dir + "/b.strtok"});
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_DOUBLE_EQ(sources[0].weight, 0.75);
  const std::string path = blend_token_files(sources, 8, dir + "/cache", true);
  TokenFile f(path);
  ASSERT_EQ(f.size(), (8 + 3) * 8);  // as many windows as the sources hold
  std::string order;
  for (int64_t w = 0; w < 11; ++w) {
    const int64_t t = f.token(w * 8);
    for (int64_t i = 1; i < 8; ++i) ASSERT_EQ(f.token(w * 8 + i), t) << "window " << w << " mixes sources";
    order += t == 1 ? 'a' : 'b';
  }
  EXPECT_EQ(order, "aabaaabaaab");  // 3 : 1, each window from the source furthest behind
  EXPECT_EQ(blend_token_files(sources, 8, dir + "/cache", false), path);  // cached
  // One path is no blend; a short source starts over.
  EXPECT_EQ(blend_token_files(parse_blend({dir + "/a.strtok"}), 8, dir + "/cache", true), dir + "/a.strtok");
  const std::string skewed = blend_token_files(parse_blend({"1", dir + "/a.strtok", "3", dir + "/b.strtok"}), 8,
                                               dir + "/cache", true);
  TokenFile g(skewed);
  int64_t b_windows = 0;
  for (int64_t w = 0; w < g.size() / 8; ++w) b_windows += g.token(w * 8) == 2;
  EXPECT_EQ(b_windows, 8);  // 3/4 of 11 windows (rounded by the order), b's 3 windows reused
  write_token_file(dir + "/c.strtok", std::vector<int32_t>(64, 3), "llmc-gpt2", 50257);
  EXPECT_THROW(blend_token_files(parse_blend({"1", dir + "/a.strtok", "1", dir + "/c.strtok"}), 8, dir + "/cache", true),
               Error);
  fs::remove_tree(dir);
}

TEST(Blend, BadBlendsNameTheArgument) {
  EXPECT_NE(error_of({"0.5", "a", "b"}).find("3 values"), std::string::npos);
  EXPECT_NE(error_of({"half", "a", "0.5", "b"}).find("'half' (value 1) is not a positive weight"), std::string::npos);
  EXPECT_NE(error_of({"-1", "a", "2", "b"}).find("'-1' (value 1)"), std::string::npos);
  EXPECT_NE(error_of({"1", "a", "1", "a"}).find("a is given twice"), std::string::npos);
}
