// --data from strangers: every file read as a regular file only (a FIFO or a
// link to /dev/zero, as the source, inside a data directory, as a Megatron
// .idx/.bin or an llm.c shard, refused by name without blocking), JSON Lines
// lines bounded and records parsed by the untrusted-JSON reader (repeated
// keys, deep nesting), Megatron counts that overflow, blend weights that
// overflow. Each call that could hang runs in a child killed after a timeout,
// so a regression fails here in seconds instead of hanging the suite.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/blend.h"
#include "stratum/data/dataset.h"
#include "stratum/data/foreign_token_headers.h"
#include "stratum/data/jsonl_record.h"
#include "stratum/data/token_file.h"
#include "temp_dir.h"

using namespace stratum;
using namespace stratum::data;
using data::testing::write_text;

namespace {

constexpr int kTimeoutMs = 20000;

// The message of the stratum::Error `call` throws, run in a child process:
// "no error", or "timed out" when it neither returns nor throws in time (the
// child, blocked on a FIFO or reading /dev/zero, is killed).
std::string error_in_child(const std::function<void()>& call) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(fds[0]);
    std::string message = "no error";
    try {
      call();
    } catch (const Error& e) {
      message = e.what();
    } catch (const std::exception& e) {
      message = std::string("not a stratum::Error: ") + e.what();
    }
    size_t done = 0;
    while (done < message.size()) {
      const ssize_t n = ::write(fds[1], message.data() + done, message.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string message;
  bool timed_out = false;
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, kTimeoutMs) <= 0) {
      timed_out = true;
      break;
    }
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    message.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (timed_out) return "timed out";
  if (!WIFEXITED(status)) return "child died (signal " + std::to_string(WTERMSIG(status)) + ")";
  return message;
}

// A tokenizer with an EOS (JSON Lines needs one): bytes, EOS 256.
class BytesWithEos final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override { return ByteTokenizer().encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return ByteTokenizer().decode(ids); }
  int64_t vocab_size() const override { return 257; }
  std::string name() const override { return "bytes-eos"; }
  int32_t eos_id() const override { return 256; }
};

class UntrustedDataSources : public data::testing::TempDirTest {
 protected:
  void make_fifo(const std::string& name) { ASSERT_EQ(::mkfifo(path(name).c_str(), 0600), 0) << path(name); }
  void link_to_dev_zero(const std::string& name) { ASSERT_EQ(::symlink("/dev/zero", path(name).c_str()), 0); }
  // prepare_token_file's error for `source`, in a child with a timeout.
  std::string prepare_error(const std::string& source, const DatasetOptions& options) {
    return error_in_child([&] { prepare_token_file(source, BytesWithEos(), options); });
  }
  std::string prepare_error(const std::string& source) { return prepare_error(source, {path("cache"), true}); }
  // A valid Megatron pair PREFIX.idx + PREFIX.bin: two uint16 sequences, one document.
  void write_megatron(const std::string& prefix) {
    write_text(path(prefix + ".idx"), megatron_index(2, 2, {3, 2}, {0, 6}, {0, 2}));
    write_text(path(prefix + ".bin"), std::string(10, '\1'));
  }
  static std::string megatron_index(uint64_t sequences, uint64_t documents, const std::vector<int32_t>& sizes,
                                    const std::vector<int64_t>& pointers, const std::vector<int64_t>& docs) {
    std::string idx("MMIDIDX\0\0", 9);
    auto put = [&](const void* p, size_t n) { idx.append(static_cast<const char*>(p), n); };
    const uint64_t version = 1;
    const uint8_t code = 8;  // uint16
    put(&version, 8), put(&code, 1), put(&sequences, 8), put(&documents, 8);
    for (int32_t s : sizes) put(&s, 4);
    for (int64_t p : pointers) put(&p, 8);
    for (int64_t d : docs) put(&d, 8);
    return idx;
  }
};

const char* kFifo = "must be a regular file, but this is a FIFO (named pipe)";
const char* kDevice = "must be a regular file, but this is a character device";

bool has(const std::string& message, const std::string& part) { return message.find(part) != std::string::npos; }

}  // namespace

// --- FIFOs and /dev/zero -------------------------------------------------------

TEST_F(UntrustedDataSources, FifoOrDevZeroAsTextFileIsRefusedByName) {
  for (const std::string name : {"corpus.txt", "docs.jsonl"}) {
    make_fifo("fifo_" + name);
    std::string e = prepare_error(path("fifo_" + name));
    EXPECT_TRUE(has(e, path("fifo_" + name) + ": a data file " + kFifo)) << e;
    link_to_dev_zero("zero_" + name);
    e = prepare_error(path("zero_" + name));
    EXPECT_TRUE(has(e, path("zero_" + name) + ": a data file " + kDevice)) << e;
    // Every rank checks the source, the writer or not.
    e = prepare_error(path("zero_" + name), {path("cache"), false});
    EXPECT_TRUE(has(e, path("zero_" + name) + ": a data file " + kDevice)) << e;
  }
}

TEST_F(UntrustedDataSources, FifoOrDevZeroAsLlmcShardIsRefusedByName) {
  make_fifo("shard.bin");
  std::string e = prepare_error(path("shard.bin"));
  EXPECT_TRUE(has(e, path("shard.bin") + ": a data file " + kFifo)) << e;
  link_to_dev_zero("zero_shard.bin");
  e = prepare_error(path("zero_shard.bin"));
  EXPECT_TRUE(has(e, path("zero_shard.bin") + ": a data file " + kDevice)) << e;
}

TEST_F(UntrustedDataSources, FifoOrDevZeroAsMegatronIndexOrTokensIsRefusedByName) {
  write_megatron("good");
  EXPECT_EQ(error_in_child([&] { TokenFile(prepare_token_file(path("good"), BytesWithEos(), {path("cache"), true})); }),
            "no error");

  write_text(path("fifo_idx.bin"), std::string(10, '\1'));
  make_fifo("fifo_idx.idx");
  std::string e = prepare_error(path("fifo_idx"));
  EXPECT_TRUE(has(e, path("fifo_idx.idx") + ": a Megatron index (.idx) " + kFifo)) << e;

  write_megatron("fifo_bin");
  ASSERT_EQ(::unlink(path("fifo_bin.bin").c_str()), 0);
  make_fifo("fifo_bin.bin");
  e = prepare_error(path("fifo_bin"));
  EXPECT_TRUE(has(e, path("fifo_bin.bin") + ": a Megatron dataset's tokens (.bin) " + kFifo)) << e;

  write_text(path("zero_idx.bin"), std::string(10, '\1'));
  link_to_dev_zero("zero_idx.idx");
  e = prepare_error(path("zero_idx"));
  EXPECT_TRUE(has(e, path("zero_idx.idx") + ": a Megatron index (.idx) " + kDevice)) << e;

  write_megatron("zero_bin");
  ASSERT_EQ(::unlink(path("zero_bin.bin").c_str()), 0);
  link_to_dev_zero("zero_bin.bin");
  e = prepare_error(path("zero_bin.idx"));
  EXPECT_TRUE(has(e, path("zero_bin.bin") + ": a Megatron dataset's tokens (.bin) " + kDevice)) << e;
}

TEST_F(UntrustedDataSources, DirectoryEntriesMustBeRegularFilesOrLinksToThem) {
  fs::make_directories(path("books/chapter.txt"));  // a subdirectory, even named *.txt, is skipped
  write_text(path("books/a.txt"), "first\n");
  write_text(path("elsewhere.txt"), "second\n");
  ASSERT_EQ(::symlink(path("elsewhere.txt").c_str(), path("books/b.txt").c_str()), 0);  // followed
  EXPECT_EQ(error_in_child([&] {
              TokenFile f(prepare_token_file(path("books"), ByteTokenizer(), {path("cache"), true}));
              if (f.size() != 13) throw Error("books: " + std::to_string(f.size()) + " tokens, not 13");
            }),
            "no error");

  make_fifo("books/c.txt");
  std::string e = prepare_error(path("books"));
  EXPECT_TRUE(has(e, path("books/c.txt") + ": a data file " + kFifo)) << e;
  ASSERT_EQ(::unlink(path("books/c.txt").c_str()), 0);

  link_to_dev_zero("books/d.txt");
  e = prepare_error(path("books"));
  EXPECT_TRUE(has(e, path("books/d.txt") + ": a data file " + kDevice)) << e;
  ASSERT_EQ(::unlink(path("books/d.txt").c_str()), 0);

  ASSERT_EQ(::symlink(path("nothing.txt").c_str(), path("books/e.txt").c_str()), 0);
  e = prepare_error(path("books"));
  EXPECT_TRUE(has(e, path("books/e.txt") + ": cannot open a data file")) << e;
}

// --- JSON Lines ----------------------------------------------------------------

TEST_F(UntrustedDataSources, JsonlLineWithoutNewlineIsBounded) {
  // The real limit: a sparse file of zeros one byte over it, no newline.
  const std::string huge = path("huge.jsonl");
  write_text(huge, "");
  ASSERT_EQ(::truncate(huge.c_str(), static_cast<off_t>(kMaxJsonlLineBytes + 1)), 0);
  std::string e = prepare_error(huge);
  EXPECT_TRUE(has(e, huge + ":1 (byte 0): line longer than " + fs::describe_bytes(kMaxJsonlLineBytes))) << e;

  // A lowered limit names the line and byte where the long line starts.
  write_text(path("long.jsonl"), "{\"text\": \"ok\"}\n" + std::string(5000, 'x'));
  e = prepare_error(path("long.jsonl"), {path("cache"), true, 4096});
  EXPECT_TRUE(has(e, path("long.jsonl") + ":2 (byte 15): line longer than 4096 bytes")) << e;
  e = prepare_error(path("long.jsonl"), {path("cache"), true, 10});
  EXPECT_TRUE(has(e, path("long.jsonl") + ":1 (byte 0): line longer than 10 bytes")) << e;
}

TEST_F(UntrustedDataSources, JsonlRepeatedTextKeyIsRefused) {
  write_text(path("twice.jsonl"), "{\"text\": \"fine\"}\n{\"text\": \"a\", \"text\": \"b\"}\n");
  const std::string e = prepare_error(path("twice.jsonl"));
  EXPECT_TRUE(has(e, path("twice.jsonl") + ":2 (byte 17): not a JSON Lines record: text: given more than once")) << e;
}

TEST_F(UntrustedDataSources, JsonlRecordChecks) {
  EXPECT_EQ(jsonl_document_text(R"({"text": "caf\u00e9", "meta": {"id": 1}})", "d.jsonl:1 (byte 0)"), "caf\xc3\xa9");
  auto error = [](const std::string& line) {
    try {
      jsonl_document_text(line, "d.jsonl:7 (byte 99)");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = error(std::string(100, '[') + std::string(100, ']'));
  EXPECT_TRUE(has(e, "d.jsonl:7 (byte 99), column 65: not a JSON Lines record: JSON nested deeper than 64")) << e;
  e = error(R"({"text": "a", "text": "a"})");
  EXPECT_TRUE(has(e, "d.jsonl:7 (byte 99): not a JSON Lines record: text: given more than once")) << e;
  e = error(R"({"text": "trunc)");
  EXPECT_TRUE(has(e, "d.jsonl:7 (byte 99), column ")) << e;
  EXPECT_TRUE(has(e, "invalid JSON")) << e;
  for (const char* line : {R"({"txt": "a"})", R"({"text": 1})", R"(["text"])", "\"text\""})
    EXPECT_TRUE(has(error(line), "d.jsonl:7 (byte 99): not an object with a string \"text\"")) << line;
}

// --- Megatron and llm.c headers ------------------------------------------------

TEST_F(UntrustedDataSources, MegatronCountsThatOverflowAreRefused) {
  // 2^62 * 12 + 2^61 * 8 wraps to 0: the 34-byte header alone would "fit".
  const std::string idx = megatron_index(uint64_t{1} << 62, uint64_t{1} << 61, {}, {}, {});
  ASSERT_EQ(idx.size(), kMegatronTableOffset);
  write_text(path("wrap.idx"), idx);
  write_text(path("wrap.bin"), "");
  const std::string e = prepare_error(path("wrap"));
  EXPECT_TRUE(has(e, path("wrap.idx") + ": byte 18: 4611686018427387904 sequences and 2305843009213693952 documents "
                                        "need more bytes than any file holds but the index has 34 (truncated)"))
      << e;

  auto check = [](const std::string& bytes, uint64_t bin_size) {
    try {
      check_megatron_index(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), bin_size, "m.idx", "m.bin");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(check(megatron_index(2, 1, {3, 2}, {0, 6}, {0}), 10), "no error");
  // A pointer far past the .bin, a negative size, a negative or backwards document index.
  EXPECT_TRUE(has(check(megatron_index(2, 1, {3, 2}, {0, INT64_MAX}, {0}), 10),
                  "m.idx: byte 50: sequence 1 starts at byte 9223372036854775807 of the .bin, not 6"));
  EXPECT_TRUE(has(check(megatron_index(2, 1, {3, -2}, {0, 6}, {0}), 10), "m.idx: byte 38: sequence 1 has size -2"));
  EXPECT_TRUE(has(check(megatron_index(2, 1, {3, 2}, {0, 6}, {0}), 8), "m.bin: truncated at byte 8: sequence 1"));
  EXPECT_TRUE(has(check(megatron_index(2, 2, {3, 2}, {0, 6}, {0, -1}), 10), "m.idx: byte 66: document index -1"));
  EXPECT_TRUE(has(check(megatron_index(2, 2, {3, 2}, {0, 6}, {0, 3}), 10), "m.idx: byte 66: document index 3"));
  EXPECT_TRUE(has(check(megatron_index(2, 1, {3, 2}, {0, 6}, {0}).substr(0, 30), 10), "m.idx: truncated at byte 30"));
}

TEST_F(UntrustedDataSources, LlmcHeaderCountsAreCheckedAgainstTheSize) {
  auto shard = [](int32_t count, size_t tokens) {
    std::vector<int32_t> header(256, 0);
    header[0] = kLlmcGpt2Magic, header[1] = 1, header[2] = count;
    std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
    return bytes + std::string(tokens * 2, '\0');
  };
  auto check = [](const std::string& bytes) {
    try {
      const auto info = check_llmc_shard(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "s.bin");
      return "ok " + std::to_string(info.count);
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(check(shard(3, 3)), "ok 3");
  EXPECT_TRUE(has(check(shard(-5, 3)), "s.bin: byte 8: the header says -5 tokens")) << check(shard(-5, 3));
  EXPECT_TRUE(has(check(shard(INT32_MAX, 3)), "s.bin: byte 8: the header says 2147483647 tokens (4294968318 bytes"));
  EXPECT_TRUE(has(check(shard(3, 4)), "(bytes after the tokens)")) << check(shard(3, 4));
  EXPECT_TRUE(has(check(shard(3, 3).substr(0, 6)), "s.bin: truncated at byte 6 (the version at byte 4"));
}

// --- a text file with no safe cut ----------------------------------------------

TEST_F(UntrustedDataSources, TextWithoutSafeCutsIsStreamedInBoundedPieces) {
  // No "\n<letter>" anywhere: pieces are cut anyway (memory stays bounded), and
  // with a byte tokenizer the ids are the text's bytes whatever the cuts.
  std::string text;
  while (text.size() < (size_t{17} << 20)) text += "word ";
  write_text(path("endless.txt"), text);
  TokenFile f(prepare_token_file(path("endless.txt"), ByteTokenizer(), {path("cache"), true}));
  ASSERT_EQ(f.size(), static_cast<int64_t>(text.size()));
  std::vector<int64_t> ids(static_cast<size_t>(f.size()));
  f.read(0, f.size(), ids.data());
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], static_cast<unsigned char>(text[i])) << "token " << i;
}

// --- blend weights -------------------------------------------------------------

TEST(UntrustedBlendWeights, WeightsThatOverflowOrVanishAreRefusedByName) {
  auto error = [](const std::vector<std::string>& args) {
    try {
      parse_blend(args);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = error({"1e308", "a", "1e308", "b"});
  EXPECT_TRUE(has(e, "--data: '1e308' (value 3) brings the sum of the weights past a double's range")) << e;
  e = error({"5e-324", "a", "1e300", "b"});
  EXPECT_TRUE(has(e, "--data: '5e-324' (value 1) is 0 next to the sum of the weights")) << e;
  for (const char* w : {"nan", "inf", "-inf", "0", "-0.5", "1e999", "0.5x", ""})
    EXPECT_TRUE(has(error({"1", "a", w, "b"}), std::string("'") + w + "' (value 3) is not a positive weight")) << w;
  std::vector<std::string> many;
  for (int i = 0; i < 2000; ++i) many.push_back("1"), many.push_back("s" + std::to_string(i));
  e = error(many);
  EXPECT_TRUE(has(e, "--data: a blend of 2000 sources; at most 1024")) << e;
  const auto ok = parse_blend({"1e-300", "a", "3e-300", "b"});  // tiny but proportional: fine
  EXPECT_DOUBLE_EQ(ok[0].weight, 0.25);
}
