// Token windows that keep documents apart (--documents separate): the
// document index written beside each token file (text files, JSON Lines
// records, blends), the segment and position ids of windows over known
// documents, the same layout after a resume and at every data-parallel size,
// and, at model level (tiny LLaMA, CPU, fp32), a window holding several
// documents training as each document alone.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/blend.h"
#include "stratum/data/dataset.h"
#include "stratum/data/hf_tokenizer.h"
#include "stratum/data/load_tokenizer.h"
#include "stratum/data/token_file.h"
#include "stratum/data/tokenizer.h"
#include "stratum/data/training_source.h"
#include "stratum/models/causal_lm.h"
#include "stratum/nn/sequence_layout.h"

using namespace stratum;
using namespace stratum::data;

namespace {

class DocumentWindows : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::make_temp_directory("stratum_docs_"); }
  void TearDown() override { fs::remove_tree(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
  }
  // A token file of documents of `lengths` tokens: document d's tokens are
  // 10 * (d + 1) + (i % 7), so every token tells its document.
  std::string documents(const std::vector<int64_t>& lengths, const std::string& name = "docs.strtok") const {
    TokenFileWriter w(path(name), "byte", 4096);
    for (size_t d = 0; d < lengths.size(); ++d) {
      w.begin_document();
      for (int64_t i = 0; i < lengths[d]; ++i) w.append({static_cast<int32_t>(10 * (d + 1) + i % 7)});
    }
    w.commit();
    return path(name);
  }
  std::string dir_;
};

// The expected layout, from the documents' lengths: segment = documents begun
// after the window's first input, position = tokens since the document began
// (or since the window began).
void expect_layout(const std::vector<int64_t>& lengths, int64_t start, const at::Tensor& segments,
                   const at::Tensor& positions, bool restart) {
  std::vector<int64_t> doc_of, index_in;
  for (size_t d = 0; d < lengths.size(); ++d)
    for (int64_t i = 0; i < lengths[d]; ++i) doc_of.push_back(static_cast<int64_t>(d)), index_in.push_back(i);
  const int64_t n = segments.size(0);
  for (int64_t i = 0; i < n; ++i) {
    const size_t t = static_cast<size_t>(start + i);
    EXPECT_EQ(segments[i].item<int32_t>(), doc_of[t] - doc_of[static_cast<size_t>(start)]) << "start " << start << " i " << i;
    const int64_t want = restart ? std::min(index_in[t], i) : i;
    EXPECT_EQ(positions[i].item<int64_t>(), want) << "start " << start << " i " << i;
  }
}

TEST_F(DocumentWindows, IndexChecksNameTheFault) {
  const std::string file = documents({5, 3, 7});
  TokenFile f(file);
  EXPECT_EQ(read_document_index(f), (std::vector<int64_t>{0, 5, 8}));
  EXPECT_TRUE(has_document_index(file, 15));
  EXPECT_FALSE(has_document_index(file, 16));
  auto error_of = [](const std::string& bytes, int64_t tokens) -> std::string {
    try {
      check_document_index(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "x.docs", tokens);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  auto index = [](uint64_t tokens, std::vector<int64_t> starts, int64_t count = -1) {
    std::string b(kDocumentIndexMagic, 8);
    const uint64_t head[2] = {tokens, count < 0 ? starts.size() : static_cast<uint64_t>(count)};
    b.append(reinterpret_cast<const char*>(head), sizeof head);
    b.append(reinterpret_cast<const char*>(starts.data()), 8 * starts.size());
    return b;
  };
  EXPECT_EQ(error_of(index(15, {0, 5, 8}), 15), "no error");
  EXPECT_NE(error_of("STRTOK1", 15).find("bad magic"), std::string::npos);
  EXPECT_NE(error_of(index(15, {0, 5, 8}).substr(0, 20), 15).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(index(16, {0, 5, 8}), 15).find("16-token file"), std::string::npos);
  EXPECT_NE(error_of(index(15, {0, 5, 8}, int64_t{1} << 61), 15).find("corrupt"), std::string::npos);
  EXPECT_NE(error_of(index(15, {0, 8, 5}), 15).find("byte 40: document 2 starts at token 5"), std::string::npos);
  EXPECT_NE(error_of(index(15, {1, 5}), 15).find("the first starts at 0"), std::string::npos);
  EXPECT_NE(error_of(index(15, {0, 15}), 15).find("below 15"), std::string::npos);
  // A token file written without documents has no index, and loses an old one.
  write_token_file(file, std::vector<int32_t>(15, 1), "byte", 256);
  EXPECT_FALSE(fs::exists(document_index_path(file)));
  try {
    read_document_index(TokenFile(file));
    ADD_FAILURE() << "a missing index was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no document index"), std::string::npos) << e.what();
  }
}

TEST_F(DocumentWindows, TextFilesAreDocuments) {
  // The byte tokenizer joins the files with a newline, which begins the next document.
  fs::make_directories(path("corpus"));
  write("corpus/a.txt", "hello\n");
  write("corpus/b.txt", "world");
  write("corpus/d.txt", "x");
  ByteTokenizer bytes;
  TokenFile f(prepare_token_file(path("corpus"), bytes, {path("cache"), true}));
  std::vector<int64_t> all(static_cast<size_t>(f.size()));
  f.read(0, f.size(), all.data());
  EXPECT_EQ(bytes.decode(std::vector<int32_t>(all.begin(), all.end())), "hello\nworld\nx");
  EXPECT_EQ(read_document_index(f), (std::vector<int64_t>{0, 6, 11}));
  // One file is one document; a cache without an index (an older Stratum's) is rebuilt.
  write("one.txt", "a\n\nb\n");
  const std::string cache = prepare_token_file(path("one.txt"), bytes, {path("cache"), true});
  EXPECT_EQ(read_document_index(TokenFile(cache)), (std::vector<int64_t>{0}));
  ::unlink(document_index_path(cache).c_str());
  prepare_token_file(path("one.txt"), bytes, {path("cache"), true});
  EXPECT_TRUE(has_document_index(cache, 5));
}

TEST_F(DocumentWindows, JsonLinesRecordsAreDocuments) {
  if (!hf_tokenizer_available()) GTEST_SKIP() << "this build has no PCRE2";
  auto tok = load_tokenizer(std::string(STRATUM_TEST_DATA_DIR) + "/tokenizers/gpt2");
  ASSERT_GE(tok->eos_id(), 0);
  write("docs.jsonl", "{\"text\": \"The first one.\"}\n\n{\"text\": \"A second,\\nlonger one.\"}\n{\"text\": \"3\"}\n");
  TokenFile f(prepare_token_file(path("docs.jsonl"), *tok, {path("cache"), true}));
  const std::vector<int64_t> starts = read_document_index(f);
  ASSERT_EQ(starts.size(), 3u);  // the blank line is no document
  for (size_t d = 1; d < starts.size(); ++d) EXPECT_EQ(f.token(starts[d] - 1), tok->eos_id()) << d;
  EXPECT_EQ(f.token(f.size() - 1), tok->eos_id());
}

TEST_F(DocumentWindows, BlendsKeepTheSourcesDocuments) {
  documents({5, 11}, "a.strtok");  // 16 tokens: 2 windows of 8, the second begins inside document 1
  documents({3, 3, 2}, "b.strtok");
  const std::string blend = blend_token_files(parse_blend({"1", path("a.strtok"), "1", path("b.strtok")}), 8,
                                              path("cache"), true);
  TokenFile f(blend);
  ASSERT_EQ(f.size(), 24);  // a's window 0, b's window 0, a's window 1
  EXPECT_EQ(read_document_index(f), (std::vector<int64_t>{0, 5, 8, 11, 14, 16}));
  // A source without an index makes a blend without one.
  write_token_file(path("c.strtok"), std::vector<int32_t>(16, 1), "byte", 256);
  const std::string plain = blend_token_files(parse_blend({"1", path("a.strtok"), "1", path("c.strtok")}), 8,
                                              path("cache"), true);
  EXPECT_FALSE(fs::exists(document_index_path(plain)));
}

TEST_F(DocumentWindows, WindowsCarryTheirDocumentsLayout) {
  const std::vector<int64_t> lengths = {5, 3, 7, 10, 1, 1, 12, 4};  // 43 tokens
  const std::string file = documents(lengths);
  for (bool restart : {true, false}) {
    TrainingSourceOptions o;
    o.seq_len = 8;
    o.micro_batch = 5;  // every training window (5) in one batch
    o.eval_fraction = 0;
    o.documents = {true, restart, false};
    auto source = token_window_source(TokenFile(file), o);
    const TrainingBatch b = source->next();
    ASSERT_TRUE(b.segment_ids.defined());
    EXPECT_EQ(b.segment_ids.scalar_type(), at::kInt);
    EXPECT_EQ(b.position_ids.scalar_type(), at::kLong);
    for (int64_t r = 0; r < 5; ++r) {
      int64_t found = -1;  // the window's start, told by its tokens
      TokenFile f(file);
      for (int64_t s = 0; s + 9 <= f.size(); s += 8) {
        bool same = true;
        for (int64_t i = 0; i < 8; ++i) same = same && f.token(s + i) == b.tokens[r][i].item<int64_t>();
        if (same) found = s;
      }
      ASSERT_GE(found, 0) << "row " << r;
      expect_layout(lengths, found, b.segment_ids[r], b.position_ids[r], restart);
    }
  }
  // The window at 0 by hand: documents of 5 and 3 tokens.
  std::vector<int32_t> seg(8);
  std::vector<int64_t> pos(8);
  bool ends[8];
  document_window_layout({0, 5, 8, 15}, 0, 8, true, seg.data(), pos.data(), ends);
  EXPECT_EQ(seg, (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(pos, (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2}));
  EXPECT_EQ(std::vector<bool>(ends, ends + 8), (std::vector<bool>{0, 0, 0, 0, 1, 0, 0, 1}));
}

TEST_F(DocumentWindows, MaskedCrossDocumentTargetsAndTheJoinedDefault) {
  const std::string file = documents({5, 3, 9});
  TrainingSourceOptions o;
  o.seq_len = 16;
  o.eval_fraction = 0;
  auto joined = token_window_source(TokenFile(file), o);
  const TrainingBatch plain = joined->next();
  EXPECT_FALSE(plain.segment_ids.defined());
  o.documents = {true, true, true};
  auto masked = token_window_source(TokenFile(file), o);
  const TrainingBatch b = masked->next();
  EXPECT_TRUE(torch::equal(b.tokens, plain.tokens));
  for (int64_t i = 0; i < 16; ++i) {
    const bool begins = i + 1 == 5 || i + 1 == 8;  // targets that are a document's first token
    EXPECT_EQ(b.targets[0][i].item<int64_t>(), begins ? -100 : plain.targets[0][i].item<int64_t>()) << i;
  }
  EXPECT_NE(masked->details().find("3 documents"), std::string::npos) << masked->details();
  write_token_file(path("plain.strtok"), std::vector<int32_t>(40, 1), "byte", 4096);
  EXPECT_THROW(token_window_source(TokenFile(path("plain.strtok")), o), Error);
}

// The layout is the window's: the same after a resume and at any data-parallel size.
TEST_F(DocumentWindows, LayoutSurvivesResumeAndDataParallelSize) {
  std::vector<int64_t> lengths;
  for (int64_t d = 0; d < 40; ++d) lengths.push_back(1 + (d * 7) % 13);
  const std::string file = documents(lengths);
  auto options = [](int rank, int size) {
    TrainingSourceOptions o;
    o.seq_len = 6;
    o.micro_batch = 1;
    o.eval_fraction = 0;
    o.dp_rank = rank, o.dp_size = size;
    o.seed = 5;
    o.documents = {true, true, false};
    return o;
  };
  // Each window's layout, keyed by its tokens' text (the tokens tell the window).
  auto key = [](const at::Tensor& t) {
    std::string s;
    for (int64_t i = 0; i < t.size(0); ++i) s += std::to_string(t[i].item<int64_t>()) + ",";
    return s;
  };
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> seen;
  auto one = token_window_source(TokenFile(file), options(0, 1));
  for (int i = 0; i < 8; ++i) {
    const TrainingBatch b = one->next();
    seen[key(b.tokens[0])] = {b.segment_ids[0], b.position_ids[0]};
  }
  const SamplerState after4 = [&] {
    auto s = token_window_source(TokenFile(file), options(0, 1));
    for (int i = 0; i < 4; ++i) s->next();
    return s->state();
  }();
  for (int rank = 0; rank < 2; ++rank) {  // resumed at 4 windows on 2 ranks: windows 4..7 of the same stream
    auto s = token_window_source(TokenFile(file), options(rank, 2));
    s->load_state(after4);
    for (int i = 0; i < 2; ++i) {
      const TrainingBatch b = s->next();
      const auto it = seen.find(key(b.tokens[0]));
      ASSERT_NE(it, seen.end()) << "rank " << rank << " drew a window the one-rank run did not";
      EXPECT_TRUE(torch::equal(b.segment_ids[0], it->second.first));
      EXPECT_TRUE(torch::equal(b.position_ids[0], it->second.second));
    }
  }
}

// A window of several documents trains as each document alone: the mean loss
// of the window with its layout is the token-weighted mean of each
// document's loss run alone on its own tokens and targets.
TEST_F(DocumentWindows, WindowTrainsAsEachDocumentAlone) {
  const std::vector<int64_t> lengths = {4, 9, 2, 6, 11};
  const std::string file = documents(lengths);
  torch::manual_seed(7);
  models::ModelConfig c = models::make_model_config(
      "tiny-llama", {{"layers", "2"}, {"max_seq_len", "32"}, {"vocab_size", "64"}});
  c.dropout = 0;
  auto model = models::build_model(c);
  for (bool mask : {false, true}) {
    TrainingSourceOptions o;
    o.seq_len = 24;
    o.eval_fraction = 0;
    o.documents = {true, true, mask};
    auto source = token_window_source(TokenFile(file), o);
    const TrainingBatch b = source->next();  // the only window: tokens [0, 25)
    ASSERT_GT(b.segment_ids.max().item<int32_t>(), 2);
    at::Tensor packed;
    {
      nn::SequenceLayoutScope scope(model->sequence_layout().get(), nn::SequenceLayout{b.segment_ids, b.position_ids});
      packed = model->forward(b.tokens, b.targets);
    }
    const int64_t counted = b.targets.ne(-100).sum().item<int64_t>();
    EXPECT_EQ(counted, mask ? 24 - 4 : 24);  // 4 targets begin a document inside the window (5th at 25 is out)
    double sum = 0;
    int64_t tokens = 0;
    const at::Tensor seg = b.segment_ids[0];
    for (int32_t s = 0; s <= seg.max().item<int32_t>(); ++s) {
      const at::Tensor where = seg.eq(s).nonzero().squeeze(1);
      const at::Tensor ids = b.tokens.index_select(1, where), targets = b.targets.index_select(1, where);
      const int64_t n = targets.ne(-100).sum().item<int64_t>();
      if (n == 0) continue;
      sum += model->forward(ids, targets).item<double>() * static_cast<double>(n);
      tokens += n;
    }
    EXPECT_EQ(tokens, counted);
    EXPECT_NEAR(packed.item<double>(), sum / static_cast<double>(tokens), 1e-5) << "mask " << mask;
    // Without the layout the documents read each other: the test can fail.
    EXPECT_GT(std::abs(model->forward(b.tokens, b.targets).item<double>() - sum / static_cast<double>(tokens)), 1e-4);
  }
}

}  // namespace
