// Invalid configs: each must fail with every problem named by its JSON path.
#include <gtest/gtest.h>

#include "stratum/config/config.h"
#include "stratum/core/error.h"

using stratum::Config;
using stratum::ConfigError;

namespace {

struct InvalidCase {
  const char* name;
  const char* json;
  std::vector<std::string> expected;  // substrings that must all appear in the error
  size_t problems;                    // exact number of problems reported
};

void PrintTo(const InvalidCase& c, std::ostream* os) { *os << c.name; }

class ConfigInvalid : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(ConfigInvalid, ReportsEveryProblemWithItsPath) {
  const InvalidCase& c = GetParam();
  try {
    Config::from_string(c.json, "bad.json");
    FAIL() << "accepted an invalid config: " << c.json;
  } catch (const ConfigError& e) {
    std::string what = e.what();
    EXPECT_EQ(e.source(), "bad.json");
    EXPECT_EQ(e.problems().size(), c.problems) << what;
    for (const auto& s : c.expected) EXPECT_NE(what.find(s), std::string::npos) << "missing '" << s << "' in:\n" << what;
  }
}

const InvalidCase kCases[] = {
    {"StageOutOfRange", R"({"train_batch_size": 8, "zero_optimization": {"stage": 4}})",
     {"zero_optimization.stage: expected 0..3, got 4"}, 1},
    {"NegativeStage", R"({"train_batch_size": 8, "zero_optimization": {"stage": -1}})",
     {"zero_optimization.stage: expected 0..3, got -1"}, 1},
    {"UnknownTopLevelKeyDidYouMean", R"({"train_batch_size": 8, "gradient_clippin": 1.0})",
     {"gradient_clippin: unknown key (did you mean 'gradient_clipping'?)"}, 1},
    {"UnknownNestedKeyDidYouMean", R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_sz": 1}})",
     {"zero_optimization.reduce_bucket_sz: unknown key (did you mean 'reduce_bucket_size'?)"}, 1},
    {"UnknownKeyNoSuggestion", R"({"train_batch_size": 8, "xyzzy": 1})", {"xyzzy: unknown key"}, 1},
    {"FractionalInteger", R"({"train_batch_size": 8.5})", {"train_batch_size: expected an integer, got 8.5"}, 1},
    {"IntegerAsString", R"({"train_batch_size": "8"})", {"train_batch_size: expected an integer, got a string"}, 1},
    {"ZeroBatch", R"({"train_batch_size": 0})", {"train_batch_size: expected 1..2147483647, got 0"}, 1},
    {"AutoBatch", R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2})",
     {"train_batch_size: \"auto\"", "needs an explicit value"}, 1},
    {"AutoEverywhereLikeHuggingFace",
     R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
         "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
         "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}})",
     {"train_batch_size: \"auto\"", "train_micro_batch_size_per_gpu: \"auto\"", "gradient_accumulation_steps: \"auto\"",
      "optimizer.params.lr: \"auto\"", "optimizer.params.weight_decay: \"auto\"",
      "zero_optimization.reduce_bucket_size: \"auto\""},
     6},
    {"Fp16AndBf16BothOn", R"({"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}})",
     {"fp16 and bf16 are both enabled"}, 1},
    {"OffloadWithStage0",
     R"({"train_batch_size": 8, "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})",
     {"zero_optimization.offload_optimizer.device", "needs ZeRO stage 1, 2 or 3"}, 1},
    {"DeprecatedCpuOffloadWithStage0", R"({"train_batch_size": 8, "zero_optimization": {"cpu_offload": true}})",
     {"needs ZeRO stage 1, 2 or 3"}, 1},
    {"CpuOffloadAndOffloadOptimizerTogether",
     R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "cpu_offload": true,
         "offload_optimizer": {"device": "cpu"}}})",
     {"zero_optimization.cpu_offload: given together with offload_optimizer"}, 1},
    {"NvmeOffload",
     R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
         "nvme_path": "/local_nvme"}}})",
     {"offload_param.device: NVMe offload (ZeRO-Infinity) is not supported"}, 1},
    {"BadOffloadDevice",
     R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}})",
     {"offload_optimizer.device: expected one of none, cpu, got \"gpu\""}, 1},
    {"UnknownOptimizer", R"({"train_batch_size": 8, "optimizer": {"type": "Adamm"}})",
     {"optimizer.type: unknown optimizer \"Adamm\"", "did you mean 'Adam'"}, 1},
    {"DeepSpeedOnlyOptimizer", R"({"train_batch_size": 8, "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-3}}})",
     {"DeepSpeed optimizer \"OneBitAdam\" is not supported by Stratum yet"}, 1},
    {"OptimizerWithoutType", R"({"train_batch_size": 8, "optimizer": {"params": {"lr": 1e-3}}})",
     {"optimizer.type: missing"}, 1},
    {"BadOptimizerParams",
     R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": -0.1, "betas": [0.9, 1.5],
         "eps": 0, "weight_decay": -1, "momentum": 0.9}}})",
     {"optimizer.params.lr: expected a number >= 0, got -0.1", "optimizer.params.betas[1]",
      "optimizer.params.eps: expected a number > 0", "optimizer.params.weight_decay", "optimizer.params.momentum: unknown key"},
     5},
    {"BetasNotAPair", R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})",
     {"optimizer.params.betas: expected a list of 2 numbers"}, 1},
    {"MaxGradNormInOptimizer",
     R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}})",
     {"optimizer.params.max_grad_norm", "gradient_clipping"}, 1},
    {"AdamWWithoutDecoupling",
     R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})",
     {"optimizer.params.adam_w_mode"}, 1},
    {"UnknownScheduler", R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosine"}})",
     {"scheduler.type: unknown scheduler \"WarmupCosine\"", "did you mean 'WarmupCosineLR'"}, 1},
    {"DeepSpeedOnlyScheduler", R"({"train_batch_size": 8, "scheduler": {"type": "LRRangeTest"}})",
     {"DeepSpeed scheduler \"LRRangeTest\" is not supported"}, 1},
    {"WarmupDecayWithoutTotal",
     R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}}})",
     {"scheduler.params.total_num_steps: required by WarmupDecayLR"}, 1},
    {"WarmupCosineTotalBelowWarmup",
     R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10,
         "warmup_num_steps": 100}}})",
     {"scheduler.params.total_num_steps: is 10, less than warmup_num_steps (100)"}, 1},
    {"SchedulerParamTypo",
     R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.1, "warmup_num_step": 5,
         "warmup_type": "cosine"}}})",
     {"scheduler.params.warmup_num_step: unknown key (did you mean 'warmup_num_steps'?)",
      "scheduler.params.warmup_type: expected one of log, linear"},
     2},
    {"OneCycleMissingBounds", R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle", "params": {}}})",
     {"scheduler.params.cycle_min_lr: required", "scheduler.params.cycle_max_lr: required"}, 2},
    {"WarmupNumStepsZero",
     R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}})",
     {"scheduler.params.warmup_num_steps: expected an integer >= 1, got 0"}, 1},
    {"Fp16ScalerRanges",
     R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": -1, "hysteresis": 0,
         "loss_scale_window": 0, "min_loss_scale": 0, "initial_scale_power": 200}})",
     {"fp16.loss_scale", "fp16.hysteresis", "fp16.loss_scale_window", "fp16.min_loss_scale", "fp16.initial_scale_power"},
     5},
    {"MinScaleAboveInitialScale",
     R"({"train_batch_size": 8, "fp16": {"enabled": true, "initial_scale_power": 4, "min_loss_scale": 32}})",
     {"fp16.min_loss_scale: is larger than the initial scale 2^4"}, 1},
    {"BooleanAsString", R"({"train_batch_size": 8, "fp16": {"enabled": "true"}})",
     {"fp16.enabled: expected true or false, got \"true\""}, 1},
    {"SectionNotAnObject", R"({"train_batch_size": 8, "fp16": true})", {"fp16: expected an object {...}"}, 1},
    {"UnsupportedFeatureSection", R"({"train_batch_size": 8, "sparse_attention": {"mode": "fixed"}})",
     {"sparse_attention: DeepSpeed feature 'sparse attention' is not supported by Stratum yet"}, 1},
    {"UnsupportedKeyAtNonDefault", R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
         "zero_quantized_weights": true, "mics_shard_size": 4}})",
     {"zero_optimization.zero_quantized_weights: DeepSpeed option not supported by Stratum yet",
      "zero_optimization.mics_shard_size: DeepSpeed option not supported"},
     2},
    {"BatchTripleDoesNotDivide",
     R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1})",
     {"train_batch_size: 10 is not a multiple of train_micro_batch_size_per_gpu (4) x gradient_accumulation_steps (1)"},
     1},
    {"NoBatchSizeAtAll", R"({"gradient_accumulation_steps": 4})",
     {"neither train_batch_size nor train_micro_batch_size_per_gpu"}, 1},
    {"MisplacedTopLevelKeys", R"({"train_batch_size": 8, "stage": 2, "lr": 0.1})",
     {"stage: not a top-level key; it belongs in \"zero_optimization\"", "lr: not a top-level key; it belongs in \"optimizer.params\""},
     2},
    {"PipelineBadValues",
     R"({"train_batch_size": 8, "pipeline": {"stages": 0, "partition_method": "param", "schedule": "1F1b2"}})",
     {"pipeline.stages: expected 1..4096, got 0", "pipeline.partition_method: expected \"parameters\"",
      "did you mean 'parameters'", "pipeline.schedule: expected one of 1f1b, gpipe, interleaved"},
     3},
    // What the pipeline engine cannot do is refused here too, so stratum-config check refuses what stratum-train would.
    {"CheckpointIntervalAndSection",
     R"({"train_batch_size": 8, "pipeline": {"stages": 2, "activation_checkpoint_interval": 2},
         "activation_checkpointing": {"partition_activations": false}})",
     {"pipeline.activation_checkpoint_interval: 2 checkpoints groups of layers", "choose one"}, 1},
    {"CheckpointIntervalWithoutStages",
     R"({"train_batch_size": 8, "pipeline": {"activation_checkpoint_interval": 2}})",
     {"pipeline.activation_checkpoint_interval: 2 applies to a pipeline's stages"}, 1},
    {"PipelineBadRegex", R"({"train_batch_size": 8, "pipeline": {"stages": 2, "partition_method": "type:(["}})",
     {"pipeline.partition_method: invalid regular expression"}, 1},
    {"PipelinePatternNestedTooDeep",
     R"j({"train_batch_size": 8, "pipeline": {"stages": 2, "partition_method": "type:(((((((((((((((((((a)))))))))))))))))))"}})j",
     {"pipeline.partition_method: the regular expression nests groups deeper than 16 (at character 16)"}, 1},
    {"PipelinePatternRepeatsTooOften",
     R"j({"train_batch_size": 8, "pipeline": {"stages": 2, "partition_method": "type:(a{1000}){1000}"}})j",
     {"pipeline.partition_method: the regular expression repeats a part {100", "over the 64 allowed"}, 1},
    {"CountsBeyondIntAreRefusedNotNarrowed",
     R"({"train_batch_size": 8, "gradient_accumulation_steps": 4294967296,
         "pipeline": {"stages": 4294967298, "virtual_stages": 4294967296},
         "tensor_parallel": {"autotp_size": 4294967296}})",
     {"gradient_accumulation_steps: expected 1..2147483647, got 4294967296",
      "pipeline.stages: expected 1..4096, got 4294967298",
      "pipeline.virtual_stages: expected 1..1024, got 4294967296",
      "tensor_parallel.autotp_size: expected 0..4096, got 4294967296"},
     4},
    {"PipelineDeepSpeedPartitionKey", R"({"train_batch_size": 8, "pipeline": {"stages": 2, "partition": "uniform"}})",
     {"pipeline.partition: DeepSpeed option not supported", "partition_method"}, 1},
    {"InterleavedNeedsVirtualStages", R"({"train_batch_size": 8, "pipeline": {"stages": 2, "schedule": "interleaved"}})",
     {"pipeline.schedule: \"interleaved\" needs pipeline.virtual_stages >= 2"}, 1},
    {"TensorParallelConflict", R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2, "tp": {"tp_size": 4}}})",
     {"tensor_parallel.autotp_size: is 2 but tp.tp_size is 4"}, 1},
    {"TopologyOrder", R"({"train_batch_size": 8, "topology": {"order": "tp-pp"}})",
     {"topology.order: \"tp-pp\" must name tp, dp and pp once each"}, 1},
    {"SequenceParallelWithoutTensorParallel", R"({"train_batch_size": 8, "tensor_parallel": {"sequence_parallel": true}})",
     {"tensor_parallel.sequence_parallel: is true but the tensor-parallel size is 1"}, 1},
    {"CommsLoggerUnknownOp",
     R"({"train_batch_size": 8, "comms_logger": {"enabled": true, "prof_ops": ["all_reduce", "allgather", 3]}})",
     {"comms_logger.prof_ops[1]: unknown collective \"allgather\"", "comms_logger.prof_ops[2]: expected a string"}, 2},
    {"CommunicationDataType", R"({"train_batch_size": 8, "communication_data_type": "fp8"})",
     {"communication_data_type: expected one of fp32, fp16, bf16, got \"fp8\""}, 1},
    {"Fp8AllGatherWithoutZero3",
     R"({"train_batch_size": 8, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2},
         "fp8": {"enabled": true, "all_gather_fp8": true}})",
     {"fp8.all_gather_fp8: true, but only ZeRO stage 3 gathers weights (zero_optimization.stage is 2)"}, 1},
    {"Fp8AllGatherRowwise",
     R"({"train_batch_size": 8, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3},
         "fp8": {"enabled": true, "recipe": "rowwise", "all_gather_fp8": true}})",
     {"fp8.all_gather_fp8: true needs recipe \"tensorwise\"", "\"rowwise\" scales rows"}, 1},
    {"Fp16CommsWithBf16", R"({"train_batch_size": 8, "bf16": {"enabled": true}, "communication_data_type": "fp16"})",
     {"communication_data_type: \"fp16\" with bf16 training"}, 1},
    {"NegativeClipping", R"({"train_batch_size": 8, "gradient_clipping": -1, "gradient_predivide_factor": 0})",
     {"gradient_clipping: expected a number >= 0", "gradient_predivide_factor: expected a number > 0"}, 2},
    {"ActivationCheckpointing",
     R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2},
         "activation_checkpointing": {"number_checkpoints": 0, "partition_activations": true}})",
     {"activation_checkpointing.number_checkpoints: expected an integer >= 1, got 0",
      "activation_checkpointing.partition_activations: DeepSpeed option not supported",
      "comes with tensor parallelism"},
     2},
    {"HostCheckpointLayersWithoutCpuCheckpointing",
     R"({"train_batch_size": 8, "activation_checkpointing": {"cpu_checkpointing_layers": 4}})",
     {"activation_checkpointing.cpu_checkpointing_layers: counts the checkpointed blocks whose inputs go to the host",
      "needs \"cpu_checkpointing\": true beside it"},
     1},
    {"AliasGivenTwice", R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "prefetch_bucket_size": 1,
         "stage3_prefetch_bucket_size": 2}})",
     {"zero_optimization.prefetch_bucket_size: given together with 'stage3_prefetch_bucket_size'"}, 1},
    {"BucketSizeZero", R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": 0}})",
     {"zero_optimization.reduce_bucket_size: expected an integer >= 1, got 0"}, 1},
    {"HugeInteger", R"({"train_batch_size": 1e300})", {"train_batch_size: integer 1e+300 does not fit in 64 bits"}, 1},
    {"MoeTopKAboveExperts", R"({"train_batch_size": 8, "moe": {"num_experts": 4, "top_k": 6}})",
     {"moe.top_k: is 6, more than num_experts (4)"}, 1},
    {"MoeExpertsDoNotSplit", R"({"train_batch_size": 8, "moe": {"num_experts": 6, "expert_parallel_size": 4}})",
     {"moe.expert_parallel_size: is 4, which does not divide num_experts (6)"}, 1},
    {"MoeDropPolicyWhileDropless", R"({"train_batch_size": 8, "moe": {"drop_policy": "position"}})",
     {"moe.drop_policy: is given but nothing is dropped"}, 1},
    {"MoeUnknownKey", R"({"train_batch_size": 8, "moe": {"aux_loss_coef": 0.01, "load_balancing": "sinkhorn"}})",
     {"moe.aux_loss_coef: unknown key (did you mean 'aux_loss_coeff'?)", "moe.load_balancing"}, 2},
    {"ContextParallelHybridWithoutUlyssesSize",
     R"({"train_batch_size": 8, "context_parallel": {"size": 4, "method": "hybrid"}})",
     {"context_parallel.ulysses_size: is missing: method \"hybrid\" runs Ulysses over ulysses_size ranks"}, 1},
    {"ContextParallelUlyssesSizeAgainstMethod",
     R"({"train_batch_size": 8, "context_parallel": {"size": 4, "method": "ring", "ulysses_size": 2}})",
     {"context_parallel.ulysses_size: is 2 but method \"ring\" runs Ulysses over 1 ranks"}, 1},
    {"ContextParallelUnknownMethod", R"({"train_batch_size": 8, "context_parallel": {"size": 2, "method": "zigzag"}})",
     {"context_parallel.method"}, 1},
    {"ManyProblemsAtOnce",
     R"({"train_batch_size": "auto", "zero_optimization": {"stage": 4, "overlap_com": true},
         "fp16": {"enabled": true, "loss_scale_windw": 100}, "bf16": {"enabled": "yes"},
         "optimizer": {"type": "OneBitLamb"}, "wall_clock_breakdwn": true})",
     {"train_batch_size: \"auto\"", "zero_optimization.stage: expected 0..3, got 4",
      "zero_optimization.overlap_com: unknown key (did you mean 'overlap_comm'?)",
      "fp16.loss_scale_windw: unknown key (did you mean 'loss_scale_window'?)", "bf16.enabled: expected true or false",
      "optimizer.type: DeepSpeed optimizer \"OneBitLamb\"", "wall_clock_breakdwn: unknown key (did you mean 'wall_clock_breakdown'?)"},
     7},
};

INSTANTIATE_TEST_SUITE_P(Cases, ConfigInvalid, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<InvalidCase>& info) { return std::string(info.param.name); });

TEST(ConfigInvalidTopLevel, NotAnObject) {
  EXPECT_THROW(Config::from_string("[1, 2]", "list.json"), ConfigError);
  try {
    Config::from_string("42", "num.json");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("num.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("must be a JSON object"), std::string::npos);
  }
}

}  // namespace
