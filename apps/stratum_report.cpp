// stratum-report: prints the environment report (like DeepSpeed's ds_report),
// as aligned text or, with --json, as JSON for scripts.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "stratum/build_info.h"
#include "stratum/monitor/env_report.h"

int main(int argc, char** argv) {
  CLI::App app{"Report the build, torch, CUDA/GPU, NCCL/MPI and CPU environment Stratum runs in."};
  app.set_version_flag("--version", std::string("stratum ") + STRATUM_VERSION + " (" + STRATUM_GIT_SHA + ")");
  bool as_json = false;
  app.add_flag("--json", as_json, "Print the report as JSON");
  CLI11_PARSE(app, argc, argv);

  const auto report = stratum::monitor::collect_env_report();
  if (as_json) {
    std::cout << nlohmann::json(report).dump(2) << '\n';
  } else {
    std::cout << stratum::monitor::format_env_report(report);
  }
  return 0;
}
