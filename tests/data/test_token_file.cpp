// Token files: round trips in both widths, mmap window reads, and an error
// naming the file (and the numbers) for each way a file can be wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "../common/fifo_deadline.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/token_file.h"
#include "temp_dir.h"

using namespace stratum;
using namespace stratum::data;
using data::testing::read_text;
using data::testing::write_text;

namespace {
class TokenFileTest : public data::testing::TempDirTest {};

int64_t file_bytes(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? st.st_size : -1;
}
}  // namespace

TEST_F(TokenFileTest, Uint16RoundTrip) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back((i * 37) % 256);
  write_token_file(path("a.strtok"), tokens, "byte", 256);
  EXPECT_EQ(file_bytes(path("a.strtok")), 64 + 2 * 1000);
  TokenFile f(path("a.strtok"));
  EXPECT_EQ(f.size(), 1000);
  EXPECT_EQ(f.dtype_bytes(), 2);
  EXPECT_EQ(f.vocab_size(), 256);
  EXPECT_EQ(f.tokenizer_name(), "byte");
  EXPECT_EQ(f.path(), path("a.strtok"));
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(f.token(i), tokens[i]);
  EXPECT_EQ(fs::list_directory(dir_).size(), 1u);  // no temporary left behind
}

TEST_F(TokenFileTest, Uint16HoldsVocabularyOf65536) {
  write_token_file(path("a.strtok"), {0, 65535, 1}, "bpe-65536", 65536);
  TokenFile f(path("a.strtok"));
  EXPECT_EQ(f.dtype_bytes(), 2);
  EXPECT_EQ(f.token(1), 65535);
}

TEST_F(TokenFileTest, Uint32RoundTrip) {
  std::vector<int32_t> tokens = {0, 65535, 65536, 99999, 12345, 70000};
  write_token_file(path("b.strtok"), tokens, "bpe-100000", 100000);
  EXPECT_EQ(file_bytes(path("b.strtok")), 64 + 4 * 6);
  TokenFile f(path("b.strtok"));
  EXPECT_EQ(f.dtype_bytes(), 4);
  EXPECT_EQ(f.vocab_size(), 100000);
  EXPECT_EQ(f.tokenizer_name(), "bpe-100000");
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(f.token(i), tokens[i]);
  std::vector<int64_t> window(3);
  f.read(2, 3, window.data());
  EXPECT_EQ(window, (std::vector<int64_t>{65536, 99999, 12345}));
}

TEST_F(TokenFileTest, StreamingWriterAppendsInPieces) {
  TokenFileWriter w(path("c.strtok"), "byte", 256);
  w.append({1, 2, 3});
  w.append({});
  w.append({4, 5});
  EXPECT_EQ(w.count(), 5);
  EXPECT_FALSE(fs::exists(path("c.strtok")));  // nothing visible before commit
  w.commit();
  TokenFile f(path("c.strtok"));
  std::vector<int64_t> all(5);
  f.read(0, 5, all.data());
  EXPECT_EQ(all, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST_F(TokenFileTest, UncommittedWriterLeavesNothing) {
  {
    TokenFileWriter w(path("d.strtok"), "byte", 256);
    w.append({1, 2, 3});
  }
  EXPECT_TRUE(fs::list_directory(dir_).empty());
}

TEST_F(TokenFileTest, CommitReplacesAnExistingFileAtomically) {
  write_token_file(path("e.strtok"), {1, 2, 3}, "byte", 256);
  TokenFile old_file(path("e.strtok"));
  write_token_file(path("e.strtok"), {9, 8, 7, 6}, "byte", 256);
  EXPECT_EQ(old_file.size(), 3);  // the old mapping still reads the old file
  EXPECT_EQ(old_file.token(0), 1);
  TokenFile f(path("e.strtok"));
  EXPECT_EQ(f.size(), 4);
  EXPECT_EQ(f.token(0), 9);
}

TEST_F(TokenFileTest, WindowReadsAndBounds) {
  std::vector<int32_t> tokens(300);
  for (int i = 0; i < 300; ++i) tokens[i] = i % 251;
  write_token_file(path("w.strtok"), tokens, "byte", 256);
  TokenFile f(path("w.strtok"));
  std::vector<int64_t> w(50);
  f.read(250, 50, w.data());  // the last token included
  for (int i = 0; i < 50; ++i) ASSERT_EQ(w[i], (250 + i) % 251);
  f.read(300, 0, w.data());  // empty window at the end is fine
  EXPECT_NE(STRATUM_ERROR_MESSAGE(f.read(251, 50, w.data())).find("window [251, 301) outside the file's 300 tokens"),
            std::string::npos);
  EXPECT_THROW(f.read(-1, 2, w.data()), Error);
  EXPECT_THROW(f.token(300), Error);
  EXPECT_THROW(f.token(-1), Error);
}

TEST_F(TokenFileTest, MoveKeepsTheMapping) {
  write_token_file(path("m.strtok"), {5, 6, 7}, "byte", 256);
  TokenFile a(path("m.strtok"));
  TokenFile b(std::move(a));
  EXPECT_EQ(b.token(2), 7);
  TokenFile c(path("m.strtok"));
  c = std::move(b);
  EXPECT_EQ(c.size(), 3);
  EXPECT_EQ(c.token(0), 5);
}

TEST_F(TokenFileTest, WriterRejectsIdsOutsideTheVocabularyAndLongNames) {
  const auto msg = STRATUM_ERROR_MESSAGE(write_token_file(path("x.strtok"), {1, 256}, "byte", 256));
  EXPECT_NE(msg.find("token 256 at position 1 is outside the vocabulary [0, 256)"), std::string::npos) << msg;
  EXPECT_THROW(write_token_file(path("x.strtok"), {-1}, "byte", 256), Error);
  EXPECT_THROW(write_token_file(path("x.strtok"), {1}, std::string(32, 'n'), 256), Error);
  EXPECT_THROW(write_token_file(path("x.strtok"), {1}, "byte", 0), Error);
  EXPECT_TRUE(fs::list_directory(dir_).empty());
}

// --- errors: each names the file --------------------------------------------

TEST_F(TokenFileTest, MissingFile) {
  const auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("nope.strtok")));
  EXPECT_NE(msg.find(path("nope.strtok") + ": no such file"), std::string::npos) << msg;
  EXPECT_NE(msg.find(".txt"), std::string::npos) << msg;  // says what --data takes
}

TEST_F(TokenFileTest, ZeroByteFile) {
  write_text(path("empty.strtok"), "");
  const auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("empty.strtok")));
  EXPECT_NE(msg.find(path("empty.strtok") + ": file is empty (0 bytes)"), std::string::npos) << msg;
}

TEST_F(TokenFileTest, ZeroTokens) {
  write_token_file(path("none.strtok"), {}, "byte", 256);
  const auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("none.strtok")));
  EXPECT_NE(msg.find(path("none.strtok") + ": token file is empty (0 tokens)"), std::string::npos) << msg;
}

TEST_F(TokenFileTest, BadMagicSuggestsText) {
  write_text(path("notes.bin"), "This is plain text, not tokens, but long enough for a header........\n");
  auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("notes.bin")));
  EXPECT_NE(msg.find(path("notes.bin") + ": not a Stratum token file (bad magic"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a .txt file or a directory of .txt files"), std::string::npos) << msg;
  write_text(path("tiny.bin"), "STR");  // shorter than the magic
  msg = STRATUM_ERROR_MESSAGE(TokenFile(path("tiny.bin")));
  EXPECT_NE(msg.find("bad magic"), std::string::npos) << msg;
}

TEST_F(TokenFileTest, TruncatedData) {
  std::vector<int32_t> tokens(100, 7);
  write_token_file(path("t.strtok"), tokens, "byte", 256);
  ASSERT_EQ(::truncate(path("t.strtok").c_str(), 64 + 150), 0);
  const auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("t.strtok")));
  EXPECT_NE(msg.find(path("t.strtok") + ": truncated token file: the header says 100 tokens (200 bytes) but the "
                                        "file holds 150 bytes after the header"),
            std::string::npos)
      << msg;
}

TEST_F(TokenFileTest, TruncatedHeader) {
  write_token_file(path("h.strtok"), {1, 2}, "byte", 256);
  ASSERT_EQ(::truncate(path("h.strtok").c_str(), 20), 0);
  const auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("h.strtok")));
  EXPECT_NE(msg.find(path("h.strtok") + ": truncated token file: the header needs 64 bytes, the file has 20"),
            std::string::npos)
      << msg;
}

TEST_F(TokenFileTest, TrailingBytes) {
  write_token_file(path("l.strtok"), {1, 2}, "byte", 256);
  std::string bytes = read_text(path("l.strtok")) + "xyz";
  write_text(path("l.strtok"), bytes);
  const auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("l.strtok")));
  EXPECT_NE(msg.find("3 bytes after the 2 tokens its header announces"), std::string::npos) << msg;
}

TEST_F(TokenFileTest, OtherVersion) {
  write_token_file(path("v.strtok"), {1, 2}, "byte", 256);
  std::string bytes = read_text(path("v.strtok"));
  bytes[8] = 2;
  write_text(path("v.strtok"), bytes);
  const auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("v.strtok")));
  EXPECT_NE(msg.find("token file version 2, this Stratum reads version 1"), std::string::npos) << msg;
}

TEST_F(TokenFileTest, TooShortForOneSequence) {
  write_token_file(path("s.strtok"), std::vector<int32_t>(57, 1), "byte", 256);
  TokenFile f(path("s.strtok"));
  f.require_sequence(56);  // 57 tokens: exactly one sequence of 56
  const auto msg = STRATUM_ERROR_MESSAGE(f.require_sequence(128));
  EXPECT_NE(msg.find(path("s.strtok") + ": too short for one sequence: seq_len 128 requires at least seq_len + 1 = "
                                        "129 tokens, has 57"),
            std::string::npos)
      << msg;
}

TEST_F(TokenFileTest, DirectoryIsNotATokenFile) {
  const auto msg = STRATUM_ERROR_MESSAGE(TokenFile{dir_});
  EXPECT_NE(msg.find(dir_ + ": is a directory"), std::string::npos) << msg;
}

namespace {
// A token file header with the given fields, then `data` bytes.
std::string header_bytes(uint32_t dtype_bytes, uint64_t count, uint64_t vocab) {
  std::string h(64, '\0');
  std::memcpy(h.data(), kTokenFileMagic, 8);
  const uint32_t version = kTokenFileVersion;
  std::memcpy(h.data() + 8, &version, 4);
  std::memcpy(h.data() + 12, &dtype_bytes, 4);
  std::memcpy(h.data() + 16, &count, 8);
  std::memcpy(h.data() + 24, &vocab, 8);
  std::memcpy(h.data() + 32, "byte", 4);
  return h;
}
}  // namespace

// count x bytes per token was an int64 product (undefined past 2^63) and the
// message showed the wrapped size.
TEST_F(TokenFileTest, TokenCountTimesWidthIsCheckedWithoutOverflow) {
  write_text(path("wrap.strtok"), header_bytes(4, uint64_t{1} << 62, 256) + std::string(8, '\0'));
  auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("wrap.strtok")));
  EXPECT_NE(msg.find(path("wrap.strtok") + ": corrupt token file header: 4611686018427387904 tokens x 4 bytes is over "
                                           "2^64 bytes; the file holds 8 bytes after the header"),
            std::string::npos)
      << msg;
  write_text(path("big.strtok"), header_bytes(2, uint64_t{1} << 61, 256) + std::string(8, '\0'));
  msg = STRATUM_ERROR_MESSAGE(TokenFile(path("big.strtok")));
  EXPECT_NE(msg.find("the header says 2305843009213693952 tokens (4611686018427387904 bytes) but the file holds 8 "
                     "bytes after the header"),
            std::string::npos)
      << msg;
  // The same checks on memory (what the fuzz target calls).
  const std::string ok = header_bytes(2, 4, 256) + std::string(8, '\0');
  const auto info = check_token_file(reinterpret_cast<const unsigned char*>(ok.data()), ok.size(), "mem");
  EXPECT_EQ(info.count, 4);
  EXPECT_EQ(info.dtype_bytes, 2);
  EXPECT_EQ(info.tokenizer_name, "byte");
}

TEST_F(TokenFileTest, VocabularySizeOutOfRangeIsCorrupt) {
  write_text(path("v.strtok"), header_bytes(2, 1, 0) + std::string(2, '\0'));
  auto msg = STRATUM_ERROR_MESSAGE(TokenFile(path("v.strtok")));
  EXPECT_NE(msg.find("corrupt token file header: vocabulary size 0 is not in [1, 2^31]"), std::string::npos) << msg;
  write_text(path("w.strtok"), header_bytes(2, 1, ~uint64_t{0}) + std::string(2, '\0'));  // was -1 as an int64
  msg = STRATUM_ERROR_MESSAGE(TokenFile(path("w.strtok")));
  EXPECT_NE(msg.find("vocabulary size 18446744073709551615 is not in [1, 2^31]"), std::string::npos) << msg;
}

// Opening a FIFO blocked until a writer came; /dev/zero is a device, not a file.
TEST_F(TokenFileTest, FifoAndDevicesAreRefusedWithoutBlocking) {
  const std::string fifo = path("pipe.strtok");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string msg;
  ASSERT_TRUE(test::returns_without_blocking(fifo, [&] { msg = STRATUM_ERROR_MESSAGE(TokenFile{fifo}); }))
      << "opening a FIFO as a token file blocked";
  EXPECT_NE(msg.find(fifo + ": not a regular file"), std::string::npos) << msg;
  msg = STRATUM_ERROR_MESSAGE(TokenFile{"/dev/zero"});
  EXPECT_NE(msg.find("/dev/zero: not a regular file"), std::string::npos) << msg;
}
