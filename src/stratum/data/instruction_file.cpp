#include "stratum/data/instruction_file.h"

#include <cstring>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::data {
namespace {

template <typename T>
void put(std::string& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}

template <typename T>
T get(const unsigned char* bytes, uint64_t at) {
  T v;
  std::memcpy(&v, bytes + at, sizeof v);
  return v;
}

}  // namespace

void write_instruction_file(const std::string& path, const std::vector<InstructionExample>& examples,
                            const std::string& tokenizer_name, int64_t vocab_size, uint64_t format_hash) {
  if (tokenizer_name.size() > 31) throw Error(path + ": tokenizer name '" + tokenizer_name + "' is longer than 31 bytes");
  if (examples.empty()) throw Error(path + ": no examples to write");
  int64_t tokens = 0;
  for (const auto& e : examples) tokens += static_cast<int64_t>(e.tokens.size());
  const auto n = static_cast<int64_t>(examples.size());
  std::string out(static_cast<size_t>(kInstructionFileHeaderBytes + 8 * (n + 1) + 5 * tokens), '\0');
  std::memcpy(out.data(), kInstructionFileMagic, 8);
  put<uint32_t>(out, 8, kInstructionFileVersion);
  put<int64_t>(out, 16, n);
  put<int64_t>(out, 24, tokens);
  put<int64_t>(out, 32, vocab_size);
  put<uint64_t>(out, 40, format_hash);
  std::memcpy(out.data() + 48, tokenizer_name.data(), tokenizer_name.size());
  size_t offsets_at = kInstructionFileHeaderBytes, tokens_at = offsets_at + 8 * (n + 1), mask_at = tokens_at + 4 * tokens;
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    const InstructionExample& e = examples[static_cast<size_t>(i)];
    put<int64_t>(out, offsets_at + 8 * i, at);
    for (size_t k = 0; k < e.tokens.size(); ++k) {
      if (e.tokens[k] < 0 || e.tokens[k] >= vocab_size)
        throw Error(path + ": example " + std::to_string(i) + " has id " + std::to_string(e.tokens[k]) +
                    " outside the vocabulary of " + std::to_string(vocab_size));
      put<int32_t>(out, tokens_at + 4 * (at + static_cast<int64_t>(k)), e.tokens[k]);
      out[mask_at + at + k] = static_cast<char>(e.loss_mask[k] ? 1 : 0);
    }
    at += static_cast<int64_t>(e.tokens.size());
  }
  put<int64_t>(out, offsets_at + 8 * n, at);
  fs::write_file_atomically(path, out, "an instruction data cache");
}

InstructionFileInfo check_instruction_file(const unsigned char* bytes, uint64_t size, const std::string& path) {
  auto fail = [&](const std::string& why) -> void { throw Error(path + ": not a valid instruction data cache: " + why); };
  if (size < static_cast<uint64_t>(kInstructionFileHeaderBytes)) fail("shorter than its 128-byte header");
  if (std::memcmp(bytes, kInstructionFileMagic, 8) != 0) fail("bad magic (expected STRINS1)");
  if (get<uint32_t>(bytes, 8) != kInstructionFileVersion) fail("version " + std::to_string(get<uint32_t>(bytes, 8)) + ", expected 1");
  InstructionFileInfo info;
  info.examples = get<int64_t>(bytes, 16);
  info.tokens = get<int64_t>(bytes, 24);
  info.vocab_size = get<int64_t>(bytes, 32);
  info.format_hash = get<uint64_t>(bytes, 40);
  const char* name = reinterpret_cast<const char*>(bytes + 48);
  info.tokenizer_name.assign(name, strnlen(name, 32));
  if (info.examples <= 0 || info.tokens <= 0) fail("no examples");
  if (info.vocab_size <= 0 || info.vocab_size > (int64_t{1} << 31)) fail("vocabulary size " + std::to_string(info.vocab_size));
  const uint64_t body = size - kInstructionFileHeaderBytes;
  const auto n = static_cast<uint64_t>(info.examples), t = static_cast<uint64_t>(info.tokens);
  if (n >= body / 8 || t > body / 5 || 8 * (n + 1) + 5 * t != body)
    fail(std::to_string(info.examples) + " examples and " + std::to_string(info.tokens) + " tokens do not fill its " +
         std::to_string(body) + " bytes");
  const uint64_t offsets_at = kInstructionFileHeaderBytes, tokens_at = offsets_at + 8 * (n + 1), mask_at = tokens_at + 4 * t;
  int64_t previous = get<int64_t>(bytes, offsets_at);
  if (previous != 0) fail("the first example does not start at token 0");
  for (uint64_t i = 1; i <= n; ++i) {
    const int64_t o = get<int64_t>(bytes, offsets_at + 8 * i);
    if (o <= previous || o > info.tokens) fail("example " + std::to_string(i - 1) + " is empty or runs past the tokens");
    previous = o;
  }
  if (previous != info.tokens) fail("the examples do not end at the last token");
  for (uint64_t k = 0; k < t; ++k) {
    const int32_t id = get<int32_t>(bytes, tokens_at + 4 * k);
    if (id < 0 || id >= info.vocab_size) fail("token " + std::to_string(k) + " has id " + std::to_string(id) + " outside the vocabulary");
    if (bytes[mask_at + k] > 1) fail("token " + std::to_string(k) + " has a loss mask that is neither 0 nor 1");
  }
  return info;
}

InstructionFile::InstructionFile(const std::string& path)
    : file_([&] {
        std::fclose(fs::open_regular_file(path, "an instruction data cache"));  // a FIFO or device refused by name
        return MappedFile(path);
      }()),
      info_(check_instruction_file(file_.data(), file_.size(), path)) {}

int64_t InstructionFile::offset(int64_t i) const { return get<int64_t>(file_.data(), kInstructionFileHeaderBytes + 8 * i); }

int64_t InstructionFile::length(int64_t example) const {
  if (example < 0 || example >= info_.examples)
    throw Error(path() + ": example " + std::to_string(example) + " of " + std::to_string(info_.examples));
  return offset(example + 1) - offset(example);
}

std::vector<int64_t> InstructionFile::lengths() const {
  std::vector<int64_t> out(static_cast<size_t>(info_.examples));
  for (int64_t i = 0; i < info_.examples; ++i) out[static_cast<size_t>(i)] = offset(i + 1) - offset(i);
  return out;
}

void InstructionFile::read(int64_t example, int64_t start, int64_t count, int64_t* tokens, uint8_t* loss_mask) const {
  const int64_t len = length(example);
  if (start < 0 || count < 0 || start + count > len)
    throw Error(path() + ": tokens [" + std::to_string(start) + ", " + std::to_string(start + count) + ") of example " +
                std::to_string(example) + ", which has " + std::to_string(len));
  const uint64_t n = static_cast<uint64_t>(info_.examples);
  const uint64_t tokens_at = kInstructionFileHeaderBytes + 8 * (n + 1);
  const uint64_t mask_at = tokens_at + 4 * static_cast<uint64_t>(info_.tokens);
  const int64_t first = offset(example) + start;
  for (int64_t k = 0; k < count; ++k) {
    tokens[k] = get<int32_t>(file_.data(), tokens_at + 4 * static_cast<uint64_t>(first + k));
    loss_mask[k] = file_.data()[mask_at + static_cast<uint64_t>(first + k)];
  }
}

}  // namespace stratum::data
