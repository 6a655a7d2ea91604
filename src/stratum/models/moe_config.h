#pragma once
// The config's "moe" section applied to a model's config: the routing's
// training settings set from it, the shape it names checked against the model.
#include <string>

#include "stratum/config/sections.h"
#include "stratum/models/model_config.h"

namespace stratum::models {

// Throws stratum::Error naming `source` (the config file) and the key: the
// section given for a dense model, num_experts or top_k that are not the
// model's. Without the section the model keeps its settings (the section's
// defaults).
void apply_moe_section(ModelConfig& model, const config::MoeConfig& moe, const std::string& source);

}  // namespace stratum::models
