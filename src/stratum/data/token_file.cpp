#include "stratum/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian; add byte swapping");

namespace {

constexpr const char* kDataHint =
    "--data takes a Stratum token file, a .txt file or a directory of .txt files (text is tokenized on first use)";

std::string sys_error() { return std::strerror(errno); }

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t dtype_bytes;
  uint64_t count;
  uint64_t vocab_size;
  char tokenizer_name[32];
};
static_assert(sizeof(Header) == kTokenFileHeaderBytes);

}  // namespace

// ---------------------------------------------------------------- writing

TokenFileWriter::TokenFileWriter(std::string path, std::string tokenizer_name, int64_t vocab_size)
    : path_(std::move(path)), tokenizer_name_(std::move(tokenizer_name)), vocab_size_(vocab_size) {
  if (tokenizer_name_.size() > 31)
    throw Error(path_ + ": tokenizer name '" + tokenizer_name_ + "' is longer than 31 bytes");
  if (vocab_size_ < 1 || vocab_size_ > (int64_t{1} << 31))
    throw Error(path_ + ": vocabulary size " + std::to_string(vocab_size_) + " is not in [1, 2^31]");
  dtype_bytes_ = vocab_size_ <= 65536 ? 2 : 4;
  temp_path_ = fs::temp_path_for(path_);
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) throw Error(temp_path_ + ": cannot create token file: " + sys_error());
  const Header placeholder{};  // rewritten by commit()
  if (std::fwrite(&placeholder, sizeof placeholder, 1, file_) != 1)
    throw Error(temp_path_ + ": write failed: " + sys_error());
}

TokenFileWriter::~TokenFileWriter() {
  if (file_) {
    std::fclose(file_);
    ::unlink(temp_path_.c_str());
  }
}

void TokenFileWriter::begin_document() {
  if (!file_) throw Error(path_ + ": begin_document after commit");
  if (document_starts_.empty() || document_starts_.back() != count_) document_starts_.push_back(count_);
}

void TokenFileWriter::append(const int32_t* ids, size_t count) {
  if (!file_) throw Error(path_ + ": append after commit");
  buffer_.resize(count * dtype_bytes_);
  for (size_t i = 0; i < count; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_)
      throw Error(path_ + ": token " + std::to_string(id) + " at position " + std::to_string(count_ + int64_t(i)) +
                  " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
    if (dtype_bytes_ == 2) {
      const uint16_t v = static_cast<uint16_t>(id);
      std::memcpy(buffer_.data() + 2 * i, &v, 2);
    } else {
      const uint32_t v = static_cast<uint32_t>(id);
      std::memcpy(buffer_.data() + 4 * i, &v, 4);
    }
  }
  if (count && std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size())
    throw Error(temp_path_ + ": write failed: " + sys_error());
  count_ += static_cast<int64_t>(count);
}

void TokenFileWriter::commit() {
  if (!file_) throw Error(path_ + ": token file committed twice");
  Header h{};
  std::memcpy(h.magic, kTokenFileMagic, sizeof h.magic);
  h.version = kTokenFileVersion;
  h.dtype_bytes = static_cast<uint32_t>(dtype_bytes_);
  h.count = static_cast<uint64_t>(count_);
  h.vocab_size = static_cast<uint64_t>(vocab_size_);
  std::memcpy(h.tokenizer_name, tokenizer_name_.data(), tokenizer_name_.size());
  const bool ok = std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(&h, sizeof h, 1, file_) == 1 &&
                  std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const std::string why = ok ? "" : sys_error();
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) {
    ::unlink(temp_path_.c_str());
    throw Error(temp_path_ + ": write failed: " + (ok ? sys_error() : why));
  }
  // The index first: a reader that finds the new token file finds its index.
  const std::string index_path = document_index_path(path_);
  while (!document_starts_.empty() && document_starts_.back() >= count_) document_starts_.pop_back();
  if (!document_starts_.empty() && document_starts_.front() != 0) document_starts_.insert(document_starts_.begin(), 0);
  if (!document_starts_.empty()) {
    std::string bytes(static_cast<size_t>(kDocumentIndexHeaderBytes) + 8 * document_starts_.size(), '\0');
    const uint64_t head[2] = {static_cast<uint64_t>(count_), static_cast<uint64_t>(document_starts_.size())};
    std::memcpy(bytes.data(), kDocumentIndexMagic, 8);
    std::memcpy(bytes.data() + 8, head, sizeof head);
    std::memcpy(bytes.data() + kDocumentIndexHeaderBytes, document_starts_.data(), 8 * document_starts_.size());
    try {
      fs::write_file_atomically(index_path, bytes, "document index");
    } catch (...) {
      ::unlink(temp_path_.c_str());
      throw;
    }
  } else {
    ::unlink(index_path.c_str());  // an older file's index would not match
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const std::string err = sys_error();
    ::unlink(temp_path_.c_str());
    throw Error(path_ + ": cannot move token file into place: " + err);
  }
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens, const std::string& tokenizer_name,
                      int64_t vocab_size) {
  TokenFileWriter writer(path, tokenizer_name, vocab_size);
  writer.append(tokens);
  writer.commit();
}

// ---------------------------------------------------------------- reading

TokenFileInfo check_token_file(const unsigned char* bytes, uint64_t size, const std::string& path) {
  if (size < 8 || std::memcmp(bytes, kTokenFileMagic, 8) != 0)
    throw Error(path + ": not a Stratum token file (bad magic; expected \"STRTOK1\"). " + kDataHint);
  if (size < static_cast<uint64_t>(kTokenFileHeaderBytes))
    throw Error(path + ": truncated token file: the header needs " + std::to_string(kTokenFileHeaderBytes) +
                " bytes, the file has " + std::to_string(size));
  Header h;
  std::memcpy(&h, bytes, sizeof h);
  if (h.version != kTokenFileVersion)
    throw Error(path + ": token file version " + std::to_string(h.version) + ", this Stratum reads version " +
                std::to_string(kTokenFileVersion));
  if (h.dtype_bytes != 2 && h.dtype_bytes != 4)
    throw Error(path + ": corrupt token file header: " + std::to_string(h.dtype_bytes) +
                " bytes per token (expected 2 or 4)");
  if (h.vocab_size < 1 || h.vocab_size > (uint64_t{1} << 31))
    throw Error(path + ": corrupt token file header: vocabulary size " + std::to_string(h.vocab_size) +
                " is not in [1, 2^31]");
  const uint64_t data_bytes = size - static_cast<uint64_t>(kTokenFileHeaderBytes);
  // count x bytes per token, checked: a count near 2^63 must not wrap into a small size.
  uint64_t expected = 0;
  if (__builtin_mul_overflow(h.count, uint64_t{h.dtype_bytes}, &expected))
    throw Error(path + ": corrupt token file header: " + std::to_string(h.count) + " tokens x " +
                std::to_string(h.dtype_bytes) + " bytes is over 2^64 bytes; the file holds " +
                std::to_string(data_bytes) + " bytes after the header");
  if (expected > data_bytes)
    throw Error(path + ": truncated token file: the header says " + std::to_string(h.count) + " tokens (" +
                std::to_string(expected) + " bytes) but the file holds " + std::to_string(data_bytes) +
                " bytes after the header");
  if (data_bytes > expected)
    throw Error(path + ": corrupt token file: " + std::to_string(data_bytes - expected) + " bytes after the " +
                std::to_string(h.count) + " tokens its header announces");
  if (h.count == 0) throw Error(path + ": token file is empty (0 tokens)");
  TokenFileInfo info;
  info.dtype_bytes = static_cast<int>(h.dtype_bytes);
  info.count = static_cast<int64_t>(h.count);  // <= data_bytes / 2, so it fits
  info.vocab_size = static_cast<int64_t>(h.vocab_size);
  info.tokenizer_name.assign(h.tokenizer_name, strnlen(h.tokenizer_name, sizeof h.tokenizer_name));
  return info;
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO must not wait for a writer (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) throw Error(path + ": no such file (" + kDataHint + ")");
    throw Error(path + ": cannot open: " + sys_error());
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string err = sys_error();
    ::close(fd);
    throw Error(path + ": cannot stat: " + err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": is a directory, not a token file (" + kDataHint + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file (a FIFO or device?), not a token file (" + kDataHint + ")");
  }
  const int64_t file_bytes = st.st_size;
  if (file_bytes == 0) {
    ::close(fd);
    throw Error(path + ": file is empty (0 bytes), not a token file (" + kDataHint + ")");
  }
  map_ = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string map_err = map_ == MAP_FAILED ? sys_error() : "";
  ::close(fd);  // the mapping keeps the file open
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(path + ": cannot mmap: " + map_err);
  }
  map_bytes_ = static_cast<size_t>(file_bytes);
  try {
    const TokenFileInfo info =
        check_token_file(static_cast<const unsigned char*>(map_), static_cast<uint64_t>(file_bytes), path);
    dtype_bytes_ = info.dtype_bytes;
    size_ = info.count;
    vocab_size_ = info.vocab_size;
    tokenizer_name_ = info.tokenizer_name;
  } catch (...) {
    release();
    throw;
  }
  tokens_ = static_cast<const unsigned char*>(map_) + kTokenFileHeaderBytes;
}

TokenFile::~TokenFile() { release(); }

void TokenFile::release() noexcept {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
}

TokenFile::TokenFile(TokenFile&& other) noexcept { *this = std::move(other); }

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    tokenizer_name_ = std::move(other.tokenizer_name_);
    vocab_size_ = other.vocab_size_;
    size_ = other.size_;
    dtype_bytes_ = other.dtype_bytes_;
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    other.size_ = 0;
  }
  return *this;
}

int64_t TokenFile::token(int64_t i) const {
  if (i < 0 || i >= size_)
    throw Error(path_ + ": token index " + std::to_string(i) + " outside [0, " + std::to_string(size_) + ")");
  if (dtype_bytes_ == 2) {
    uint16_t v;
    std::memcpy(&v, tokens_ + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, tokens_ + 4 * i, 4);
  return v;
}

void TokenFile::read(int64_t start, int64_t count, int64_t* out) const {
  if (start < 0 || count < 0 || start > size_ - count)
    throw Error(path_ + ": window [" + std::to_string(start) + ", " + std::to_string(start + count) +
                ") outside the file's " + std::to_string(size_) + " tokens");
  if (dtype_bytes_ == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(tokens_) + start;  // 64-byte header keeps it aligned
    for (int64_t i = 0; i < count; ++i) out[i] = p[i];
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(tokens_) + start;
    for (int64_t i = 0; i < count; ++i) out[i] = p[i];
  }
}

void TokenFile::require_sequence(int64_t seq_len) const {
  if (seq_len < 1) throw Error(path_ + ": sequence length must be at least 1, got " + std::to_string(seq_len));
  if (size_ < seq_len + 1)
    throw Error(path_ + ": too short for one sequence: seq_len " + std::to_string(seq_len) +
                " requires at least seq_len + 1 = " + std::to_string(seq_len + 1) + " tokens, has " +
                std::to_string(size_));
}

// ---------------------------------------------------------------- documents

std::string document_index_path(const std::string& token_file_path) { return token_file_path + ".docs"; }

std::vector<int64_t> check_document_index(const unsigned char* bytes, uint64_t size, const std::string& path,
                                          int64_t tokens) {
  if (size < 8 || std::memcmp(bytes, kDocumentIndexMagic, 8) != 0)
    throw Error(path + ": not a Stratum document index (bad magic; expected \"STRDOC1\")");
  if (size < static_cast<uint64_t>(kDocumentIndexHeaderBytes))
    throw Error(path + ": truncated document index: the header needs " + std::to_string(kDocumentIndexHeaderBytes) +
                " bytes, the file has " + std::to_string(size));
  uint64_t head[2];
  std::memcpy(head, bytes + 8, sizeof head);
  if (head[0] != static_cast<uint64_t>(tokens))
    throw Error(path + ": document index of a " + std::to_string(head[0]) + "-token file, but the token file holds " +
                std::to_string(tokens) + " tokens (rebuilt since? remove the index, or the cache, to rebuild it)");
  const uint64_t rest = size - static_cast<uint64_t>(kDocumentIndexHeaderBytes);
  if (head[1] == 0 || head[1] > rest / 8 || rest != head[1] * 8)
    throw Error(path + ": corrupt document index: " + std::to_string(head[1]) + " documents but " +
                std::to_string(rest) + " bytes after the header (8 a document)");
  std::vector<int64_t> starts(static_cast<size_t>(head[1]));
  std::memcpy(starts.data(), bytes + kDocumentIndexHeaderBytes, 8 * starts.size());
  for (size_t i = 0; i < starts.size(); ++i) {
    const bool ok = (i == 0 ? starts[0] == 0 : starts[i] > starts[i - 1]) && starts[i] < tokens;
    if (!ok)
      throw Error(path + ": corrupt document index: byte " +
                  std::to_string(kDocumentIndexHeaderBytes + 8 * static_cast<int64_t>(i)) + ": document " +
                  std::to_string(i) + " starts at token " + std::to_string(starts[i]) +
                  (i == 0 ? " (the first starts at 0, below the " + std::to_string(tokens) + " tokens)"
                          : " (after " + std::to_string(starts[i - 1]) + " and below " + std::to_string(tokens) + ")"));
  }
  return starts;
}

std::vector<int64_t> read_document_index(const TokenFile& token_file) {
  const std::string path = document_index_path(token_file.path());
  if (!fs::exists(path))
    throw Error(path + ": no such file: " + token_file.path() + " has no document index (Stratum writes one beside "
                "each token file it makes from text, JSON Lines, llm.c shards, Megatron datasets and blends of them; "
                "a cache from an older Stratum is rebuilt from its source)");
  const std::string bytes = fs::read_regular_file(path, size_t{1} << 40, "document index");
  return check_document_index(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), path,
                              token_file.size());
}

bool has_document_index(const std::string& token_file_path, int64_t tokens) {
  try {
    const std::string path = document_index_path(token_file_path);
    if (!fs::is_regular_file(path)) return false;
    const std::string bytes = fs::read_regular_file(path, size_t{1} << 40, "document index");
    check_document_index(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), path, tokens);
    return true;
  } catch (const Error&) {
    return false;
  }
}

void document_window_layout(const std::vector<int64_t>& starts, int64_t start, int64_t seq_len, bool restart_positions,
                            int32_t* segment_ids, int64_t* position_ids, bool* target_starts_document) {
  // The first document start after the window's first input.
  auto next = std::upper_bound(starts.begin(), starts.end(), start);
  int32_t segment = 0;
  int64_t begins = 0;  // where the current document begins in the window
  for (int64_t i = 0; i < seq_len; ++i) {
    if (next != starts.end() && *next == start + i) {
      ++segment, begins = i;
      ++next;
    }
    segment_ids[i] = segment;
    position_ids[i] = restart_positions ? i - begins : i;
    target_starts_document[i] = next != starts.end() && *next == start + i + 1;
  }
}

}  // namespace stratum::data
