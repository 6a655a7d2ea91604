#pragma once
// Cuts a model's layers into contiguous ranges, one per (virtual) pipeline
// stage, by DeepSpeed's partition_method. Pure code: no tensors, no ranks.
//
//   parameters  balance the trainable parameter counts (DeepSpeed's default)
//   uniform     balance the layer counts (the first parts take one more)
//   type:REGEX  balance the layers whose kind matches REGEX (case-insensitive,
//               searched anywhere in the kind, as DeepSpeed's re.search)
// Balancing minimises the heaviest part, then fills parts from the first
// (DeepSpeed's partition_balanced), so the last stage, which also runs the
// loss, gets the lighter share. The embedding, the first layer, always lands
// on the first stage; the final norm and the head, the last layers, on the last.
#include <cstdint>
#include <string>
#include <vector>

namespace stratum::pipeline {

struct LayerWeight {
  std::string kind;        // StackLayer::name(): "GPT2Block"
  int64_t parameters = 0;  // trainable elements the layer owns
};

struct Partition {
  std::vector<size_t> bounds;  // parts + 1 layer indices: part k is [bounds[k], bounds[k+1])
  int parts() const { return static_cast<int>(bounds.size()) - 1; }
  size_t begin(int part) const { return bounds.at(part); }
  size_t end(int part) const { return bounds.at(part + 1); }
  // The part holding layer `layer`.
  int part_of(size_t layer) const;
};

// `parts`: pipeline stages x virtual stages. Throws stratum::Error with the
// numbers when a part would be empty: fewer layers (or, for type:, matching
// layers) than parts, or a regex that matches no layer. `what` starts the
// message ("pipeline.partition_method").
Partition partition_layers(const std::vector<LayerWeight>& layers, int parts, const std::string& method,
                           const std::string& what = "pipeline.partition_method");

// "0-3 | 4-7 | 8-9": the layer ranges, for logs and errors.
std::string describe(const Partition& partition);

}  // namespace stratum::pipeline
