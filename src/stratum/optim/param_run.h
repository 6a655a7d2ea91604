#pragma once
// Which parameter the elements of a flat optimizer segment belong to (no torch:
// the host kernels take it too).
#include <cstdint>

namespace stratum::optim {

// Elements [offset, offset + numel) of a flat segment belong to parameter
// `param` (an index into the model's parameter list); the parameter's other
// elements may sit in other segments or on other ranks.
struct ParamRun {
  int64_t param = 0;
  int64_t offset = 0;
  int64_t numel = 0;
};

}  // namespace stratum::optim
