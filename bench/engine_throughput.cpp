// Training throughput of the engine on a built-in model (the presets of
// models/, the architectures bench/peers/gpt_peers.py rebuilds in PyTorch),
// random tokens, AdamW, one JSON line in the peers' schema: tokens/s per GPU,
// TFLOP/s per GPU and MFU (6N + 12 L d seq FLOPs per token against
// --peak-tflops), peak allocated memory, the mean time of forward, backward
// and the optimizer step (CUDA events on the compute stream, as the peers: no
// synchronization inside a step), and the exposed communication: how long the
// compute stream stood waiting for collectives (NCCL builds). Stages 1/2 run
// with zero_optimization.overlap_param_gather (off: --overlap-param-gather 0).
// Run: mpirun -np 2 build/bin/bench_engine --model gpt2-350m --stage 2 [--seq 1024 --micro 8 --checkpointing]
// (--help lists every flag and its default).
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include "stratum/distributed/job.h"
#include "stratum/engine/engine.h"
#include "stratum/nn/weight_grad_deferral.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/flops.h"
#include "stratum/models/lora.h"
#ifdef STRATUM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif
#ifdef STRATUM_WITH_NCCL
#include "stratum/distributed/nccl_communicator.h"
#endif

using namespace stratum;

namespace {

void device_sync() {
#ifdef STRATUM_WITH_CUDA
  c10::cuda::device_synchronize();
#endif
}

// Phase boundaries on the compute stream (CUDA events; host clocks on CPU
// ranks, where every op is synchronous), read once at the end: no
// synchronization between steps, so work a step leaves in flight (the lazy
// parameter all-gathers) overlaps the next as it does in training.
class PhaseTimeline {
 public:
  explicit PhaseTimeline(bool cuda) : cuda_(cuda) {}
  ~PhaseTimeline() {
#ifdef STRATUM_WITH_CUDA
    for (auto e : events_) cudaEventDestroy(e);
#endif
  }
  PhaseTimeline(const PhaseTimeline&) = delete;
  PhaseTimeline& operator=(const PhaseTimeline&) = delete;

  size_t mark() {
#ifdef STRATUM_WITH_CUDA
    if (cuda_) {
      cudaEvent_t e;
      cudaEventCreate(&e);
      cudaEventRecord(e, c10::cuda::getCurrentCUDAStream().stream());
      events_.push_back(e);
      return events_.size() - 1;
    }
#endif
    host_.push_back(std::chrono::steady_clock::now());
    return host_.size() - 1;
  }
  // The time from mark a to mark b counts for phase p (0 forward, 1 backward, 2 optimizer).
  void span(int p, size_t a, size_t b) { spans_.push_back({p, a, b}); }
  // Seconds per phase; the device must have passed every mark.
  std::array<double, 3> totals() const {
    std::array<double, 3> t{};
    for (const auto& [p, a, b] : spans_) t[p] += seconds(a, b);
    return t;
  }

 private:
  double seconds(size_t a, size_t b) const {
#ifdef STRATUM_WITH_CUDA
    if (cuda_) {
      float ms = 0;
      cudaEventElapsedTime(&ms, events_[a], events_[b]);
      return ms / 1e3;
    }
#endif
    return std::chrono::duration<double>(host_[b] - host_[a]).count();
  }

  bool cuda_;
#ifdef STRATUM_WITH_CUDA
  std::vector<cudaEvent_t> events_;
#endif
  std::vector<std::chrono::steady_clock::time_point> host_;
  std::vector<std::tuple<int, size_t, size_t>> spans_;
};

double peak_gib(int device) {
#ifdef STRATUM_WITH_CUDA
  if (device >= 0)
    return c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device))
               .allocated_bytes[0].peak / double(1 << 30);
#endif
  (void)device;
  return 0.0;
}

struct Options {
  std::string model = "gpt2-350m", precision = "bf16", zero_extra, profile;
  std::string moe_gemm = "auto";  // a mixture of experts' GEMMs: "auto" (by size), "grouped", or "loop" (one GEMM per expert)
  std::string fp8;  // an fp8 recipe (tensorwise, rowwise, blockwise): the projections' GEMMs in FP8 (docs/fp8.md); empty: bf16
  std::string lora;  // a "lora" section: adapters on a frozen base drawn on the device (MFU then counts the full model's FLOPs)
  std::vector<std::pair<std::string, std::string>> overrides;
  int64_t seq = 1024, micro = 8, gas = 1, steps = 10, warmup = 3;
  int stage = 2;
  bool checkpointing = false;
  bool sparse_gradients = false;  // the embedding's gradient exchanged as rows (stages 0-2)
  bool overlap_param_gather = true;  // stages 1/2
  // ZB-H1's split: the backward's weight-gradient GEMMs deferred and run after it (B then W).
  bool split_backward = false;
  double peak_tflops = 989.0;
};

// The command line (bench/run_matrix.sh passes --model, --seq, --micro, --steps, --warmup, --stage).
void add_flags(CLI::App& app, Options& o, std::vector<std::string>& overrides) {
  app.add_option("--model", o.model, "built-in preset (gpt2-350m, gpt2-1.3b, llama-1b, ...)")->capture_default_str();
  app.add_option("--set", overrides, "override a model setting, e.g. --set max_seq_len=2048 (repeatable)");
  app.add_option("--seq", o.seq, "sequence length")->capture_default_str();
  app.add_option("--micro", o.micro, "micro-batch per GPU")->capture_default_str();
  app.add_option("--gas", o.gas, "gradient accumulation steps")->capture_default_str();
  app.add_option("--steps", o.steps, "timed optimizer steps")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed optimizer steps before them")->capture_default_str();
  app.add_option("--stage", o.stage, "ZeRO stage")->check(CLI::Range(0, 3))->capture_default_str();
  app.add_option("--precision", o.precision, "bf16, or anything else for fp32")->capture_default_str();
  app.add_option("--zero-extra", o.zero_extra,
                 "more zero_optimization keys, appended as is: ',\"stage3_max_reuse_distance\": 0'");
  app.add_option("--peak-tflops", o.peak_tflops, "device peak TFLOP/s for MFU (H200 bf16 dense)")
      ->capture_default_str();
  app.add_option("--profile", o.profile, "trace one more step (rank 0) to this Chrome trace path");
  app.add_option("--overlap-param-gather", o.overlap_param_gather,
                 "stages 1/2: leave the parameter all-gathers to the next forward (0 or 1)")
      ->capture_default_str();
  app.add_option("--moe-gemm", o.moe_gemm,
                 "a mixture of experts' GEMMs: auto (by the experts' sizes), grouped (ATen's grouped GEMM on the "
                 "GPU) or loop (one GEMM per expert)")
      ->check(CLI::IsMember({"auto", "grouped", "loop"}))
      ->capture_default_str();
  app.add_option("--lora", o.lora,
                 "a lora section, e.g. '{\"r\": 16, \"target_modules\": \"all-linear\", \"base_dtype\": \"nf4\"}'");
  app.add_option("--fp8", o.fp8, "the attention and MLP projections' GEMMs in FP8 with this recipe (with bf16)")
      ->check(CLI::IsMember({"tensorwise", "rowwise", "blockwise"}));
  app.add_flag("--checkpointing", o.checkpointing, "activation checkpointing");
  app.add_flag("--split-backward", o.split_backward,
               "zero-bubble split: the weight-gradient GEMMs deferred out of the backward, then run (B, then W)");
  app.add_flag("--sparse-gradients", o.sparse_gradients, "the embedding's gradient exchanged as rows (stages 0-2)");
}

// Runs `step` once under the Kineto profiler (CPU ops and GPU kernels) and
// writes a Chrome trace to `path` (bench/profile_summary.py reads it).
template <class Step>
void profile_step(const std::string& path, bool cuda, Step step) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  step();
  device_sync();
  prof::disableProfiler()->save(path);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run(const distributed::DistContext& ctx, const Options& o) {
  const int dp = ctx.device_world()->size();
  const bool gather_overlapped = o.overlap_param_gather && (o.stage == 1 || o.stage == 2);
  const std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(o.micro) +
                           ", \"gradient_accumulation_steps\": " + std::to_string(o.gas) + ", " +
                           (o.precision == "bf16" ? "\"bf16\": {\"enabled\": true}, " : "") +
                           (o.fp8.empty() ? "" : "\"fp8\": {\"enabled\": true, \"recipe\": \"" + o.fp8 + "\"}, ") +
                           (o.checkpointing ? "\"activation_checkpointing\": {}, " : "") +
                           (o.sparse_gradients ? "\"sparse_gradients\": true, " : "") +
                           (o.lora.empty() ? "" : "\"lora\": " + o.lora + ", ") +
                           "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4, \"betas\": [0.9, 0.95], "
                           "\"weight_decay\": 0.1}}, \"gradient_clipping\": 1.0, \"zero_optimization\": {\"stage\": " +
                           std::to_string(o.stage) + ", \"overlap_comm\": true, \"reduce_bucket_size\": 50000000" +
                           (gather_overlapped ? ", \"overlap_param_gather\": true" : "") + o.zero_extra + "}}";
  Config config = Config::from_string(json, "bench");
  const models::ModelConfig mcfg = models::make_model_config(o.model, o.overrides);
  if (o.seq > mcfg.max_seq_len)
    throw Error("--seq " + std::to_string(o.seq) + " exceeds " + o.model + "'s max_seq_len " +
                std::to_string(mcfg.max_seq_len) + "; add --set max_seq_len=" + std::to_string(o.seq));
  torch::manual_seed(1);
  // LoRA: a skeleton with adapters, its frozen base drawn (or quantized) on the device one weight at a time.
  // A mixture of experts: a skeleton too, its billions of parameters drawn on the device.
  const bool skeleton = !o.lora.empty() || mcfg.is_moe();
  auto model = skeleton ? models::construct_model(mcfg, {}, c10::kMeta) : models::build_model(mcfg);
  if (!o.lora.empty()) models::apply_lora(*model, config.lora);
  const int64_t n_params = models::parameter_count(mcfg);
  auto engine = initialize(config, model, ctx);
  const c10::Device device = ctx.device();
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
#ifdef STRATUM_WITH_NCCL
  distributed::set_exposed_comm_timing(ctx.gpu_world != nullptr);
#endif
  if (o.split_backward && o.gas != 1) throw Error("--split-backward: only with --gas 1");
  int64_t deferred_gemms = 0;
  auto train_step = [&](PhaseTimeline& timeline) {
    at::Tensor loss;
    for (int64_t k = 0; k < o.gas; ++k) {
      at::Tensor tokens = torch::randint(mcfg.vocab_size, {o.micro, o.seq + 1}, opts);
      const size_t a = timeline.mark();
      loss = engine.forward(tokens.narrow(1, 0, o.seq), tokens.narrow(1, 1, o.seq));
      const size_t b = timeline.mark();
      if (o.split_backward) {
        nn::DeferredWeightGrads queue;
        {
          nn::DeferWeightGrads defer(queue);
          engine.core().backward_pass(loss, at::Tensor(), /*boundary=*/false);
        }
        deferred_gemms = static_cast<int64_t>(queue.size());
        queue.run();
        engine.core().close_backward_window();
      } else {
        engine.backward(loss);
      }
      const size_t c = timeline.mark();
      timeline.span(0, a, b);
      timeline.span(1, b, c);
      if (k + 1 < o.gas) engine.step();  // counts the micro-step
    }
    const size_t d = timeline.mark();
    engine.step();
    timeline.span(2, d, timeline.mark());
    return loss;
  };
  {
    PhaseTimeline warm(ctx.on_gpu());
    for (int64_t s = 0; s < o.warmup; ++s) train_step(warm);
    device_sync();
  }
#ifdef STRATUM_WITH_NCCL
  if (ctx.gpu_world) distributed::take_exposed_comm_seconds();  // the warm-up's
#endif
  PhaseTimeline timeline(ctx.on_gpu());
  at::Tensor last_loss;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < o.steps; ++s) last_loss = train_step(timeline);
  device_sync();
  const double wall = seconds_since(t0);
#ifdef STRATUM_WITH_NCCL
  const double exposed = ctx.gpu_world ? distributed::take_exposed_comm_seconds() : 0.0;
#else
  const double exposed = 0.0;
#endif
  const auto [forward, backward, optimizer] = timeline.totals();
  const double loss_value = last_loss.item<double>();
  const double tokens_per_gpu = o.micro * o.gas * o.seq * o.steps / wall;
  // A mixture of experts runs a token through top_k of its experts: its active parameters' FLOPs.
  const double flops_per_token =
      mcfg.is_moe() ? models::training_flops_per_token(mcfg, o.seq)
                    : models::training_flops_per_token(static_cast<double>(n_params), mcfg.layers, mcfg.hidden, o.seq);
  const double tflops = tokens_per_gpu * flops_per_token / 1e12;
  // "-tuned": zero_optimization keys beyond the defaults (named in the row's zero_extra).
  const std::string system = "stratum-zero" + std::to_string(o.stage) + (o.checkpointing ? "-ckpt" : "") +
                             (o.sparse_gradients ? "-sparse" : "") + (o.zero_extra.empty() ? "" : "-tuned") +
                             (o.lora.empty() ? "" : "-lora") + (o.moe_gemm == "auto" ? "" : "-" + o.moe_gemm) +
                             (o.fp8.empty() ? "" : "-fp8-" + o.fp8);
  nlohmann::ordered_json out = {{"system", system},
                        {"model", o.model},
                        {"gpus", dp},
                        {"seq", o.seq},
                        {"micro", o.micro},
                        {"params", n_params},
                        {"active_params", mcfg.is_moe() ? models::active_parameter_count(mcfg) : n_params},
                        {"tokens_per_s_per_gpu", tokens_per_gpu},
                        {"tflops_per_gpu", tflops},
                        {"mfu", tflops / o.peak_tflops},
                        {"peak_memory_gib", peak_gib(ctx.cuda_device)},
                        {"model_states_gib", engine.core().model_state_bytes().total() / double(1 << 30)},
                        {"wall_step_s", wall / o.steps},
                        {"loss", loss_value},
                        {"forward_s", forward / o.steps},
                        {"backward_s", backward / o.steps},
                        {"split_backward", o.split_backward},
                        {"deferred_weight_gemms", deferred_gemms},
                        {"optimizer_s", optimizer / o.steps},
                        {"exposed_comm_s", exposed / o.steps},
                        {"overlap_param_gather", gather_overlapped},
                        {"zero_extra", o.zero_extra}};
  if (!o.lora.empty()) out["lora"] = nlohmann::json::parse(o.lora);
  if (!o.overrides.empty()) {  // --set: the model settings the row ran with (max_seq_len, recompute_mlp_activation)
    nlohmann::ordered_json set = nlohmann::ordered_json::object();
    for (const auto& [key, value] : o.overrides) set[key] = value;
    out["model_set"] = set;
  }
  if (ctx.rank == 0) std::printf("%s\n", out.dump().c_str());
  if (!o.profile.empty()) {
    PhaseTimeline untimed(ctx.on_gpu());
    auto step = [&] { train_step(untimed); };
    if (ctx.rank == 0) profile_step(o.profile, ctx.on_gpu(), step);
    else step();  // the other ranks join the collectives untraced
    device_sync();
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training throughput of the engine on a built-in model: one JSON line (rank 0)"};
  Options options;
  std::vector<std::string> overrides;
  add_flags(app, options, overrides);
  CLI11_PARSE(app, argc, argv);
  try {
    for (const auto& kv : overrides) options.overrides.push_back(models::parse_override(kv));
    // Read once by the experts' GEMMs (nn/moe/grouped_linear.h): set before any runs.
    if (options.moe_gemm != "auto") setenv("STRATUM_MOE_GROUPED_GEMM", options.moe_gemm == "loop" ? "0" : "1", 1);
    distributed::DistContext ctx = distributed::init();
    // Every CUDA object dies inside run(), before distributed::finalize() (see init.h).
    run(ctx, options);
    // NCCL first: its CUDA state must go while the context lives, and the last
    // MPI communicator finalizes MPI, which may release the context.
    ctx.gpu_world.reset();
    ctx.cpu_world.reset();
    distributed::finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine: error: %s\n", distributed::describe_exception(e).c_str());  // no backtrace
    return 1;
  }
  return 0;
}
