// stratum-estimate: memory per GPU (and per node on the CPU) for every ZeRO
// stage and offload choice, plus activations, before a run. Like DeepSpeed's
// estimate_zero{2,3}_model_states_mem_needs_all_live, with activations added;
// with --pp, per pipeline stage; with --cp, for a GPU's part of each sequence.
// With --plan, every layout (dp x pp x tp, expert and context parallelism,
// ZeRO, offload, micro-batch, schedule, checkpointing) the cluster can run,
// those that fit ranked by an estimated step time (planning/layout_planner.h).
//
//   stratum-estimate --params 7.5e9 --num_nodes 8 --num_gpus 8
//   stratum-estimate --model llama-8b --num_gpus 2 --micro-batch 1 --seq 8192 --checkpointing
//   stratum-estimate --model gpt2-1.3b --num_gpus 8 --pp 4 --micro-batches 8
//   stratum-estimate --model llama-8b --num_gpus 8 --tp 4 --sequence-parallel --seq 8192
//   stratum-estimate --model llama-8b --num_gpus 8 --cp 8 --cp-method ring --seq 131072 --checkpointing
//   stratum-estimate --model llama-8b --seq 262144 --checkpointing --cpu-checkpointing \
//     --set tiled_mlp_tokens=8192 --set tiled_loss_tokens=8192
//   stratum-estimate --model llama-8b --longest --gpu h200 --host-memory 128GiB --checkpointing \
//     --cpu-checkpointing --set tiled_mlp_tokens=8192 --set tiled_loss_tokens=8192
//   stratum-estimate --plan --model llama-8b --num_gpus 8 --gpu h200 --seq 131072 --global-batch 8
//   stratum-estimate --plan --model gpt3-175b --nodes 8 --gpus-per-node 8 --gpu a100-80gb --seq 2048 --global-batch 1536
#include <CLI/CLI.hpp>

#include <iostream>
#include <map>
#include <optional>

#include "stratum/core/error.h"
#include "stratum/models/model_config.h"
#include "stratum/models/tensor_parallel_plan.h"
#include "stratum/planning/layout_planner.h"
#include "stratum/planning/memory_estimator.h"
#include "stratum/planning/plan_config.h"

int main(int argc, char** argv) {
  CLI::App app{"Estimate memory per device for every ZeRO stage and offload choice"};
  double params = 0;
  std::string model;
  std::vector<std::string> overrides;
  double largest_layer = 0;
  stratum::planning::EstimateInput in;
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
  app.add_option("--num_nodes,--nodes", in.nodes, "nodes")->check(CLI::Range(1, 100000));
  app.add_option("--num_gpus,--gpus-per-node", in.gpus_per_node, "GPUs per node")->check(CLI::Range(1, 1024));
  auto* micro_batch =
      app.add_option("--micro-batch", in.micro_batch, "micro-batch per GPU (activations)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--seq", in.seq_len, "sequence length (activations)")->check(CLI::Range(1, 1 << 24));
  auto* checkpointing = app.add_flag("--checkpointing", in.activation_checkpointing, "activation checkpointing on");
  auto* cpu_checkpointing =
      app.add_flag("--cpu-checkpointing", in.cpu_checkpointing,
                   "with --checkpointing: the checkpointed inputs in pinned host memory (cpu_checkpointing)");
  int64_t host_blocks = 0;
  auto* host_blocks_opt =
      app.add_option("--cpu-checkpointing-layers", host_blocks,
                     "with --cpu-checkpointing: only the first N blocks' inputs on the host, the rest on the GPU "
                     "(cpu_checkpointing_layers; --longest chooses the fewest that fit when not given)")
          ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  auto* fp32_flag = app.add_flag("--fp32", fp32, "fp32 training (default: bf16/fp16 with fp32 masters)");
  app.add_flag("--fp8", in.fp8,
               "the projections' GEMMs in FP8 (the config's fp8 section; bf16): their weights' FP8 copies, W and its "
               "transpose, kept at ZeRO 0-2 (needs --model)");
  auto* pp = app.add_option("--pp", in.pipeline_stages, "pipeline stages (dividing the GPUs; needs --model)")
                 ->check(CLI::Range(1, 1 << 16));
  auto* schedule_opt = app.add_option("--schedule", schedule, "pipeline schedule: gpipe, 1f1b (default), interleaved, zb-h1")
                           ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  auto* virtual_stages = app.add_option("--virtual-stages", in.virtual_stages,
                                        "model chunks per stage (interleaved; default 2 there, else 1)")
                             ->check(CLI::Range(1, 1 << 10));
  auto* micro_batches = app.add_option("--micro-batches", in.micro_batches,
                                       "micro-batches a step, gradient_accumulation_steps (default: --pp)")
                            ->check(CLI::Range(1, 1 << 20));
  auto* tp = app.add_option("--tp", in.tensor_parallel, "tensor-parallel size (dividing the GPUs of a node; needs --model)")
                 ->check(CLI::Range(1, 1 << 10));
  auto* sequence_parallel = app.add_flag("--sequence-parallel", in.sequence_parallel, "sequence parallelism with --tp");
  auto* ep = app.add_option("--ep", in.expert_parallel,
                            "expert-parallel size: a mixture of experts' experts over this many of the data-parallel "
                            "GPUs (needs a mixture-of-experts --model)")
                 ->check(CLI::Range(1, 1 << 16));
  std::string cp_method = "ring";
  int64_t cp_ulysses = 1;
  auto* cp = app.add_option("--cp", in.context_parallel,
                            "context-parallel size: each sequence split over this many of the data-parallel GPUs "
                            "(needs --model)")
                 ->check(CLI::Range(1, 1 << 16));
  auto* cp_method_opt = app.add_option("--cp-method", cp_method,
                                       "context parallelism's attention: ring (default), ulysses, hybrid (Ulysses "
                                       "over --cp-ulysses GPUs inside each ring rank)")
                            ->check(CLI::IsMember({"ulysses", "ring", "hybrid"}));
  auto* cp_ulysses_opt = app.add_option("--cp-ulysses", cp_ulysses,
                                        "hybrid: the Ulysses size inside each ring rank (dividing --cp)")
                             ->check(CLI::Range(1, 1 << 16));
  auto* zero_opt = app.add_option("--zero", zero, "ZeRO stage of the per-stage table with --pp (0-3; default 1)")
                       ->check(CLI::Range(0, 3));
  // The layout planner; with --plan the layout flags above (--pp, --tp, --zero,
  // --micro-batch, --micro-batches, --schedule, --virtual-stages,
  // --checkpointing, --sequence-parallel, --ep, --cp, --cp-method, --cp-ulysses)
  // fix that choice instead of setting it.
  bool plan = false;
  std::string gpu = "a100-80gb", gpu_memory, host_memory, config_path, offload;
  int64_t global_batch = 0;
  size_t rows = 10;
  double peak_tflops = 0, mfu = 0, node_gbps = 0, network_gbps = 0, host_link_gbps = 0, host_updates = 0, margin = -1;
  bool longest = false;
  app.add_flag("--plan", plan,
               "list the layouts that fit, fastest first (needs --global-batch or a config's train_batch_size)");
  app.add_flag("--longest", longest,
               "the longest sequence each ZeRO stage and offload choice fits in (--gpu or --gpu-memory, "
               "--host-memory, --memory-margin; needs --model)");
  // The planner's own options: refused without --plan rather than ignored
  // (the memory ones also serve --longest).
  std::vector<CLI::Option*> plan_only, plan_or_longest;
  auto plan_option = [&](const char* name, auto& value, const std::string& help) {
    CLI::Option* o = app.add_option(name, value, "--plan: " + help);
    plan_only.push_back(o);
    return o;
  };
  auto memory_option = [&](const char* name, auto& value, const std::string& help) {
    CLI::Option* o = app.add_option(name, value, "--plan, --longest: " + help);
    plan_or_longest.push_back(o);
    return o;
  };
  memory_option("--gpu", gpu, "the GPU's figures: a100-40gb, a100-80gb (default), h100, h200")
      ->check(CLI::IsMember(stratum::planning::hardware_names()));
  memory_option("--gpu-memory", gpu_memory, "memory a GPU, e.g. 80GiB (default: --gpu's)");
  memory_option("--host-memory", host_memory, "host memory a node for offloaded states, e.g. 1TiB (default: not checked)");
  plan_option("--global-batch", global_batch, "sequences a step (train_batch_size)")->check(CLI::Range(1, 1 << 30));
  plan_option("--config", config_path,
              "a ds_config.json; it fixes what it says (precision, gradient dtype, stage, offload, batch, pipeline, "
              "tensor parallelism, context parallelism, checkpointing)");
  plan_option("--offload", offload, "fix the offload: none, optimizer, optimizer+param")
      ->check(CLI::IsMember({"none", "optimizer", "optimizer+param"}));
  plan_option("--peak-tflops", peak_tflops, "dense 16-bit TFLOP/s a GPU (default: --gpu's)")
      ->check(CLI::Range(0.001, 1e6));
  plan_option("--mfu", mfu, "model FLOPs utilization of the compute (default 0.58, measured: gpt2-1.3b on an H200)")
      ->check(CLI::Range(0.01, 1.0));
  plan_option("--node-bandwidth", node_gbps, "collective bus bandwidth in a node, GB/s (default: --gpu's)")
      ->check(CLI::Range(0.001, 1e5));
  plan_option("--network-bandwidth", network_gbps, "bandwidth a GPU across nodes, GB/s (default: --gpu's)")
      ->check(CLI::Range(0.001, 1e5));
  plan_option("--host-link-bandwidth", host_link_gbps, "GPU-host bandwidth, GB/s (default: --gpu's)")
      ->check(CLI::Range(0.001, 1e5));
  plan_option("--host-updates", host_updates, "host optimizer parameter updates a second a node (default 1e10)")
      ->check(CLI::Range(1.0, 1e15));
  memory_option("--memory-margin", margin, "fraction of GPU memory kept free of the estimate (default 0.10)")
      ->check(CLI::Range(0.0, 0.9));
  plan_option("--rows", rows, "layouts listed (default 10)")->check(CLI::Range(1, 100000));
  bool no_checkpointing = false;
  plan_only.push_back(app.add_flag("--no-checkpointing", no_checkpointing, "--plan: fix activation checkpointing off"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "stratum-estimate: error: " << e.what() << " (see --help)\n";
    return 2;
  }
  for (const CLI::Option* o : plan_only)
    if (!plan && o->count()) {
      std::cerr << "stratum-estimate: error: " << o->get_name() << " needs --plan (it sets the layout planner's input)\n";
      return 2;
    }
  for (const CLI::Option* o : plan_or_longest)
    if (!plan && !longest && o->count()) {
      std::cerr << "stratum-estimate: error: " << o->get_name() << " needs --plan or --longest\n";
      return 2;
    }
  if (plan && longest) {
    std::cerr << "stratum-estimate: error: --plan and --longest: give one\n";
    return 2;
  }
  if (params > 0 && largest_layer > params) {
    std::cerr << "stratum-estimate: error: --largest-layer " << largest_layer << " is more than --params " << params
              << "\n";
    return 2;
  }
  try {
    if (model.empty() == (params <= 0)) throw stratum::Error("give exactly one of --params and --model");
    if (cpu_checkpointing->count() && !plan && !in.activation_checkpointing)
      throw stratum::Error("--cpu-checkpointing keeps the checkpointed inputs on the host: it needs --checkpointing");
    if (host_blocks_opt->count() && !cpu_checkpointing->count())
      throw stratum::Error("--cpu-checkpointing-layers counts the blocks whose inputs go to the host: it needs "
                           "--cpu-checkpointing");
    if (host_blocks_opt->count()) in.host_checkpoint_blocks = host_blocks;
    std::optional<stratum::models::ModelConfig> mc;
    if (!model.empty()) {
      std::vector<std::pair<std::string, std::string>> kv;
      for (const auto& s : overrides) kv.push_back(stratum::models::parse_override(s));
      mc = stratum::models::make_model_config(model, kv);
    }
    // FP8 where the config check or the engine refuses it (models/float8_layers.h).
    auto refuse_fp8_model = [&](const std::string& what) {
      if (mc->is_moe())
        throw stratum::Error(what + " with " + model + ": FP8 projections do not run in a mixture of experts");
      if (mc->tiled_mlp_tokens > 0 || mc->recompute_mlp_activation)
        throw stratum::Error(what + " with tiled_mlp_tokens or recompute_mlp_activation: FP8 MLPs with those are "
                             "not built");
    };
    if (in.fp8) {
      if (!mc) throw stratum::Error("--fp8 needs --model: the FP8 weight copies follow the projections' shapes");
      if (fp32) throw stratum::Error("--fp8 with --fp32: FP8 projections train with bf16; drop one");
      refuse_fp8_model("--fp8");
    }
    if (plan) {
      namespace mon = stratum::planning;
      mon::PlanRequest request;
      request.hardware = mon::hardware_preset(gpu);
      mon::Hardware& h = request.hardware;
      if (!gpu_memory.empty()) h.gpu_memory = mon::parse_byte_size(gpu_memory, "--gpu-memory");
      if (!host_memory.empty()) h.host_memory = mon::parse_byte_size(host_memory, "--host-memory");
      if (peak_tflops > 0) h.peak_flops = peak_tflops * 1e12;
      if (mfu > 0) h.mfu = mfu;
      if (node_gbps > 0) h.node_bandwidth = node_gbps * 1e9;
      if (network_gbps > 0) h.network_bandwidth = network_gbps * 1e9;
      if (host_link_gbps > 0) h.host_link_bandwidth = host_link_gbps * 1e9;
      if (host_updates > 0) h.host_updates_per_s = host_updates;
      if (margin >= 0) h.memory_margin = margin;
      request.shape = in;
      request.shape.tensor_parallel = 1;
      request.shape.sequence_parallel = false;
      request.shape.param_bytes = fp32 ? 4 : 2;
      if (mc) {
        request.model = mc;
        mon::set_model_shape(request.shape, *mc);
      } else {
        request.shape.params = static_cast<int64_t>(params);
        request.shape.largest_layer_params = static_cast<int64_t>(largest_layer);
      }
      request.global_batch = global_batch;
      mon::LayoutChoices& fx = request.fixed;
      if (pp->count()) fx.pp = in.pipeline_stages;
      if (tp->count()) fx.tp = in.tensor_parallel;
      if (ep->count()) fx.ep = in.expert_parallel;
      request.shape.expert_parallel = 1;
      if (cp->count()) fx.cp = in.context_parallel;
      if (cp_method_opt->count()) fx.cp_method = mon::parse_context_method(cp_method);
      if (cp_ulysses_opt->count()) fx.cp_ulysses = cp_ulysses;
      request.shape.context_parallel = request.shape.context_ulysses = 1;
      if (zero_opt->count()) fx.zero_stage = zero;
      if (micro_batch->count()) fx.micro_batch = in.micro_batch;
      if (micro_batches->count()) fx.micro_batches = in.micro_batches;
      if (schedule_opt->count()) fx.schedule = schedules.at(schedule);
      if (virtual_stages->count()) fx.virtual_stages = in.virtual_stages;
      if (checkpointing->count() && no_checkpointing)
        throw stratum::Error("--checkpointing and --no-checkpointing: give one");
      if (checkpointing->count()) fx.checkpointing = true;
      if (no_checkpointing) fx.checkpointing = false;
      if (sequence_parallel->count()) fx.sequence_parallel = true;
      if (!offload.empty()) {
        fx.offload_optimizer = offload != "none";
        fx.offload_param = offload == "optimizer+param";
      }
      if (!config_path.empty()) {
        if (fp32_flag->count())
          throw stratum::Error("--fp32 with --config: the config's fp16/bf16 sections say the precision; drop --fp32");
        mon::apply_plan_config(request, config_path);
        if (request.shape.fp8 && mc) refuse_fp8_model(config_path + ": fp8");
      }
      const mon::Plan result = mon::plan_layouts(request);
      std::cout << mon::format_plan(request, result, rows);
      return result.fitting.empty() ? 1 : 0;
    }
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
    if (in.expert_parallel > 1) {
      const int64_t gpus = in.nodes * in.gpus_per_node;
      if (!mc || !mc->is_moe())
        throw stratum::Error("--ep " + std::to_string(in.expert_parallel) + " needs a mixture-of-experts --model "
                             "(tiny-mixtral, mixtral-8x7b, qwen3-30b-a3b)");
      const int64_t dp = gpus / (in.tensor_parallel * std::max<int64_t>(1, in.pipeline_stages));
      if (mc->num_experts % in.expert_parallel != 0 || dp % in.expert_parallel != 0)
        throw stratum::Error("--ep " + std::to_string(in.expert_parallel) + " must divide the model's " +
                             std::to_string(mc->num_experts) + " experts and the " + std::to_string(dp) +
                             " data-parallel GPUs (GPUs / (--tp x --pp))");
    }
    if (in.context_parallel > 1 || cp_method_opt->count() || cp_ulysses_opt->count()) {
      const std::string what = "--cp " + std::to_string(in.context_parallel);
      if (in.context_parallel <= 1) throw stratum::Error("--cp-method and --cp-ulysses need --cp > 1");
      if (!mc) throw stratum::Error(what + " needs --model: context parallelism splits the model's attention");
      const int64_t dp = in.nodes * in.gpus_per_node / (in.pipeline_stages * in.tensor_parallel);
      if ((in.nodes * in.gpus_per_node) % (in.pipeline_stages * in.tensor_parallel) != 0 || dp % in.context_parallel != 0)
        throw stratum::Error(what + " does not divide the " + std::to_string(dp) +
                             " data-parallel GPUs (GPUs / (--pp x --tp)): context parallelism is cut from them");
      const auto method = stratum::planning::parse_context_method(cp_method);
      using stratum::planning::ContextMethod;
      const int64_t implied = method == ContextMethod::ulysses ? in.context_parallel : 1;
      if (method == ContextMethod::hybrid) {
        if (!cp_ulysses_opt->count() || cp_ulysses <= 1 || cp_ulysses >= in.context_parallel)
          throw stratum::Error("--cp-method hybrid needs --cp-ulysses strictly between 1 and " +
                               std::to_string(in.context_parallel) + " (--cp), dividing it");
        in.context_ulysses = cp_ulysses;
      } else {
        if (cp_ulysses_opt->count() && cp_ulysses != implied)
          throw stratum::Error("--cp-ulysses " + std::to_string(cp_ulysses) + " with --cp-method " + cp_method +
                               " (which runs Ulysses over " + std::to_string(implied) +
                               "): leave it out, or use --cp-method hybrid");
        in.context_ulysses = implied;
      }
    }
    if (mc) {
      stratum::models::validate_tensor_parallel(*mc, in.tensor_parallel);
      stratum::planning::set_model_shape(in, *mc);
      if (const std::string problem = stratum::planning::context_parallel_problem(in); !problem.empty())
        throw stratum::Error("--cp " + std::to_string(in.context_parallel) + ": " + problem);
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
      if (longest) throw stratum::Error("--longest is for one pipeline stage: leave out --pp");
      std::cout << stratum::planning::format_pipeline_estimate(in, zero);
      return 0;
    }
    if (longest) {
      if (!mc) throw stratum::Error("--longest needs --model: the activations follow the model's shape");
      const stratum::planning::Hardware h = stratum::planning::hardware_preset(gpu);
      const double gpu_bytes =
          gpu_memory.empty() ? h.gpu_memory : stratum::planning::parse_byte_size(gpu_memory, "--gpu-memory");
      const double host_bytes = host_memory.empty() ? 0.0 : stratum::planning::parse_byte_size(host_memory, "--host-memory");
      std::cout << stratum::planning::format_longest(in, (1.0 - (margin >= 0 ? margin : h.memory_margin)) * gpu_bytes,
                                                     host_bytes);
      return 0;
    }
    std::cout << stratum::planning::format_estimate(in);
    if (in.largest_layer_params == 0)
      std::cout << "  (ZeRO-3 working set not counted: give --largest-layer or --model)\n";
    if (in.layers == 0) std::cout << "  (activations not estimated: give --model for the shape)\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "stratum-estimate: error: " << e.what() << "\n";
    return 2;
  }
}
