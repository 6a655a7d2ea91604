#include <algorithm>

#include "stratum/config/parse_sections.h"
#include "stratum/config/partition_pattern.h"
#include "stratum/core/error.h"

namespace stratum::config {
namespace {

constexpr int64_t kMax = KeyReader::kIntMax;
// Beyond any model's layer count (stages, chunks) or any node's GPU count (TP):
// bounds that keep the engine's int arithmetic exact and a hostile config from
// asking for schedules of billions of actions.
constexpr int64_t kMaxPipelineStages = 4096;
constexpr int64_t kMaxVirtualStages = 1024;
constexpr int64_t kMaxTensorParallel = 4096;

void parse_pipeline(KeyReader& root, Config& config) {
  KeyReader pipe = root.child("pipeline");
  PipelineConfig& p = config.pipeline;
  Diagnostics& diag = pipe.diagnostics();
  p.stages = pipe.get_int("stages", 1, 1, kMaxPipelineStages);
  p.partition_method = pipe.get_string("partition_method", p.partition_method);
  if (p.partition_method.rfind("type:", 0) == 0) {
    try {
      compile_partition_pattern(p.partition_method.substr(5));
    } catch (const Error& e) {
      diag.error(pipe.path_of("partition_method"), std::string(e.what()) + " (after \"type:\")");
    }
  } else if (p.partition_method != "parameters" && p.partition_method != "uniform") {
    diag.error(pipe.path_of("partition_method"),
               "expected \"parameters\", \"uniform\" or \"type:<regex>\", got \"" + p.partition_method + "\"" +
                   did_you_mean(p.partition_method, {"parameters", "uniform"}));
  }
  p.activation_checkpoint_interval = pipe.get_int("activation_checkpoint_interval", 0, 0, kMax);
  const std::string schedule = pipe.get_enum("schedule", "1f1b", {"1f1b", "gpipe", "interleaved", "zb-h1"}, true);
  p.schedule = schedule == "gpipe"         ? PipelineSchedule::gpipe
               : schedule == "interleaved" ? PipelineSchedule::interleaved
               : schedule == "zb-h1"       ? PipelineSchedule::zb_h1
                                           : PipelineSchedule::one_f_one_b;
  p.virtual_stages = pipe.get_int("virtual_stages", 1, 1, kMaxVirtualStages);
  if (p.virtual_stages > 1 && p.schedule != PipelineSchedule::interleaved)
    diag.error(pipe.path_of("virtual_stages"), "is " + std::to_string(p.virtual_stages) +
                                                   " but only the \"interleaved\" schedule uses virtual stages");
  pipe.unsupported("partition", "best", "use \"partition_method\": \"parameters\" | \"uniform\" | \"type:<regex>\"");
  pipe.unsupported("seed_layers", false);
  // DeepSpeed splits P2P activations/gradients over tensor-parallel ranks; Stratum sends them whole.
  pipe.unsupported("pipe_partitioned", true);
  pipe.unsupported("grad_partitioned", true);
  pipe.finish();
}

void parse_tensor_parallel(KeyReader& root, Config& config) {
  KeyReader tp = root.child("tensor_parallel");
  Diagnostics& diag = tp.diagnostics();
  auto autotp = tp.get_opt_int("autotp_size", 0, kMaxTensorParallel);
  KeyReader nested = tp.child("tp");
  auto tp_size = nested.get_opt_int("tp_size", 1, kMaxTensorParallel);
  nested.unsupported("tp_grain_size", 1);
  nested.finish();
  if (autotp && tp_size && std::max<int64_t>(*autotp, 1) != *tp_size)
    diag.error(tp.path_of("autotp_size"), "is " + std::to_string(*autotp) + " but tp.tp_size is " +
                                              std::to_string(*tp_size) + "; give one of them");
  config.tensor_parallel.size = std::max<int64_t>(1, autotp.value_or(tp_size.value_or(1)));
  config.tensor_parallel.sequence_parallel = tp.get_bool("sequence_parallel", false);
  if (config.tensor_parallel.sequence_parallel && config.tensor_parallel.size == 1)
    diag.error(tp.path_of("sequence_parallel"), "is true but the tensor-parallel size is 1; sequence parallelism "
                                                "splits the sequence over tensor-parallel ranks: set autotp_size > 1 "
                                                "or sequence_parallel false");
  tp.unsupported("tp_overlap_comm", false);
  tp.unsupported("partition_config", Json(nullptr), "Stratum's tensor parallelism is Megatron-style on its own layers");
  tp.unsupported("injection_policy_tuple", Json(nullptr));
  tp.unsupported("preset_model", Json(nullptr));
  tp.unsupported("keep_module_on_host", false);
  tp.alias("kernel_inject", "replace_with_kernel_inject", false);
  tp.unsupported("replace_with_kernel_inject", false);
  tp.unsupported("dtype", Json(nullptr), "the precision comes from the fp16/bf16 sections");
  tp.finish();
}

void parse_context_parallel(KeyReader& root, Config& config) {
  KeyReader cp = root.child("context_parallel");
  if (!cp.present()) return;
  ContextParallelConfig& c = config.context_parallel;
  Diagnostics& diag = cp.diagnostics();
  c.size = cp.get_int("size", 1, 1, kMaxTensorParallel * kMaxTensorParallel);
  c.method = cp.get_enum("method", c.method, {"ulysses", "ring", "hybrid"});
  const std::optional<int64_t> ulysses = cp.get_opt_int("ulysses_size", 1, c.size);
  if (c.method == "hybrid") {
    if (!ulysses || *ulysses <= 1 || *ulysses >= c.size || c.size % *ulysses != 0)
      diag.error(cp.path_of("ulysses_size"),
                 (ulysses ? "is " + std::to_string(*ulysses) : std::string("is missing")) +
                     ": method \"hybrid\" runs Ulysses over ulysses_size ranks inside each ring rank, so it must "
                     "divide size (" + std::to_string(c.size) + ") and lie strictly between 1 and size");
    else
      c.ulysses_size = *ulysses;
  } else {
    const int64_t implied = c.method == "ulysses" ? c.size : 1;
    if (ulysses && *ulysses != implied)
      diag.error(cp.path_of("ulysses_size"), "is " + std::to_string(*ulysses) + " but method \"" + c.method +
                                                 "\" runs Ulysses over " + std::to_string(implied) +
                                                 " ranks; leave it out, or use method \"hybrid\"");
    c.ulysses_size = implied;
  }
  if (c.size == 1 && cp.has("method"))
    diag.note(cp.path_of("method"), "has no effect with context_parallel.size 1");
  cp.finish();
}

void parse_topology(KeyReader& root, Config& config) {
  KeyReader topo = root.child("topology");
  const std::string order = topo.get_string("order", "tp-dp-pp");
  std::vector<std::string> axes;
  for (size_t begin = 0; begin <= order.size();) {
    const size_t end = std::min(order.find('-', begin), order.size());
    axes.push_back(order.substr(begin, end - begin));
    begin = end + 1;
  }
  std::vector<std::string> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != std::vector<std::string>{"dp", "pp", "tp"})
    topo.diagnostics().error(topo.path_of("order"), "\"" + order + "\" must name tp, dp and pp once each, "
                                                    "fastest-varying first (e.g. \"tp-dp-pp\")");
  else
    config.topology.order = order;
  topo.finish();
}

void parse_activation_checkpointing(KeyReader& root, Config& config) {
  KeyReader ac = root.child("activation_checkpointing");
  config.activation_checkpointing.enabled = ac.present();
  config.activation_checkpointing.number_checkpoints = ac.get_opt_int("number_checkpoints", 1, kMax);
  config.activation_checkpointing.cpu_checkpointing = ac.get_bool("cpu_checkpointing", false);
  ActivationCheckpointingConfig& a = config.activation_checkpointing;
  a.cpu_checkpointing_layers = ac.get_opt_int("cpu_checkpointing_layers", 0, kMax);
  if (a.cpu_checkpointing_layers && !a.cpu_checkpointing)
    ac.diagnostics().error(ac.path_of("cpu_checkpointing_layers"),
                           "counts the checkpointed blocks whose inputs go to the host; it needs "
                           "\"cpu_checkpointing\": true beside it");
  a.contiguous_memory_optimization = ac.get_bool("contiguous_memory_optimization", false);
  a.synchronize_checkpoint_boundary = ac.get_bool("synchronize_checkpoint_boundary", false);
  a.profile = ac.get_bool("profile", false);
  // DeepSpeed splits each checkpointed input across the tensor-parallel group.
  if (config.tensor_parallel.size > 1)
    ac.unsupported("partition_activations", false,
                   "partitioning checkpointed activations across tensor-parallel ranks comes with tensor parallelism");
  else
    ac.noted("partition_activations", false,
             "partitions checkpointed activations across tensor-parallel ranks; with tensor-parallel size 1 each rank "
             "keeps its checkpoints whole, as DeepSpeed does");
  ac.finish();
}

}  // namespace

void parse_parallel(KeyReader& root, Config& config) {
  parse_pipeline(root, config);
  parse_tensor_parallel(root, config);
  parse_context_parallel(root, config);
  parse_topology(root, config);
  parse_activation_checkpointing(root, config);
}

}  // namespace stratum::config
