#include "stratum/data/foreign_token_headers.h"

#include <cstring>
#include <limits>

#include "stratum/core/error.h"

namespace stratum::data {
namespace {

constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

// A field at `offset`, whose bytes the caller has checked lie within the data.
template <class T>
T load(const uint8_t* data, uint64_t offset) {
  T v;
  std::memcpy(&v, data + offset, sizeof v);
  return v;
}

// A field of a header, checked against the data's size first.
template <class T>
T field(const uint8_t* data, uint64_t size, uint64_t offset, const std::string& path, const char* what) {
  if (offset > size || size - offset < sizeof(T))
    throw Error(path + ": truncated at byte " + std::to_string(size) + " (" + what + " at byte " +
                std::to_string(offset) + " needs " + std::to_string(sizeof(T)) + " bytes)");
  return load<T>(data, offset);
}

int megatron_width(int code, const std::string& idx_path) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: return 4;
    case 5: return 8;
    default:
      throw Error(idx_path + ": byte 17: dtype code " + std::to_string(code) +
                  (code == 6 || code == 7 ? " is a floating type, not token ids" : " is not a Megatron dtype"));
  }
}

// S * 12 + D * 8 bytes of table after the header, exactly the rest of the index.
void check_megatron_table_size(uint64_t sequences, uint64_t documents, uint64_t idx_size, const std::string& idx_path) {
  const uint64_t room = idx_size - kMegatronTableOffset;
  // By division first: hostile counts make the products wrap around.
  const bool fits = sequences <= room / 12 && documents <= (room - sequences * 12) / 8;
  if (fits && sequences * 12 + documents * 8 == room) return;
  std::string need;
  if (sequences <= std::numeric_limits<uint64_t>::max() / 12 &&
      documents <= (std::numeric_limits<uint64_t>::max() - sequences * 12 - kMegatronTableOffset) / 8)
    need = std::to_string(kMegatronTableOffset + sequences * 12 + documents * 8) + " bytes";
  else
    need = "more bytes than any file holds";
  throw Error(idx_path + ": byte 18: " + std::to_string(sequences) + " sequences and " + std::to_string(documents) +
              " documents need " + need + " but the index has " + std::to_string(idx_size) +
              (fits ? " (bytes after the document index)" : " (truncated)"));
}

// Each sequence follows the one before it in the .bin, the last ending at its end.
uint64_t check_megatron_sequences(const uint8_t* idx, const MegatronIndexInfo& info, uint64_t bin_size,
                                  const std::string& idx_path, const std::string& bin_path) {
  uint64_t expected = 0;
  for (uint64_t s = 0; s < info.sequences; ++s) {
    const uint64_t size_at = kMegatronTableOffset + s * 4;
    const uint64_t pointer_at = kMegatronTableOffset + info.sequences * 4 + s * 8;
    const int32_t size = load<int32_t>(idx, size_at);
    const int64_t pointer = load<int64_t>(idx, pointer_at);
    if (size < 0)
      throw Error(idx_path + ": byte " + std::to_string(size_at) + ": sequence " + std::to_string(s) + " has size " +
                  std::to_string(size));
    if (pointer < 0 || static_cast<uint64_t>(pointer) != expected)
      throw Error(idx_path + ": byte " + std::to_string(pointer_at) + ": sequence " + std::to_string(s) +
                  " starts at byte " + std::to_string(pointer) + " of the .bin, not " + std::to_string(expected) +
                  " (after the sequences before it)");
    const uint64_t bytes = static_cast<uint64_t>(size) * static_cast<uint64_t>(info.width);  // < 2^34
    if (bytes > bin_size - expected)
      throw Error(bin_path + ": truncated at byte " + std::to_string(bin_size) + ": sequence " + std::to_string(s) +
                  " ends at byte " + std::to_string(expected + bytes));
    expected += bytes;
  }
  if (expected != bin_size)
    throw Error(bin_path + ": byte " + std::to_string(expected) + ": " + std::to_string(bin_size - expected) +
                " bytes after the last sequence the index lists");
  return expected;
}

// The document index: 0, then each document's end, in sequences.
void check_megatron_documents(const uint8_t* idx, const MegatronIndexInfo& info, const std::string& idx_path) {
  int64_t previous = -1;
  for (uint64_t d = 0; d < info.documents; ++d) {
    const uint64_t at = kMegatronTableOffset + info.sequences * 12 + d * 8;
    const int64_t doc = load<int64_t>(idx, at);
    if (doc < previous || doc < 0 || static_cast<uint64_t>(doc) > info.sequences || (d == 0 && doc != 0))
      throw Error(idx_path + ": byte " + std::to_string(at) + ": document index " + std::to_string(doc) +
                  " does not follow " + std::to_string(previous) + " within 0.." + std::to_string(info.sequences));
    previous = doc;
  }
}

}  // namespace

LlmcShardInfo check_llmc_shard(const uint8_t* data, size_t size, const std::string& path) {
  const int32_t magic = field<int32_t>(data, size, 0, path, "the magic");
  const int32_t version = field<int32_t>(data, size, 4, path, "the version");
  const int32_t count = field<int32_t>(data, size, 8, path, "the token count");
  LlmcShardInfo info;
  if (magic == kLlmcGpt2Magic && version == 1) info.width = 2, info.vocab = 50257;
  else if (magic == kLlmcLlama3Magic && version == 7) info.width = 4, info.vocab = 128256;
  else
    throw Error(path + ": byte 0: magic " + std::to_string(magic) + " version " + std::to_string(version) +
                " is not an llm.c shard's (20240520 version 1: GPT-2, 20240801 version 7: LLaMA-3)");
  // count < 2^31 and width <= 4: the product cannot overflow.
  const uint64_t want = kLlmcHeaderBytes + static_cast<uint64_t>(count > 0 ? count : 0) * info.width;
  if (count <= 0 || size != want)
    throw Error(path + ": byte 8: the header says " + std::to_string(count) + " tokens (" + std::to_string(want) +
                " bytes with the header) but the file has " + std::to_string(size) +
                (size < want ? " (truncated)" : count <= 0 ? "" : " (bytes after the tokens)"));
  info.count = count;
  return info;
}

int64_t llmc_token(const uint8_t* data, const LlmcShardInfo& info, int64_t i) {
  const uint64_t at = kLlmcHeaderBytes + static_cast<uint64_t>(i) * static_cast<uint64_t>(info.width);
  return info.width == 2 ? int64_t{load<uint16_t>(data, at)} : int64_t{load<uint32_t>(data, at)};
}

MegatronIndexInfo check_megatron_index(const uint8_t* idx, size_t idx_size, uint64_t bin_size,
                                       const std::string& idx_path, const std::string& bin_path) {
  if (idx_size < sizeof kMegatronMagic || std::memcmp(idx, kMegatronMagic, sizeof kMegatronMagic) != 0)
    throw Error(idx_path + ": byte 0: not a Megatron index (magic \"MMIDIDX\\0\\0\")");
  const uint64_t version = field<uint64_t>(idx, idx_size, 9, idx_path, "the version");
  if (version != 1) throw Error(idx_path + ": byte 9: version " + std::to_string(version) + " (expected 1)");
  MegatronIndexInfo info;
  info.code = field<uint8_t>(idx, idx_size, 17, idx_path, "the dtype code");
  info.width = megatron_width(info.code, idx_path);
  info.sequences = field<uint64_t>(idx, idx_size, 18, idx_path, "the sequence count");
  info.documents = field<uint64_t>(idx, idx_size, 26, idx_path, "the document count");
  check_megatron_table_size(info.sequences, info.documents, idx_size, idx_path);
  info.token_bytes = check_megatron_sequences(idx, info, bin_size, idx_path, bin_path);
  check_megatron_documents(idx, info, idx_path);
  return info;
}

int32_t megatron_sequence_size(const uint8_t* idx, const MegatronIndexInfo& info, uint64_t s) {
  (void)info;
  return load<int32_t>(idx, kMegatronTableOffset + s * 4);
}

int64_t megatron_sequence_pointer(const uint8_t* idx, const MegatronIndexInfo& info, uint64_t s) {
  return load<int64_t>(idx, kMegatronTableOffset + info.sequences * 4 + s * 8);
}

int64_t megatron_document(const uint8_t* idx, const MegatronIndexInfo& info, uint64_t d) {
  return load<int64_t>(idx, kMegatronTableOffset + info.sequences * 12 + d * 8);
}

int64_t megatron_token(const uint8_t* bin, const MegatronIndexInfo& info, uint64_t at) {
  switch (info.code) {
    case 1: return load<uint8_t>(bin, at);
    case 2: return load<int8_t>(bin, at);
    case 3: return load<int16_t>(bin, at);
    case 8: return load<uint16_t>(bin, at);
    case 4: return load<int32_t>(bin, at);
    default: return load<int64_t>(bin, at);
  }
}

}  // namespace stratum::data
