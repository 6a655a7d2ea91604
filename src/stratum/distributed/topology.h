#pragma once
// The DP x PP x TP grid: which rank holds which coordinate, and which ranks form
// each parallel group. Built once, validated, passed explicitly (no globals).
// Pure arithmetic: no communicator is needed to build or test it.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace stratum::distributed {

enum class Axis { tp = 0, dp = 1, pp = 2 };
const char* axis_name(Axis a);

struct Coord {
  int64_t tp = 0, dp = 0, pp = 0;
  int64_t operator[](Axis a) const { return a == Axis::tp ? tp : a == Axis::dp ? dp : pp; }
  bool operator==(const Coord&) const = default;
};

class Topology {
 public:
  // `order` lists the axes fastest-varying first, e.g. "tp-dp-pp" (Megatron's
  // default: a TP group is consecutive ranks, so it stays inside a node).
  // Throws stratum::Error naming every factor if dp x pp x tp != world_size.
  static Topology create(int64_t world_size, int64_t dp, int64_t pp, int64_t tp, const std::string& order = "tp-dp-pp");
  // dp derived as world_size / (pp x tp).
  static Topology from_model_parallel(int64_t world_size, int64_t pp, int64_t tp,
                                      const std::string& order = "tp-dp-pp");

  int64_t world_size() const { return world_size_; }
  int64_t size(Axis a) const { return sizes_[static_cast<int>(a)]; }
  int64_t dp() const { return size(Axis::dp); }
  int64_t pp() const { return size(Axis::pp); }
  int64_t tp() const { return size(Axis::tp); }
  const std::string& order() const { return order_; }

  Coord coord_of(int64_t rank) const;
  int64_t rank_of(const Coord& c) const;

  // The ranks that differ from `rank` only along `axis`, in axis order.
  std::vector<int64_t> group(Axis axis, int64_t rank) const;
  // Every group along `axis`, ordered by their first rank.
  std::vector<std::vector<int64_t>> groups(Axis axis) const;
  // Ranks sharing `rank`'s pipeline stage (DP x TP): the gradient norm's group.
  std::vector<int64_t> dp_tp_group(int64_t rank) const;
  std::vector<std::vector<int64_t>> dp_tp_groups() const;

  // Rank 0 prints this at start: one line per rank with its coordinates and
  // groups, and where it runs when `places` (one per rank) are given.
  struct Place {
    std::string host;
    int gpu = -1;  // -1: a CPU rank
  };
  std::string table(const std::vector<Place>& places = {}) const;

 private:
  Topology() = default;
  int64_t world_size_ = 1;
  std::array<int64_t, 3> sizes_{1, 1, 1};  // indexed by Axis
  std::array<Axis, 3> order_axes_{Axis::tp, Axis::dp, Axis::pp};  // fastest first
  std::array<int64_t, 3> strides_{1, 1, 1};                      // indexed by Axis
  std::string order_ = "tp-dp-pp";
};

}  // namespace stratum::distributed
