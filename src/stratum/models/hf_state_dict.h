#pragma once
// A built-in model's weights as a Hugging Face checkpoint sees them, and back.
// Stratum's parameter names already are HF's; what differs:
//   - GPT-2's attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj are Conv1D in HF,
//     stored [in, out]; Stratum's Linear stores [out, in]: transposed both ways.
//   - tied embeddings: HF files carry no lm_head.weight (transformers re-ties
//     it); on load a present lm_head.weight is checked equal to the embedding.
//   - loading also accepts GPT-2 files saved from GPT2Model (no "transformer."
//     prefix, as the hub's gpt2 checkpoints are) and skips HF's non-parameter
//     buffers (attn.bias, attn.masked_bias, rotary_emb.inv_freq).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/models/causal_lm.h"
#include "stratum/quant/nf4.h"

namespace stratum::models {

// In the model's parameter order, detached, contiguous, on the model's
// device and in its dtype (cast and move before writing if needed). A
// tensor-parallel model is refused (its ranks hold shards).
std::vector<std::pair<std::string, at::Tensor>> to_hf_state_dict(const CausalLMImpl& model);

// What hf_whole_parameters checks beyond names and shapes.
struct HfChecks {
  // A tied model's file that carries lm_head.weight too: it must equal the
  // embedding (reads both whole; one rank of a job is enough).
  bool compare_tied_head = true;
};

// Each of the model's parameters as the whole tensor in `tensors` (HF names)
// holds it, by Stratum's parameter name and in its layout: views, no copies
// (GPT-2's Conv1D weights a transposed view), so that a caller copies only
// the elements it keeps. A tensor-parallel model's parameters are checked
// against their whole shapes. Throws stratum::Error listing every missing,
// unexpected or mis-shaped tensor by name (and `source`, e.g. the file), and
// every one whose dtype is not a float weight's (F32, BF16, F16, F64: a
// quantized checkpoint's integers are never cast into weights), and a weight
// stored in bitsandbytes' NF4 (hf_parameters reads those).
std::map<std::string, at::Tensor> hf_whole_parameters(const CausalLMImpl& model,
                                                     const std::map<std::string, at::Tensor>& tensors,
                                                     const std::string& source = "", const HfChecks& checks = {});

// A checkpoint saved from a bitsandbytes 4-bit model (transformers'
// load_in_4bit): its linear weights stored in NF4 (`<name>` packed uint8
// beside `<name>.absmax`, `.quant_map`, `.nested_*` and
// `.quant_state.bitsandbytes__nf4`), the rest dense.
struct HfParameters {
  std::map<std::string, at::Tensor> whole;      // as hf_whole_parameters gives them
  std::map<std::string, quant::Nf4Tensor> nf4;  // the weights stored in NF4, as stored (views of the file)
};
// hf_whole_parameters that also reads weights stored in bitsandbytes' NF4
// (checked against the parameter's whole shape, Stratum's [out, in]); their
// quant states' errors name the tensor.
HfParameters hf_parameters(const CausalLMImpl& model, const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source = "", const HfChecks& checks = {});

// Copies `tensors` (HF names) into the model's parameters, converting dtype
// and device; a tensor-parallel rank keeps its shard of each (the file holds
// whole tensors). Errors as hf_whole_parameters'.
void load_hf_state_dict(CausalLMImpl& model, const std::map<std::string, at::Tensor>& tensors,
                        const std::string& source = "");

// The tensors of a Hugging Face checkpoint directory: model.safetensors, or
// the shards that model.safetensors.index.json's weight_map names (as the hub
// stores large models). Memory-mapped (CPU, file dtypes, read-only): a rank
// reads only the bytes it copies (a tensor-parallel rank's row slices), and
// the ranks of a node share the page cache. The index is read as untrusted
// (io/safetensors_index.h); a shard must hold exactly the tensors the index
// lists for it (transformers would load a shard's extras too). Throws
// stratum::Error naming the directory, index or shard at fault.
std::map<std::string, at::Tensor> read_hf_checkpoint(const std::string& dir);

// True for GPT-2's Conv1D weights (stored transposed in HF files).
bool is_hf_conv1d_weight(const ModelConfig& config, const std::string& name);

// The dtypes a weight loads from: F32, BF16, F16, F64. Integer tensors (a
// quantized checkpoint's int8 codes, bool masks) and fp8 (meaningless without
// its scales) cast into float weights would make a different model.
bool is_weight_dtype(at::ScalarType t);
// "'NAME' is int8, not a floating-point weight (...)".
std::string not_a_weight(const std::string& name, const at::Tensor& t);

}  // namespace stratum::models
