#pragma once
// The on-disk tokenized dataset: a 64-byte header, then the tokens as raw
// little-endian uint16 (vocabularies up to 65536) or uint32.
//
//   offset  size  field
//        0     8  magic "STRTOK1\0"
//        8     4  version (1)
//       12     4  bytes per token (2 or 4)
//       16     8  token count
//       24     8  vocabulary size of the tokenizer that wrote it
//       32    32  tokenizer name, NUL-padded
//       64        tokens
//
// Beside it, `<file>.docs` may hold its document index (below).
//
// Plain C++, no torch. Readers map the file (read-only, MAP_PRIVATE), so many
// ranks on one node share the page cache and nothing is loaded up front.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace stratum::data {

inline constexpr char kTokenFileMagic[8] = {'S', 'T', 'R', 'T', 'O', 'K', '1', '\0'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 64;

// Streams tokens into `<path>.tmp.<host>.<pid>`; commit() renames it onto
// `path`, so readers (and other ranks writing the same file) never see a torn
// file. Destroyed without commit(), it removes the temporary file.
class TokenFileWriter {
 public:
  // Throws stratum::Error if the name is longer than 31 bytes, the vocabulary
  // size is not in [1, 2^31], or the temporary file cannot be created.
  TokenFileWriter(std::string path, std::string tokenizer_name, int64_t vocab_size);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // The tokens appended from here on begin a document (the document index,
  // below). A document with no tokens is dropped.
  void begin_document();
  // Throws if an id is outside [0, vocab_size).
  void append(const int32_t* ids, size_t count);
  void append(const std::vector<int32_t>& ids) { append(ids.data(), ids.size()); }
  int64_t count() const { return count_; }
  // Writes the header, flushes to disk, renames into place; first the
  // document index when begin_document() was called (else an old index of
  // that path is removed).
  void commit();

 private:
  std::string path_, temp_path_, tokenizer_name_;
  std::vector<int64_t> document_starts_;
  int64_t vocab_size_;
  int dtype_bytes_;
  int64_t count_ = 0;
  std::FILE* file_ = nullptr;
  std::vector<char> buffer_;
};

// Atomic (temporary file + rename).
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens, const std::string& tokenizer_name,
                      int64_t vocab_size);

// What a token file's header says, after every check against the file's
// bytes (those of the TokenFile constructor, on memory: tests and fuzzing).
struct TokenFileInfo {
  int dtype_bytes = 0;
  int64_t count = 0;
  int64_t vocab_size = 0;
  std::string tokenizer_name;
};
// Throws stratum::Error naming `path`: bad magic, other version, bad bytes per
// token or vocabulary size, token count x bytes per token not the size after
// the header (checked without overflow), 0 tokens.
TokenFileInfo check_token_file(const unsigned char* bytes, uint64_t size, const std::string& path);

// A token file opened read-only through mmap. Move-only.
class TokenFile {
 public:
  // Throws stratum::Error naming the file when it is missing, not a regular
  // file (a FIFO or device is refused without blocking), empty (0 bytes), or
  // fails check_token_file.
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& tokenizer_name() const { return tokenizer_name_; }
  int64_t vocab_size() const { return vocab_size_; }
  int dtype_bytes() const { return dtype_bytes_; }
  int64_t size() const { return size_; }

  int64_t token(int64_t i) const;  // throws if i is outside [0, size())
  // Copies tokens [start, start + count) into out[0, count); throws if the
  // window leaves the file.
  void read(int64_t start, int64_t count, int64_t* out) const;

  // Throws unless the file holds one training sequence: "requires at least
  // seq_len + 1 = N tokens, has M" (inputs plus the target shifted by one).
  void require_sequence(int64_t seq_len) const;

 private:
  void release() noexcept;

  std::string path_, tokenizer_name_;
  int64_t vocab_size_ = 0, size_ = 0;
  int dtype_bytes_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
};

// ---------------------------------------------------------------- documents
//
// A token file's document index, `<token file>.docs`: where each document's
// tokens begin in the stream, for training windows that keep documents apart
// (training_source.h). Written beside every token file Stratum makes from
// documents: each text file of a directory, each JSON Lines record, each
// Megatron document, each llm.c document (from its delimiter token on). The
// stream itself does not change: a document owns whatever the stream holds
// between its start and the next (its BOS, its text, its EOS; with the byte
// tokenizer the newline that joins it to the one before).
//
//   offset  size  field
//        0     8  magic "STRDOC1\0"
//        8     8  tokens in the token file it indexes
//       16     8  document count D
//       24   8*D  int64 start of each document: the first 0, strictly
//                 increasing, each below the token count
inline constexpr char kDocumentIndexMagic[8] = {'S', 'T', 'R', 'D', 'O', 'C', '1', '\0'};
inline constexpr int64_t kDocumentIndexHeaderBytes = 24;

std::string document_index_path(const std::string& token_file_path);

// Throws stratum::Error naming `path`: bad magic, a size the count
// contradicts (checked without overflow), another token count than `tokens`,
// starts not as above.
std::vector<int64_t> check_document_index(const unsigned char* bytes, uint64_t size, const std::string& path,
                                          int64_t tokens);

// The index beside `token_file` (a file of `tokens` tokens). Throws
// stratum::Error naming it when it is missing, not a regular file, or fails
// check_document_index.
std::vector<int64_t> read_document_index(const TokenFile& token_file);

// Whether `token_file_path` has an index for its `tokens` tokens (a freshness
// check for caches: false on any fault).
bool has_document_index(const std::string& token_file_path, int64_t tokens);

// A window's layout over documents: inputs [start, start + seq_len) and
// targets one token later, `starts` a checked index. segment_ids[i]: 0 for
// the document holding the first input, one more at each document start up
// to input i; position_ids[i]: i - (where input i's document begins in the
// window) when `restart_positions`, else i; target_starts_document[i]: the
// target of input i (token start + i + 1) begins a document, i.e. input i is
// the last token of its document and its target the next one's first.
void document_window_layout(const std::vector<int64_t>& starts, int64_t start, int64_t seq_len, bool restart_positions,
                            int32_t* segment_ids, int64_t* position_ids, bool* target_starts_document);

}  // namespace stratum::data
