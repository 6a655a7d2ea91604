#pragma once
// A scratch directory per test, removed afterwards, plus small file helpers.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "stratum/core/fs.h"

namespace stratum::data::testing {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::make_temp_directory("stratum-data-test-"); }
  void TearDown() override { fs::remove_tree(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
  std::fclose(f);
}

inline std::string read_text(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, got);
  std::fclose(f);
  return out;
}

// The message of the stratum::Error that `statement` throws ("" if none).
#define STRATUM_ERROR_MESSAGE(statement)        \
  [&]() -> std::string {                        \
    try {                                       \
      statement;                                \
    } catch (const ::stratum::Error& e) {       \
      return e.what();                          \
    }                                           \
    ADD_FAILURE() << "no error from " #statement; \
    return "";                                  \
  }()

}  // namespace stratum::data::testing
