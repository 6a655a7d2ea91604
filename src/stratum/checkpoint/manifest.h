#pragma once
// The manifest of a checkpoint tag (manifest.json): what every shard holds,
// the training counters, and a CRC-32C per stored tensor. Parsed into a typed
// value and validated field by field before any of it is trusted: every
// problem is reported at once, each naming the file and the key.
//
// Plain C++ and nlohmann/json, no torch: the fuzz target reads it as the
// loader does.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stratum {

inline constexpr const char* kCheckpointFormat = "stratum-checkpoint";
// 1: no checksums (still read, unverified); 2: a CRC-32C per tensor.
inline constexpr int kCheckpointVersion = 2;
// A manifest larger than this is not one (thousands of ranks and parameters stay far below).
inline constexpr size_t kMaxManifestBytes = 1ull << 30;

// How tensor parallelism cut a parameter when it was saved (nn::tp::ShardSpec
// without the rank's index): along `dim`, padded to `padded` (0: none), in
// `blocks` blocks of `parts` pieces each. parts 1: saved whole.
struct ManifestSplit {
  int64_t dim = 0, blocks = 1, parts = 1, padded = 0;
};

struct ManifestParam {
  std::string name;
  std::vector<int64_t> shape;  // the whole tensor's
  int64_t numel = 0;
  ManifestSplit split;
  // Elements of one piece (numel when saved whole).
  int64_t piece_numel() const;
};

// Elements [start, start + numel) of piece `piece` of parameter `param` (an
// index into params), counted within the piece (the whole tensor when parts is 1).
struct ManifestFragment {
  int64_t param = 0, start = 0, numel = 0, piece = 0;
};

struct ManifestShard {
  std::string file;  // shard_file_name(rank), inside the tag directory
  int rank = 0;
  std::vector<ManifestFragment> fragments;
  std::map<std::string, uint32_t> checksums;  // tensor name -> CRC-32C of its bytes (version 2)
};

struct ManifestLossScaler {
  double cur_scale = 1.0;
  int64_t cur_iter = 0, last_overflow_iter = -1, cur_hysteresis = 1, overflows_at_min = 0;
};

struct CheckpointManifest {
  std::string path;  // the manifest.json it was read from (messages)
  int version = kCheckpointVersion;
  std::string tag;
  int64_t global_steps = 0, micro_steps = 0, skipped_steps = 0;
  int zero_stage = 0;
  bool offload_optimizer = false, offload_param = false;  // as saved (absent before: false)
  int data_parallel_size = 1;
  // Pipelines: the stages that wrote it (shards[r] is then stage r / dp's,
  // data-parallel rank r % dp) and which stage held each layer of the model.
  int pipeline_stages = 1;
  std::vector<int> layer_stages;
  // Tensor parallelism: shards[((stage x tp) + tp rank) x dp + dp rank].
  int tensor_parallel_size = 1;
  // Expert parallelism (cut from the data-parallel ranks): the shards of
  // expert index e are [e x dp / size, (e + 1) x dp / size) of each part.
  int expert_parallel_size = 1;
  std::string model_dtype;  // torch's name: "Float", "BFloat16", "Half"
  std::vector<ManifestParam> params;
  std::vector<ManifestShard> shards;  // one per rank: data_parallel_size x pipeline_stages x tensor_parallel_size
  double adam_step = 0.0;
  int64_t lr_last_batch_iteration = -1;
  ManifestLossScaler loss_scaler;
  // State outside the parameters that training moves (a mixture of experts'
  // expert biases), by name: "layers.3.expert_bias" -> its values.
  std::map<std::string, std::vector<double>> routing;
  nlohmann::json client_state = nlohmann::json::object();

  bool has_checksums() const { return version >= 2; }
  int64_t total_numel() const;
};

// "rank_00003.safetensors".
std::string shard_file_name(int rank);

// Throws stratum::Error naming `path` and listing every problem: not JSON,
// nested too deep, another format or version, a key missing or of the wrong
// type, a count or size out of range (negative steps, ZeRO stage 7, shards
// that disagree with the data-parallel size, fragments outside their
// parameter, a shard file that is not the rank's own name, a bad checksum).
CheckpointManifest parse_checkpoint_manifest(const std::string& text, const std::string& path);
// Reads <tag_dir>/manifest.json (a regular file of at most kMaxManifestBytes).
CheckpointManifest read_checkpoint_manifest(const std::string& tag_dir);

std::string manifest_to_json_text(const CheckpointManifest& manifest);

}  // namespace stratum
