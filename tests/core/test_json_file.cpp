// stratum::read_json_file / parse_json_text: the one reader of JSON from files
// Stratum did not write. Size, kind of file, nesting and repeated keys are
// refused naming the file (and line:column), before or instead of parsing.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "../common/error_of.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/json_file.h"

namespace {

using namespace stratum;
using stratum::test::error_of;

class JsonFile : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::make_temp_directory("stratum_json_"); }
  void TearDown() override { fs::remove_tree(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(JsonFile, ReadsAnObject) {
  const auto j = read_json_file(write("config.json", R"({"a": [1, {"b": "c"}]})"), 1 << 20, "a config.json");
  EXPECT_EQ(j["a"][1]["b"], "c");
}

TEST_F(JsonFile, NestingBeyondTheCapIsRefusedWithItsPlace) {
  const std::string deep = "{\"x\":\n" + std::string(100, '[') + std::string(100, ']') + "}";
  const std::string e = error_of([&] { read_json_file(write("tokenizer.json", deep), 1 << 20, "a tokenizer.json"); });
  EXPECT_NE(e.find(dir_ + "/tokenizer.json:2:64: 1 problem"), std::string::npos) << e;
  EXPECT_NE(e.find("JSON nested deeper than 64 levels; a tokenizer.json needs a handful"), std::string::npos) << e;
  // A caller may allow less.
  EXPECT_NE(error_of([] { parse_json_text("[[[1]]]", "x.json", "a record", 2); }).find("deeper than 2 levels"),
            std::string::npos);
}

TEST_F(JsonFile, AKeyGivenTwiceIsRefusedNotSilentlyDropped) {
  const std::string e =
      error_of([] { parse_json_text(R"({"model": {"vocab": {"a": 0, "b": 1, "a": 2}}})", "tokenizer.json", "a tokenizer.json"); });
  EXPECT_NE(e.find("tokenizer.json: 1 problem"), std::string::npos) << e;
  EXPECT_NE(e.find("model.vocab.a: given more than once in one object"), std::string::npos) << e;
}

TEST_F(JsonFile, FifoDeviceDirectoryAndOversizedFilesAreRefusedWithoutReading) {
  const std::string fifo = dir_ + "/fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string e = error_of([&] { read_json_file(fifo, 1 << 20, "a config.json"); });
  EXPECT_NE(e.find("fifo.json: 1 problem"), std::string::npos) << e;
  EXPECT_NE(e.find("must be a regular file, but this is a FIFO"), std::string::npos) << e;
  const std::string zero = dir_ + "/zero.json";
  ASSERT_EQ(::symlink("/dev/zero", zero.c_str()), 0);
  e = error_of([&] { read_json_file(zero, 1 << 20, "a config.json"); });
  EXPECT_NE(e.find("a character device"), std::string::npos) << e;
  e = error_of([&] { read_json_file(dir_, 1 << 20, "a config.json"); });
  EXPECT_NE(e.find("is a directory, not a config.json"), std::string::npos) << e;
  e = error_of([&] { read_json_file(write("big.json", "[" + std::string(5000, ' ') + "]"), 4096, "an index"); });
  EXPECT_NE(e.find("over the limit of 4096 bytes"), std::string::npos) << e;
}

TEST_F(JsonFile, SyntaxErrorsNameLineAndColumn) {
  std::string e = error_of([] { parse_json_text("{\n  \"a\": tru\n}", "c.json", "a config.json"); });
  EXPECT_NE(e.find("c.json:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;
  e = error_of([] { parse_json_text("  \n", "c.json", "a config.json"); });
  EXPECT_NE(e.find("the file is empty; a config.json is a JSON object"), std::string::npos) << e;
  e = error_of([] { parse_json_text("{\"a\": 1e999}", "c.json", "a config.json"); });
  EXPECT_NE(e.find("the number 1e999 is out of range"), std::string::npos) << e;
}

}  // namespace
