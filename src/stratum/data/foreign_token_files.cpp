#include "stratum/data/foreign_token_files.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/mapped_file.h"
#include "stratum/data/token_file.h"

namespace stratum::data {
namespace {

constexpr int32_t kLlmcGpt2Magic = 20240520, kLlmcLlama3Magic = 20240801;
constexpr int64_t kLlmcHeaderBytes = 256 * 4;
constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

template <class T>
T field(const MappedFile& file, uint64_t offset, const std::string& path, const char* what) {
  if (offset + sizeof(T) > file.size())
    throw Error(path + ": truncated at byte " + std::to_string(file.size()) + " (" + what + " at byte " +
                std::to_string(offset) + " needs " + std::to_string(sizeof(T)) + " bytes)");
  T v;
  std::memcpy(&v, file.data() + offset, sizeof v);
  return v;
}

// Streams ids into the token file a chunk at a time (sources can be far larger than memory).
class ChunkedWriter {
 public:
  ChunkedWriter(const std::string& out, const std::string& tokenizer, int64_t vocab) : writer_(out, tokenizer, vocab) {
    chunk_.reserve(kChunk);
  }
  void push(int64_t id) {
    chunk_.push_back(static_cast<int32_t>(id));
    if (chunk_.size() == kChunk) flush();
  }
  void commit() {
    flush();
    writer_.commit();
  }

 private:
  static constexpr size_t kChunk = 1 << 20;
  void flush() {
    writer_.append(chunk_);
    chunk_.clear();
  }
  TokenFileWriter writer_;
  std::vector<int32_t> chunk_;
};

int64_t mtime(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_mtime) : -1;
}

std::string megatron_prefix(const std::string& path) {
  for (const char* ext : {".bin", ".idx"})
    if (path.size() > 4 && path.compare(path.size() - 4, 4, ext) == 0) return path.substr(0, path.size() - 4);
  return path;
}

std::string cache_path(const std::string& source, const std::string& cache_dir, const char* format) {
  std::string base = source;
  if (const size_t slash = base.rfind('/'); slash != std::string::npos) base = base.substr(slash + 1);
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the absolute path: same names elsewhere do not collide
  for (char c : fs::absolute_path(source)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char hash[9];
  std::snprintf(hash, sizeof hash, "%08llx", static_cast<unsigned long long>(h >> 32));
  return (cache_dir.empty() ? source : cache_dir + "/" + base) + "." + hash + "." + format + ".strtok";
}

void convert_llmc(const std::string& path, const std::string& out) {
  const MappedFile bytes(path);
  const int32_t magic = field<int32_t>(bytes, 0, path, "the magic");
  const int32_t version = field<int32_t>(bytes, 4, path, "the version");
  const int64_t count = field<int32_t>(bytes, 8, path, "the token count");
  int width = 0;
  int64_t vocab = 0;
  if (magic == kLlmcGpt2Magic && version == 1) width = 2, vocab = 50257;
  else if (magic == kLlmcLlama3Magic && version == 7) width = 4, vocab = 128256;
  else
    throw Error(path + ": byte 0: magic " + std::to_string(magic) + " version " + std::to_string(version) +
                " is not an llm.c shard's (20240520 version 1: GPT-2, 20240801 version 7: LLaMA-3)");
  const int64_t want = kLlmcHeaderBytes + count * width;
  if (count <= 0 || static_cast<int64_t>(bytes.size()) != want)
    throw Error(path + ": byte 8: the header says " + std::to_string(count) + " tokens (" + std::to_string(want) +
                " bytes with the header) but the file has " + std::to_string(bytes.size()) +
                (static_cast<int64_t>(bytes.size()) < want ? " (truncated)" : ""));
  ChunkedWriter writer(out, width == 2 ? "llmc-gpt2" : "llmc-llama3", vocab);
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t at = static_cast<uint64_t>(kLlmcHeaderBytes + i * width);
    const int64_t id = width == 2 ? field<uint16_t>(bytes, at, path, "a token") : field<uint32_t>(bytes, at, path, "a token");
    if (id >= vocab)
      throw Error(path + ": byte " + std::to_string(at) + ": token " + std::to_string(id) + " is outside the " +
                  std::to_string(vocab) + "-token vocabulary");
    writer.push(id);
  }
  writer.commit();
}

void convert_megatron(const std::string& prefix, const std::string& out) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  const MappedFile idx(idx_path), bin(bin_path);
  if (idx.size() < 9 || std::memcmp(idx.data(), kMegatronMagic, 9) != 0)
    throw Error(idx_path + ": byte 0: not a Megatron index (magic \"MMIDIDX\\0\\0\")");
  const uint64_t version = field<uint64_t>(idx, 9, idx_path, "the version");
  if (version != 1) throw Error(idx_path + ": byte 9: version " + std::to_string(version) + " (expected 1)");
  const uint8_t code = field<uint8_t>(idx, 17, idx_path, "the dtype code");
  int width = 0;
  switch (code) {
    case 1: case 2: width = 1; break;
    case 3: case 8: width = 2; break;
    case 4: width = 4; break;
    case 5: width = 8; break;
    default:
      throw Error(idx_path + ": byte 17: dtype code " + std::to_string(code) +
                  (code == 6 || code == 7 ? " is a floating type, not token ids" : " is not a Megatron dtype"));
  }
  const uint64_t sequences = field<uint64_t>(idx, 18, idx_path, "the sequence count");
  const uint64_t documents = field<uint64_t>(idx, 26, idx_path, "the document count");
  const uint64_t table = 34, need = table + sequences * 12 + documents * 8;
  if (sequences > (idx.size() / 12) || documents > idx.size() / 8 || idx.size() != need)
    throw Error(idx_path + ": byte 18: " + std::to_string(sequences) + " sequences and " + std::to_string(documents) +
                " documents need " + std::to_string(need) + " bytes but the index has " + std::to_string(idx.size()) +
                (idx.size() < need ? " (truncated)" : ""));
  auto token_at = [&](int64_t at) -> int64_t {
    const uint64_t u = static_cast<uint64_t>(at);
    switch (code) {
      case 1: return field<uint8_t>(bin, u, bin_path, "a token");
      case 2: return field<int8_t>(bin, u, bin_path, "a token");
      case 3: return field<int16_t>(bin, u, bin_path, "a token");
      case 8: return field<uint16_t>(bin, u, bin_path, "a token");
      case 4: return field<int32_t>(bin, u, bin_path, "a token");
      default: return field<int64_t>(bin, u, bin_path, "a token");
    }
  };
  // First pass: every table entry and token checked, the largest id found;
  // then the sequences (back to back, the whole .bin) streamed out.
  int64_t expected_pointer = 0, largest = -1;
  for (uint64_t s = 0; s < sequences; ++s) {
    const size_t size_at = table + s * 4, pointer_at = table + sequences * 4 + s * 8;
    const int32_t size = field<int32_t>(idx, size_at, idx_path, "a sequence size");
    const int64_t pointer = field<int64_t>(idx, pointer_at, idx_path, "a sequence pointer");
    if (size < 0) throw Error(idx_path + ": byte " + std::to_string(size_at) + ": sequence " + std::to_string(s) +
                              " has size " + std::to_string(size));
    if (pointer != expected_pointer)
      throw Error(idx_path + ": byte " + std::to_string(pointer_at) + ": sequence " + std::to_string(s) +
                  " starts at byte " + std::to_string(pointer) + " of the .bin, not " + std::to_string(expected_pointer) +
                  " (after the sequences before it)");
    const int64_t end = pointer + int64_t{size} * width;
    if (end > static_cast<int64_t>(bin.size()))
      throw Error(bin_path + ": truncated at byte " + std::to_string(bin.size()) + ": sequence " + std::to_string(s) +
                  " ends at byte " + std::to_string(end));
    for (int64_t at = pointer; at < end; at += width) {
      const int64_t id = token_at(at);
      if (id < 0 || id >= (int64_t{1} << 31))
        throw Error(bin_path + ": byte " + std::to_string(at) + ": token id " + std::to_string(id) + " is not a token");
      largest = std::max(largest, id);
    }
    expected_pointer = end;
  }
  if (expected_pointer != static_cast<int64_t>(bin.size()))
    throw Error(bin_path + ": byte " + std::to_string(expected_pointer) + ": " +
                std::to_string(bin.size() - static_cast<size_t>(expected_pointer)) +
                " bytes after the last sequence the index lists");
  // The document index: 0, then each document's end, in sequences.
  int64_t previous = -1;
  for (uint64_t d = 0; d < documents; ++d) {
    const size_t at = table + sequences * 12 + d * 8;
    const int64_t doc = field<int64_t>(idx, at, idx_path, "a document index entry");
    if (doc < previous || doc > static_cast<int64_t>(sequences) || (d == 0 && doc != 0))
      throw Error(idx_path + ": byte " + std::to_string(at) + ": document index " + std::to_string(doc) +
                  " does not follow " + std::to_string(previous) + " within 0.." + std::to_string(sequences));
    previous = doc;
  }
  if (largest < 0) throw Error(bin_path + ": no tokens");
  ChunkedWriter writer(out, "megatron", largest + 1);
  for (int64_t at = 0; at < expected_pointer; at += width) writer.push(token_at(at));
  writer.commit();
}

}  // namespace

ForeignTokenFormat detect_foreign_token_format(const std::string& path) {
  const std::string prefix = megatron_prefix(path);
  if (fs::exists(prefix + ".idx") && fs::exists(prefix + ".bin")) return ForeignTokenFormat::megatron;
  if (!fs::exists(path) || fs::is_directory(path)) return ForeignTokenFormat::none;
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof magic);
  if (in && (magic == kLlmcGpt2Magic || magic == kLlmcLlama3Magic)) return ForeignTokenFormat::llmc;
  return ForeignTokenFormat::none;
}

std::string convert_foreign_token_file(const std::string& path, const std::string& cache_dir, bool may_write) {
  const ForeignTokenFormat format = detect_foreign_token_format(path);
  if (format == ForeignTokenFormat::none) throw Error(path + ": neither an llm.c shard nor a Megatron dataset");
  const bool megatron = format == ForeignTokenFormat::megatron;
  const std::string source = megatron ? megatron_prefix(path) : path;
  const std::string out = cache_path(source, cache_dir, megatron ? "megatron" : "llmc");
  if (!may_write) return out;
  const int64_t newest = megatron ? std::max(mtime(source + ".idx"), mtime(source + ".bin")) : mtime(source);
  if (fs::exists(out) && mtime(out) >= newest) return out;
  if (!cache_dir.empty()) fs::make_directories(cache_dir);
  if (megatron) convert_megatron(source, out);
  else convert_llmc(source, out);
  return out;
}

}  // namespace stratum::data
