// Pretokenized data as other tools write it — llm.c shards (GPT-2 and LLaMA-3
// headers) and Megatron indexed datasets (.bin + .idx) — written by a Python
// script from the formats' specifications (write_foreign_token_files.py),
// read through prepare_token_file into the same tokens, in order; damaged
// files are named with the byte at fault.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/dataset.h"
#include "stratum/data/foreign_token_files.h"
#include "stratum/data/foreign_token_headers.h"
#include "stratum/data/token_file.h"
#include "stratum/data/tokenizer.h"

using namespace stratum;
using namespace stratum::data;

namespace {

class ForeignTokenFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(fs::make_temp_directory("stratum_foreign_"));
    const std::string cmd = std::string("python3 ") + STRATUM_TEST_DATA_DIR + "/write_foreign_token_files.py " + *dir_;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(*dir_ + "/expected.txt");
    std::string line;
    for (auto* v : {&megatron_, &gpt2_}) {
      std::getline(in, line);
      std::istringstream ss(line);
      for (int64_t x; ss >> x;) v->push_back(x);
    }
  }
  static void TearDownTestSuite() {
    fs::remove_tree(*dir_);
    delete dir_;
  }
  static std::vector<int64_t> tokens(const std::string& source) {
    TokenFile f(prepare_token_file(source, ByteTokenizer(), {*dir_ + "/cache", true}));
    std::vector<int64_t> out(static_cast<size_t>(f.size()));
    f.read(0, f.size(), out.data());
    return out;
  }
  static std::string error_of(const std::string& source) {
    try {
      prepare_token_file(source, ByteTokenizer(), {*dir_ + "/cache", true});
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
  static std::string* dir_;
  static std::vector<int64_t> megatron_, gpt2_;
};
std::string* ForeignTokenFiles::dir_ = nullptr;
std::vector<int64_t> ForeignTokenFiles::megatron_, ForeignTokenFiles::gpt2_;

}  // namespace

TEST_F(ForeignTokenFiles, LlmcShardsReadAsWritten) {
  const std::string gpt2 = *dir_ + "/shard_gpt2.bin";
  EXPECT_EQ(detect_foreign_token_format(gpt2), ForeignTokenFormat::llmc);
  EXPECT_EQ(tokens(gpt2), gpt2_);
  TokenFile f(prepare_token_file(gpt2, ByteTokenizer(), {*dir_ + "/cache", false}));
  EXPECT_EQ(f.vocab_size(), 50257);
  EXPECT_EQ(f.tokenizer_name(), "llmc-gpt2");
  TokenFile llama(prepare_token_file(*dir_ + "/shard_llama3.bin", ByteTokenizer(), {*dir_ + "/cache", true}));
  EXPECT_EQ(llama.size(), 2000);
  EXPECT_EQ(llama.vocab_size(), 128256);
  EXPECT_EQ(llama.token(1), 104729 % 128256);
}

TEST_F(ForeignTokenFiles, MegatronDatasetsReadInDocumentOrder) {
  const std::string prefix = *dir_ + "/megatron_text_document";
  EXPECT_EQ(detect_foreign_token_format(prefix), ForeignTokenFormat::megatron);
  EXPECT_EQ(tokens(prefix), megatron_);              // Megatron's --data-path: the prefix
  EXPECT_EQ(tokens(prefix + ".bin"), megatron_);     // or either file of the pair
  EXPECT_EQ(tokens(*dir_ + "/megatron_int32"), megatron_);
  TokenFile f(prepare_token_file(prefix, ByteTokenizer(), {*dir_ + "/cache", false}));
  EXPECT_EQ(f.tokenizer_name(), "megatron");
  EXPECT_EQ(f.vocab_size(), *std::max_element(megatron_.begin(), megatron_.end()) + 1);
  // The documents keep their end-of-document tokens: 40 of them.
  EXPECT_EQ(std::count(megatron_.begin(), megatron_.end(), 0), 40);
}

// The documents each format records become the token file's document index:
// Megatron's document index (here each document ends in EOD 0), llm.c's
// delimiter before each document (GPT-2's <|endoftext|>, 50256).
TEST_F(ForeignTokenFiles, DocumentsBecomeTheDocumentIndex) {
  TokenFile megatron(prepare_token_file(*dir_ + "/megatron_text_document", ByteTokenizer(), {*dir_ + "/cache", true}));
  std::vector<int64_t> want = {0};
  for (size_t i = 0; i + 1 < megatron_.size(); ++i)
    if (megatron_[i] == 0) want.push_back(static_cast<int64_t>(i) + 1);
  EXPECT_EQ(want.size(), 40u);
  EXPECT_EQ(read_document_index(megatron), want);
  const std::vector<uint16_t> tokens = {5, 6, 50256, 7, 8, 9, 50256, 50256, 3};
  std::vector<int32_t> header(256, 0);
  header[0] = kLlmcGpt2Magic, header[1] = 1, header[2] = static_cast<int32_t>(tokens.size());
  {
    std::ofstream out(*dir_ + "/docs_gpt2.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(2 * tokens.size()));
  }
  TokenFile llmc(prepare_token_file(*dir_ + "/docs_gpt2.bin", ByteTokenizer(), {*dir_ + "/cache", true}));
  EXPECT_EQ(read_document_index(llmc), (std::vector<int64_t>{0, 2, 6, 7}));
}

TEST_F(ForeignTokenFiles, DamagedFilesAreNamedWithTheByte) {
  struct Case {
    const char* file;
    const char* message;
  };
  for (const Case c : {Case{"shard_truncated.bin", "shard_truncated.bin: byte 8: the header says 200 tokens"},
                       Case{"shard_bad_version.bin", "shard_bad_version.bin: byte 0: magic 20240520 version 3"},
                       Case{"megatron_pointer", "megatron_pointer.idx: byte "},
                       Case{"megatron_truncated_idx", "(truncated)"},
                       Case{"megatron_magic", "megatron_magic.idx: byte 0: not a Megatron index"},
                       Case{"megatron_truncated_bin", "megatron_truncated_bin.bin: truncated at byte"}}) {
    const std::string e = error_of(*dir_ + "/" + c.file);
    EXPECT_NE(e.find(c.message), std::string::npos) << c.file << ": " << e;
  }
  EXPECT_NE(error_of(*dir_ + "/megatron_pointer").find("byte 374: sequence 3 starts at byte 38 of the .bin, not 36"), std::string::npos)
      << error_of(*dir_ + "/megatron_pointer");
}
