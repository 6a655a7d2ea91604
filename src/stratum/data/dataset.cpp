#include "stratum/data/dataset.h"
#include "stratum/data/foreign_token_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cctype>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/log.h"
#include "stratum/data/jsonl_record.h"

namespace stratum::data {

namespace {

constexpr size_t kChunkBytes = size_t{4} << 20;
// A piece of text with no safe cut (one endless line, binary) is cut anyway
// at this size, so memory stays bounded whatever the file holds.
constexpr size_t kMaxPieceBytes = 4 * kChunkBytes;
constexpr const char* kDataFile = "a data file";

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

// Refuses by name what is not a regular file (links followed), without
// blocking on a FIFO: /dev/zero or a pipe would never end.
void require_regular_file(const std::string& path) { std::fclose(fs::open_regular_file(path, kDataFile)); }

// The text files of a source, in the order they are concatenated. In a
// directory, subdirectories are skipped (it is not read recursively); any
// other *.txt that is not a regular file (a FIFO, a device, a link to
// /dev/zero or to nothing) is refused by name.
std::vector<std::string> text_files(const std::string& source) {
  if (!fs::is_directory(source)) {
    require_regular_file(source);
    return {source};
  }
  std::vector<std::string> names;
  for (const auto& name : fs::list_directory(source))
    if (ends_with(name, ".txt") && !fs::is_directory(source + "/" + name)) names.push_back(name);
  if (names.empty()) throw Error(source + ": directory holds no .txt files");
  std::sort(names.begin(), names.end());
  for (auto& n : names) {
    n = source + "/" + n;
    require_regular_file(n);
  }
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
    return file.tokenizer_name() == tokenizer.name() && file.vocab_size() == tokenizer.vocab_size() &&
           has_document_index(cache, file.size());  // a cache from before document indexes is rebuilt
  } catch (const Error&) {
    return false;  // damaged or empty: rebuild
  }
}

// Encodes pieces of text on every core, keeping their order: pieces queue
// up until there is one per thread, then run at once.
class ParallelEncoder {
 public:
  ParallelEncoder(const Tokenizer& tokenizer, TokenFileWriter& writer)
      : tokenizer_(tokenizer), writer_(writer),
        threads_(std::max(1u, std::thread::hardware_concurrency())) {}
  // `before` and `after` are ids around the piece's own (special tokens);
  // `document`: the piece begins a document (TokenFileWriter::begin_document).
  void add(std::string text, std::vector<int32_t> before = {}, std::vector<int32_t> after = {}, bool document = false) {
    jobs_.push_back({std::move(text), std::move(before), std::move(after), {}, document});
    if (jobs_.size() >= threads_) flush();
  }
  // Ids after the last piece added (a document's EOS).
  void append_to_last(const std::vector<int32_t>& ids) {
    if (jobs_.empty()) {
      writer_.append(ids);
      return;
    }
    auto& after = jobs_.back().after;
    after.insert(after.end(), ids.begin(), ids.end());
  }
  void flush() {
    std::vector<std::thread> pool;
    std::vector<std::exception_ptr> errors(jobs_.size());
    for (size_t i = 1; i < jobs_.size(); ++i)
      pool.emplace_back([this, i, &errors] { run(i, errors[i]); });
    if (!jobs_.empty()) run(0, errors[0]);
    for (auto& t : pool) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    for (auto& job : jobs_) {
      if (job.document) writer_.begin_document();
      writer_.append(job.before);
      writer_.append(job.ids);
      writer_.append(job.after);
    }
    jobs_.clear();
  }

 private:
  struct Job {
    std::string text;
    std::vector<int32_t> before, after, ids;
    bool document = false;
  };
  void run(size_t i, std::exception_ptr& error) {
    try {
      jobs_[i].ids = tokenizer_.encode(jobs_[i].text);
    } catch (...) {
      error = std::current_exception();
    }
  }
  const Tokenizer& tokenizer_;
  TokenFileWriter& writer_;
  unsigned threads_;
  std::vector<Job> jobs_;
};

// Where a piece of text may end so that encoding the pieces apart gives the
// ids of encoding them together: after a newline that a letter or digit
// follows (no pre-tokenizer joins "\n" with a word after it). npos if none.
size_t safe_cut(const std::string& text) {
  for (size_t i = text.size(); i-- > 1;)
    if (text[i - 1] == '\n' && std::isalnum(static_cast<unsigned char>(text[i]))) return i;
  return std::string::npos;
}

// Where a piece with no safe cut is cut anyway: before a space that ends a
// word (pre-tokenizers start the next word with it), else at the start of a
// UTF-8 character. Only the ids at that one seam may differ from encoding the
// text whole.
size_t forced_cut(const std::string& text) {
  for (size_t i = text.size(); i-- > 1;)
    if (text[i] == ' ' && !std::isspace(static_cast<unsigned char>(text[i - 1]))) return i;
  for (size_t i = text.size(); i-- > 1;)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) return i;
  return text.size();
}

// Where the pending text is cut into a piece to encode; npos: read on.
size_t next_cut(const std::string& pending) {
  if (pending.size() < kChunkBytes) return std::string::npos;
  const size_t cut = safe_cut(pending);
  if (cut != std::string::npos || pending.size() < kMaxPieceBytes) return cut;
  return forced_cut(pending);
}

// The ids after a document: the tokenizer's suffix, then its EOS.
std::vector<int32_t> document_end(const Tokenizer& tokenizer) {
  std::vector<int32_t> ids = tokenizer.suffix_tokens();
  const int32_t eos = tokenizer.eos_id();
  if (eos >= 0 && (ids.empty() || ids.back() != eos)) ids.push_back(eos);
  return ids;
}

// Each text file is a document: the tokenizer's prefix (BOS) before it, its
// suffix and EOS after it (a tokenizer without an EOS, as the byte one, joins
// the files with a newline instead, the newline counted in the next file's
// document). A file is fed in pieces of about kChunkBytes cut where safe_cut
// says, encoded in parallel; its first piece begins a document.
void tokenize_files(const std::vector<std::string>& files, const Tokenizer& tokenizer, TokenFileWriter& writer) {
  ParallelEncoder encoder(tokenizer, writer);
  const bool documents = tokenizer.eos_id() >= 0;
  std::vector<char> chunk(kChunkBytes);
  char last = '\n';
  for (size_t f_index = 0; f_index < files.size(); ++f_index) {
    const auto& path = files[f_index];
    std::string pending;
    if (!documents && last != '\n') pending.push_back('\n');
    std::vector<int32_t> before = tokenizer.prefix_tokens();
    bool document = true;
    std::FILE* f = fs::open_regular_file(path, kDataFile);
    size_t got;
    while ((got = std::fread(chunk.data(), 1, chunk.size(), f)) > 0) {
      pending.append(chunk.data(), got);
      last = chunk[got - 1];
      const size_t cut = next_cut(pending);
      if (cut != std::string::npos) {
        encoder.add(pending.substr(0, cut), std::move(before), {}, document);
        before.clear();
        document = false;
        pending.erase(0, cut);
      }
    }
    const bool failed = std::ferror(f);
    std::fclose(f);
    if (failed) throw Error(path + ": read error");
    if (!pending.empty() || !before.empty()) encoder.add(std::move(pending), std::move(before), {}, document);
    if (documents) encoder.append_to_last(document_end(tokenizer));
  }
  encoder.flush();
}

// JSON Lines: one {"text": "..."} object per line, each a document (prefix,
// text, suffix, EOS); blank lines are skipped.
void tokenize_jsonl(const std::string& path, const Tokenizer& tokenizer, TokenFileWriter& writer,
                    size_t max_line_bytes) {
  if (tokenizer.eos_id() < 0)
    throw Error(path + ": JSON Lines documents are separated by an end-of-text token, which the " + tokenizer.name() +
                " tokenizer has not; pass --tokenizer with a tokenizer.json or tokenizer.model whose config names "
                "its eos_token");
  ParallelEncoder encoder(tokenizer, writer);
  const std::vector<int32_t> end = document_end(tokenizer);
  std::FILE* f = fs::open_regular_file(path, kDataFile);
  try {
    read_jsonl_lines(f, path, max_line_bytes, [&](std::string_view line, int64_t line_number, int64_t byte) {
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;  // blank lines are skipped
      encoder.add(jsonl_document_text(line, jsonl_line_name(path, line_number, byte)), tokenizer.prefix_tokens(), end,
                  true);
    });
  } catch (...) {
    std::fclose(f);
    throw;
  }
  std::fclose(f);
  encoder.flush();
}

void build_cache(const std::string& source, const std::vector<std::string>& files, const Tokenizer& tokenizer,
                 const std::string& cache, size_t max_jsonl_line_bytes) {
  std::string where = cache.substr(0, cache.rfind('/') == std::string::npos ? 0 : cache.rfind('/'));
  if (!where.empty()) fs::make_directories(where);
  log::info("data: tokenizing " + source + " (" + tokenizer.name() + " tokenizer) into " + cache);
  try {
    TokenFileWriter writer(cache, tokenizer.name(), tokenizer.vocab_size());
    if (ends_with(source, ".jsonl"))
      tokenize_jsonl(source, tokenizer, writer, max_jsonl_line_bytes);
    else
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
  return fs::is_directory(data_path) || ends_with(data_path, ".txt") || ends_with(data_path, ".jsonl");
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
  if (!is_text_source(data_path)) {
    // A token file; TokenFile checks it. A FIFO or device is named here, as a text source's would be.
    if (fs::exists(data_path) && !fs::is_directory(data_path)) require_regular_file(data_path);
    return data_path;
  }
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
  if (!cache_is_fresh(cache, source, files, tokenizer)) build_cache(source, files, tokenizer, cache, options.max_jsonl_line_bytes);
  return cache;
}

TokenFile prepare_dataset(const std::string& data_path, const Tokenizer& tokenizer, const DatasetOptions& options) {
  return TokenFile(prepare_token_file(data_path, tokenizer, options));
}

}  // namespace stratum::data
