// What the per-tensor CRC-32C costs a checkpoint save: N GiB of fp32 tensors
// written as a safetensors shard (fsync'd) alone, and again with the checksums
// computed piece by piece inside the write as save_checkpoint does; also the
// parallel checksum pass by itself (io::tensor_crc32c, what verification
// reads use). Prints one JSON line.
//
//   bench_checkpoint_checksum [--gib 4] [--dir /tmp] [--rounds 3]
#include <CLI/CLI.hpp>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"
#include "stratum/io/tensor_checksum.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CRC-32C cost of a checkpoint save"};
  double gib = 4;
  std::string dir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  app.add_option("--gib", gib, "GiB of tensors per shard")->check(CLI::Range(0.01, 256.0));
  app.add_option("--dir", dir, "where the shard is written (then removed)");
  int rounds = 3;
  app.add_option("--rounds", rounds, "writes of each kind, alternating (medians reported)")->check(CLI::Range(1, 50));
  CLI11_PARSE(app, argc, argv);

  const int64_t piece = int64_t{64} << 20;  // 256 MiB of fp32 per tensor, like a large layer's fragment
  const int64_t pieces = std::max<int64_t>(1, static_cast<int64_t>(gib * (1 << 30) / (piece * 4)));
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (int64_t i = 0; i < pieces; ++i) tensors.emplace_back("master|layer" + std::to_string(i) + "|0", at::randn({piece}));
  const double bytes = static_cast<double>(pieces * piece * 4);

  auto t0 = std::chrono::steady_clock::now();
  uint32_t sink = 0;
  for (const auto& [name, t] : tensors) sink ^= stratum::io::tensor_crc32c(t);
  const double crc_s = seconds_since(t0);

  const std::string out_dir = dir + "/stratum_ckpt_bench." + std::to_string(::getpid());
  stratum::fs::make_directories(out_dir);
  const std::string shard = out_dir + "/rank_00000.safetensors";
  // Alternating, `rounds` times each (the disk's speed drifts): the median of each.
  std::vector<double> plain, checked;
  for (int r = 0; r < rounds; ++r) {
    t0 = std::chrono::steady_clock::now();
    stratum::io::write_safetensors(shard, tensors);
    plain.push_back(seconds_since(t0));
    // As save_checkpoint does it: each piece checksummed just before it is written.
    t0 = std::chrono::steady_clock::now();
    std::vector<uint32_t> crcs;
    stratum::io::write_safetensors(shard, tensors, {}, &crcs);
    checked.push_back(seconds_since(t0));
    uint32_t again = 0;
    for (uint32_t c : crcs) again ^= c;
    if (again != sink) {
      std::fprintf(stderr, "bench_checkpoint_checksum: the write's checksums disagree with the separate pass\n");
      return 1;
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double write_s = median(plain), save_s = median(checked);
  stratum::fs::remove_tree(out_dir);

  std::printf("{\"bench\": \"checkpoint_checksum\", \"gib\": %.2f, \"threads\": %d, \"crc32c_s\": %.3f, "
              "\"crc32c_gib_per_s\": %.2f, \"write_s\": %.3f, \"write_gib_per_s\": %.2f, "
              "\"write_with_checksums_s\": %.3f, \"checksum_cost_of_save\": %.3f, \"crc\": %u}\n",
              bytes / (1 << 30), at::get_num_threads(), crc_s, bytes / (1 << 30) / crc_s, write_s,
              bytes / (1 << 30) / write_s, save_s, save_s / write_s - 1.0, sink);
  return 0;
}
