// The checkpoint manifest reader on what its fuzz target found (torch-free,
// no ranks): manifests that validate must hold numbers the loader can use.
#include <gtest/gtest.h>

#include <string>

#include "../common/error_of.h"
#include "stratum/checkpoint/manifest.h"
#include "stratum/core/error.h"

namespace stratum {
namespace {

std::string manifest_with_params(const std::string& params) {
  return R"({"format": "stratum-checkpoint", "version": 2, "tag": "global_step3", "global_steps": 3,
    "micro_steps": 6, "skipped_steps": 0, "zero_stage": 1, "data_parallel_size": 1, "model_dtype": "Float",
    "params": )" + params + R"(,
    "shards": [{"file": "rank_00000.safetensors", "rank": 0, "fragments": [], "checksums": {}}],
    "adam_step": 3, "lr_scheduler": {"last_batch_iteration": 2},
    "loss_scaler": {"cur_scale": 65536, "cur_iter": 3, "last_overflow_iter": -1, "cur_hysteresis": 2,
                    "overflows_at_min": 0}})";
}

TEST(ManifestLimits, SmallManifestReads) {
  const auto m = parse_checkpoint_manifest(
      manifest_with_params(R"([{"name": "w", "shape": [4, 2], "numel": 8}, {"name": "b", "shape": [4], "numel": 4}])"),
      "m.json");
  EXPECT_EQ(m.total_numel(), 12);
}

// Found while writing fuzz_checkpoint_manifest (UBSan in its build, on a crafted
// input, not by a random run): two parameters of 2^62 elements each
// validated, and total_numel() overflowed (undefined behaviour).
TEST(ManifestLimits, ParameterTotalPast64BitsIsRefused) {
  const std::string big = "4611686018427387904";
  const auto msg = test::error_of([&] {
    parse_checkpoint_manifest(manifest_with_params(R"([{"name": "a", "shape": [)" + big + R"(], "numel": )" + big +
                                                   R"(}, {"name": "b", "shape": [)" + big + R"(], "numel": )" + big +
                                                   "}]"),
                              "m.json");
  });
  EXPECT_NE(msg.find("m.json: invalid checkpoint manifest (1 problem):\n  params[1].numel: 4611686018427387904 takes "
                     "the parameters' total past 64 bits"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace stratum
