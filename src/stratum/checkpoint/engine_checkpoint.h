#pragma once
// Checkpoints of an engine (engine/engine.h), whatever its layout: under
// pipeline stages every stage writes its shards and rank 0 the manifest with
// the layer -> stage map; any layout (stages, tensor and data-parallel sizes,
// ZeRO stage) loads what any other saved.
//
//   stratum::save_checkpoint(engine, "ckpt", "global_step100", {{"data", ...}});
//   nlohmann::json client = stratum::load_checkpoint(engine, "ckpt");  // the tag `latest` names
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stratum/checkpoint/checkpoint.h"
#include "stratum/engine/engine.h"

namespace stratum {

// Collective over the job (checkpoint/checkpoint.h).
template <class Model>
void save_checkpoint(Engine<Model>& engine, const std::string& save_dir, const std::string& tag,
                     const nlohmann::json& client_state, const CheckpointSaveOptions& options = {}) {
  const PipelineStages* stages = engine.pipeline();
  save_checkpoint(engine.core(), save_dir, tag, client_state, options, stages ? &stages->place() : nullptr);
}

// Collective: through a CheckpointSaver (synchronous or asynchronous saves).
template <class Model>
void save_checkpoint(CheckpointSaver& saver, Engine<Model>& engine, const std::string& save_dir, const std::string& tag,
                     const nlohmann::json& client_state, const CheckpointSaveOptions& options = {}) {
  const PipelineStages* stages = engine.pipeline();
  saver.save(engine.core(), save_dir, tag, client_state, options, stages ? &stages->place() : nullptr);
}

// Collective: loads `tag` (empty: the one `latest` names); returns the client
// state. (`Json` only keeps this header on nlohmann's forward declarations.)
template <class Model, class Json = nlohmann::json>
Json load_checkpoint(Engine<Model>& engine, const std::string& load_dir, const std::string& tag = "") {
  const PipelineStages* stages = engine.pipeline();
  return load_checkpoint(engine.core(), load_dir, tag, stages ? &stages->place() : nullptr);
}

}  // namespace stratum
