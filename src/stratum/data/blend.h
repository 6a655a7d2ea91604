#pragma once
// Several datasets mixed by weight, as Megatron's `--data-path 0.7 a 0.3 b`:
// a cached token file of windows drawn from each source in proportion to its
// weight (deterministic: the next window comes from the source furthest
// behind its share), as many windows as the sources hold together; a source
// that runs out starts over from its first window. Every source must come
// from the same tokenizer.
#include <cstdint>
#include <string>
#include <vector>

namespace stratum::data {

struct BlendSource {
  double weight = 1.0;  // normalised to sum to 1
  std::string path;
};

// "W1 P1 W2 P2 ..." (Megatron's order), or one path alone. Throws
// stratum::Error naming the argument: an odd count, a weight that is not a
// finite positive number (NaN, inf, 0, -1, "half"), weights whose sum passes
// a double's range or next to whose sum one is 0, a path given twice, more
// than 1024 sources.
std::vector<BlendSource> parse_blend(const std::vector<std::string>& args);

// The blend of `token_files` (each a Stratum token file: prepare_token_file's
// result, with its weight) in windows of `window` tokens, cached in
// `cache_dir`; written when `may_write` and missing, else only its path.
// Throws stratum::Error naming the sources whose tokenizers differ, or one
// shorter than a window.
std::string blend_token_files(const std::vector<BlendSource>& token_files, int64_t window,
                              const std::string& cache_dir, bool may_write);

}  // namespace stratum::data
