// What the per-tensor CRC-32C costs a checkpoint save: N GiB of fp32 tensors
// written as a safetensors shard (fsync'd) alone, and with the checksums
// computed two ways: a parallel pass (io::tensor_crc32c) before it, and one
// thread beside it (what save_checkpoint does). Prints one JSON line.
//
//   bench_checkpoint_checksum [--gib 4] [--dir /tmp] [--rounds 3]
#include <CLI/CLI.hpp>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "stratum/core/crc32c.h"
#include "stratum/core/error.h"
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
  // Alternating, `rounds` times each (the disk's speed drifts): the median of
  // each way of checksumming a save against the plain write.
  const auto check = [&](const std::vector<uint32_t>& crcs) {
    uint32_t x = 0;
    for (uint32_t c : crcs) x ^= c;
    if (x != sink) throw stratum::Error("bench_checkpoint_checksum: the checksums disagree with the separate pass");
  };
  const std::vector<std::pair<std::string, std::function<void()>>> ways = {
      {"write_s", [&] { stratum::io::write_safetensors(shard, tensors); }},
      // A parallel pass over the tensors (io::tensor_crc32c), then the write.
      {"parallel_then_write_s", [&] {
         std::vector<uint32_t> crcs;
         for (const auto& [name, t] : tensors) crcs.push_back(stratum::io::tensor_crc32c(t));
         stratum::io::write_safetensors(shard, tensors);
         check(crcs);
       }},
      // One thread checksumming while the write runs.
      {"beside_write_s", [&] {
         auto crcs = std::async(std::launch::async, [&] {
           std::vector<uint32_t> out;
           for (const auto& [name, t] : tensors) out.push_back(stratum::crc32c(t.data_ptr(), t.nbytes()));
           return out;
         });
         stratum::io::write_safetensors(shard, tensors);
         check(crcs.get());
       }}};
  std::vector<std::vector<double>> seconds(ways.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t w = 0; w < ways.size(); ++w) {
      t0 = std::chrono::steady_clock::now();
      ways[w].second();
      seconds[w].push_back(seconds_since(t0));
    }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  stratum::fs::remove_tree(out_dir);

  const double write_s = median(seconds[0]);
  std::printf("{\"bench\": \"checkpoint_checksum\", \"gib\": %.2f, \"threads\": %d, \"crc32c_parallel_s\": %.3f, "
              "\"crc32c_gib_per_s\": %.2f, \"write_gib_per_s\": %.2f",
              bytes / (1 << 30), at::get_num_threads(), crc_s, bytes / (1 << 30) / crc_s, bytes / (1 << 30) / write_s);
  for (size_t w = 0; w < ways.size(); ++w) std::printf(", \"%s\": %.3f", ways[w].first.c_str(), median(seconds[w]));
  for (size_t w = 1; w < ways.size(); ++w)
    std::printf(", \"cost_%s\": %.3f", ways[w].first.substr(0, ways[w].first.size() - 2).c_str(),
                median(seconds[w]) / write_s - 1.0);
  std::printf("}\n");
  return 0;
}
