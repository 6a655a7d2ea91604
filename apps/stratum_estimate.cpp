// stratum-estimate: memory per GPU (and per node on the CPU) for every ZeRO
// stage and offload choice, plus activations, before a run. Like DeepSpeed's
// estimate_zero{2,3}_model_states_mem_needs_all_live, with activations added.
//
//   stratum-estimate --params 7.5e9 --num_nodes 8 --num_gpus 8
//   stratum-estimate --model llama-8b --num_gpus 2 --micro-batch 1 --seq 8192 --checkpointing
#include <CLI/CLI.hpp>

#include <iostream>

#include "stratum/core/error.h"
#include "stratum/models/model_config.h"
#include "stratum/monitor/memory_estimator.h"

int main(int argc, char** argv) {
  CLI::App app{"Estimate memory per device for every ZeRO stage and offload choice"};
  double params = 0;
  std::string model;
  std::vector<std::string> overrides;
  double largest_layer = 0;
  stratum::monitor::EstimateInput in;
  bool fp32 = false;
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
    if (!model.empty()) {
      std::vector<std::pair<std::string, std::string>> kv;
      for (const auto& s : overrides) kv.push_back(stratum::models::parse_override(s));
      stratum::monitor::set_model_shape(in, stratum::models::make_model_config(model, kv));
    } else {
      in.params = static_cast<int64_t>(params);
      in.largest_layer_params = static_cast<int64_t>(largest_layer);
    }
    in.param_bytes = fp32 ? 4 : 2;
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
