#pragma once
// Starting weights from whole tensors held elsewhere (a Hugging Face
// checkpoint, memory-mapped): each rank copies only the elements its own
// optimizer segments hold (its ZeRO partition of its pipeline stage's
// parameters, cut to its tensor-parallel piece) into the fp32 masters, and the
// strategy publishes them as after a checkpoint load. What a rank does not
// keep it never reads.
#include <cstdint>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "stratum/engine/engine_core.h"
#include "stratum/nn/tensor_parallel/shard_spec.h"
#include "stratum/quant/nf4.h"

namespace torch::nn {
class Module;
}

namespace stratum {

struct WeightLoadReport {
  int64_t parameters = 0;   // the core's parameters
  int64_t bytes_copied = 0;  // of the source tensors, in their dtype, by this rank
  int64_t bytes_whole = 0;   // the same parameters' source tensors, whole
};

// `whole`: each of the core's parameters by name, whole (a view of a float
// dtype and any layout on the host; a tensor-parallel rank's piece is cut from
// it). An integer or bool tensor is refused before copying, and the elements a
// rank copied are checked finite after (NaN or infinity refused naming the
// tensor and its first bad element).
// Collective: an error on any rank of `world` (the job; agreed on
// `world_device`) is every rank's, naming it and `what`; then the core's
// data-parallel group publishes. Adam's moments and the step are untouched.
WeightLoadReport load_whole_weights(EngineCore& engine, const std::map<std::string, at::Tensor>& whole,
                                    distributed::Communicator& world, c10::Device world_device,
                                    const std::string& what);

// The frozen parameters (requires_grad false: a LoRA base, which the engine
// keeps no state for) this rank holds, copied from `whole` (by name; a
// tensor-parallel rank's piece cut by `sharded`'s specs; null: not sharded),
// cast to each parameter's dtype. Those another stage holds are skipped.
// Collective like load_whole_weights; returns the bytes this rank read.
//
// `nf4`: weights a bitsandbytes-quantized checkpoint stores in NF4 (whole). A
// layer that holds its weight in NF4 whole takes it as stored, bit for bit;
// a tensor-parallel piece, or a layer that holds it dense, gets it
// dequantized (one weight at a time, in fp32) and then as any weight.
//
// `frozen`: the base ZeRO-3 partitions (EngineCore::frozen_units; null:
// none). Each of its layers is opened whole, written, and partitioned again
// before the next: a rank never holds more than one layer of it whole.
int64_t load_frozen_weights(torch::nn::Module& model, const nn::tp::ShardedModule* sharded,
                            const std::map<std::string, at::Tensor>& whole, distributed::Communicator& world,
                            c10::Device world_device, const std::string& what,
                            const std::map<std::string, quant::Nf4Tensor>& nf4 = {},
                            zero::FrozenUnits* frozen = nullptr);

}  // namespace stratum
