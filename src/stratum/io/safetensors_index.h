#pragma once
// model.safetensors.index.json, the table of contents of a Hugging Face
// checkpoint stored in shards: {"metadata": {"total_size": N}, "weight_map":
// {tensor name: shard file name}}. Parsed and checked without torch (the fuzz
// targets link it); models/hf_state_dict.cpp opens the shards it names.
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace stratum::io {

// Bounds far above any published checkpoint's (Llama 3.1 405B: 191 shards,
// about 1,100 tensors; mixture-of-experts models: some 100,000 tensors).
inline constexpr size_t kMaxSafetensorsIndexBytes = size_t{64} << 20;
inline constexpr size_t kMaxSafetensorsIndexShards = size_t{1} << 16;
inline constexpr size_t kMaxSafetensorsIndexTensors = size_t{1} << 20;

// Shard file name -> the tensor names the index puts in it (each name in one
// shard only: JSON's repeated keys are refused by the reader). Throws
// stratum::Error (a ConfigError for bad JSON) naming `path` and the entry:
// no weight_map object, a value not a string, a shard name that is not a
// plain "*.safetensors" file name of the directory ('/', "..", NUL, empty),
// an empty tensor name, more shards or tensors than the bounds above, a
// metadata.total_size that is not a non-negative integer.
std::map<std::string, std::vector<std::string>> parse_safetensors_index(std::string_view text,
                                                                        const std::string& path);

// The index file (a regular file of at most kMaxSafetensorsIndexBytes), parsed.
std::map<std::string, std::vector<std::string>> read_safetensors_index(const std::string& path);

}  // namespace stratum::io
