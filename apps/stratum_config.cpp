// stratum-config check FILE [--world-size N]: validates a DeepSpeed ds_config.json
// and prints the resolved config (exit 0), or every problem (exit 1). Notes
// (keys accepted with what they mean here) go to stderr apart from the errors
// and do not fail the check.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "stratum/config/config.h"
#include "stratum/core/error.h"

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
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    const stratum::Config config = stratum::Config::from_file(path);
    print_notes(path, config.notes);
    std::optional<int64_t> world;
    if (world_size > 0) world = world_size;
    nlohmann::json resolved = stratum::to_json(config, world);
    std::cout << resolved.dump(2) << "\n";
    const auto& b = config.batch;
    if (world) {
      auto sizes = config.resolve_batch(*world);
      std::cout << "batch: train_batch_size " << sizes.train_batch_size << " = micro " << sizes.micro_batch_per_gpu
                << " x accumulation " << sizes.gradient_accumulation_steps << " x data-parallel "
                << sizes.data_parallel_size << " (world " << *world << " = dp " << sizes.data_parallel_size
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
