#include "stratum/data/dataset.h"
#include "stratum/data/foreign_token_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/log.h"

namespace stratum::data {

namespace {

constexpr size_t kChunkBytes = size_t{4} << 20;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Nanoseconds since the epoch; -1 if the path cannot be stat'ed.
int64_t mtime_ns(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// The text files of a source, in the order they are concatenated.
std::vector<std::string> text_files(const std::string& source) {
  if (!fs::is_directory(source)) return {source};
  std::vector<std::string> names;
  for (const auto& name : fs::list_directory(source))
    if (ends_with(name, ".txt") && !fs::is_directory(source + "/" + name)) names.push_back(name);
  if (names.empty()) throw Error(source + ": directory holds no .txt files");
  std::sort(names.begin(), names.end());
  for (auto& n : names) n = source + "/" + n;
  return names;
}

int64_t total_bytes(const std::vector<std::string>& files) {
  int64_t total = 0;
  struct stat st;
  for (const auto& f : files)
    if (::stat(f.c_str(), &st) == 0) total += st.st_size;
  return total;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool cache_is_fresh(const std::string& cache, const std::string& source, const std::vector<std::string>& files,
                    const Tokenizer& tokenizer) {
  const int64_t cache_time = mtime_ns(cache);
  if (cache_time < 0) return false;
  int64_t newest = mtime_ns(source);  // a directory's time changes when files come or go
  for (const auto& f : files) newest = std::max(newest, mtime_ns(f));
  if (newest > cache_time) return false;
  try {
    TokenFile file(cache);
    return file.tokenizer_name() == tokenizer.name() && file.vocab_size() == tokenizer.vocab_size();
  } catch (const Error&) {
    return false;  // damaged or empty: rebuild
  }
}

// Feeds the text to the tokenizer in chunks cut after a newline, so a word is
// never split between two encode() calls.
void tokenize_files(const std::vector<std::string>& files, const Tokenizer& tokenizer, TokenFileWriter& writer) {
  std::string pending;
  std::vector<char> chunk(kChunkBytes);
  char last = '\n';
  for (const auto& path : files) {
    if (last != '\n') pending.push_back('\n');
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw Error(path + ": cannot read: " + std::strerror(errno));
    size_t got;
    while ((got = std::fread(chunk.data(), 1, chunk.size(), f)) > 0) {
      pending.append(chunk.data(), got);
      last = chunk[got - 1];
      const size_t cut = pending.rfind('\n');
      if (cut != std::string::npos && pending.size() >= kChunkBytes) {
        writer.append(tokenizer.encode(std::string_view(pending).substr(0, cut + 1)));
        pending.erase(0, cut + 1);
      }
    }
    const bool failed = std::ferror(f);
    std::fclose(f);
    if (failed) throw Error(path + ": read error");
  }
  if (!pending.empty()) writer.append(tokenizer.encode(pending));
}

void build_cache(const std::string& source, const std::vector<std::string>& files, const Tokenizer& tokenizer,
                 const std::string& cache) {
  std::string where = cache.substr(0, cache.rfind('/') == std::string::npos ? 0 : cache.rfind('/'));
  if (!where.empty()) fs::make_directories(where);
  log::info("data: tokenizing " + source + " (" + tokenizer.name() + " tokenizer) into " + cache);
  try {
    TokenFileWriter writer(cache, tokenizer.name(), tokenizer.vocab_size());
    tokenize_files(files, tokenizer, writer);
    if (writer.count() == 0) throw Error(source + ": text is empty (0 bytes)");
    writer.commit();
    log::info("data: " + cache + ": " + std::to_string(writer.count()) + " tokens");
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("cannot create") != std::string::npos)
      throw Error(what + " (choose a writable cache directory for tokenized text)");
    throw;
  }
}

}  // namespace

bool is_text_source(const std::string& data_path) {
  return fs::is_directory(data_path) || ends_with(data_path, ".txt");
}

std::string text_cache_path(const std::string& data_path, const Tokenizer& tokenizer, const std::string& cache_dir) {
  const std::string source = without_trailing_slashes(data_path);
  const std::string suffix = "." + tokenizer.name() + ".strtok";
  if (cache_dir.empty()) return source + suffix;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(fs::absolute_path(source))));
  return without_trailing_slashes(cache_dir) + "/" + base_name(source) + "." + std::string(hash, 8) + suffix;
}

std::string prepare_token_file(const std::string& data_path, const Tokenizer& tokenizer,
                               const DatasetOptions& options) {
  if (detect_foreign_token_format(data_path) != ForeignTokenFormat::none)  // llm.c shards, Megatron datasets
    return convert_foreign_token_file(data_path, options.cache_dir, options.may_write);
  if (!is_text_source(data_path)) return data_path;  // a token file; TokenFile checks it
  const std::string source = without_trailing_slashes(data_path);
  // Checks of the source run on every rank, so a bad --data fails everywhere
  // alike instead of leaving the other ranks waiting in the caller's barrier.
  if (!fs::exists(source))
    throw Error(source + ": no such file (--data takes a Stratum token file, a .txt file, a directory of .txt files, "
                         "an llm.c shard or a Megatron dataset's PREFIX of PREFIX.bin and PREFIX.idx)");
  const std::vector<std::string> files = text_files(source);
  if (total_bytes(files) == 0) throw Error(source + ": text is empty (0 bytes)");
  const std::string cache = text_cache_path(source, tokenizer, options.cache_dir);
  if (!options.may_write) return cache;
  if (!cache_is_fresh(cache, source, files, tokenizer)) build_cache(source, files, tokenizer, cache);
  return cache;
}

TokenFile prepare_dataset(const std::string& data_path, const Tokenizer& tokenizer, const DatasetOptions& options) {
  return TokenFile(prepare_token_file(data_path, tokenizer, options));
}

}  // namespace stratum::data
