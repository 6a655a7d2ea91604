// Reading config files: missing, unreadable, empty and malformed files name
// the file (and line:column of a syntax error).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>

#include "stratum/config/config.h"
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
