#pragma once
// What stratum-estimate --plan reads from its user beyond flags: a
// ds_config.json's fixed choices, and memory sizes written with units.
#include <string>

#include "stratum/planning/layout_planner.h"

namespace stratum::planning {

// Fixes in `request` what the config at `path` says: the precision (always: a
// config without fp16 or bf16 trains in fp32), the gradients' dtype
// (data_types.grad_accum_dtype, communication_data_type), and, where its keys
// are given, the ZeRO stage, each offload, the batch triple, the pipeline's
// stages, schedule and chunks, the tensor-parallel size and sequence
// parallelism, the expert-parallel size, context parallelism (its size, method
// and Ulysses size), and activation checkpointing (its section, or
// pipeline.activation_checkpoint_interval; its cpu_checkpointing puts the
// checkpointed inputs in host memory), and FP8 projections (fp8.enabled,
// with a --model: their weights' FP8 copies, less those fp8.exclude keeps in
// bf16, averaged over the blocks). Throws
// ConfigError for an invalid config and Error naming the key when it
// contradicts a choice already fixed (the command line's) or asks for what
// the plan does not model (a topology order other than tp-dp-pp).
void apply_plan_config(PlanRequest& request, const std::string& path);

// "80GiB", "80 GB", "141e9", "1.5TiB" in bytes (KB ... PB powers of 1000,
// KiB ... PiB of 1024, no unit: bytes). Throws Error naming `what`.
double parse_byte_size(const std::string& text, const std::string& what);

}  // namespace stratum::planning
