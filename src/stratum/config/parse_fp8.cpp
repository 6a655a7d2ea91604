// The "fp8" section: FP8 GEMMs for the attention and MLP projections. What
// the config alone can tell is checked here (bf16, the recipe, the layouts
// the FP8 layers do not compose with yet); the device (a CUDA GPU of compute
// capability >= 8.9) is checked when the engine starts (models/float8_layers.h).
#include <cstdlib>
#include <string>

#include "stratum/config/parse_sections.h"
#include "stratum/core/error.h"

namespace stratum::config {

const char* fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::tensorwise: return "tensorwise";
    case Fp8Recipe::rowwise: return "rowwise";
    case Fp8Recipe::blockwise: return "blockwise";
  }
  return "?";
}

namespace {

// Layouts the FP8 layers are not built for: refused rather than run in bf16.
// Tensor parallelism, pipeline stages and ZeRO 0-3 compose (docs/fp8.md).
void check_fp8_composition(const Config& c, Diagnostics& diag) {
  const std::string why = " (not built yet; docs/fp8.md lists what composes)";
  if (!c.bf16.enabled)
    diag.error("fp8.enabled", std::string("needs bf16 training (the FP8 GEMMs take and give bf16), but training runs "
                                          "in ") +
                                  (c.fp16.enabled ? "fp16" : "fp32") + "; enable the bf16 section");
  if (c.lora.enabled)
    diag.error("fp8.enabled", "with a lora section: FP8 layers with adapters or NF4 bases are not built yet" + why);
  if (c.moe.present)
    diag.error("fp8.enabled", "with a moe section: FP8 layers in a mixture of experts are not built yet" + why);
}

}  // namespace

bool float8_cpu_emulation() {
  const char* v = std::getenv(kFloat8CpuEmulation);
  return v && std::string(v) == "1";
}

void parse_fp8(KeyReader& root, Config& config) {
  KeyReader fp8 = root.child("fp8");
  if (!fp8.present()) return;
  Fp8Config& f = config.fp8;
  Diagnostics& diag = fp8.diagnostics();
  f.enabled = fp8.get_bool("enabled", false);
  const std::string recipe = fp8.get_enum("recipe", "tensorwise", {"tensorwise", "rowwise", "blockwise"});
  f.recipe = recipe == "rowwise" ? Fp8Recipe::rowwise : recipe == "blockwise" ? Fp8Recipe::blockwise : Fp8Recipe::tensorwise;
  f.exclude = fp8.get_string_list("exclude");
  f.all_gather_fp8 = fp8.get_opt_bool("all_gather_fp8");
  for (size_t i = 0; i < f.exclude.size(); ++i)
    if (f.exclude[i].empty() || f.exclude[i].front() == '.' || f.exclude[i].back() == '.')
      diag.error(fp8.path_of("exclude") + "[" + std::to_string(i) + "]",
                 "\"" + f.exclude[i] + "\" is not a layer name pattern (\"c_attn\", \"attn.c_proj\", "
                 "\"layers.0.mlp.*\")");
  fp8.finish();
  if (!f.enabled) return;
  // "blockwise" on a GPU needs its projections' widths in multiples of 512,
  // which only the model knows: refused at the first forward otherwise,
  // naming the layer (nn/float8/float8_linear.h).
  check_fp8_composition(config, diag);
  if (f.all_gather_fp8.value_or(false)) {
    // Asked for: refused where no gather runs in FP8, rather than ignored.
    if (config.zero_optimization.stage != 3)
      diag.error(fp8.path_of("all_gather_fp8"),
                 "true, but only ZeRO stage 3 gathers weights (zero_optimization.stage is " +
                     std::to_string(config.zero_optimization.stage) + "); remove the key");
    else if (f.recipe != Fp8Recipe::tensorwise)
      diag.error(fp8.path_of("all_gather_fp8"),
                 std::string("true needs recipe \"tensorwise\" (one scale a weight, known before the gather); \"") +
                     fp8_recipe_name(f.recipe) + "\" scales rows, which a gathered slice cuts; remove the key");
  }
}

}  // namespace stratum::config
