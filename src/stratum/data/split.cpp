#include "stratum/data/split.h"

#include <cmath>

#include "stratum/core/error.h"

namespace stratum::data {

TrainEvalSplit split_train_eval(int64_t n_tokens, int64_t seq_len, double eval_fraction, const std::string& source) {
  if (seq_len < 1) throw Error(source + ": sequence length must be at least 1, got " + std::to_string(seq_len));
  // seq_len + 1 and the sums below stay within int64.
  if (seq_len > (int64_t{1} << 40))
    throw Error(source + ": sequence length " + std::to_string(seq_len) + " is beyond any model's context");
  if (n_tokens < 0) throw Error(source + ": " + std::to_string(n_tokens) + " tokens");
  if (!(eval_fraction >= 0.0 && eval_fraction < 1.0))
    throw Error(source + ": eval fraction must be in [0, 1), got " + std::to_string(eval_fraction));
  const int64_t window = seq_len + 1;
  int64_t eval_tokens = 0;
  if (eval_fraction > 0.0) {
    eval_tokens = static_cast<int64_t>(std::ceil(eval_fraction * static_cast<double>(n_tokens)));
    if (eval_tokens < window) eval_tokens = window;
  }
  const int64_t needed = window + eval_tokens;
  if (n_tokens < needed) {
    std::string why = eval_tokens == 0
                          ? "requires at least seq_len + 1 = " + std::to_string(window)
                          : "requires at least seq_len + 1 = " + std::to_string(window) + " to train on plus " +
                                std::to_string(eval_tokens) + " held out for evaluation = " + std::to_string(needed);
    throw Error(source + ": too short for seq_len " + std::to_string(seq_len) + ": " + why + " tokens, has " +
                std::to_string(n_tokens));
  }
  const int64_t boundary = n_tokens - eval_tokens;
  return {Split{0, boundary}, Split{boundary, n_tokens}};
}

}  // namespace stratum::data
