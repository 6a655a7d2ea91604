#include "stratum/distributed/topology.h"

#include <algorithm>
#include <sstream>

#include "stratum/core/error.h"

namespace stratum::distributed {

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::tp: return "tp";
    case Axis::dp: return "dp";
    case Axis::pp: return "pp";
  }
  return "?";
}

namespace {

std::array<Axis, 3> parse_order(const std::string& order) {
  std::array<Axis, 3> axes{};
  std::stringstream ss(order);
  std::string part;
  int n = 0;
  bool seen[3] = {false, false, false};
  while (std::getline(ss, part, '-')) {
    Axis a;
    if (part == "tp") a = Axis::tp;
    else if (part == "dp") a = Axis::dp;
    else if (part == "pp") a = Axis::pp;
    else throw Error("topology order '" + order + "': unknown axis '" + part + "' (expected tp, dp, pp)");
    if (n >= 3 || seen[static_cast<int>(a)])
      throw Error("topology order '" + order + "': each of tp, dp, pp must appear exactly once");
    seen[static_cast<int>(a)] = true;
    axes[n++] = a;
  }
  if (n != 3) throw Error("topology order '" + order + "': each of tp, dp, pp must appear exactly once");
  return axes;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

Topology Topology::create(int64_t world_size, int64_t dp, int64_t pp, int64_t tp, const std::string& order) {
  if (world_size < 1 || dp < 1 || pp < 1 || tp < 1 || dp * pp * tp != world_size)
    throw Error("topology: world size " + std::to_string(world_size) + " != data parallel " + std::to_string(dp) +
                " x pipeline parallel " + std::to_string(pp) + " x tensor parallel " + std::to_string(tp) + " = " +
                std::to_string(dp * pp * tp));
  Topology t;
  t.world_size_ = world_size;
  t.sizes_ = {tp, dp, pp};
  t.order_axes_ = parse_order(order);
  t.order_ = order;
  int64_t stride = 1;
  for (Axis a : t.order_axes_) {
    t.strides_[static_cast<int>(a)] = stride;
    stride *= t.size(a);
  }
  return t;
}

Topology Topology::from_model_parallel(int64_t world_size, int64_t pp, int64_t tp, const std::string& order) {
  if (pp < 1 || tp < 1 || world_size < 1 || world_size % (pp * tp) != 0)
    throw Error("topology: world size " + std::to_string(world_size) + " is not a multiple of pipeline parallel " +
                std::to_string(pp) + " x tensor parallel " + std::to_string(tp) + " = " + std::to_string(pp * tp));
  return create(world_size, world_size / (pp * tp), pp, tp, order);
}

Coord Topology::coord_of(int64_t rank) const {
  if (rank < 0 || rank >= world_size_)
    throw Error("topology: rank " + std::to_string(rank) + " outside world of " + std::to_string(world_size_));
  auto along = [&](Axis a) { return (rank / strides_[static_cast<int>(a)]) % size(a); };
  return Coord{along(Axis::tp), along(Axis::dp), along(Axis::pp)};
}

int64_t Topology::rank_of(const Coord& c) const {
  return c.tp * strides_[0] + c.dp * strides_[1] + c.pp * strides_[2];
}

std::vector<int64_t> Topology::group(Axis axis, int64_t rank) const {
  Coord base = coord_of(rank);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < size(axis); ++i) {
    Coord c = base;
    (axis == Axis::tp ? c.tp : axis == Axis::dp ? c.dp : c.pp) = i;
    out.push_back(rank_of(c));
  }
  return out;
}

std::vector<std::vector<int64_t>> Topology::groups(Axis axis) const {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < world_size_; ++r)
    if (coord_of(r)[axis] == 0) out.push_back(group(axis, r));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> Topology::dp_tp_group(int64_t rank) const {
  const int64_t stage = coord_of(rank).pp;
  std::vector<int64_t> out;
  for (int64_t r = 0; r < world_size_; ++r)
    if (coord_of(r).pp == stage) out.push_back(r);
  return out;
}

std::vector<std::vector<int64_t>> Topology::dp_tp_groups() const {
  std::vector<std::vector<int64_t>> out;
  for (int64_t s = 0; s < pp(); ++s) out.push_back(dp_tp_group(rank_of(Coord{0, 0, s})));
  std::sort(out.begin(), out.end());
  return out;
}

std::string Topology::table(const std::vector<Place>& places) const {
  const bool placed = static_cast<int64_t>(places.size()) == world_size_;
  size_t host_width = 4;
  if (placed)
    for (const auto& p : places) host_width = std::max(host_width, p.host.size());
  std::ostringstream os;
  os << "topology: world " << world_size_ << " = dp " << dp() << " x pp " << pp() << " x tp " << tp()
     << " (order " << order_ << ", fastest first)\n";
  os << "  rank" << (placed ? "  " + std::string("host") + std::string(host_width - 4, ' ') + "  gpu" : "")
     << "  dp  pp  tp  dp-group          pp-group          tp-group\n";
  for (int64_t r = 0; r < world_size_; ++r) {
    Coord c = coord_of(r);
    std::string where;
    if (placed) {
      const Place& p = places[static_cast<size_t>(r)];
      std::string host = p.host;
      host.resize(host_width, ' ');
      char gpu[16];
      std::snprintf(gpu, sizeof gpu, "%5s", p.gpu < 0 ? "-" : std::to_string(p.gpu).c_str());
      where = "  " + host + gpu;
    }
    char line[64];
    std::snprintf(line, sizeof line, "  %4lld", static_cast<long long>(r));
    char coords[48];
    std::snprintf(coords, sizeof coords, " %3lld %3lld %3lld  ", static_cast<long long>(c.dp),
                  static_cast<long long>(c.pp), static_cast<long long>(c.tp));
    os << line << where << coords;
    std::string g1 = join(group(Axis::dp, r)), g2 = join(group(Axis::pp, r)), g3 = join(group(Axis::tp, r));
    g1.resize(std::max<size_t>(g1.size(), 16), ' ');
    g2.resize(std::max<size_t>(g2.size(), 16), ' ');
    os << g1 << "  " << g2 << "  " << g3 << "\n";
  }
  return os.str();
}

}  // namespace stratum::distributed
