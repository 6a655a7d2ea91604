#pragma once
// Which parameters the elements of each of this rank's optimizer segments
// belong to, from the flat layout and the pieces the rank holds: what an
// optimizer whose step needs whole-parameter quantities (Lamb's trust ratio)
// must know about ZeRO's flat segments. Pure arithmetic, no torch.
#include <cstddef>
#include <vector>

#include "stratum/optim/param_run.h"
#include "stratum/zero/flat_layout.h"

namespace stratum {

// Per segment (0 .. segments - 1), the runs of parameters it holds, in
// ascending segment offset; bucket padding is in no run, a parameter of no
// elements in none. Throws stratum::Error when a piece names a segment out
// of range.
std::vector<std::vector<optim::ParamRun>> segment_param_runs(const zero::FlatLayout& layout,
                                                             const std::vector<zero::FlatPiece>& pieces,
                                                             size_t segments);

// Where parameter `param`'s elements sit among this rank's segments: runs of
// `numel` elements from `param_offset` in the parameter, at `segment_offset`
// of segment `segment`. Empty when the rank holds none of them.
struct ParamPiece {
  int segment = 0;
  int64_t segment_offset = 0;
  int64_t param_offset = 0;
  int64_t numel = 0;
};
std::vector<ParamPiece> param_pieces(const zero::FlatLayout& layout, const std::vector<zero::FlatPiece>& pieces,
                                     int param);

}  // namespace stratum
