#pragma once
// Typed sections of a DeepSpeed ds_config.json, with DeepSpeed's key names (as
// field names) and DeepSpeed's defaults. Parsing and validation live in the
// parse_*.cpp files; this header is plain data.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace stratum::config {

enum class DType { fp32, fp16, bf16 };
const char* dtype_name(DType d);

// --- batch ------------------------------------------------------------------
// The three keys as written; any two give the third (see batch.h).
struct BatchConfig {
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> train_micro_batch_size_per_gpu;
  std::optional<int64_t> gradient_accumulation_steps;
};

// --- optimizer ----------------------------------------------------------------
enum class OptimizerType { Adam, AdamW, Lamb };
const char* optimizer_name(OptimizerType t);

struct OptimizerConfig {
  OptimizerType type = OptimizerType::AdamW;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // DeepSpeed's "Adam" is decoupled (AdamW) unless adam_w_mode is false (Adam/AdamW only).
  bool adam_w_mode = true;
  // Every type: m and v divided by 1 - beta^step (false: used as they are, BERT's recipes).
  bool bias_correction = true;
  // Lamb (DeepSpeed's FusedLamb): the trust ratio ||p|| / ||update|| is clamped to [min_coeff, max_coeff].
  double max_coeff = 10.0;
  double min_coeff = 0.01;
};

// With no "optimizer" section (DeepSpeed then takes the script's optimizer;
// Hugging Face's and Megatron's configs often leave it out) the engine trains
// with AdamW at OptimizerConfig's defaults, and says so in this note, as
// stratum-config check does.
std::string default_optimizer_note();

// --- scheduler ----------------------------------------------------------------
enum class WarmupType { log, linear };

struct WarmupLRParams {
  double warmup_min_lr = 0.0;
  std::optional<double> warmup_max_lr;  // unset: the optimizer's lr
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::log;
  int64_t last_batch_iteration = -1;
};
struct WarmupDecayLRParams {
  int64_t total_num_steps = 0;  // required
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::log;
  int64_t last_batch_iteration = -1;
};
struct WarmupCosineLRParams {
  int64_t total_num_steps = 0;  // required
  double warmup_min_ratio = 0.0;
  int64_t warmup_num_steps = 1000;
  double cos_min_ratio = 0.0001;
  WarmupType warmup_type = WarmupType::log;
  int64_t last_batch_iteration = -1;
};
struct OneCycleParams {
  double cycle_min_lr = 0.0;  // required
  double cycle_max_lr = 0.0;  // required
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  std::optional<int64_t> cycle_second_step_size;  // unset: cycle_first_step_size
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;  // unset: cycle_first_stair_count
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
  int64_t last_batch_iteration = -1;
};
using SchedulerConfig = std::variant<WarmupLRParams, WarmupDecayLRParams, WarmupCosineLRParams, OneCycleParams>;
const char* scheduler_name(const SchedulerConfig& s);

// --- precision ----------------------------------------------------------------
struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;  // 0: dynamic
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  bool dynamic() const { return loss_scale == 0.0; }
};
struct Bf16Config {
  bool enabled = false;
};

// --- ZeRO -----------------------------------------------------------------------
enum class OffloadDevice { none, cpu };
struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::none;
  bool pin_memory = true;
  double cpuadam_cores_perc = 0.8;
};
struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::none;
  bool pin_memory = true;
};
// Every field is read by the engine; the DeepSpeed keys Stratum's design makes
// moot (contiguous_gradients, allgather_partitions, allgather_bucket_size,
// sub_group_size, ...) are validated and noted in parse_zero.cpp, not stored.
struct ZeroConfig {
  int64_t stage = 0;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500'000'000;
  bool overlap_comm = false;  // DeepSpeed: defaults to true at stage 3 only
  // Stratum (Megatron's name): stages 1/2 leave the parameter all-gathers after
  // the step to the layers of the next forward (LayerStack models).
  bool overlap_param_gather = false;
  // Stratum (Megatron's name): at every stage the weight-gradient GEMM of every
  // nn::linear writes (adds) its result straight into the flat fp32 gradient
  // (stages 2/3: its bucket's staging buffer) instead of a 16-bit .grad that is
  // then widened into it (LayerStack models).
  bool gradient_accumulation_fusion = true;
  bool load_from_fp32_weights = true;
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;
  int64_t stage3_prefetch_bucket_size = 50'000'000;
  int64_t stage3_param_persistence_threshold = 100'000;
  int64_t stage3_max_live_parameters = 1'000'000'000;
  int64_t stage3_max_reuse_distance = 1'000'000'000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  bool ignore_unused_parameters = true;
};

// --- activation checkpointing -------------------------------------------------------
struct ActivationCheckpointingConfig {
  bool enabled = false;                       // the section is present
  std::optional<int64_t> number_checkpoints;  // unset: every repeated layer (transformer block)
  bool cpu_checkpointing = false;
  // Stratum's: under cpu_checkpointing, only the first this many checkpointed
  // blocks keep their inputs on the host, the rest on the GPU (unset: all on
  // the host, DeepSpeed's). The first blocks' inputs are held longest; a split
  // fits sequences that neither the GPU nor the host holds alone.
  std::optional<int64_t> cpu_checkpointing_layers;
  // The saved layer inputs of a step go into one preallocated buffer (reused
  // while no older graph holds it) instead of one allocation per layer.
  bool contiguous_memory_optimization = false;
  // A device synchronize at the start of every checkpointed forward and recomputation.
  bool synchronize_checkpoint_boundary = false;
  // Times the checkpointed layers' forward, recomputation and backward (device
  // synchronized) and prints them every steps_per_print steps.
  bool profile = false;
};

// --- pipeline and tensor parallelism ---------------------------------------------------
// zb_h1: zero bubble (Qi et al., ICLR 2024), the backward split into input (B)
// and weight (W) gradients, W deferred into the bubble.
enum class PipelineSchedule { one_f_one_b, gpipe, interleaved, zb_h1 };
const char* pipeline_schedule_name(PipelineSchedule s);

struct PipelineConfig {
  int64_t stages = 1;
  // "parameters", "uniform" or "type:<regex>" (DeepSpeed PipelineModule's partition_method).
  std::string partition_method = "parameters";
  int64_t activation_checkpoint_interval = 0;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  // Stratum extension
  int64_t virtual_stages = 1;                                  // Stratum extension (interleaved)
};

struct TensorParallelConfig {
  int64_t size = 1;  // DeepSpeed "autotp_size" (or "tp": {"tp_size"}); 0 and 1 mean off
  // "sequence_parallel" (Megatron's name): norms and the activations between
  // the split regions on 1/size of the sequence (needs size > 1).
  bool sequence_parallel = false;
};

// The "context_parallel" section: the sequence split over `size` ranks cut
// from the data-parallel ones (nn/context_parallel/context_parallel.h).
// "ulysses" trades the sequence for heads by all-to-all (the heads must
// divide), "ring" passes key/value blocks around the ring (any heads),
// "hybrid" runs Ulysses over `ulysses_size` consecutive ranks inside each
// ring rank.
struct ContextParallelConfig {
  int64_t size = 1;
  std::string method = "ring";  // "ulysses" | "ring" | "hybrid"
  int64_t ulysses_size = 1;     // hybrid only; ulysses: size, ring: 1
};

// Stratum's "topology" section: how ranks map to (dp, pp, tp) coordinates,
// the axes fastest-varying first (Megatron's default, "tp-dp-pp", keeps a
// tensor-parallel group on consecutive ranks, inside a node).
struct TopologyConfig {
  std::string order = "tp-dp-pp";
};

// --- diagnostics ------------------------------------------------------------------------
struct CommsLoggerConfig {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  std::vector<std::string> prof_ops;
  bool debug = false;
};

struct MonitorWriterConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};
struct MonitorConfig {
  MonitorWriterConfig tensorboard;
  MonitorWriterConfig csv_monitor;
};

// DeepSpeed's flops profiler (engine/flops_profiler.h): the forward passes of
// one optimizer step counted and timed per module, printed at its end.
struct FlopsProfilerConfig {
  bool enabled = false;
  // Extra forward passes a step recomputes (activation checkpointing): the
  // backward is counted as (2 + this) forwards. 0 to 1.
  double recompute_fwd_factor = 0.0;
  int64_t profile_step = 1;   // the step profiled: the one taken after this many optimizer steps
  int64_t module_depth = -1;  // deepest level of the aggregated profile; -1: every level
  int64_t top_modules = 1;    // modules listed per level in the aggregated profile
  bool detailed = true;       // also the module tree with every module's figures
  std::string output_file;    // empty (null in JSON): printed on rank 0
};


// --- mixture of experts ----------------------------------------------------------------
// The "moe" section: how a mixture-of-experts model's routing trains (the
// model's shape, experts and top_k, is the model's: its preset or
// config.json). Present with a dense model: an error at start.
struct MoeConfig {
  bool present = false;
  // The model's shape, when given: checked against it (not set by it).
  std::optional<int64_t> num_experts, top_k;
  int64_t expert_parallel_size = 1;
  double capacity_factor = 0;               // 0 (or null): dropless
  std::string drop_policy = "probs";        // "probs" | "position": which assignments over capacity go
  std::string load_balancing = "aux_loss";  // "aux_loss" | "seq_aux_loss" | "none"
  double aux_loss_coeff = 1e-2;
  double z_loss_coeff = 0;
  // DeepSeek-V3's aux-loss-free balancing: a per-expert bias on the router's
  // choice, moved by this much a step towards the less loaded experts (0: off).
  double expert_bias_update_rate = 0;
};

// --- fine-tuning ------------------------------------------------------------------------
// The "lora" section: low-rank adapters on a frozen base, with peft's
// LoraConfig key names (Hu et al. 2021; QLoRA with base_dtype "nf4").
// Present: the base's weights train no more (no gradient, no optimizer
// state) and only the adapters and modules_to_save do.
enum class LoraBaseDType { model, bf16, nf4 };
struct LoraConfig {
  bool enabled = false;
  int64_t r = 8;
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  // Hugging Face module names ("q_proj", "c_attn", ...): a linear layer is
  // adapted when its name is one of them or ends with "." + one of them.
  // {"all-linear"}: every projection of every block (not the LM head), as peft.
  std::vector<std::string> target_modules;
  bool use_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r
  // Modules trained whole beside the adapters ("lm_head", "embed_tokens", "norm", ...).
  std::vector<std::string> modules_to_save;
  // model: the base in the training precision; bf16: in bf16 (bf16 training
  // only); nf4: 4-bit NormalFloat with double quantization (QLoRA).
  LoraBaseDType base_dtype = LoraBaseDType::model;
};
const char* lora_base_dtype_name(LoraBaseDType d);
// The linear layers LoRA adapts in the built-in architectures' blocks ("gpt2",
// "llama"; empty for another), by Hugging Face module name. The LM head is
// not one (vocabulary-parallel; peft's "all-linear" leaves it out too).
const std::vector<std::string>& lora_target_names(const std::string& arch);

// --- fp8 (Stratum's section) ----------------------------------------------------------------
// The attention and MLP projections' GEMMs in FP8 (nn/float8/, docs/fp8.md):
// forward and both backward GEMMs through ATen's _scaled_mm, bf16 out.
// tensorwise: one scale a tensor from its current amax (e4m3 forward
// operands, e5m2 gradients); rowwise: one scale a row along the contraction
// axis, powers of two, e4m3 everywhere; blockwise: DeepSeek-V3's 1x128
// activation and 128x128 weight blocks, e4m3 everywhere (Hopper only).
enum class Fp8Recipe { tensorwise, rowwise, blockwise };
const char* fp8_recipe_name(Fp8Recipe r);
struct Fp8Config {
  bool enabled = false;
  Fp8Recipe recipe = Fp8Recipe::tensorwise;
  // Layers kept in bf16: a pattern matches a projection's full name
  // ("layers.0.attn.c_attn") or its last parts ("c_attn", "attn.c_proj",
  // "0.mlp.down_proj"); "*" matches any run of characters.
  std::vector<std::string> exclude;
  // ZeRO-3 gathers the FP8 projections' weights as FP8 bytes (tensorwise:
  // half the traffic, the same values as casting the gathered bf16 weight).
  // Unset: wherever it applies (tensorwise at ZeRO stage 3); true: an error
  // where it cannot; false: gathered in bf16 and cast after.
  std::optional<bool> all_gather_fp8;
};
// For tests only: with this environment variable set to 1, FP8 training runs
// on CPU ranks, the FP8 operands dequantized and multiplied in fp32 (the same
// FP8 values, no speed), so that its composition with the parallel layouts is
// tested under mpirun on machines without a GPU. Read by float8_cpu_emulation
// alone.
inline constexpr const char* kFloat8CpuEmulation = "STRATUM_FP8_CPU_EMULATION";
bool float8_cpu_emulation();

// --- checkpoint (DeepSpeed's section; "async" is Stratum's key) -------------------
struct CheckpointConfig {
  // A save blocks the step only while each rank's states are copied into host
  // memory; a background thread writes, checksums and publishes them.
  bool async = false;
};

}  // namespace stratum::config
