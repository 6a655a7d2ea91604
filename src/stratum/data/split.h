#pragma once
// The train / held-out split of a token stream. Plain C++, no torch.
#include <cstdint>
#include <string>

namespace stratum::data {

// Token range [begin, end).
struct Split {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  // Windows of seq_len + 1 tokens at stride seq_len (see sampler.h).
  int64_t num_windows(int64_t seq_len) const { return size() > seq_len ? (size() - 1) / seq_len : 0; }
};

struct TrainEvalSplit {
  Split train, eval;
};

// Holds out the last ceil(eval_fraction * n_tokens) tokens, at least one
// sequence (seq_len + 1 tokens), for evaluation; trains on the rest, which
// must also hold a sequence. The held-out part is at the end so it is one
// contiguous text the model never trains on. eval_fraction 0 gives an empty
// eval split. Throws stratum::Error naming `source` and the numbers when the
// stream is too short.
TrainEvalSplit split_train_eval(int64_t n_tokens, int64_t seq_len, double eval_fraction, const std::string& source);

}  // namespace stratum::data
