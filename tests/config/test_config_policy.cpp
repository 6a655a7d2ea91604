// The four classes of docs/config_policy.md: errors, keys accepted with a note,
// implemented options, DeepSpeed features refused by name.
#include <gtest/gtest.h>

#include <algorithm>

#include "stratum/config/config.h"
#include "stratum/core/error.h"

using stratum::Config;
using stratum::ConfigError;
using namespace stratum::config;

namespace {

Config parse(const std::string& text) { return Config::from_string(text, "test.json"); }

// Every problem of a config that must fail, as one string (and its notes).
std::string errors_of(const std::string& text, std::vector<std::string>* notes = nullptr) {
  try {
    parse(text);
  } catch (const ConfigError& e) {
    if (notes) *notes = e.notes();
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

bool has_note(const Config& c, const std::string& prefix) {
  return std::any_of(c.notes.begin(), c.notes.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
}

std::string all_notes(const Config& c) {
  std::string s;
  for (const auto& n : c.notes) s += n + "\n";
  return s;
}

}  // namespace

TEST(ConfigPolicy, PermissionsAndBehaviourStratumHasAreAcceptedWithANote) {
  Config c = parse(R"({"train_batch_size": 8, "zero_allow_untested_optimizer": true,
      "zero_force_ds_cpu_optimizer": false, "disable_allgather": true, "dataloader_drop_last": true,
      "memory_breakdown": true, "load_universal_checkpoint": true,
      "zero_optimization": {"stage": 2, "elastic_checkpoint": true, "round_robin_gradients": true,
                            "contiguous_gradients": false, "allgather_partitions": false,
                            "allgather_bucket_size": 2e8, "sub_group_size": 0}})");
  for (const char* key : {"zero_allow_untested_optimizer: no permission needed", "zero_force_ds_cpu_optimizer:",
                          "disable_allgather:", "dataloader_drop_last:", "memory_breakdown:",
                          "load_universal_checkpoint:", "zero_optimization.elastic_checkpoint:",
                          "zero_optimization.round_robin_gradients:", "zero_optimization.contiguous_gradients:",
                          "zero_optimization.allgather_partitions:", "zero_optimization.allgather_bucket_size:",
                          "zero_optimization.sub_group_size:"})
    EXPECT_TRUE(has_note(c, key)) << key << " in\n" << all_notes(c);
  EXPECT_EQ(c.notes.size(), 12u) << all_notes(c);
}

TEST(ConfigPolicy, KeysDeepSpeedIgnoresAreNotedAndChangeNothing) {
  Config c = parse(R"({"train_batch_size": 8,
      "fp16": {"enabled": true, "opt_level": "O2", "fp16_scale_tolerance": 0.25, "auto_cast": true},
      "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu", "pin_memory": true},
                            "offload_optimizer": {"device": "cpu", "nvme_path": "/nvme", "buffer_count": 8,
                                                  "fast_init": false}},
      "aio": {"block_size": 1048576}, "timers": {"throughput": {"enabled": true}}})");
  for (const char* key : {"fp16.opt_level:", "fp16.fp16_scale_tolerance:", "fp16.auto_cast:",
                          "zero_optimization.offload_param: applies at ZeRO stage 3 only",
                          "zero_optimization.offload_optimizer.nvme_path: used only by NVMe offload",
                          "zero_optimization.offload_optimizer.buffer_count:", "aio:", "timers:"})
    EXPECT_TRUE(has_note(c, key)) << key << " in\n" << all_notes(c);
  EXPECT_FALSE(has_note(c, "zero_optimization.offload_optimizer.fast_init")) << "false is DeepSpeed's default";
  EXPECT_EQ(c.zero_optimization.offload_param.device, OffloadDevice::none) << "ignored below stage 3, as in DeepSpeed";
  EXPECT_EQ(c.zero_optimization.offload_optimizer.device, OffloadDevice::cpu);
}

TEST(ConfigPolicy, LossScaleKeysInsideBf16AreNoted) {
  Config c = parse(R"({"train_batch_size": 8, "bf16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16,
      "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}})");
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.notes.size(), 5u) << all_notes(c);
  EXPECT_TRUE(has_note(c, "bf16.hysteresis: bf16 needs no loss scaling"));
}

TEST(ConfigPolicy, DeepSpeedDefaultsNeedNoNote) {
  Config c = parse(R"({"train_batch_size": 8, "zero_allow_untested_optimizer": false, "disable_allgather": false,
      "zero_optimization": {"stage": 3, "contiguous_gradients": true, "allgather_partitions": true,
                            "allgather_bucket_size": 500000000, "sub_group_size": 1e9, "elastic_checkpoint": false,
                            "offload_param": {"device": "cpu"}}})");
  EXPECT_TRUE(c.notes.empty()) << all_notes(c);
  EXPECT_EQ(c.zero_optimization.offload_param.device, OffloadDevice::cpu);
}

TEST(ConfigPolicy, SwitchedOffFeatureSectionsAreAcceptedAtAnyDepth) {
  Config c = parse(R"({"train_batch_size": 8,
      "compression_training": {"weight_quantization": {"shared_parameters": {"enabled": false, "quantizer_kernel": false},
                                                       "different_groups": {"wq1": {"params": {"start_bits": 8}}}},
                               "activation_quantization": {"shared_parameters": {"enabled": false}}},
      "hybrid_engine": {"enabled": false, "max_out_tokens": 512},
      "data_efficiency": {"enabled": false, "data_sampling": {"enabled": false}},
      "flops_profiler": {"enabled": false}, "wandb": {"enabled": false}, "amp": {"enabled": false}})");
  EXPECT_TRUE(c.notes.empty()) << all_notes(c);
}

TEST(ConfigPolicy, FeaturesStratumDoesNotHaveAreRefusedByName) {
  const std::string e = errors_of(R"({"train_batch_size": 8,
      "compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true}}},
      "sparse_attention": {"mode": "fixed"}, "amp": {"enabled": true, "opt_level": "O1"},
      "wandb": {"enabled": true},
      "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme"},
                            "zero_quantized_weights": true},
      "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-3, "freeze_step": 100, "cuda_aware": false}}})");
  for (const char* s : {"compression_training: DeepSpeed feature 'compression training'",
                        "sparse_attention: DeepSpeed feature 'sparse attention'", "amp: DeepSpeed feature 'NVIDIA Apex AMP",
                        "wandb: DeepSpeed feature 'Weights & Biases monitor'",
                        "offload_param.device: NVMe offload (ZeRO-Infinity) is not supported",
                        "zero_optimization.zero_quantized_weights: DeepSpeed option not supported",
                        "optimizer.type: DeepSpeed optimizer \"OneBitAdam\" is not supported"})
    EXPECT_NE(e.find(s), std::string::npos) << s << " in\n" << e;
  EXPECT_EQ(e.find("freeze_step"), std::string::npos) << "a refused optimizer's own parameters are not listed too:\n" << e;
}

TEST(ConfigPolicy, AutoOnANotedKeyIsReportedOnce) {
  const std::string e = errors_of(R"({"train_batch_size": 8, "zero_optimization": {"allgather_bucket_size": "auto"}})");
  EXPECT_NE(e.find("1 problem"), std::string::npos) << e;
  EXPECT_NE(e.find("zero_optimization.allgather_bucket_size: \"auto\""), std::string::npos) << e;
}

TEST(ConfigPolicy, UnderscoreKeysAreCommentsAndNoted) {
  Config c = parse(R"({"train_batch_size": 8, "_comment": "ZeRO-2 for 8 GPUs", "_note": {"x": 1}})");
  EXPECT_TRUE(has_note(c, "_comment: a comment")) << all_notes(c);
  EXPECT_TRUE(has_note(c, "_note: a comment")) << all_notes(c);
}

TEST(ConfigPolicy, UnknownKeysStayErrorsWithDidYouMean) {
  const std::string e = errors_of(R"({"train_batch_size": 8, "gradient_clippin": 1.0,
      "zero_optimization": {"stage": 3, "stage3_param_persitence_threshold": 1e4}})");
  EXPECT_NE(e.find("gradient_clippin: unknown key (did you mean 'gradient_clipping'?)"), std::string::npos) << e;
  EXPECT_NE(e.find("stage3_param_persitence_threshold: unknown key (did you mean 'stage3_param_persistence_threshold'?)"),
            std::string::npos) << e;
}

TEST(ConfigPolicy, NotesTravelWithTheErrorsApartFromThem) {
  std::vector<std::string> notes;
  const std::string e = errors_of(R"({"train_batch_size": 8, "zero_allow_untested_optimizer": true, "stage": 2})", &notes);
  EXPECT_NE(e.find("stage: not a top-level key"), std::string::npos) << e;
  EXPECT_EQ(e.find("zero_allow_untested_optimizer"), std::string::npos) << "notes are not problems:\n" << e;
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("zero_allow_untested_optimizer: ", 0), 0u) << notes[0];
}

TEST(ConfigPolicy, PartitionActivationsIsNotedWithoutTensorParallelismAndRefusedWithIt) {
  Config c = parse(R"({"train_batch_size": 8, "activation_checkpointing": {"partition_activations": true,
      "contiguous_memory_optimization": true, "synchronize_checkpoint_boundary": true, "profile": true,
      "number_checkpoints": 2}})");
  EXPECT_TRUE(has_note(c, "activation_checkpointing.partition_activations: partitions checkpointed activations"))
      << all_notes(c);
  EXPECT_TRUE(c.activation_checkpointing.contiguous_memory_optimization);
  EXPECT_TRUE(c.activation_checkpointing.synchronize_checkpoint_boundary);
  EXPECT_TRUE(c.activation_checkpointing.profile);
  const std::string e = errors_of(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2},
      "activation_checkpointing": {"partition_activations": true}})");
  EXPECT_NE(e.find("partition_activations: DeepSpeed option not supported"), std::string::npos) << e;
}

TEST(ConfigPolicy, Fp32AllreduceIsCommunicationDataTypeFp32) {
  Config c = parse(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "fp32_allreduce": true})");
  ASSERT_TRUE(c.communication_data_type);
  EXPECT_EQ(*c.communication_data_type, DType::fp32);
  const std::string e = errors_of(R"({"train_batch_size": 8, "fp32_allreduce": true, "communication_data_type": "bf16"})");
  EXPECT_NE(e.find("fp32_allreduce: true contradicts communication_data_type \"bf16\""), std::string::npos) << e;
  c = parse(R"({"train_batch_size": 8, "data_types": {"grad_accum_dtype": "fp32"}})");
  EXPECT_TRUE(c.grad_accum_fp32);
  const std::string narrow = errors_of(R"({"train_batch_size": 8, "data_types": {"grad_accum_dtype": "bf16"}})");
  EXPECT_NE(narrow.find("data_types.grad_accum_dtype: \"bf16\" is not supported"), std::string::npos) << narrow;
}

TEST(ConfigPolicy, CheckpointSectionIsReadAndNodeLocalStorageRefused) {
  Config c = parse(R"({"train_batch_size": 8, "checkpoint": {"tag_validation": "Fail", "load_universal": false,
      "parallel_write": {"pipeline_stage": true}}})");
  EXPECT_TRUE(has_note(c, "checkpoint.tag_validation:")) << all_notes(c);
  EXPECT_TRUE(has_note(c, "checkpoint.parallel_write.pipeline_stage:")) << all_notes(c);
  std::string e = errors_of(R"({"train_batch_size": 8, "checkpoint": {"use_node_local_storage": true}})");
  EXPECT_NE(e.find("checkpoint.use_node_local_storage: DeepSpeed option not supported"), std::string::npos) << e;
  e = errors_of(R"({"train_batch_size": 8, "checkpoint": {"tag_validation": "Sometimes"}})");
  EXPECT_NE(e.find("checkpoint.tag_validation: expected one of Ignore, Warn, Fail"), std::string::npos) << e;
}
