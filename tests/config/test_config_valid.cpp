// Valid configs: defaults, the shapes DeepSpeed's own examples use, and the
// config our users start from.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "stratum/config/config.h"
#include "stratum/core/error.h"

using stratum::Config;
using namespace stratum::config;

namespace {
Config parse(const std::string& text) { return Config::from_string(text, "test.json"); }
}  // namespace

TEST(ConfigValid, MinimalConfigGetsDeepSpeedDefaults) {
  Config c = parse(R"({"train_batch_size": 8})");
  EXPECT_EQ(c.batch.train_batch_size, 8);
  EXPECT_FALSE(c.batch.train_micro_batch_size_per_gpu);
  EXPECT_FALSE(c.optimizer);
  EXPECT_FALSE(c.scheduler);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_DOUBLE_EQ(c.fp16.min_loss_scale, 1.0);
  EXPECT_TRUE(c.fp16.dynamic());
  EXPECT_FALSE(c.bf16.enabled);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.zero_optimization.stage, 0);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 500000000);
  EXPECT_FALSE(c.zero_optimization.overlap_comm);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(c.pipeline.stages, 1);
  EXPECT_EQ(c.tensor_parallel.size, 1);
  EXPECT_FALSE(c.comms_logger.enabled);
  EXPECT_TRUE(c.comms_logger.prof_all);
  EXPECT_EQ(c.precision(), DType::fp32);
  EXPECT_TRUE(c.notes.empty());
}

TEST(ConfigValid, TheConfigOurUsersStartFrom) {
  // With pipeline parallelism it composes ZeRO-2, which DeepSpeed refuses.
  Config c = parse(R"({"train_batch_size": 64, "gradient_accumulation_steps": 2,
      "fp16": {"enabled": true}, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}}, "pipeline": {"stages": 4,
      "partition_method": "parameters"}})");
  EXPECT_EQ(c.zero_optimization.stage, 2);
  EXPECT_EQ(c.zero_optimization.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_TRUE(c.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_EQ(c.pipeline.stages, 4);
  EXPECT_EQ(c.pipeline.partition_method, "parameters");
  EXPECT_EQ(c.precision(), DType::fp16);
  BatchSizes b = c.resolve_batch(8);
  EXPECT_EQ(b.data_parallel_size, 2);
  EXPECT_EQ(b.micro_batch_per_gpu, 16);
  EXPECT_EQ(b.gradient_accumulation_steps, 2);
}

// ZB-H1 composes with every ZeRO stage (stages 2 and 3 reduce when the window closes).
TEST(ConfigValid, ZeroBubbleScheduleWithEveryZeroStage) {
  for (int stage : {0, 1, 2, 3}) {
    Config c = parse(R"({"train_batch_size": 8, "pipeline": {"stages": 2, "schedule": "zb-h1"},
        "zero_optimization": {"stage": )" + std::to_string(stage) + "}}");
    EXPECT_EQ(c.pipeline.schedule, PipelineSchedule::zb_h1);
    EXPECT_EQ(static_cast<int>(c.zero_optimization.stage), stage);
  }
}

TEST(ConfigValid, IntegersWrittenAsFloats) {
  Config c = parse(R"({"train_batch_size": 3.2e1, "zero_optimization": {"stage": 3,
      "reduce_bucket_size": 5e8, "allgather_bucket_size": 2e8, "stage3_prefetch_bucket_size": 5e7,
      "stage3_param_persistence_threshold": 1e5, "stage3_max_live_parameters": 1e14,
      "stage3_max_reuse_distance": 20000000000000000, "sub_group_size": 1e9}})");
  EXPECT_EQ(c.batch.train_batch_size, 32);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero_optimization.stage3_max_reuse_distance, 20000000000000000);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 100000000000000);
  EXPECT_TRUE(c.zero_optimization.overlap_comm) << "DeepSpeed turns overlap_comm on by default at stage 3";
}

// DeepSpeedExamples' cifar / bing_bert shape: Adam + WarmupLR, fp16 with explicit scaler settings.
TEST(ConfigValid, CifarExampleShape) {
  Config c = parse(R"({
    "train_batch_size": 16, "steps_per_print": 2000,
    "optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.8, 0.999], "eps": 1e-8, "weight_decay": 3e-7}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.001, "warmup_num_steps": 1000}},
    "gradient_clipping": 1.0, "prescale_gradients": false,
    "fp16": {"enabled": true, "fp16_master_weights_and_grads": false, "loss_scale": 0, "loss_scale_window": 500,
             "hysteresis": 2, "min_loss_scale": 1, "initial_scale_power": 15},
    "wall_clock_breakdown": false,
    "zero_optimization": {"stage": 0, "allgather_partitions": true, "reduce_scatter": true,
      "allgather_bucket_size": 50000000, "reduce_bucket_size": 50000000, "overlap_comm": true,
      "contiguous_gradients": true, "cpu_offload": false}})");
  ASSERT_TRUE(c.optimizer);
  EXPECT_EQ(c.optimizer->type, OptimizerType::Adam);
  EXPECT_TRUE(c.optimizer->adam_w_mode) << "DeepSpeed's Adam is decoupled by default";
  EXPECT_DOUBLE_EQ(c.optimizer->beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer->weight_decay, 3e-7);
  ASSERT_TRUE(c.scheduler);
  const auto& w = std::get<WarmupLRParams>(*c.scheduler);
  EXPECT_DOUBLE_EQ(*w.warmup_max_lr, 0.001);
  EXPECT_EQ(w.warmup_num_steps, 1000);
  EXPECT_EQ(w.warmup_type, WarmupType::log);
  EXPECT_EQ(c.steps_per_print, 2000);
  EXPECT_EQ(c.fp16.initial_scale_power, 15);
  EXPECT_EQ(c.fp16.loss_scale_window, 500);
  EXPECT_EQ(c.zero_optimization.offload_optimizer.device, OffloadDevice::none);
  ASSERT_EQ(c.notes.size(), 2u);
  EXPECT_NE(c.notes[0].find("zero_optimization.allgather_bucket_size: Stratum all-gathers each reduce bucket"),
            std::string::npos) << c.notes[0];
  EXPECT_NE(c.notes[1].find("zero_optimization.cpu_offload: deprecated"), std::string::npos) << c.notes[1];
}

// Megatron-DeepSpeed's ds_config shape for GPT pretraining.
TEST(ConfigValid, MegatronDeepSpeedShape) {
  Config c = parse(R"({
    "train_batch_size": 256, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 10,
    "zero_optimization": {"stage": 1}, "gradient_clipping": 1.0, "prescale_gradients": false,
    "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2,
             "min_loss_scale": 1, "initial_scale_power": 11},
    "bf16": {"enabled": false}, "wall_clock_breakdown": false,
    "activation_checkpointing": {"partition_activations": false, "contiguous_memory_optimization": false,
                                 "cpu_checkpointing": false, "number_checkpoints": null,
                                 "synchronize_checkpoint_boundary": false, "profile": false}})");
  EXPECT_EQ(c.zero_optimization.stage, 1);
  BatchSizes b = c.resolve_batch(16);
  EXPECT_EQ(b.gradient_accumulation_steps, 4);
}

// Hugging Face's ds_config_zero3.json with its "auto" values replaced by numbers.
TEST(ConfigValid, HuggingFaceZero3Shape) {
  Config c = parse(R"({
    "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-5,
                  "warmup_num_steps": 500, "total_num_steps": 10000}},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "cpu", "pin_memory": true}, "overlap_comm": true, "contiguous_gradients": true,
      "sub_group_size": 1e9, "reduce_bucket_size": 16777216, "stage3_prefetch_bucket_size": 15099494,
      "stage3_param_persistence_threshold": 40960, "stage3_max_live_parameters": 1e9,
      "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": true},
    "gradient_accumulation_steps": 4, "gradient_clipping": 1.0, "steps_per_print": 2000,
    "train_batch_size": 128, "train_micro_batch_size_per_gpu": 4, "wall_clock_breakdown": false})");
  EXPECT_EQ(c.precision(), DType::bf16);
  EXPECT_EQ(c.zero_optimization.offload_param.device, OffloadDevice::cpu);
  EXPECT_TRUE(c.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 15099494);
  const auto& s = std::get<WarmupDecayLRParams>(*c.scheduler);
  EXPECT_EQ(s.total_num_steps, 10000);
  EXPECT_EQ(c.resolve_batch(8).data_parallel_size, 8);
}

// DeepSpeed's ZeRO-Offload tutorial shape (ZeRO-2 + cpu offload).
TEST(ConfigValid, ZeroOffloadTutorialShape) {
  Config c = parse(R"({"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2,
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": false},
                          "contiguous_gradients": true, "overlap_comm": true}, "fp16": {"enabled": true}})");
  EXPECT_FALSE(c.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_TRUE(c.zero_optimization.overlap_comm);
  EXPECT_EQ(c.resolve_batch(4).train_batch_size, 64);
}

// Stratum's overlap_param_gather (Megatron's name): stages 1/2 only.
TEST(ConfigValid, OverlapParamGather) {
  Config c = parse(R"({"train_batch_size": 4, "zero_optimization": {"stage": 2, "overlap_param_gather": true}})");
  EXPECT_TRUE(c.zero_optimization.overlap_param_gather);
  EXPECT_TRUE(c.notes.empty());
  EXPECT_FALSE(parse(R"({"train_batch_size": 4, "zero_optimization": {"stage": 1}})").zero_optimization.overlap_param_gather);
  Config s3 = parse(R"({"train_batch_size": 4, "zero_optimization": {"stage": 3, "overlap_param_gather": true}})");
  ASSERT_EQ(s3.notes.size(), 1u);
  EXPECT_NE(s3.notes[0].find("zero_optimization.overlap_param_gather"), std::string::npos) << s3.notes[0];
}

// DeepSpeed's sparse_gradients: the embedding's gradient as rows at stages 0-2.
TEST(ConfigValid, SparseGradients) {
  EXPECT_FALSE(parse(R"({"train_batch_size": 4})").sparse_gradients);
  Config c = parse(R"({"train_batch_size": 4, "sparse_gradients": true, "zero_optimization": {"stage": 1}})");
  EXPECT_TRUE(c.sparse_gradients);
  EXPECT_TRUE(c.notes.empty());
  Config s3 = parse(R"({"train_batch_size": 4, "sparse_gradients": true, "zero_optimization": {"stage": 3}})");
  ASSERT_EQ(s3.notes.size(), 1u);
  EXPECT_NE(s3.notes[0].find("sparse_gradients"), std::string::npos) << s3.notes[0];
}

TEST(ConfigValid, EverySchedulerWithItsParameters) {
  Config a = parse(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupCosineLR", "params": {
      "total_num_steps": 2000, "warmup_min_ratio": 0.1, "warmup_num_steps": 100, "cos_min_ratio": 0.01,
      "warmup_type": "linear"}}})");
  const auto& w = std::get<WarmupCosineLRParams>(*a.scheduler);
  EXPECT_EQ(w.total_num_steps, 2000);
  EXPECT_DOUBLE_EQ(w.warmup_min_ratio, 0.1);
  EXPECT_DOUBLE_EQ(w.cos_min_ratio, 0.01);
  EXPECT_EQ(w.warmup_type, WarmupType::linear);

  Config b = parse(R"({"train_batch_size": 1, "scheduler": {"type": "OneCycle", "params": {
      "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 1000, "cycle_momentum": true,
      "cycle_min_mom": 0.85, "cycle_max_mom": 0.99, "decay_lr_rate": 0.001, "decay_step_size": 100}}})");
  const auto& o = std::get<OneCycleParams>(*b.scheduler);
  EXPECT_DOUBLE_EQ(o.cycle_max_lr, 1e-3);
  EXPECT_EQ(o.cycle_first_step_size, 1000);
  EXPECT_FALSE(o.cycle_second_step_size);
  EXPECT_DOUBLE_EQ(o.cycle_min_mom, 0.85);

  Config c = parse(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupLR", "params": {}}})");
  const auto& l = std::get<WarmupLRParams>(*c.scheduler);
  EXPECT_FALSE(l.warmup_max_lr) << "unset: the optimizer's lr";
  EXPECT_EQ(l.warmup_num_steps, 1000);
}

TEST(ConfigValid, OptimizerTypeIsCaseInsensitiveLikeDeepSpeed) {
  Config c = parse(R"({"train_batch_size": 1, "optimizer": {"type": "adamw", "params": {"lr": 6e-4}}})");
  EXPECT_EQ(c.optimizer->type, OptimizerType::AdamW);
  EXPECT_DOUBLE_EQ(c.optimizer->lr, 6e-4);
  Config d = parse(R"({"train_batch_size": 1, "optimizer": {"type": "ADAM", "params": {"adam_w_mode": false}}})");
  EXPECT_EQ(d.optimizer->type, OptimizerType::Adam);
  EXPECT_FALSE(d.optimizer->adam_w_mode);
}

TEST(ConfigValid, DeprecatedSpellingsMapWithWarnings) {
  Config c = parse(R"({"train_batch_size": 1, "bfloat16": {"enabled": true},
      "zero_optimization": {"stage": 3, "cpu_offload": true, "cpu_offload_param": true,
                            "cpu_offload_use_pin_memory": false,
                            "stage3_gather_fp16_weights_on_model_save": true}})");
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.zero_optimization.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_EQ(c.zero_optimization.offload_param.device, OffloadDevice::cpu);
  EXPECT_FALSE(c.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_TRUE(c.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.notes.size(), 5u);
}

TEST(ConfigValid, Stage3KeysWithoutPrefixAreAliases) {
  Config c = parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
      "prefetch_bucket_size": 1234, "param_persistence_threshold": 10, "max_live_parameters": 99}})");
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 1234);
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 10);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 99);
}

TEST(ConfigValid, UnsupportedKeysAtDeepSpeedDefaultsAreAccepted) {
  Config c = parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2, "round_robin_gradients": false,
      "elastic_checkpoint": false, "zero_hpz_partition_size": 1, "use_multi_rank_bucket_allreduce": true},
      "sparse_gradients": false, "amp": {"enabled": false}, "flops_profiler": {"enabled": false},
      "tensorboard": {"enabled": false}, "wandb": {"enabled": false}})");
  EXPECT_EQ(c.zero_optimization.stage, 2);
}

TEST(ConfigValid, ParallelismAndDiagnosticsSections) {
  Config c = parse(R"({"train_micro_batch_size_per_gpu": 2,
      "pipeline": {"stages": 2, "partition_method": "type:TransformerBlock", "schedule": "interleaved",
                   "virtual_stages": 2},
      "tensor_parallel": {"autotp_size": 2, "sequence_parallel": true}, "topology": {"order": "pp-tp-dp"},
      "activation_checkpointing": {"number_checkpoints": 4, "cpu_checkpointing": true, "cpu_checkpointing_layers": 3},
      "comms_logger": {"enabled": true, "verbose": true, "prof_all": false, "prof_ops": ["all_reduce", "all_gather"],
                       "debug": true},
      "csv_monitor": {"enabled": true, "output_path": "logs/", "job_name": "run1"},
      "tensorboard": {"enabled": false, "output_path": "tb/"},
      "communication_data_type": "bf16", "bf16": {"enabled": true}, "gradient_predivide_factor": 2.0,
      "prescale_gradients": true})");
  EXPECT_EQ(c.pipeline.schedule, PipelineSchedule::interleaved);
  EXPECT_EQ(c.pipeline.virtual_stages, 2);
  EXPECT_EQ(c.tensor_parallel.size, 2);
  EXPECT_TRUE(c.tensor_parallel.sequence_parallel);
  EXPECT_EQ(c.topology.order, "pp-tp-dp");
  EXPECT_EQ(c.model_parallel_size(), 4);
  EXPECT_EQ(c.activation_checkpointing.number_checkpoints, 4);
  EXPECT_TRUE(c.activation_checkpointing.cpu_checkpointing);
  EXPECT_EQ(c.activation_checkpointing.cpu_checkpointing_layers, 3);
  EXPECT_EQ(c.comms_logger.prof_ops, (std::vector<std::string>{"all_reduce", "all_gather"}));
  EXPECT_TRUE(c.comms_logger.debug);
  EXPECT_TRUE(c.monitor.csv_monitor.enabled);
  EXPECT_EQ(c.monitor.csv_monitor.job_name, "run1");
  EXPECT_EQ(c.monitor.tensorboard.output_path, "tb/");
  EXPECT_EQ(c.communication_data_type, DType::bf16);
  EXPECT_DOUBLE_EQ(c.gradient_predivide_factor, 2.0);
  EXPECT_EQ(c.resolve_batch(8).train_batch_size, 4);  // dp = 8 / (2 x 2) = 2
}

TEST(ConfigValid, TensorParallelNestedSpelling) {
  Config c = parse(R"({"train_batch_size": 4, "tensor_parallel": {"tp": {"tp_size": 4}}})");
  EXPECT_EQ(c.tensor_parallel.size, 4);
}

TEST(ConfigValid, LegacyBooleanZeroOptimization) {
  Config c = parse(R"({"train_batch_size": 4, "zero_optimization": true})");
  EXPECT_EQ(c.zero_optimization.stage, 1);
  EXPECT_EQ(c.notes.size(), 1u);
}

TEST(ConfigValid, ResolvedJsonRoundTripsThroughTheParser) {
  Config c = parse(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2, "bf16": {"enabled": true},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
      "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-5, "cycle_max_lr": 1e-4}},
      "zero_optimization": {"stage": 2}})");
  nlohmann::json resolved = stratum::to_json(c, 4);
  EXPECT_EQ(resolved["train_micro_batch_size_per_gpu"], 4);
  Config again = Config::from_json(resolved, "resolved");
  EXPECT_EQ(stratum::to_json(again, 4), resolved);
}

// The "moe" section: its keys read, the defaults (dropless, the auxiliary
// loss at 1e-2, no expert parallelism) without it, and null capacity as dropless.
TEST(ConfigValid, MixtureOfExpertsSection) {
  Config none = parse(R"({"train_batch_size": 8})");
  EXPECT_FALSE(none.moe.present);
  EXPECT_EQ(none.moe.expert_parallel_size, 1);
  Config c = parse(R"({"train_batch_size": 8, "moe": {"num_experts": 8, "top_k": 2, "expert_parallel_size": 4,
      "capacity_factor": 1.25, "drop_policy": "position", "load_balancing": "seq_aux_loss", "aux_loss_coeff": 0.001,
      "z_loss_coeff": 0.0001, "expert_bias_update_rate": 0.001}})");
  EXPECT_TRUE(c.moe.present);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.expert_parallel_size, 4);
  EXPECT_DOUBLE_EQ(c.moe.capacity_factor, 1.25);
  EXPECT_EQ(c.moe.drop_policy, "position");
  EXPECT_EQ(c.moe.load_balancing, "seq_aux_loss");
  EXPECT_DOUBLE_EQ(c.moe.aux_loss_coeff, 0.001);
  EXPECT_DOUBLE_EQ(c.moe.z_loss_coeff, 0.0001);
  EXPECT_DOUBLE_EQ(c.moe.expert_bias_update_rate, 0.001);
  Config dropless = parse(R"({"train_batch_size": 8, "moe": {"capacity_factor": null}})");
  EXPECT_DOUBLE_EQ(dropless.moe.capacity_factor, 0.0);
  EXPECT_DOUBLE_EQ(dropless.moe.aux_loss_coeff, 1e-2);
}

// The "context_parallel" section: off without it; the Ulysses size each method
// implies; hybrid's own; the batch counting data replicas (world / (stages x
// tensor-parallel x context-parallel)); the resolved config read back alike.
TEST(ConfigValid, ContextParallelSection) {
  Config none = parse(R"({"train_batch_size": 8})");
  EXPECT_EQ(none.context_parallel.size, 1);
  Config ulysses = parse(R"({"train_batch_size": 8, "context_parallel": {"size": 4, "method": "ulysses"}})");
  EXPECT_EQ(ulysses.context_parallel.ulysses_size, 4);
  Config ring = parse(R"({"train_batch_size": 8, "context_parallel": {"size": 4}})");
  EXPECT_EQ(ring.context_parallel.method, "ring");
  EXPECT_EQ(ring.context_parallel.ulysses_size, 1);
  Config hybrid = parse(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2},
      "context_parallel": {"size": 4, "method": "hybrid", "ulysses_size": 2}})");
  EXPECT_EQ(hybrid.context_parallel.ulysses_size, 2);
  EXPECT_EQ(hybrid.model_parallel_size(), 8);
  EXPECT_EQ(hybrid.resolve_batch(16).train_batch_size, 8);
  EXPECT_EQ(hybrid.resolve_batch(16).micro_batch_per_gpu, 4);  // 2 data replicas
  nlohmann::json resolved = stratum::to_json(hybrid, 16);
  EXPECT_EQ(resolved["context_parallel"]["ulysses_size"], 2);
  EXPECT_EQ(stratum::to_json(Config::from_json(resolved, "resolved"), 16), resolved);
}

// "checkpoint": {"async": true} (Stratum's key in DeepSpeed's section): off by
// default, reported in the resolved config; a misspelt key stays an error.
TEST(ConfigValid, AsyncCheckpointsAreAKeyOfTheCheckpointSection) {
  EXPECT_FALSE(parse(R"({"train_batch_size": 8})").checkpoint.async);
  EXPECT_EQ(stratum::to_json(parse(R"({"train_batch_size": 8})"), 1)["checkpoint"]["async"], false);
  Config c = parse(R"({"train_batch_size": 8, "checkpoint": {"async": true, "tag_validation": "Warn"}})");
  EXPECT_TRUE(c.checkpoint.async);
  EXPECT_EQ(stratum::to_json(c, 1)["checkpoint"]["async"], true);
  try {
    parse(R"({"train_batch_size": 8, "checkpoint": {"asynchronous": true}})");
    ADD_FAILURE() << "an unknown key of the checkpoint section was accepted";
  } catch (const stratum::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.asynchronous"), std::string::npos) << e.what();
  }
  try {
    parse(R"({"train_batch_size": 8, "checkpoint": {"async": "yes"}})");
    ADD_FAILURE() << "a string for checkpoint.async was accepted";
  } catch (const stratum::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.async"), std::string::npos) << e.what();
  }
}
