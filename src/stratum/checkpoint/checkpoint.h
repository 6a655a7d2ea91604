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
// Asynchronous saves (CheckpointSaver, `"checkpoint": {"async": true}`): the
// step blocks only while each rank copies its states into host staging
// buffers; a background thread writes the shard and its checksums, and the
// publication (the ranks' agreement, the manifest, the renames, `latest`)
// happens on the training thread at the first poll() after every rank's write
// has ended, or when the next save starts, or at finish().
//
// Every stored tensor has a CRC-32C in the manifest (checkpoint/manifest.h),
// checked whenever it is read: a flipped bit or an edited shard is an error
// naming the file and tensor, never a silent load.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "stratum/checkpoint/host_staging.h"
#include "stratum/checkpoint/tags.h"
#include "stratum/engine/engine_core.h"
#include "stratum/engine/pipeline_stages.h"

namespace stratum {

struct CheckpointManifest;

struct CheckpointSaveOptions {
  // Called on every rank with "<tag>.tmp" once its files are written, before
  // the manifest and the renames publish them: where a crash test stops a saver.
  std::function<void(const std::string& staging_dir)> before_publish;
  // Files the first rank copies into the tag before it is published (a
  // tokenizer's files), by the name they get there -> their path now.
  std::map<std::string, std::string> files;
  // Tests: called on every rank at each stage of a save, "copy" (the states
  // are in host memory), "write" (this rank's shard is written: on the
  // background thread of an asynchronous save) and "publish" (before the
  // manifest); an exception thrown there fails the save as a failing disk would.
  std::function<void(const std::string& stage, const std::string& staging_dir)> at_stage;
};

// What one save did, once it is published.
struct CheckpointSaveReport {
  std::string tag, dir;          // dir: save_dir/tag
  bool async = false;
  uint64_t bytes = 0;            // every rank's shard (and model_16bit) together
  uint64_t staging_bytes = 0;    // this rank's host staging buffers (async; allocated once, reused)
  double blocked_seconds = 0;    // this rank's training thread: the copy and the publication
  double write_seconds = 0;      // the slowest rank's write of its files (and checksums)
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

// Saves one after another, each either synchronously (as save_checkpoint) or
// asynchronously: save() copies this rank's states into host buffers (pinned
// when they live on a GPU; allocated at the first save and reused, as large as
// the rank's shard) and returns while a background thread writes them. The
// background thread makes no collective call: the communicators are used by
// the training thread only. poll() publishes once every rank has written; the
// next save() or finish() waits for the write, then the ranks agree that every one wrote its shard (an error on any rank
// ends every rank with AgreedError naming it), rank 0 writes the manifest,
// renames "<tag>.tmp" to "<tag>" and moves `latest`: a job that dies before
// that leaves the previous checkpoint loadable and `latest` naming it.
//
// STRATUM_CHECKPOINT_FAULT="<stage>:<throw|exit>[:<tag>]" (tests) fails or
// _exits every rank at that stage ("copy", "write", "publish") of a save.
class CheckpointSaver {
 public:
  // `on_saved`: called on every rank when a save is published.
  explicit CheckpointSaver(bool async, std::function<void(const CheckpointSaveReport&)> on_saved = {});
  ~CheckpointSaver();  // waits for a pending write; never publishes it (no collectives here)
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Collective (as save_checkpoint): publishes the pending save, then saves `tag`.
  void save(EngineCore& engine, const std::string& save_dir, const std::string& tag, const nlohmann::json& client_state,
            const CheckpointSaveOptions& options = {}, const PipelinePlace* place = nullptr);
  // Collective: waits for the pending save and publishes it (nothing when none).
  void finish();
  // Collective, cheap (one integer reduced while a save is pending, nothing
  // otherwise): publishes the pending save once every rank's write has ended,
  // so `latest` moves without waiting for the next save. Call it on every
  // rank at the same points (after each step).
  void poll();
  bool async() const { return async_; }
  bool pending() const;
  // Async: host memory held for the copies (the reserved block and beyond).
  uint64_t staging_bytes() const;
  // Async: starts reserving, in the background, the host memory the saves
  // will copy this rank's states into (pinned for a GPU's), so that the first
  // save does not block while it is pinned. Nothing when synchronous.
  void reserve_staging(EngineCore& engine);

  struct Pending;  // a save between its copy and its publication

 private:
  bool async_;
  std::function<void(const CheckpointSaveReport&)> on_saved_;
  HostStaging staging_;
  std::unique_ptr<Pending> pending_;
};

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
