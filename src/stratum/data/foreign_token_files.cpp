#include "stratum/data/foreign_token_files.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/mapped_file.h"
#include "stratum/data/foreign_token_headers.h"
#include "stratum/data/token_file.h"

namespace stratum::data {
namespace {

// Checked before MappedFile opens it: open(2) without O_NONBLOCK waits on a
// FIFO for a writer, and a device (/dev/zero) has no size to check.
void require_regular_file(const std::string& path, const std::string& what) {
  std::fclose(fs::open_regular_file(path, what));
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
  // The ids pushed from here on begin a document (the token file's index).
  void begin_document() {
    flush();
    writer_.begin_document();
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
  require_regular_file(path, "an llm.c shard");
  const MappedFile bytes(path);
  const LlmcShardInfo info = check_llmc_shard(bytes.data(), bytes.size(), path);
  ChunkedWriter writer(out, info.width == 2 ? "llmc-gpt2" : "llmc-llama3", info.vocab);
  // llm.c puts its delimiter before each document: GPT-2's <|endoftext|>,
  // LLaMA-3's <|begin_of_text|>. A document begins at each.
  const int64_t delimiter = info.width == 2 ? kLlmcGpt2Delimiter : kLlmcLlama3Delimiter;
  writer.begin_document();
  for (int64_t i = 0; i < info.count; ++i) {
    const int64_t id = llmc_token(bytes.data(), info, i);
    if (id == delimiter) writer.begin_document();
    if (id >= info.vocab)
      throw Error(path + ": byte " + std::to_string(kLlmcHeaderBytes + static_cast<uint64_t>(i) * info.width) +
                  ": token " + std::to_string(id) + " is outside the " + std::to_string(info.vocab) +
                  "-token vocabulary");
    writer.push(id);
  }
  writer.commit();
}

// The largest id of a checked .bin; every id must be one (0 <= id < 2^31).
int64_t largest_megatron_id(const MappedFile& bin, const MegatronIndexInfo& info) {
  int64_t largest = -1;
  for (uint64_t at = 0; at < info.token_bytes; at += static_cast<uint64_t>(info.width)) {
    const int64_t id = megatron_token(bin.data(), info, at);
    if (id < 0 || id >= (int64_t{1} << 31))
      throw Error(bin.path() + ": byte " + std::to_string(at) + ": token id " + std::to_string(id) + " is not a token");
    largest = std::max(largest, id);
  }
  if (largest < 0) throw Error(bin.path() + ": no tokens");
  return largest;
}

// The sequences lie back to back, the whole .bin (check_megatron_index), so
// the documents in order are the .bin's tokens in order. A document begins at
// each sequence its document index names.
void convert_megatron(const std::string& prefix, const std::string& out) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  require_regular_file(idx_path, "a Megatron index (.idx)");
  require_regular_file(bin_path, "a Megatron dataset's tokens (.bin)");
  const MappedFile idx(idx_path), bin(bin_path);
  const MegatronIndexInfo info = check_megatron_index(idx.data(), idx.size(), bin.size(), idx_path, bin_path);
  ChunkedWriter writer(out, "megatron", largest_megatron_id(bin, info) + 1);
  writer.begin_document();
  uint64_t next_document = 0;  // into the document index, which never goes back
  for (uint64_t s = 0; s < info.sequences; ++s) {
    bool begins = false;
    while (next_document < info.documents &&
           static_cast<uint64_t>(megatron_document(idx.data(), info, next_document)) <= s)
      begins |= static_cast<uint64_t>(megatron_document(idx.data(), info, next_document++)) == s;
    if (begins) writer.begin_document();
    const auto at = static_cast<uint64_t>(megatron_sequence_pointer(idx.data(), info, s));
    const auto size = static_cast<uint64_t>(megatron_sequence_size(idx.data(), info, s));
    for (uint64_t k = 0; k < size; ++k) writer.push(megatron_token(bin.data(), info, at + k * static_cast<uint64_t>(info.width)));
  }
  writer.commit();
}

}  // namespace

ForeignTokenFormat detect_foreign_token_format(const std::string& path) {
  const std::string prefix = megatron_prefix(path);
  if (fs::exists(prefix + ".idx") && fs::exists(prefix + ".bin")) return ForeignTokenFormat::megatron;
  if (!fs::exists(path) || fs::is_directory(path)) return ForeignTokenFormat::none;
  // Not a regular file (a FIFO, /dev/zero): no llm.c shard; the caller names it.
  if (!fs::is_regular_file(path)) return ForeignTokenFormat::none;
  std::FILE* f = nullptr;
  try {
    f = fs::open_regular_file(path, "a data file");  // O_NONBLOCK: swapped for a FIFO since, it cannot block
  } catch (const Error&) {
    return ForeignTokenFormat::none;
  }
  int32_t magic = 0;
  const bool read = std::fread(&magic, sizeof magic, 1, f) == 1;
  std::fclose(f);
  if (read && (magic == kLlmcGpt2Magic || magic == kLlmcLlama3Magic)) return ForeignTokenFormat::llmc;
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
  if (fs::exists(out) && mtime(out) >= newest) {
    try {  // a cache from before document indexes, or damaged: rebuilt
      if (has_document_index(out, TokenFile(out).size())) return out;
    } catch (const Error&) {
    }
  }
  if (!cache_dir.empty()) fs::make_directories(cache_dir);
  if (megatron) convert_megatron(source, out);
  else convert_llmc(source, out);
  return out;
}

}  // namespace stratum::data
