// The default corpus: the system's license texts in a fixed order, the
// embedded fallback, and a file written once.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "stratum/core/fs.h"
#include "stratum/data/default_corpus.h"
#include "temp_dir.h"

using namespace stratum;
using namespace stratum::data;
using data::testing::read_text;
using data::testing::write_text;

namespace {
class DefaultCorpusTest : public data::testing::TempDirTest {};

int64_t mtime_ns(const std::string& p) {
  struct stat st;
  ::stat(p.c_str(), &st);
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}
}  // namespace

TEST_F(DefaultCorpusTest, SystemLicensesInAFixedOrder) {
  if (!fs::exists(std::string(kSystemLicensesDir) + "/GPL-3")) GTEST_SKIP() << "no " << kSystemLicensesDir;
  const std::string text = default_corpus_text();
  std::printf("default corpus: %zu bytes\n", text.size());
  EXPECT_GE(text.size(), 200000u);
  EXPECT_EQ(text, default_corpus_text());
  const size_t gpl3 = text.find("GNU GENERAL PUBLIC LICENSE\n                       Version 3");
  const size_t apache = text.find("Apache License\n                           Version 2.0");
  ASSERT_NE(gpl3, std::string::npos);
  ASSERT_NE(apache, std::string::npos);
  EXPECT_LT(gpl3, apache);
  EXPECT_GT(apache, text.size() - 12000);  // Apache-2.0 is the tail (the held-out part)
}

TEST_F(DefaultCorpusTest, OrderAndSeparatorsFromAGivenDirectory) {
  fs::make_directories(path("licenses"));
  const std::string big(40000, 'x');
  write_text(path("licenses/Apache-2.0"), "apache" + big);  // no final newline: one is added
  write_text(path("licenses/GPL-2"), "gpl2" + big + "\n");
  write_text(path("licenses/Unknown"), "not in the list\n");
  EXPECT_EQ(default_corpus_text(path("licenses")), "gpl2" + big + "\n\napache" + big + "\n\n");
}

TEST_F(DefaultCorpusTest, EmbeddedTextWhenLicensesAreMissingOrTooSmall) {
  const std::string embedded = embedded_corpus_text();
  EXPECT_GT(embedded.size(), 3000u);
  EXPECT_EQ(embedded.rfind("Four score and seven years ago", 0), 0u);
  EXPECT_EQ(default_corpus_text(path("absent")), embedded);
  fs::make_directories(path("licenses"));
  write_text(path("licenses/GPL-3"), "short\n");
  EXPECT_EQ(default_corpus_text(path("licenses")), embedded);
}

TEST_F(DefaultCorpusTest, WrittenOnceAndRewrittenWhenDifferent) {
  const std::string p = write_default_corpus(path("data"));
  EXPECT_EQ(p, path("data/default_corpus.txt"));
  EXPECT_EQ(read_text(p), default_corpus_text());
  const int64_t first = mtime_ns(p);
  EXPECT_EQ(write_default_corpus(path("data")), p);
  EXPECT_EQ(mtime_ns(p), first);  // same text: untouched, so its token cache stays valid
  write_text(p, "stale");
  write_default_corpus(path("data"));
  EXPECT_EQ(read_text(p), default_corpus_text());
  EXPECT_EQ(fs::list_directory(path("data")).size(), 1u);
}
