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

}  // namespace stratum
