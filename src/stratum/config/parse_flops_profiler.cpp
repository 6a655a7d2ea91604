// The flops_profiler section, DeepSpeed's keys and defaults (deepspeed/profiling/config.py).
#include "stratum/config/parse_sections.h"

namespace stratum::config {

void parse_flops_profiler(KeyReader& root, Config& config) {
  KeyReader r = root.child("flops_profiler");
  FlopsProfilerConfig& f = config.flops_profiler;
  f.enabled = r.get_bool("enabled", false);
  // Backward counts as (2 + factor) forwards: a factor past 1 would recompute more than the whole forward.
  f.recompute_fwd_factor = r.get_double("recompute_fwd_factor", 0.0, 0.0, 1.0);
  f.profile_step = r.get_int("profile_step", 1, 0);
  f.module_depth = r.get_int("module_depth", -1, -1);
  f.top_modules = r.get_int("top_modules", 1, 1);
  f.detailed = r.get_bool("detailed", true);
  f.output_file = r.get_string("output_file", "");  // null: printed
  r.finish();
}

}  // namespace stratum::config
