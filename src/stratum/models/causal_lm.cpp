#include "stratum/models/causal_lm.h"

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cctype>
#include <cmath>

#include "stratum/core/error.h"
#include "stratum/core/splitmix.h"
#include "stratum/nn/cross_entropy.h"
#include "stratum/nn/lm_head.h"
#include "stratum/nn/parameter_modules.h"
#include "stratum/quant/nf4.h"

namespace stratum::models {

CausalLMImpl::CausalLMImpl(ModelConfig config, nn::tp::TensorParallel tp, uint64_t init_seed)
    : nn::LayerStackImpl(config.arch == "llama"       ? "LlamaForCausalLM"
                         : config.arch == "mixtral"   ? "MixtralForCausalLM"
                         : config.arch == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                                                      : "GPT2LMHeadModel"),
      config_(std::move(config)),
      tp_(std::move(tp)),
      vocab_(nn::tp::vocab_shard(config_.vocab_size, tp_.size(), tp_.rank())),
      init_seed_(init_seed) {}

namespace {
void check_tokens(const ModelConfig& c, const at::Tensor& tokens) {
  if (tokens.dim() != 2) throw Error("model '" + c.name + "': tokens must be [batch, seq], got " +
                                     std::to_string(tokens.dim()) + " dimensions");
}
}  // namespace

namespace {
// Sequence parallelism splits the sequence over the group. A length it does
// not divide (generation's growing prompt, a short evaluation) is padded on
// the right, which a causal model's earlier positions never see; the padding
// is then dropped (logits) or ignored (the loss).
int64_t sequence_padding(const nn::tp::TensorParallel& tp, int64_t length) {
  return tp.sequence_parallel ? (tp.size() - length % tp.size()) % tp.size() : 0;
}
}  // namespace

at::Tensor CausalLMImpl::stack_input(const at::Tensor& tokens) const {
  check_tokens(config_, tokens);
  const int64_t pad = sequence_padding(tp_, tokens.size(1));
  return pad ? at::constant_pad_nd(tokens, {0, pad}, 0) : tokens;
}

at::Tensor CausalLMImpl::logits_of_output(const at::Tensor& output, int64_t length) const {
  if (!tp_.enabled()) return output;
  const at::Tensor whole = nn::tp::gather_from_last(output, tp_).narrow(-1, 0, config_.vocab_size);
  return whole.size(1) != length ? whole.narrow(1, 0, length) : whole;
}

nn::LMHeadLayer* CausalLMImpl::tiled_head() const {
  if (config_.tiled_loss_tokens <= 0 || size() == 0) return nullptr;
  auto* head = dynamic_cast<nn::LMHeadLayer*>(&layer(size() - 1));
  return head && head->loss_tiled() ? head : nullptr;
}

at::Tensor CausalLMImpl::logits(const at::Tensor& tokens) {
  if (nn::LMHeadLayer* head = tiled_head()) head->set_loss_targets({});  // logits, not a loss
  return logits_of_output(nn::LayerStackImpl::forward(stack_input(tokens)), tokens.size(1));
}

void CausalLMImpl::set_stage_targets(const at::Tensor& targets) {
  nn::LMHeadLayer* head = tiled_head();
  if (!head) return;
  // Sequence parallelism: the stage's input was padded (stack_input); the padding is ignored.
  const int64_t pad = targets.defined() ? sequence_padding(tp_, targets.size(-1)) : 0;
  head->set_loss_targets(pad ? at::constant_pad_nd(targets, {0, pad}, -100) : targets);
}

at::Tensor CausalLMImpl::loss(const at::Tensor& output, const at::Tensor& targets) {
  // A pipeline's last stage: its head has produced the logits, or the tiled
  // loss when set_stage_targets gave it the targets.
  if (output.dim() == 0 && tiled_head()) return output;
  if (!tp_.enabled()) return causal_lm_loss(output, targets);
  return nn::tp::vocab_parallel_cross_entropy(output, targets, vocab_, tp_);
}

namespace {
// `consume`: nothing else holds the logits (their gradient is written over them).
at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& targets, bool consume) {
  if (logits.sizes().slice(0, logits.dim() - 1) != targets.sizes())
    throw Error("causal_lm_loss: targets " + c10::str(targets.sizes()) + " do not match logits " +
                c10::str(logits.sizes()));
  // Never a full fp32 copy of the logits (nn/cross_entropy.h).
  return nn::chunked_cross_entropy(logits, targets, /*ignore_index=*/-100, /*block_rows=*/4096, consume);
}
}  // namespace

at::Tensor CausalLMImpl::forward(const at::Tensor& tokens, const at::Tensor& targets) {
  if (nn::LMHeadLayer* head = tiled_head()) {
    // The head returns the loss itself, a tile of rows at a time (nn/tiled_lm_loss.h).
    check_tokens(config_, tokens);
    if (targets.sizes() != tokens.sizes())
      throw Error("causal_lm_loss: targets " + c10::str(targets.sizes()) + " do not match tokens " +
                  c10::str(tokens.sizes()));
    set_stage_targets(targets);
    at::Tensor loss = nn::LayerStackImpl::forward(stack_input(tokens));
    if (!c10::GradMode::is_enabled()) head->set_loss_targets({});  // no backward can run the head again
    return loss;
  }
  // The logits live only here: their gradient takes their place.
  if (!tp_.enabled()) return next_token_loss(logits(tokens), targets, /*consume=*/true);
  // Under tensor parallelism the loss is vocabulary-parallel over the head's logit shards.
  check_tokens(config_, tokens);
  if (const int64_t pad = sequence_padding(tp_, tokens.size(1)))
    return nn::tp::vocab_parallel_cross_entropy(
        nn::LayerStackImpl::forward(at::constant_pad_nd(tokens, {0, pad}, 0)),
        at::constant_pad_nd(targets, {0, pad}, -100), vocab_, tp_);
  return nn::tp::vocab_parallel_cross_entropy(nn::LayerStackImpl::forward(tokens), targets, vocab_, tp_);
}

at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return next_token_loss(logits, targets, /*consume=*/false);
}

std::shared_ptr<CausalLMImpl> build_model(const ModelConfig& config, c10::Device init_device) {
  auto model = construct_model(config, {}, c10::kMeta);
  nn::materialize(*model, init_device, at::typeMetaToScalarType(at::get_default_dtype()));
  return model;
}

uint64_t default_init_seed() { return at::detail::getDefaultCPUGenerator().current_seed(); }

std::shared_ptr<CausalLMImpl> construct_model(const ModelConfig& config, const nn::tp::TensorParallel& tp,
                                              c10::Device device, const nn::moe::ExpertParallel& ep) {
  validate(config);
  if (ep.enabled() && !config.is_moe())
    throw Error("model '" + config.name + "' is dense: expert parallelism over " + std::to_string(ep.size()) +
                " ranks needs a mixture of experts");
  if (config.arch == "gpt2") return construct_gpt2(config, tp, device);
  if (config.llama_family()) return construct_llama(config, tp, device, ep);
  throw Error("model '" + config.name + "': unknown arch '" + config.arch + "' (gpt2, llama, mixtral, qwen3_moe)");
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}
}  // namespace

at::Tensor initial_whole_value(const ModelConfig& c, const std::string& name, at::IntArrayRef shape, uint64_t seed,
                               c10::Device device) {
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  // LoRA adapters (models/lora.h) as peft starts them: B zero, A torch's
  // Linear default, kaiming-uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in)).
  if (ends_with(name, ".lora_B.weight")) return at::zeros(shape, options);
  if (ends_with(name, ".lora_A.weight")) {
    at::Generator gen = at::globalContext().defaultGenerator(device).clone();
    gen.set_current_seed(splitmix64(seed ^ fnv1a(name)));
    const double bound = 1.0 / std::sqrt(static_cast<double>(shape.back()));
    return at::empty(shape, options).uniform_(-bound, bound, gen);
  }
  if (ends_with(name, ".bias")) return at::zeros(shape, options);
  if (shape.size() == 1) return at::ones(shape, options);  // LayerNorm / RMSNorm scales
  const bool residual = ends_with(name, "attn.c_proj.weight") || ends_with(name, "mlp.c_proj.weight") ||
                        ends_with(name, "self_attn.o_proj.weight") || ends_with(name, "mlp.down_proj.weight") ||
                        // a mixture of experts' second GEMMs (Mixtral's w2), shared experts' too
                        (name.find("experts.") != std::string::npos &&
                         (ends_with(name, ".down_proj.weight") || ends_with(name, ".w2.weight")));
  const double std = residual ? c.init_std / std::sqrt(2.0 * static_cast<double>(c.layers)) : c.init_std;
  // A generator of the device's kind of its own, seeded by the name: the
  // value depends on nothing else (not on which parameters were drawn before).
  at::Generator gen = at::globalContext().defaultGenerator(device).clone();
  gen.set_current_seed(splitmix64(seed ^ fnv1a(name)));
  return at::empty(shape, options).normal_(0.0, std, gen);
}

at::Tensor CausalLMImpl::initial_value(const std::string& name, c10::Device device, at::ScalarType dtype) const {
  const at::Tensor* param = named_parameters(/*recurse=*/true).find(name);
  if (!param) throw Error("model '" + config_.name + "' has no parameter '" + name + "' to draw");
  const auto spec = shard_spec(name, tp_.rank());
  const std::vector<int64_t> whole_shape = spec ? nn::tp::whole_shape(param->sizes().vec(), *spec) : param->sizes().vec();
  at::Tensor value = initial_whole_value(config_, name, whole_shape, init_seed_, device);
  if (spec) value = nn::tp::take_shard(value, *spec);
  return value.to(dtype);
}

bool CausalLMImpl::expert_held_elsewhere(const std::string& name) const {
  if (!ep_.enabled() || !config_.is_moe()) return false;
  const std::string key = ".experts.";
  const size_t at = name.find(key);
  if (at == std::string::npos) return false;
  size_t end = at + key.size();
  int64_t index = 0;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end])) && index < config_.num_experts)
    index = index * 10 + (name[end++] - '0');
  if (end == at + key.size() || end >= name.size() || name[end] != '.' || index >= config_.num_experts) return false;
  const int64_t local = config_.num_experts / ep_.size(), first = ep_.rank() * local;
  return index < first || index >= first + local;
}

std::vector<nn::moe::SparseMoEImpl*> CausalLMImpl::moe_layers() const {
  std::vector<nn::moe::SparseMoEImpl*> out;
  for (const auto& m : modules(/*include_self=*/false))
    if (auto* moe = dynamic_cast<nn::moe::SparseMoEImpl*>(m.get())) out.push_back(moe);
  return out;
}

bool CausalLMImpl::held_apart(const std::string& name) const { return nf4_layers_.count(name) > 0; }

void CausalLMImpl::draw_apart(const std::string& name, c10::Device device, at::ScalarType dtype) {
  auto it = nf4_layers_.find(name);
  if (it == nf4_layers_.end() || it->second->nf4) return;
  nn::LinearImpl* linear = it->second;
  linear->nf4 = std::make_shared<const quant::Nf4Tensor>(quant::quantize_nf4(initial_value(name, device, dtype)));
}

bool CausalLMImpl::set_apart(const std::string& name, const at::Tensor& value) {
  auto it = nf4_layers_.find(name);
  if (it == nf4_layers_.end() || !it->second->nf4) return false;
  nn::LinearImpl* linear = it->second;
  if (value.sizes().vec() != linear->nf4->shape)
    throw Error("parameter '" + name + "' is " + c10::str(at::IntArrayRef(linear->nf4->shape)) + " on this rank, its "
                "tensor " + c10::str(value.sizes()));
  const c10::Device device = linear->nf4->packed.device();
  linear->nf4 = std::make_shared<const quant::Nf4Tensor>(
      quant::quantize_nf4(value.to(device, linear->nf4->dtype)));
  return true;
}

bool CausalLMImpl::set_apart_nf4(const std::string& name, const quant::Nf4Tensor& value) {
  auto it = nf4_layers_.find(name);
  if (it == nf4_layers_.end() || !it->second->nf4) return false;
  nn::LinearImpl* linear = it->second;
  if (value.shape != linear->nf4->shape)
    throw Error("parameter '" + name + "' is " + c10::str(at::IntArrayRef(linear->nf4->shape)) + " on this rank, its "
                "NF4 tensor " + c10::str(at::IntArrayRef(value.shape)));
  // The codes and scales as stored, on the layer's device; dequantized in the training dtype.
  const c10::Device device = linear->nf4->packed.device();
  // Copies: the value may be a view of a file that is unmapped after loading.
  auto own = [&](const at::Tensor& t) { return t.to(device, t.scalar_type(), false, /*copy=*/true).contiguous(); };
  quant::Nf4Tensor q = value;
  q.dtype = linear->nf4->dtype;
  q.packed = own(value.packed);
  q.absmax = own(value.absmax);
  if (q.nested) {
    q.nested_absmax = own(value.nested_absmax);
    q.nested_code = own(value.nested_code);
  }
  linear->nf4 = std::make_shared<const quant::Nf4Tensor>(std::move(q));
  return true;
}

void init_weights(CausalLMImpl& model, c10::Device device) {
  c10::AutoGradMode no_grad(false);
  for (auto& item : model.named_parameters(/*recurse=*/true))
    item.value().set_data(model.initial_value(item.key(), device, item.value().scalar_type()));
}

}  // namespace stratum::models
