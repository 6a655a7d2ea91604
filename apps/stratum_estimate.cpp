// stratum-estimate: memory per GPU (and per node on the CPU) for every ZeRO
// stage and offload choice, plus activations, before a run. Like DeepSpeed's
// estimate_zero{2,3}_model_states_mem_needs_all_live, with activations added;
// with --pp, per pipeline stage.
//
//   stratum-estimate --params 7.5e9 --num_nodes 8 --num_gpus 8
//   stratum-estimate --model llama-8b --num_gpus 2 --micro-batch 1 --seq 8192 --checkpointing
//   stratum-estimate --model gpt2-1.3b --num_gpus 8 --pp 4 --micro-batches 8
//   stratum-estimate --model llama-8b --num_gpus 8 --tp 4 --sequence-parallel --seq 8192
#include <CLI/CLI.hpp>

#include <iostream>
#include <map>

#include "stratum/core/error.h"
#include "stratum/models/model_config.h"
#include "stratum/models/tensor_parallel_plan.h"
#include "stratum/monitor/memory_estimator.h"

int main(int argc, char** argv) {
  CLI::App app{"Estimate memory per device for every ZeRO stage and offload choice"};
  double params = 0;
  std::string model;
  std::vector<std::string> overrides;
  double largest_layer = 0;
  stratum::monitor::EstimateInput in;
  bool fp32 = false;
  int zero = 1;
  std::string schedule = "1f1b";
  const std::map<std::string, stratum::pipeline::ScheduleKind> schedules = {
      {"gpipe", stratum::pipeline::ScheduleKind::gpipe},
      {"1f1b", stratum::pipeline::ScheduleKind::one_f_one_b},
      {"interleaved", stratum::pipeline::ScheduleKind::interleaved},
      {"zb-h1", stratum::pipeline::ScheduleKind::zb_h1}};
  app.add_option("--params", params, "trainable parameters (e.g. 7.5e9), when not a --model preset")
      ->check(CLI::Range(1.0, 1e15));
  app.add_option("--model", model, "a built-in preset (its shape also gives activations)");
  app.add_option("--set", overrides, "override a preset dimension, e.g. --set layers=48");
  app.add_option("--largest-layer", largest_layer, "parameters of the largest layer (ZeRO-3 working set)")
      ->check(CLI::Range(0.0, 1e15));
  app.add_option("--num_nodes", in.nodes, "nodes")->check(CLI::Range(1, 100000));
  app.add_option("--num_gpus", in.gpus_per_node, "GPUs per node")->check(CLI::Range(1, 1024));
  app.add_option("--micro-batch", in.micro_batch, "micro-batch per GPU (activations)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--seq", in.seq_len, "sequence length (activations)")->check(CLI::Range(1, 1 << 24));
  app.add_flag("--checkpointing", in.activation_checkpointing, "activation checkpointing on");
  app.add_flag("--fp32", fp32, "fp32 training (default: bf16/fp16 with fp32 masters)");
  app.add_option("--pp", in.pipeline_stages, "pipeline stages (dividing the GPUs; needs --model)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--schedule", schedule, "pipeline schedule: gpipe, 1f1b (default), interleaved, zb-h1")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  auto* virtual_stages = app.add_option("--virtual-stages", in.virtual_stages,
                                        "model chunks per stage (interleaved; default 2 there, else 1)")
                             ->check(CLI::Range(1, 1 << 10));
  auto* micro_batches = app.add_option("--micro-batches", in.micro_batches,
                                       "micro-batches a step, gradient_accumulation_steps (default: --pp)")
                            ->check(CLI::Range(1, 1 << 20));
  app.add_option("--tp", in.tensor_parallel, "tensor-parallel size (dividing the GPUs of a node; needs --model)")
      ->check(CLI::Range(1, 1 << 10));
  app.add_flag("--sequence-parallel", in.sequence_parallel, "sequence parallelism with --tp");
  app.add_option("--zero", zero, "ZeRO stage of the per-stage table with --pp (0-2; default 1)")
      ->check(CLI::Range(0, 3));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "stratum-estimate: error: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (params > 0 && largest_layer > params) {
    std::cerr << "stratum-estimate: error: --largest-layer " << largest_layer << " is more than --params " << params
              << "\n";
    return 2;
  }
  try {
    if (model.empty() == (params <= 0)) throw stratum::Error("give exactly one of --params and --model");
    if (in.tensor_parallel > 1) {
      if (model.empty())
        throw stratum::Error("--tp " + std::to_string(in.tensor_parallel) +
                             " needs --model: tensor parallelism splits the model's heads and widths");
      if (in.gpus_per_node % in.tensor_parallel != 0)
        throw stratum::Error("--tp " + std::to_string(in.tensor_parallel) + " does not divide the " +
                             std::to_string(in.gpus_per_node) + " GPUs of a node (--num_gpus)");
    }
    if (in.sequence_parallel && in.tensor_parallel <= 1)
      throw stratum::Error("--sequence-parallel needs --tp > 1: it splits the sequence over tensor-parallel ranks");
    if (!model.empty()) {
      std::vector<std::pair<std::string, std::string>> kv;
      for (const auto& s : overrides) kv.push_back(stratum::models::parse_override(s));
      const stratum::models::ModelConfig mc = stratum::models::make_model_config(model, kv);
      stratum::models::validate_tensor_parallel(mc, in.tensor_parallel);
      stratum::monitor::set_model_shape(in, mc);
    } else {
      in.params = static_cast<int64_t>(params);
      in.largest_layer_params = static_cast<int64_t>(largest_layer);
    }
    in.param_bytes = fp32 ? 4 : 2;
    in.schedule = schedules.at(schedule);
    const bool interleaved = in.schedule == stratum::pipeline::ScheduleKind::interleaved;
    if (virtual_stages->count() == 0 && interleaved) in.virtual_stages = 2;
    if (micro_batches->count() == 0) in.micro_batches = in.pipeline_stages;  // enough for every schedule
    if (in.pipeline_stages > 1 || in.virtual_stages > 1 || interleaved) {
      if (model.empty())
        throw stratum::Error("--pp " + std::to_string(in.pipeline_stages) +
                             " needs --model: a pipeline splits the model's layers");
      std::cout << stratum::monitor::format_pipeline_estimate(in, zero);
      return 0;
    }
    std::cout << stratum::monitor::format_estimate(in);
    if (in.largest_layer_params == 0)
      std::cout << "  (ZeRO-3 working set not counted: give --largest-layer or --model)\n";
    if (in.layers == 0) std::cout << "  (activations not estimated: give --model for the shape)\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "stratum-estimate: error: " << e.what() << "\n";
    return 2;
  }
}
