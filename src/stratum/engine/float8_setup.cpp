#include "stratum/engine/float8_setup.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "stratum/core/error.h"
#include "stratum/core/log.h"
#include "stratum/engine/engine_core.h"
#include "stratum/models/float8_layers.h"
#include "stratum/nn/float8/device_support.h"
#include "stratum/zero/strategy.h"

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

void check_float8_device(const Config& config, c10::Device device) {
  if (!config.fp8.enabled) return;
  if (device.is_cpu() && float8_cpu_emulation()) {
    // Tests only: the FP8 GEMMs of dequantized operands on the CPU.
    log::warn(std::string("fp8: ") + kFloat8CpuEmulation +
              "=1: the FP8 GEMMs run emulated on the CPU (for tests of the FP8 path only; no speed)");
    return;
  }
  const bool blockwise = config.fp8.recipe == config::Fp8Recipe::blockwise;
  const std::string why = nn::float8::unsupported_reason(device, blockwise);
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
  // copy is kept past its use (cast after each gather, or gathered as FP8;
  // Wᵀ again in backward).
  const bool stage3 = config.zero_optimization.stage == 3;
  layers.cache->set_holds_weights(!stage3);
  if (stage3 && config.fp8.recipe == config::Fp8Recipe::tensorwise && config.fp8.all_gather_fp8.value_or(true))
    gather_weights_in_fp8(layers, core.strategy());
  core.attach_step_observer(float8_step_observer(layers.cache));
}

zero::Float8GatherReport gather_weights_in_fp8(const models::Float8Layers& layers, zero::ZeroStrategy& strategy) {
  std::unordered_map<std::string, int> index;
  const auto& specs = strategy.layout().specs();
  for (size_t i = 0; i < specs.size(); ++i) index.emplace(specs[i].name, static_cast<int>(i));
  std::vector<zero::Float8GatherGroup> groups;
  for (const auto& site : layers.sites) {
    zero::Float8GatherGroup g{site.projection->name(), {}, std::make_shared<nn::float8::GatheredWeight>(),
                              site.projection->amax_reducer()};
    for (const std::string& w : site.weights)
      if (auto it = index.find(w); it != index.end()) g.params.push_back(it->second);
    // Another pipeline stage's projection: this rank holds none of its weights.
    if (g.params.empty()) continue;
    if (g.params.size() != site.weights.size())
      throw Error("fp8: projection " + g.name + " has weights this rank trains and weights it does not");
    site.projection->read_gathered(g.slot);
    groups.push_back(std::move(g));
  }
  const zero::Float8GatherReport r = strategy.gather_in_float8(std::move(groups));
  const auto mib = [](int64_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return std::string(b);
  };
  const int64_t width = 2;  // bf16: FP8 trains in bf16 only
  const int64_t rest = (r.elems - r.elems_in_fp8) * width;
  std::string line = "fp8: ZeRO-3 gathers " + std::to_string(r.units_in_fp8) + " of " + std::to_string(r.units) +
                     " layers with FP8 projections as FP8 bytes: " + mib(r.elems_in_fp8 + rest) +
                     " gathered a pass over every layer instead of " + mib(r.elems * width);
  if (!r.kept_16bit.empty())
    line += "; " + r.kept_16bit + " keeps its layer in bf16 (a stage3_param_persistence_threshold above its size "
            "keeps it whole instead)";
  if (r.units > 0) log::info(line);  // else every weight is persistent: nothing is gathered
  return r;
}

std::shared_ptr<StepObserver> float8_step_observer(std::shared_ptr<nn::float8::WeightCache> cache) {
  return std::make_shared<Float8StepObserver>(std::move(cache));
}

}  // namespace stratum::engine_detail
