#include <algorithm>

#include "stratum/config/parse_sections.h"

namespace stratum::config {
namespace {

// The collectives the comms logger can profile (DeepSpeed's names).
const std::vector<std::string> kCommOps = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send",
                                           "recv", "isend", "irecv", "barrier", "all_to_all_single",
                                           "reduce_scatter_tensor", "all_gather_into_tensor", "batch_isend_irecv"};

void parse_comms_logger(KeyReader& root, Config& config) {
  KeyReader cl = root.child("comms_logger");
  CommsLoggerConfig& c = config.comms_logger;
  c.enabled = cl.get_bool("enabled", false);
  c.verbose = cl.get_bool("verbose", false);
  c.prof_all = cl.get_bool("prof_all", true);
  c.debug = cl.get_bool("debug", false);
  c.prof_ops = cl.get_string_list("prof_ops");
  for (size_t i = 0; i < c.prof_ops.size(); ++i)
    if (std::find(kCommOps.begin(), kCommOps.end(), c.prof_ops[i]) == kCommOps.end())
      cl.diagnostics().error(cl.path_of("prof_ops") + "[" + std::to_string(i) + "]",
                             "unknown collective \"" + c.prof_ops[i] + "\"" + did_you_mean(c.prof_ops[i], kCommOps));
  cl.finish();
}

void parse_writer(KeyReader& root, const std::string& key, MonitorWriterConfig& w) {
  KeyReader r = root.child(key);
  w.enabled = r.get_bool("enabled", false);
  w.output_path = r.get_string("output_path", "");
  w.job_name = r.get_string("job_name", w.job_name);
  r.finish();
}


}  // namespace

void parse_diagnostics(KeyReader& root, Config& config) {
  parse_comms_logger(root, config);
  parse_writer(root, "tensorboard", config.monitor.tensorboard);
  parse_writer(root, "csv_monitor", config.monitor.csv_monitor);
  config.steps_per_print = root.get_opt_int("steps_per_print", 1);
  config.wall_clock_breakdown = root.get_bool("wall_clock_breakdown", false);
  config.dump_state = root.get_bool("dump_state", false);
}

}  // namespace stratum::config
