// stratum-config check FILE [--world-size N]: validates a DeepSpeed ds_config.json
// and prints the resolved config (exit 0), or every problem (exit 1). Notes
// (keys accepted with what they mean here) go to stderr apart from the errors
// and do not fail the check. With --world-size, the process grid's shape is
// checked for one node of N ranks (ProcessGrid::problems, the engine's words):
// what check accepts, training starts.
// stratum-config schedule [FILE] [--stages P --micro-batches M --schedule S
// --virtual-stages V --forward F --backward-input B --backward-weight W]: the
// pipeline schedule as a time-by-stage table (costs per stage, default 1 each;
// a full backward costs B + W, zb-h1 runs them as separate B and W columns)
// with its bubble, peak activations and idle time by stage.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "stratum/config/config.h"
#include "stratum/core/error.h"
#include "stratum/distributed/process_grid.h"
#include "stratum/pipeline/schedule.h"
#include "stratum/pipeline/simulate.h"

namespace {
void print_notes(const std::string& path, const std::vector<std::string>& notes) {
  if (notes.empty()) return;
  std::cerr << path << ": " << notes.size() << (notes.size() == 1 ? " note" : " notes")
            << " (accepted keys and what Stratum does with them; not errors):\n";
  for (const auto& note : notes) std::cerr << "note: " << note << "\n";
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Validate DeepSpeed configs for Stratum"};
  app.require_subcommand(1);
  auto* check = app.add_subcommand("check", "Validate a ds_config.json and print it resolved");
  std::string path;
  int64_t world_size = 0;
  check->add_option("file", path, "the ds_config.json")->required();
  check->add_option("--world-size,-n", world_size,
                    "total number of ranks; resolves the batch triple for data-parallel size = "
                    "world size / (pipeline stages x tensor parallel size)")
      ->check(CLI::Range(int64_t{1}, int64_t{std::numeric_limits<int>::max()}));
  auto* schedule = app.add_subcommand("schedule", "Print a pipeline schedule as a time-by-stage table");
  std::string schedule_config, kind_name;
  int stages = 0, micro_batches = 0, virtual_stages = 0;
  stratum::pipeline::Costs stage_costs;  // per stage; a chunk runs 1/v of it
  schedule->add_option("file", schedule_config,
                       "a ds_config.json: pipeline.stages, pipeline.schedule, pipeline.virtual_stages and "
                       "gradient_accumulation_steps (micro-batches per step); the flags below override it");
  schedule->add_option("--stages,-p", stages, "pipeline stages")->check(CLI::Range(1, 64));
  schedule->add_option("--micro-batches,-m", micro_batches, "micro-batches per step")->check(CLI::Range(1, 4096));
  schedule->add_option("--schedule,-s", kind_name, "gpipe, 1f1b, interleaved or zb-h1")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  schedule->add_option("--virtual-stages,-v", virtual_stages, "model chunks per stage (interleaved)")
      ->check(CLI::Range(1, 64));
  schedule->add_option("--forward", stage_costs.forward, "a stage's forward time (any unit, e.g. measured ms)")
      ->check(CLI::PositiveNumber);
  schedule->add_option("--backward-input", stage_costs.backward_input, "a stage's input-gradient time (B)")
      ->check(CLI::NonNegativeNumber);
  schedule->add_option("--backward-weight", stage_costs.backward_weight, "a stage's weight-gradient time (W)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  if (schedule->parsed()) {
    try {
      using stratum::config::PipelineSchedule;
      int p = 1, m = 1, v = 1;
      PipelineSchedule kind = PipelineSchedule::one_f_one_b;
      if (!schedule_config.empty()) {
        const stratum::Config c = stratum::Config::from_file(schedule_config);
        p = static_cast<int>(c.pipeline.stages);
        v = static_cast<int>(c.pipeline.virtual_stages);
        kind = c.pipeline.schedule;
        m = static_cast<int>(c.batch.gradient_accumulation_steps.value_or(1));
      }
      if (stages) p = stages;
      if (micro_batches) m = micro_batches;
      for (PipelineSchedule k : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved,
                                  PipelineSchedule::zb_h1})
        if (kind_name == stratum::config::pipeline_schedule_name(k)) kind = k;
      if (virtual_stages) v = virtual_stages;
      const auto s = stratum::pipeline::make_schedule(kind, p, m, v);
      const stratum::pipeline::Costs chunk{stage_costs.forward / v, stage_costs.backward_input / v,
                                           stage_costs.backward_weight / v};
      const auto sim = stratum::pipeline::simulate(s, chunk);
      // One column per the shortest compute, so unit costs draw the papers' figures.
      double unit = chunk.forward;
      for (double c : {chunk.backward_input, chunk.backward_weight})
        if (c > 0) unit = std::min(unit, c);
      std::cout << stratum::config::pipeline_schedule_name(kind) << ": " << p << " stages, " << m << " micro-batches, "
                << v << " chunk" << (v == 1 ? "" : "s") << " per stage (per chunk: forward " << chunk.forward
                << ", backward input " << chunk.backward_input << ", backward weight " << chunk.backward_weight
                << (kind == PipelineSchedule::zb_h1 ? "" : ", run together as B") << "; one column per " << unit
                << ")\n"
                << stratum::pipeline::schedule_table(s, sim, unit) << "bubble " << sim.bubble() * 100.0
                << "% of the compute; peak activations by stage:";
      for (int a : sim.peak_activations) std::cout << " " << a;
      std::cout << "; idle by stage:";
      for (double t : sim.idle) std::cout << " " << t;
      std::cout << "\n";
      return 0;
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
  }

  try {
    const stratum::Config config = stratum::Config::from_file(path);
    std::vector<std::string> notes = config.notes;
    if (!config.optimizer) notes.push_back(stratum::config::default_optimizer_note());  // as stratum-train says it
    print_notes(path, notes);
    std::optional<int64_t> world;
    if (world_size > 0) world = world_size;
    if (world) {
      // The grid's problems first, then the batch's (which cannot resolve on a shape that does not fit).
      std::vector<std::string> problems = stratum::distributed::ProcessGrid::problems(
          config, static_cast<int>(*world), static_cast<int>(*world));
      if (!problems.empty()) {
        try {
          config.resolve_batch(*world);
        } catch (const stratum::ConfigError& e) {
          problems.insert(problems.end(), e.problems().begin(), e.problems().end());
        }
        throw stratum::ConfigError(config.source, problems);  // the notes are printed above
      }
    }
    nlohmann::json resolved = stratum::to_json(config, world);
    std::cout << resolved.dump(2) << "\n";
    const auto& b = config.batch;
    if (world) {
      auto sizes = config.resolve_batch(*world);
      std::cout << "batch: train_batch_size " << sizes.train_batch_size << " = micro " << sizes.micro_batch_per_gpu
                << " x accumulation " << sizes.gradient_accumulation_steps << " x data-parallel "
                << sizes.data_parallel_size << " (world " << *world << " = dp " << sizes.data_parallel_size
                << (config.context_parallel.size > 1 ? " x cp " + std::to_string(config.context_parallel.size) : "")
                << " x pp " << config.pipeline.stages << " x tp " << config.tensor_parallel.size << ")\n";
    } else {
      std::cout << "batch: not resolved (pass --world-size N to resolve train_batch_size = micro x accumulation x "
                   "data-parallel size)\n";
      if (b.train_batch_size && b.train_micro_batch_size_per_gpu && b.gradient_accumulation_steps)
        std::cout << "       as written it needs data-parallel size "
                  << *b.train_batch_size / (*b.train_micro_batch_size_per_gpu * *b.gradient_accumulation_steps)
                  << "\n";
    }
    std::cout << path << ": OK\n";
    return 0;
  } catch (const stratum::ConfigError& e) {
    std::cerr << "error: " << e.what() << "\n";
    print_notes(path, e.notes());
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << path << ": " << e.what() << "\n";
    return 1;
  }
}
