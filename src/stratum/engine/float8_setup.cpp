#include "stratum/engine/float8_setup.h"

#include <cstdlib>
#include <string>

#include "stratum/core/error.h"
#include "stratum/core/log.h"
#include "stratum/engine/engine_core.h"
#include "stratum/models/float8_layers.h"
#include "stratum/nn/float8/device_support.h"

namespace stratum::engine_detail {
namespace {

// After each optimizer step: the step's FP8 casts checked, then the weights'
// FP8 copies invalidated (the next micro-batch casts the updated weights).
class Float8StepObserver : public StepObserver {
 public:
  explicit Float8StepObserver(std::shared_ptr<nn::float8::WeightCache> cache) : cache_(std::move(cache)) {}
  void before_backward(double) override {}
  void after_step(bool) override {
    cache_->invalidate();  // first: the next step recasts even if the check throws
    cache_->check_finite();
  }

 private:
  std::shared_ptr<nn::float8::WeightCache> cache_;
};

}  // namespace

bool float8_cpu_emulation() {
  const char* v = std::getenv(kFloat8CpuEmulation);
  return v && std::string(v) == "1";
}

void check_float8_device(const Config& config, c10::Device device) {
  if (!config.fp8.enabled) return;
  if (device.is_cpu() && float8_cpu_emulation()) {
    // Tests only: the FP8 GEMMs through the CPU's _scaled_mm, as slow as it is.
    log::warn(std::string("fp8: ") + kFloat8CpuEmulation +
              "=1: the FP8 GEMMs run emulated on the CPU (for tests of the FP8 path only; no speed)");
    return;
  }
  const std::string why = nn::float8::unsupported_reason(device);
  if (!why.empty())
    throw ConfigError(config.source, {"fp8.enabled: " + why + "; remove the fp8 section (or set enabled false) to "
                                      "train in bf16"});
}

void attach_float8(const Config& config, torch::nn::Module& model, EngineCore& core) {
  if (!config.fp8.enabled) return;
  models::Float8Layers layers;
  try {
    layers = models::apply_float8(model, models::fp8_recipe(config.fp8), config.fp8.exclude);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw ConfigError(config.source, {e.what()});
  }
  if (layers.fp8.empty())
    throw ConfigError(config.source, {"fp8.enabled: no attention or MLP projection of the model runs in FP8 (" +
                                      std::to_string(layers.excluded.size()) +
                                      " excluded by fp8.exclude); FP8 applies to the built-in blocks' projections"});
  if (core.step_observer())
    throw ConfigError(config.source, {"fp8.enabled: the engine already follows the step for the model (a mixture "
                                      "of experts' routing); FP8 with it is not built"});
  // ZeRO-3 holds a layer's whole weight only while it is gathered: no FP8
  // copy is kept past its use (cast after each gather, Wᵀ again in backward).
  layers.cache->set_holds_weights(config.zero_optimization.stage != 3);
  core.attach_step_observer(float8_step_observer(layers.cache));
}

std::shared_ptr<StepObserver> float8_step_observer(std::shared_ptr<nn::float8::WeightCache> cache) {
  return std::make_shared<Float8StepObserver>(std::move(cache));
}

}  // namespace stratum::engine_detail
