#include "stratum/monitor/memory_estimator.h"

#include <algorithm>
#include <cstdio>

namespace stratum::monitor {

std::vector<StateEstimate> estimate_model_states(const EstimateInput& in) {
  const double psi = static_cast<double>(in.params);
  const double n = static_cast<double>(in.nodes * in.gpus_per_node);
  const double w = static_cast<double>(in.param_bytes);  // bytes of a parameter as trained
  // Of a gradient at stages 0-2 (ZeRO-3's are in the model's dtype).
  const double g = in.grad_bytes > 0 ? static_cast<double>(in.grad_bytes) : n > 1 ? std::max(w, 4.0) : w;
  // fp32 master + Adam m + v: 12 bytes a parameter; with 16-bit training the master is a
  // separate copy, with fp32 training the parameters are the master (stage 0) or a copy of a shard.
  const double k = in.param_bytes == 4 ? 8.0 : 12.0;
  // ZeRO-3 holds one gathered layer and the prefetched next one, plus that layer's full gradient.
  const double working_set = 3.0 * w * static_cast<double>(in.largest_layer_params);
  const double per_node = static_cast<double>(in.gpus_per_node);
  // Offloaded optimizer: fp32 master + m + v and the fp32 gradient shard the CPU step reads.
  const double offloaded = 16.0 * psi / n;
  std::vector<StateEstimate> out;
  auto add = [&](int stage, bool opt, bool param, double gpu, double cpu_per_gpu) {
    out.push_back(StateEstimate{stage, opt, param, gpu, cpu_per_gpu * per_node});
  };
  add(0, false, false, (w + g) * psi + k * psi, 0);
  const double k1 = 12.0;  // stages >= 1 keep a separate fp32 master shard (+ m + v), also in fp32 training
  add(1, false, false, (w + g) * psi + k1 * psi / n, 0);
  add(1, true, false, (w + g) * psi, offloaded);
  add(2, false, false, w * psi + (g + k1) * psi / n, 0);
  add(2, true, false, w * psi + g * psi / n, offloaded);
  add(3, false, false, (2 * w + k1) * psi / n + working_set, 0);
  add(3, true, false, 2 * w * psi / n + working_set, offloaded);
  add(3, true, true, working_set, offloaded + w * psi / n);
  return out;
}

void set_model_shape(EstimateInput& in, const models::ModelConfig& c) {
  in.params = models::parameter_count(c);
  in.layers = c.layers;
  in.hidden = c.hidden;
  in.heads = c.heads;
  in.kv_heads = c.kv_heads;
  in.ffn = c.ffn_hidden;
  in.gated_mlp = c.arch == "llama";
  in.mlp_activation_recomputed = c.recompute_mlp_activation;
  in.vocab = c.vocab_size;
  models::ModelConfig block = c;
  block.layers = 1;
  const int64_t one_block =
      models::parameter_count(block) - c.vocab_size * c.hidden * (c.tie_embeddings ? 1 : 2);
  in.largest_layer_params = std::max<int64_t>(one_block, c.vocab_size * c.hidden);
}

double estimate_activation_bytes(const EstimateInput& in) {
  if (in.layers <= 0 || in.hidden <= 0) return 0.0;
  const double s = static_cast<double>(in.seq_len), b = static_cast<double>(in.micro_batch),
               h = static_cast<double>(in.hidden), L = static_cast<double>(in.layers),
               v = static_cast<double>(in.vocab), w = static_cast<double>(in.param_bytes);
  // Kept per token and layer (flash attention: no s x s scores; no dropout
  // masks): both norms' inputs and outputs (4h), q, k and v (h + 2 kv), the
  // attention output (h), and the MLP's pre-activation (ffn; gated: gate and
  // up, 2 ffn) and, unless recomputed in backward, the activation's output
  // (ffn). GPT-2 (ffn 4h) keeping it: 16h elements, Korthikanti et al.'s 34
  // sbh bytes less the 2 of dropout masks; recomputing it: 12h.
  const double kv = in.heads > 0 && in.kv_heads > 0 ? h * static_cast<double>(in.kv_heads) / in.heads : h;
  const double ffn = in.ffn > 0 ? static_cast<double>(in.ffn) : 4.0 * h;
  const double mlp = (in.gated_mlp ? 2.0 : 1.0) + (in.mlp_activation_recomputed ? 0.0 : 1.0);
  const double per_token = 4.0 * h + h + 2.0 * kv + h + mlp * ffn;
  const double per_layer = w * s * b * per_token;
  const double layers = in.activation_checkpointing ? L * w * s * b * h + per_layer  // inputs + one recomputed layer
                                                    : L * per_layer;
  // At the loss: the logits and their gradient in the training dtype (the LM
  // head reads the gradient in place, in the logits' padded rows).
  const double per_logit = in.loss_bytes_per_logit > 0 ? in.loss_bytes_per_logit : w * 2.0;
  const double logits = s * b * v * per_logit;
  return layers + logits;
}

std::string format_estimate(const EstimateInput& in) {
  char line[256];
  auto gib = [](double bytes) { return bytes / double(1ull << 30); };
  std::string out;
  std::snprintf(line, sizeof line,
                "Estimated memory for %.3gB parameters (largest layer %.3gM) on %lld node(s) x %lld GPU(s), %s training\n",
                in.params / 1e9, in.largest_layer_params / 1e6, (long long)in.nodes, (long long)in.gpus_per_node,
                in.param_bytes == 2 ? "16-bit" : "fp32");
  out += line;
  out += "  ZeRO  offload_optimizer  offload_param   per GPU (GiB)   per node CPU (GiB)\n";
  for (const auto& e : estimate_model_states(in)) {
    std::snprintf(line, sizeof line, "  %4d  %-17s  %-13s   %13.2f   %18.2f\n", e.stage, e.offload_optimizer ? "cpu" : "none",
                  e.offload_param ? "cpu" : "none", gib(e.gpu_bytes), gib(e.cpu_bytes_per_node));
    out += line;
  }
  const double act = estimate_activation_bytes(in);
  if (act > 0) {
    std::snprintf(line, sizeof line, "  activations: %.2f GiB per GPU (micro-batch %lld, seq %lld, %s%s)\n", gib(act),
                  (long long)in.micro_batch, (long long)in.seq_len,
                  in.activation_checkpointing ? "activation checkpointing" : "no checkpointing",
                  in.mlp_activation_recomputed ? ", MLP activation recomputed" : "");
    out += line;
  }
  return out;
}

}  // namespace stratum::monitor
