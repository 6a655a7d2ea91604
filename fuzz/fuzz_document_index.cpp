// A token file's document index (`<file>.docs`, from Stratum or beside a
// token file given as is): bytes -> the checked starts, then the layout of
// windows over them the way training reads it (ASan sees a read out of bounds).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/data/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The token count the index must state: its own field, so that well-formed inputs get through.
  int64_t tokens = 0;
  if (size >= 16) std::memcpy(&tokens, data + 8, sizeof tokens);
  try {
    const std::vector<int64_t> starts = stratum::data::check_document_index(data, size, "fuzz.docs", tokens);
    constexpr int64_t kWindow = 16;
    int32_t segments[kWindow];
    int64_t positions[kWindow];
    bool crossing[kWindow];
    // The index holds a document at 0 below `tokens`, so tokens >= 1 here: no overflow below.
    for (int64_t start : {int64_t{0}, tokens / 2, tokens - kWindow - 1}) {
      if (start < 0 || start > tokens - kWindow - 1) continue;
      stratum::data::document_window_layout(starts, start, kWindow, true, segments, positions, crossing);
    }
  } catch (const stratum::Error&) {
  }
  return 0;
}
