#pragma once
// Checkpoints in one format for every topology: a directory per tag with one
// safetensors shard per rank and a JSON manifest, and a `latest` file beside
// the tags. A shard holds this rank's fp32 master weights and Adam moments as
// fragments named "<kind>|<parameter>|<first element>", so any data-parallel
// size and ZeRO stage can read what any other wrote.
//
// Saving is atomic: every rank writes into "<tag>.tmp", then rank 0 writes the
// manifest, renames the directory to "<tag>" and only then moves `latest`. A job
// killed mid-save leaves the previous checkpoint and `latest` as they were.
//
// Every stored tensor has a CRC-32C in the manifest (checkpoint/manifest.h),
// checked whenever it is read: a flipped bit or an edited shard is an error
// naming the file and tensor, never a silent load.
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "stratum/checkpoint/tags.h"
#include "stratum/engine/engine_core.h"
#include "stratum/engine/pipeline_stages.h"

namespace stratum {

struct CheckpointManifest;

struct CheckpointSaveOptions {
  // Called on every rank with "<tag>.tmp" once its files are written, before
  // the manifest and the renames publish them: where a crash test stops a saver.
  std::function<void(const std::string& staging_dir)> before_publish;
};

// Collective over the engine's data-parallel group: every rank writes its shard.
// With zero_optimization.stage3_gather_16bit_weights_on_model_save the tag also
// gets model_16bit.safetensors: every parameter whole, in the training dtype.
// `client_state` (data position, model config, ...) goes into the manifest.
// `place`: this rank's stage of a pipeline (engine/pipeline_stages.h;
// collective over its world then).
void save_checkpoint(EngineCore& engine, const std::string& save_dir, const std::string& tag,
                     const nlohmann::json& client_state, const CheckpointSaveOptions& options = {},
                     const PipelinePlace* place = nullptr);

// Collective: loads `tag` (empty: the one `latest` names) whatever topology
// wrote it. When the checkpoint is corrupt (checksum, NaN or Inf, truncated
// shard, invalid manifest) or does not match the model on any rank, every rank
// throws AgreedError: the failing ones with their error naming the file and
// tensor. Returns the client state.
nlohmann::json load_checkpoint(EngineCore& engine, const std::string& load_dir, const std::string& tag = "",
                               const PipelinePlace* place = nullptr);

// For tools (stratum-ckpt): the manifest, and each parameter's full fp32 value
// assembled from every shard (optionally Adam's moments too, as "exp_avg|name").
struct ConsolidatedCheckpoint {
  std::string path;  // the tag directory
  std::shared_ptr<const CheckpointManifest> manifest;
  std::map<std::string, at::Tensor> tensors;
};
ConsolidatedCheckpoint read_consolidated_checkpoint(const std::string& tag_dir, bool with_optimizer_states = false);

// Reads every tensor of every shard one at a time and checks it: listed in the
// manifest and nothing else, its checksum, finite values, and every parameter's
// elements covered exactly once per kind. Throws stratum::Error at the first
// problem, naming the file and tensor.
struct CheckpointVerification {
  int shards = 0;
  int64_t tensors = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  bool checksums = true;  // false: a format-1 checkpoint (no checksums stored; values checked only)
};
CheckpointVerification verify_checkpoint(const std::string& tag_dir);

}  // namespace stratum
