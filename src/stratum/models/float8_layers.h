#pragma once
// The config's "fp8" section on a model: the attention and MLP projections'
// GEMMs in FP8 (nn/float8/), each layer's unless an `exclude` pattern names
// it. Embeddings, the LM head, norms, attention itself and the loss stay
// in bf16. The engine applies it (stratum::initialize) after checking the
// device; a model can be given FP8 layers directly as well (tests).
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "stratum/config/sections.h"
#include "stratum/models/model_config.h"
#include "stratum/nn/float8/float8_projection.h"

namespace stratum::models {

// Whether `pattern` names the layer at `path`: it matches the whole path or
// its last dot-separated parts ("c_attn", "attn.c_proj", "layers.1.*");
// "*" matches any run of characters, dots included.
bool fp8_pattern_matches(const std::string& pattern, const std::string& path);

struct Float8Layers {
  std::shared_ptr<nn::float8::WeightCache> cache;  // invalidate() after each optimizer step
  std::vector<std::string> fp8;                    // the FP8 projections' names
  // Each FP8 projection and its weights' parameter names (as the model's
  // named_parameters gives them), in the order it stacks them.
  struct Site {
    std::shared_ptr<nn::float8::Float8Projection> projection;
    std::vector<std::string> weights;
  };
  std::vector<Site> sites;
  std::vector<std::string> excluded;               // the layers an exclude pattern kept in bf16
};

// Gives every attention and MLP projection of `model` (the built-in blocks:
// FusedQKVAttention, GroupedQueryAttention, GeluMLP, SwiGLUMLP) an FP8 GEMM
// with `recipe`, except those `exclude` names. Projections stacked into one
// GEMM (q/k/v, gate/up) go to FP8 together or not at all: one excluded keeps
// the three (two) in bf16. Under tensor parallelism the column-parallel
// projections (c_attn, q/k/v, c_fc, gate/up) and the row-parallel ones
// (c_proj, o_proj, down_proj) reduce their shards' amaxes over the layer's
// group (nn/tensor_parallel/float8_parallel_linear.h). Throws stratum::Error
// for what the FP8 layers are not built for (LoRA or NF4 layers, a tiled MLP
// or one recomputing its activation), naming the layer, and when an exclude
// pattern matches no layer. Does not check the device (nn/float8/device_support.h).
Float8Layers apply_float8(torch::nn::Module& model, nn::float8::Recipe recipe,
                          const std::vector<std::string>& exclude);

// Of a model's attention and MLP projections' weight parameters, those that
// `exclude` leaves in FP8, and all of them; counted on a skeleton of the
// model (the meta device: nothing allocated). Throws as apply_float8 does for
// a pattern that names no projection. The memory estimator's share of the
// projections cast (planning/plan_config.h).
struct Fp8Coverage {
  int64_t fp8_params = 0, projection_params = 0;
};
Fp8Coverage fp8_coverage(const ModelConfig& config, const std::vector<std::string>& exclude);

// The recipe the config names (tensorwise, rowwise or blockwise).
nn::float8::Recipe fp8_recipe(const config::Fp8Config& fp8);

}  // namespace stratum::models
