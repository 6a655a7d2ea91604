// safetensors: round trip for every dtype, the file layout byte by byte, and
// each way a file can be corrupt (every error names the file and the tensor).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/fifo_deadline.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"
#include "stratum/io/safetensors_header.h"

using namespace stratum;
using namespace stratum::io;

namespace {

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::make_temp_directory("stratum-safetensors-"); }
  void TearDown() override { fs::remove_tree(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // A file made by hand: 8-byte little-endian length, header text, data bytes.
  std::string craft(const std::string& name, const std::string& header, size_t data_bytes,
                    int64_t declared_length = -1) {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = declared_length >= 0 ? static_cast<uint64_t>(declared_length) : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << std::string(data_bytes, '\0');
    return p;
  }

  std::string read_error(const std::string& p) {
    try {
      read_safetensors(p);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }

  std::string dir_;
};

std::string bytes_of(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

}  // namespace

TEST_F(Safetensors, EveryDtypeRoundTrips) {
  torch::manual_seed(1);
  const at::Tensor base = torch::randn({3, 5}) * 100;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto type : {torch::kDouble, torch::kFloat, torch::kHalf, torch::kBFloat16, torch::kLong, torch::kInt,
                    torch::kShort, torch::kChar, torch::kByte, torch::kBool})
    tensors.emplace_back(std::string("t_") + c10::toString(type), base.to(type));
  tensors.emplace_back("scalar", torch::tensor(3.5));
  tensors.emplace_back("empty", torch::zeros({0, 4}, torch::kBFloat16));
  tensors.emplace_back("strided", base.t());  // not contiguous
  write_safetensors(path("a.safetensors"), tensors, {{"step", "12"}});

  const auto back = read_safetensors(path("a.safetensors"));
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const at::Tensor& b = back.at(name);
    EXPECT_EQ(b.scalar_type(), t.scalar_type());
    EXPECT_EQ(b.sizes(), t.sizes());
    EXPECT_TRUE(torch::equal(b, t));
  }
  const SafetensorsHeader h = read_safetensors_header(path("a.safetensors"));
  EXPECT_EQ(h.metadata.at("step"), "12");
  EXPECT_EQ(h.metadata.at("format"), "pt");  // transformers refuses files without it
  EXPECT_EQ((8 + h.header_length) % 8, 0u);  // data start aligned
  // Larger elements first: every tensor starts at a multiple of its element size.
  for (const auto& e : h.tensors) EXPECT_EQ(e.begin % c10::elementSize(e.scalar_type), 0u) << e.name;
  EXPECT_EQ(h.tensors.front().dtype, "F64");
  // The torch-free header's element sizes are torch's, and it reads the same header from memory.
  const auto info = parse_safetensors_bytes(bytes_of(path("a.safetensors")), "a");
  ASSERT_EQ(info.tensors.size(), h.tensors.size());
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    EXPECT_EQ(safetensors_element_size(h.tensors[i].dtype), c10::elementSize(h.tensors[i].scalar_type)) << h.tensors[i].dtype;
    EXPECT_EQ(info.tensors[i].name, h.tensors[i].name);
    EXPECT_EQ(info.tensors[i].begin, h.tensors[i].begin);
  }

  const auto some = read_safetensors(path("a.safetensors"), {"t_BFloat16", "scalar"});
  EXPECT_EQ(some.size(), 2u);
  try {
    read_safetensors(path("a.safetensors"), {"nope"});
    ADD_FAILURE();
  } catch (const Error& e) {
    expect_contains(e.what(), "a.safetensors: no tensor 'nope'");
  }
}

TEST_F(Safetensors, LayoutIsTheFormats) {
  write_safetensors(path("b.safetensors"), {{"x", torch::tensor({1.0f, 2.0f})}});
  const std::string raw = bytes_of(path("b.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  ASSERT_EQ(raw.size(), 8 + n + 8);
  const auto header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(header["x"]["dtype"], "F32");
  EXPECT_EQ(header["x"]["shape"], nlohmann::json({2}));
  EXPECT_EQ(header["x"]["data_offsets"], nlohmann::json({0, 8}));
  float values[2];
  std::memcpy(values, raw.data() + 8 + n, 8);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], 2.0f);
}

TEST_F(Safetensors, WritesAtomically) {
  write_safetensors(path("c.safetensors"), {{"x", torch::ones({2})}});
  write_safetensors(path("c.safetensors"), {{"y", torch::zeros({3})}});  // replaces
  EXPECT_EQ(read_safetensors(path("c.safetensors")).count("y"), 1u);
  EXPECT_EQ(fs::list_directory(dir_), std::vector<std::string>{"c.safetensors"});  // no temporary left
  // A failed write leaves the old file alone and no temporary behind.
  EXPECT_THROW(write_safetensors(path("c.safetensors"), {{"x", torch::ones({2})}, {"x", torch::ones({2})}}), Error);
  EXPECT_THROW(write_safetensors(path("c.safetensors"), {{"z", torch::ones({2}, torch::kComplexFloat)}}), Error);
  EXPECT_EQ(read_safetensors(path("c.safetensors")).count("y"), 1u);
  EXPECT_EQ(fs::list_directory(dir_), std::vector<std::string>{"c.safetensors"});
  try {
    write_safetensors(path("no/such/dir/d.safetensors"), {{"x", torch::ones({2})}});
    ADD_FAILURE();
  } catch (const Error& e) {
    expect_contains(e.what(), "d.safetensors");
  }
}

TEST_F(Safetensors, TruncatedFile) {
  write_safetensors(path("t.safetensors"), {{"x", torch::ones({4})}});
  const std::string raw = bytes_of(path("t.safetensors"));
  std::ofstream(path("t.safetensors"), std::ios::binary | std::ios::trunc) << raw.substr(0, raw.size() - 3);
  const std::string msg = read_error(path("t.safetensors"));
  expect_contains(msg, "t.safetensors");
  expect_contains(msg, "tensor 'x'");  // its data_offsets run past the end
  std::ofstream(path("short.safetensors"), std::ios::binary) << "abc";
  expect_contains(read_error(path("short.safetensors")), "short.safetensors: truncated");
  expect_contains(read_error(path("missing.safetensors")), "missing.safetensors: cannot open");
}

TEST_F(Safetensors, HeaderLengthBeyondTheFile) {
  const std::string p = craft("len.safetensors", "{}", 0, 1000);
  expect_contains(read_error(p), "len.safetensors: header length 1000 goes beyond the file");
  const std::string q = craft("huge.safetensors", "{}", 0, int64_t{1} << 40);
  expect_contains(read_error(q), "over the format's limit");
}

TEST_F(Safetensors, BadJson) {
  expect_contains(read_error(craft("j.safetensors", "{\"x\": {", 0)), "j.safetensors: bad JSON header");
  expect_contains(read_error(craft("k.safetensors", "[1, 2]", 0)), "not an object");
  expect_contains(read_error(craft("m.safetensors", R"({"__metadata__": {"a": 1}})", 0)), "metadata 'a'");
}

TEST_F(Safetensors, UnknownDtype) {
  const std::string msg =
      read_error(craft("d.safetensors", R"({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})", 2));
  expect_contains(msg, "d.safetensors: tensor 'w': unknown dtype 'F8_E4M3'");
}

TEST_F(Safetensors, ShapeAndSizeDisagree) {
  const std::string msg =
      read_error(craft("s.safetensors", R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20));
  expect_contains(msg, "tensor 'w': shape [2, 3] of F32 needs 24 bytes but data_offsets cover 20");
  expect_contains(read_error(craft("n.safetensors", R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4)),
                  "tensor 'w': shape [-1]");
  expect_contains(read_error(craft("o.safetensors", R"({"w": {"dtype": "F32", "shape": [1]}})", 4)),
                  "tensor 'w': 'data_offsets' must be [begin, end]");
}

TEST_F(Safetensors, OverlappingOffsets) {
  const std::string msg = read_error(craft("ov.safetensors",
                                           R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                               "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                           12));
  expect_contains(msg, "ov.safetensors: tensor 'b': data_offsets [4, 12) overlap tensor 'a'");
}

TEST_F(Safetensors, OffsetsOutOfRangeGapsAndLeftovers) {
  expect_contains(read_error(craft("r.safetensors", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4)),
                  "tensor 'a': data_offsets [0, 8) are beyond the data section (4 bytes)");
  expect_contains(read_error(craft("g.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8)),
                  "tensor 'a': data_offsets [4, 8) leave a gap");
  expect_contains(read_error(craft("l.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8)),
                  "l.safetensors: the data section has 8 bytes but tensors cover 4");
}

TEST_F(Safetensors, HeaderPaddedWithSpacesReads) {
  // Other writers pad the header with spaces too.
  const std::string p = craft("p.safetensors", R"({"a": {"dtype": "I32", "shape": [], "data_offsets": [0, 4]}}     )", 4);
  const auto t = read_safetensors(p);
  EXPECT_EQ(t.at("a").dim(), 0);
  EXPECT_EQ(t.at("a").item<int>(), 0);
}

// No header nests more than 3 levels; the parser's time grows with the depth.
TEST_F(Safetensors, DeepHeaderNestingIsRefused) {
  const std::string deep = "{\"__metadata__\": " + std::string(100'000, '[') + std::string(100'000, ']') + "}";
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = read_error(craft("deep.safetensors", deep, 0));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.5);
  expect_contains(msg, "deep.safetensors: bad JSON header: nested deeper than 64 levels (at byte 88 of the file)");
}

// A size over 2^63 - 1 became a negative dimension (torch then threw its own
// error); 0 x huge passed the overflow check.
TEST_F(Safetensors, DimensionsOverInt64AreRefused) {
  const std::string msg = read_error(craft(
      "big.safetensors", R"({"w": {"dtype": "F32", "shape": [0, 18446744073709551615], "data_offsets": [0, 0]}})", 0));
  expect_contains(msg, "big.safetensors: tensor 'w': shape [0,18446744073709551615] is not a list of sizes");
}

// Opening a FIFO blocked until a writer came.
TEST_F(Safetensors, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = path("pipe.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string msg;
  ASSERT_TRUE(test::returns_without_blocking(fifo, [&] { msg = read_error(fifo); }))
      << "reading a FIFO as a safetensors file blocked";
  expect_contains(msg, "pipe.safetensors: not a regular file");
}

TEST_F(Safetensors, LongTensorNamesAreShortenedInMessages) {
  const std::string name(100'000, 'w');
  const std::string msg =
      read_error(craft("name.safetensors", "{\"" + name + R"(": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}})", 1));
  expect_contains(msg, "... (100000 characters)': unknown dtype 'F8'");
  EXPECT_LT(msg.size(), 500u);
}

// The memory-mapped reader gives the same tensors as the reading one, with
// the same header checks, and a tensor outlives the map it came from.
TEST_F(Safetensors, MappedTensorsEqualReadOnesAndOutliveTheMap) {
  const std::string p = dir_ + "/mapped.safetensors";
  torch::manual_seed(3);
  io::write_safetensors(p, {{"w", torch::randn({5, 7})}, {"b", torch::randn({7}).to(torch::kBFloat16)},
                            {"i", torch::arange(11, torch::kLong)}, {"empty", torch::zeros({0, 3})}});
  const auto read = io::read_safetensors(p);
  at::Tensor kept;
  {
    const auto mapped = io::map_safetensors(p);
    ASSERT_EQ(mapped.size(), read.size());
    for (const auto& [name, t] : read) {
      EXPECT_EQ(mapped.at(name).scalar_type(), t.scalar_type()) << name;
      EXPECT_TRUE(mapped.at(name).equal(t)) << name;
    }
    kept = mapped.at("w");
  }
  EXPECT_TRUE(kept.equal(read.at("w")));  // the map stays while a tensor over it lives
  const std::string bad = dir_ + "/truncated.safetensors";
  std::ofstream(bad, std::ios::binary) << std::string("\x10\0\0\0\0\0\0\0{", 9);
  EXPECT_THROW(io::map_safetensors(bad), Error);
}
