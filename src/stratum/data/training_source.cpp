#include "stratum/data/training_source.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "stratum/core/error.h"
#include "stratum/data/batch.h"
#include "stratum/data/packed_batch.h"
#include "stratum/data/packed_sampler.h"
#include "stratum/data/split.h"

namespace stratum::data {
namespace {

// Which held-out sequences each rank evaluates: `available` of them, in
// micro-batches of one size, the same count on every rank.
struct EvalPlan {
  std::vector<int64_t> items;  // this rank's, indices into the held-out sequences
  int64_t micro = 1, sequences = 0;
  int micro_batches = 0;
};
EvalPlan plan_eval(int64_t available, const TrainingSourceOptions& o) {
  EvalPlan p;
  if (available == 0) return p;
  int64_t per_rank = std::min(o.eval_batches * o.micro_batch, std::max<int64_t>(1, available / o.dp_size));
  p.micro = std::min(o.micro_batch, per_rank);
  per_rank -= per_rank % p.micro;
  p.micro_batches = static_cast<int>(per_rank / p.micro);
  p.sequences = std::min(available, per_rank * o.dp_size);
  for (int64_t i = 0; i < per_rank; ++i) p.items.push_back((o.dp_rank + i * o.dp_size) % available);
  return p;
}

std::vector<int64_t> slice(const std::vector<int64_t>& v, int index, int64_t micro) {
  return {v.begin() + index * micro, v.begin() + (index + 1) * micro};
}

class TokenWindows final : public TrainingSource {
 public:
  TokenWindows(TokenFile file, const TrainingSourceOptions& o)
      : file_(std::move(file)),
        o_(o),
        split_(split_train_eval(file_.size(), o.seq_len, o.eval_fraction, file_.path())),
        sampler_(split_.train, o.seq_len, o.dp_rank, o.dp_size, o.seed),
        eval_(plan_eval(split_.eval.num_windows(o.seq_len), o)) {
    for (int64_t& w : eval_.items) w = split_.eval.begin + w * o.seq_len;  // window index -> offset
    if (o.documents.separate) starts_ = read_document_index(file_);
  }
  TrainingBatch next() override { return batch(sampler_.next(o_.micro_batch)); }
  SamplerState state() const override { return sampler_.state(); }
  void load_state(const SamplerState& s) override { sampler_.load_state(s); }
  int eval_micro_batches() const override { return eval_.micro_batches; }
  int64_t eval_sequences() const override { return eval_.sequences; }
  TrainingBatch eval_batch(int index) const override { return batch(slice(eval_.items, index, eval_.micro)); }
  int64_t train_sequences() const override { return split_.train.num_windows(o_.seq_len); }
  const std::string& path() const override { return file_.path(); }
  const std::string& tokenizer_name() const override { return file_.tokenizer_name(); }
  std::string details() const override {
    std::string out = std::to_string(file_.size()) + " tokens";
    if (o_.documents.separate)
      out += " in " + std::to_string(starts_.size()) + " documents kept apart in each window, positions " +
             (o_.documents.restart_positions ? "restarting at each document" : "running through the window") +
             (o_.documents.mask_cross_document_targets ? ", no loss on a document's first token" : "");
    return out;
  }

 private:
  TrainingBatch batch(const std::vector<int64_t>& offsets) const {
    Batch b = make_batch(file_, offsets, o_.seq_len);
    if (!o_.documents.separate) return {b.tokens, b.targets, {}, {}};
    const auto rows = static_cast<int64_t>(offsets.size()), n = o_.seq_len;
    at::Tensor segments = at::empty({rows, n}, at::kInt), positions = at::empty({rows, n}, at::kLong);
    const auto starts_document = std::make_unique<bool[]>(static_cast<size_t>(n));
    int64_t* targets = b.targets.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      document_window_layout(starts_, offsets[static_cast<size_t>(r)], n, o_.documents.restart_positions,
                             segments.data_ptr<int32_t>() + r * n, positions.data_ptr<int64_t>() + r * n,
                             starts_document.get());
      if (o_.documents.mask_cross_document_targets)
        for (int64_t i = 0; i < n; ++i)
          if (starts_document[static_cast<size_t>(i)]) targets[r * n + i] = -100;
    }
    return {b.tokens, b.targets, segments, positions};
  }

  TokenFile file_;
  TrainingSourceOptions o_;
  TrainEvalSplit split_;
  DistributedSampler sampler_;
  EvalPlan eval_;
  std::vector<int64_t> starts_;  // the document index, when documents are kept apart
};

// The last ceil(fraction * rows) rows held out (none at fraction 0), the rest
// keeping at least one row per rank.
int64_t held_out_rows(int64_t rows, const TrainingSourceOptions& o, const std::string& path) {
  if (rows < o.dp_size)
    throw Error(path + ": its examples pack into " + std::to_string(rows) + " rows of " + std::to_string(o.seq_len) +
                " tokens, fewer than the " + std::to_string(o.dp_size) + " data-parallel ranks; add examples or use a "
                "shorter sequence");
  if (o.eval_fraction <= 0) return 0;
  const auto wanted = static_cast<int64_t>(std::ceil(o.eval_fraction * static_cast<double>(rows)));
  return std::clamp<int64_t>(wanted, 0, rows - o.dp_size);
}

class PackedRows final : public TrainingSource {
 public:
  PackedRows(InstructionFile file, const TrainingSourceOptions& o, int32_t pad_id)
      : file_(std::move(file)),
        o_(o),
        pad_id_(pad_id),
        plan_(pack_examples(file_.lengths(), o.seq_len)),
        eval_rows_(held_out_rows(static_cast<int64_t>(plan_.rows.size()), o, file_.path())),
        train_rows_(static_cast<int64_t>(plan_.rows.size()) - eval_rows_),
        sampler_(train_rows_, o.dp_rank, o.dp_size, o.seed),
        eval_(plan_eval(eval_rows_, o)) {
    for (int64_t& r : eval_.items) r += train_rows_;
  }
  TrainingBatch next() override { return batch(sampler_.next(o_.micro_batch)); }
  SamplerState state() const override { return sampler_.state(); }
  void load_state(const SamplerState& s) override { sampler_.load_state(s); }
  int eval_micro_batches() const override { return eval_.micro_batches; }
  int64_t eval_sequences() const override { return eval_.sequences; }
  TrainingBatch eval_batch(int index) const override { return batch(slice(eval_.items, index, eval_.micro)); }
  int64_t train_sequences() const override { return train_rows_; }
  const std::string& path() const override { return file_.path(); }
  const std::string& tokenizer_name() const override { return file_.info().tokenizer_name; }
  std::string details() const override {
    const PackingStats& s = plan_.stats;
    const double cells = static_cast<double>(s.rows) * static_cast<double>(o_.seq_len + 1);
    char text[320];
    std::snprintf(text, sizeof text, "%lld examples, %lld tokens packed into %lld rows of %lld, %.1f%% padding",
                  static_cast<long long>(s.examples), static_cast<long long>(s.tokens), static_cast<long long>(s.rows),
                  static_cast<long long>(o_.seq_len + 1), 100.0 * static_cast<double>(s.padding_tokens) / std::max(1.0, cells));
    std::string out = text;
    if (s.truncated_examples > 0)
      out += "; " + std::to_string(s.truncated_examples) + " examples longer than a row cut by " +
             std::to_string(s.truncated_tokens) + " tokens";
    return out;
  }

 private:
  TrainingBatch batch(const std::vector<int64_t>& rows) const {
    PackedBatch b = make_packed_batch(file_, plan_, rows, pad_id_);
    return {b.tokens, b.targets, b.segment_ids, b.position_ids};
  }

  InstructionFile file_;
  TrainingSourceOptions o_;
  int32_t pad_id_;
  PackingPlan plan_;
  int64_t eval_rows_, train_rows_;
  PackedRowSampler sampler_;
  EvalPlan eval_;
};

}  // namespace

std::unique_ptr<TrainingSource> token_window_source(TokenFile file, const TrainingSourceOptions& options) {
  return std::make_unique<TokenWindows>(std::move(file), options);
}

std::unique_ptr<TrainingSource> packed_row_source(InstructionFile file, const TrainingSourceOptions& options,
                                                  int32_t pad_id) {
  return std::make_unique<PackedRows>(std::move(file), options, pad_id);
}

}  // namespace stratum::data
