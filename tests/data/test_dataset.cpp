// From --data to a token file: text sources tokenized into a cache that is
// reused until the text changes; errors for missing or empty input; the
// train / eval split.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/dataset.h"
#include "stratum/data/split.h"
#include "temp_dir.h"

using namespace stratum;
using namespace stratum::data;
using data::testing::write_text;

namespace {
class DatasetTest : public data::testing::TempDirTest {};

std::string all_text(const TokenFile& f) {
  std::vector<int64_t> ids(f.size());
  f.read(0, f.size(), ids.data());
  std::string s;
  for (int64_t id : ids) s.push_back(static_cast<char>(id));
  return s;
}

int64_t mtime_ns(const std::string& p) {
  struct stat st;
  ::stat(p.c_str(), &st);
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

void set_mtime_seconds_ahead(const std::string& p, int seconds) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec += seconds;
  times[1] = times[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
}
}  // namespace

TEST_F(DatasetTest, TextFileIsTokenizedIntoACacheNextToIt) {
  write_text(path("corpus.txt"), "hello world\n");
  ByteTokenizer tok;
  EXPECT_TRUE(is_text_source(path("corpus.txt")));
  const std::string cache = prepare_token_file(path("corpus.txt"), tok);
  EXPECT_EQ(cache, path("corpus.txt.byte.strtok"));
  TokenFile f(cache);
  EXPECT_EQ(f.tokenizer_name(), "byte");
  EXPECT_EQ(all_text(f), "hello world\n");
  EXPECT_EQ(prepare_dataset(path("corpus.txt"), tok).size(), 12);
}

TEST_F(DatasetTest, CacheIsReusedUntilTheTextIsNewer) {
  write_text(path("corpus.txt"), "first version\n");
  ByteTokenizer tok;
  const std::string cache = prepare_token_file(path("corpus.txt"), tok);
  const int64_t built = mtime_ns(cache);
  prepare_token_file(path("corpus.txt"), tok);
  EXPECT_EQ(mtime_ns(cache), built);  // not rewritten

  write_text(path("corpus.txt"), "second, longer version\n");
  set_mtime_seconds_ahead(path("corpus.txt"), 5);  // newer than the cache whatever the clock's resolution
  EXPECT_EQ(all_text(prepare_dataset(path("corpus.txt"), tok)), "second, longer version\n");
}

TEST_F(DatasetTest, DamagedCacheIsRebuilt) {
  write_text(path("corpus.txt"), "some text\n");
  ByteTokenizer tok;
  const std::string cache = prepare_token_file(path("corpus.txt"), tok);
  write_text(cache, "garbage");
  EXPECT_EQ(all_text(prepare_dataset(path("corpus.txt"), tok)), "some text\n");
}

TEST_F(DatasetTest, DirectoryOfTextFilesInNameOrder) {
  fs::make_directories(path("books"));
  write_text(path("books/b.txt"), "second");  // no final newline: one is added
  write_text(path("books/a.txt"), "first\n");
  write_text(path("books/c.txt"), "third\n");
  write_text(path("books/notes.md"), "ignored\n");
  ByteTokenizer tok;
  const std::string cache = prepare_token_file(path("books/"), tok);
  EXPECT_EQ(cache, path("books.byte.strtok"));  // beside the directory, not in it
  EXPECT_EQ(all_text(TokenFile(cache)), "first\nsecond\nthird\n");
}

TEST_F(DatasetTest, CacheDirectoryKeepsSourcesApart) {
  fs::make_directories(path("one"));
  fs::make_directories(path("two"));
  write_text(path("one/corpus.txt"), "one\n");
  write_text(path("two/corpus.txt"), "two\n");
  ByteTokenizer tok;
  const DatasetOptions opts{path("cache/tokens"), true};
  const std::string a = prepare_token_file(path("one/corpus.txt"), tok, opts);
  const std::string b = prepare_token_file(path("two/corpus.txt"), tok, opts);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind(path("cache/tokens/corpus.txt."), 0), 0u) << a;
  EXPECT_EQ(all_text(TokenFile(a)), "one\n");
  EXPECT_EQ(all_text(TokenFile(b)), "two\n");
}

TEST_F(DatasetTest, OnlyTheWriterBuildsTheCache) {
  write_text(path("corpus.txt"), "text\n");
  ByteTokenizer tok;
  const std::string reader_path = prepare_token_file(path("corpus.txt"), tok, {"", false});
  EXPECT_FALSE(fs::exists(reader_path));  // other ranks only learn the path
  const std::string writer_path = prepare_token_file(path("corpus.txt"), tok, {"", true});
  EXPECT_EQ(reader_path, writer_path);
  EXPECT_EQ(TokenFile(reader_path).size(), 5);
}

// Local rank 0 of several nodes on one shared file system: all build the same
// cache at once; each renames a complete file into place.
TEST_F(DatasetTest, ConcurrentWritersLeaveOneValidCache) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + "\n";
  write_text(path("corpus.txt"), text);
  std::vector<pid_t> children;
  for (int c = 0; c < 4; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        ByteTokenizer tok;
        TokenFile f(prepare_token_file(path("corpus.txt"), tok, {path("cache"), true}));
        rc = f.size() == static_cast<int64_t>(text.size()) ? 0 : 2;
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(fs::list_directory(path("cache")).size(), 2u);  // the cache and its document index, no temporaries
  EXPECT_EQ(all_text(prepare_dataset(path("corpus.txt"), ByteTokenizer{}, {path("cache"), false})), text);
}

TEST_F(DatasetTest, TokenFileIsUsedAsIs) {
  write_token_file(path("ready.strtok"), {1, 2, 3}, "byte", 256);
  ByteTokenizer tok;
  EXPECT_FALSE(is_text_source(path("ready.strtok")));
  EXPECT_EQ(prepare_token_file(path("ready.strtok"), tok), path("ready.strtok"));
  EXPECT_EQ(fs::list_directory(dir_).size(), 1u);
}

TEST_F(DatasetTest, Errors) {
  ByteTokenizer tok;
  auto msg = STRATUM_ERROR_MESSAGE(prepare_token_file(path("missing.txt"), tok));
  EXPECT_NE(msg.find(path("missing.txt") + ": no such file"), std::string::npos) << msg;
  // Every rank sees the same error, writer or not.
  msg = STRATUM_ERROR_MESSAGE(prepare_token_file(path("missing.txt"), tok, {"", false}));
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;

  write_text(path("empty.txt"), "");
  msg = STRATUM_ERROR_MESSAGE(prepare_token_file(path("empty.txt"), tok, {"", false}));
  EXPECT_NE(msg.find(path("empty.txt") + ": text is empty (0 bytes)"), std::string::npos) << msg;

  fs::make_directories(path("nothing"));
  write_text(path("nothing/readme.md"), "x");
  msg = STRATUM_ERROR_MESSAGE(prepare_token_file(path("nothing"), tok));
  EXPECT_NE(msg.find(path("nothing") + ": directory holds no .txt files"), std::string::npos) << msg;

  msg = STRATUM_ERROR_MESSAGE(prepare_dataset(path("missing.strtok"), tok));
  EXPECT_NE(msg.find(path("missing.strtok") + ": no such file"), std::string::npos) << msg;
}

// --- train / eval split --------------------------------------------------------

TEST(Split, HoldsOutTheLastFraction) {
  const auto s = split_train_eval(100000, 128, 0.05, "corpus");
  EXPECT_EQ(s.eval.end, 100000);
  EXPECT_EQ(s.eval.size(), 5000);
  EXPECT_EQ(s.train.begin, 0);
  EXPECT_EQ(s.train.end, s.eval.begin);
  EXPECT_EQ(s.train.num_windows(128), (95000 - 1) / 128);
  EXPECT_EQ(s.eval.num_windows(128), (5000 - 1) / 128);
}

TEST(Split, EvalHoldsAtLeastOneSequence) {
  const auto s = split_train_eval(1000, 64, 0.01, "corpus");  // 1% = 10 tokens, less than a window
  EXPECT_EQ(s.eval.size(), 65);
  EXPECT_EQ(s.eval.num_windows(64), 1);
  EXPECT_EQ(s.train.size(), 935);
}

TEST(Split, FractionRoundsUpAndIsDeterministic) {
  const auto a = split_train_eval(1001, 4, 0.1, "c");
  EXPECT_EQ(a.eval.size(), 101);  // ceil(100.1)
  const auto b = split_train_eval(1001, 4, 0.1, "c");
  EXPECT_EQ(a.train.end, b.train.end);
}

TEST(Split, NoEval) {
  const auto s = split_train_eval(50, 8, 0.0, "c");
  EXPECT_EQ(s.train.size(), 50);
  EXPECT_EQ(s.eval.size(), 0);
  EXPECT_EQ(s.eval.num_windows(8), 0);
}

TEST(Split, TooShortNamesTheNumbers) {
  auto msg = STRATUM_ERROR_MESSAGE(split_train_eval(100, 64, 0.05, "data.strtok"));
  EXPECT_NE(msg.find("data.strtok: too short for seq_len 64: requires at least seq_len + 1 = 65 to train on plus 65 "
                     "held out for evaluation = 130 tokens, has 100"),
            std::string::npos)
      << msg;
  msg = STRATUM_ERROR_MESSAGE(split_train_eval(10, 64, 0.0, "data.strtok"));
  EXPECT_NE(msg.find("data.strtok: too short for seq_len 64: requires at least seq_len + 1 = 65 tokens, has 10"),
            std::string::npos)
      << msg;
  EXPECT_NO_THROW(split_train_eval(130, 64, 0.05, "c"));
  EXPECT_THROW(split_train_eval(1000, 8, 1.0, "c"), Error);
  EXPECT_THROW(split_train_eval(1000, 0, 0.1, "c"), Error);
}
