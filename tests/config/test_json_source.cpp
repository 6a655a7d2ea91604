// Reading config files: missing, unreadable, empty and malformed files name
// the file (and line:column of a syntax error).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>

#include "stratum/config/config.h"
#include "stratum/config/json_source.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"

using stratum::Config;
using stratum::ConfigError;

namespace {

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = stratum::fs::make_temp_directory("stratum_cfg_"); }
  void TearDown() override { stratum::fs::remove_tree(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  std::string error_of(const std::string& path) {
    try {
      Config::from_file(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

TEST_F(ConfigFile, ReadsAValidFile) {
  Config c = Config::from_file(write("ok.json", R"({"train_batch_size": 4, "zero_optimization": {"stage": 1}})"));
  EXPECT_EQ(c.zero_optimization.stage, 1);
  EXPECT_NE(c.source.find("ok.json"), std::string::npos);
}

TEST_F(ConfigFile, MissingFileIsNamed) {
  std::string p = dir_ + "/nope.json";
  std::string e = error_of(p);
  EXPECT_NE(e.find(p), std::string::npos);
  EXPECT_NE(e.find("no such file"), std::string::npos);
}

TEST_F(ConfigFile, DirectoryIsRejected) {
  std::string e = error_of(dir_);
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
}

TEST_F(ConfigFile, UnreadableFileIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file";
  std::string p = write("secret.json", "{}");
  ::chmod(p.c_str(), 0);
  std::string e = error_of(p);
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
}

TEST_F(ConfigFile, EmptyFile) {
  std::string p = write("empty.json", "  \n");
  std::string e = error_of(p);
  EXPECT_NE(e.find(p + ": 1 problem"), std::string::npos) << e;
  EXPECT_NE(e.find("the file is empty"), std::string::npos) << e;
}

TEST_F(ConfigFile, SyntaxErrorHasLineAndColumn) {
  std::string p = write("syntax.json", "{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": tru}\n}\n");
  std::string e = error_of(p);
  EXPECT_NE(e.find(p + ":3:"), std::string::npos) << e;
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;
}

TEST_F(ConfigFile, TrailingCommaIsASyntaxError) {
  std::string p = write("comma.json", "{\"train_batch_size\": 8,\n}");
  std::string e = error_of(p);
  EXPECT_NE(e.find(p + ":2:1"), std::string::npos) << e;
}

TEST_F(ConfigFile, ValidationErrorsNameTheFile) {
  std::string p = write("stage.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 9}})");
  std::string e = error_of(p);
  EXPECT_EQ(e.rfind(p, 0), 0u) << e;
  EXPECT_NE(e.find("zero_optimization.stage: expected 0..3, got 9"), std::string::npos) << e;
}

}  // namespace

// A key twice in one object: JSON keeps the last value, which would drop a
// setting silently. Each repeat is named by its path, in objects inside arrays
// too; the same key in different objects is fine.
TEST_F(ConfigFile, KeysGivenTwiceAreNamed) {
  const std::string e = error_of(write("twice.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 1, "reduce_bucket_size": 5e7, "stage": 2},
      "train_batch_size": 16})"));
  EXPECT_NE(e.find("twice.json"), std::string::npos) << e;
  EXPECT_NE(e.find("zero_optimization.stage: given more than once"), std::string::npos) << e;
  EXPECT_NE(e.find("train_batch_size: given more than once"), std::string::npos) << e;
  try {
    stratum::config::parse_json_text(R"({"a": [1, {"b": 1}, {"b": 2, "c": [0, {"d": 1, "d": 2}]}]})", "arrays");
    FAIL() << "accepted a repeated key";
  } catch (const ConfigError& err) {
    ASSERT_EQ(err.problems().size(), 1u) << err.what();
    EXPECT_EQ(err.problems()[0].rfind("a[2].c[1].d: given more than once", 0), 0u) << err.what();
  }
  EXPECT_NO_THROW(Config::from_file(write("same_key_elsewhere.json",
                                          R"({"train_batch_size": 8, "fp16": {"enabled": false},
                                              "bf16": {"enabled": true}})")));
}
