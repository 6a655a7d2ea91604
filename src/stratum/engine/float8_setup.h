#pragma once
// The config's "fp8" section at engine start: the device checked before any
// collective (a CUDA GPU of compute capability >= 8.9, else a ConfigError
// naming fp8.enabled and why), then the model's projections given FP8 GEMMs
// (models/float8_layers.h) and the weight cache tied to the optimizer step.
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <memory>

#include "stratum/config/config.h"

namespace stratum {

class EngineCore;
class StepObserver;

namespace nn::float8 {
class WeightCache;
}
namespace models {
struct Float8Layers;
}
namespace zero {
class ZeroStrategy;
struct Float8GatherReport;
}

namespace engine_detail {

// The tests' CPU emulation switch (config/sections.h); logged as a warning when used.
using config::float8_cpu_emulation;
using config::kFloat8CpuEmulation;

// Throws ConfigError when config.fp8 is enabled and `device` cannot run it
// (a CPU too, unless kFloat8CpuEmulation is 1).
void check_float8_device(const Config& config, c10::Device device);

// With config.fp8 enabled: FP8 projections on `model`, and a step observer on
// `core` that, after each optimizer step, reads the casts' Inf/NaN flags
// (an error naming the layer and operand) and invalidates the FP8 weight
// copies; at ZeRO-3 the projections keep no FP8 weight copy past its use
// (WeightCache::holds_weights). Throws ConfigError when no projection would run in FP8, or when
// the core already has a step observer (a mixture of experts' routing).
void attach_float8(const Config& config, torch::nn::Module& model, EngineCore& core);

// At ZeRO-3 with tensorwise scaling (unless fp8.all_gather_fp8 is false):
// the layers whose parameters are all FP8 projections' weights are gathered
// as FP8 bytes (zero/float8_unit_gather.h), each projection reading its W
// from the gather. Collective over data parallelism; logs what it covers.
zero::Float8GatherReport gather_weights_in_fp8(const models::Float8Layers& layers, zero::ZeroStrategy& strategy);

// The observer attach_float8 gives the core: after each optimizer step it
// invalidates `cache`, then reads its Inf/NaN flags (WeightCache::check_finite).
std::shared_ptr<StepObserver> float8_step_observer(std::shared_ptr<nn::float8::WeightCache> cache);

}  // namespace engine_detail
}  // namespace stratum
