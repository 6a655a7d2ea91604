#pragma once
// What a training run reads: this data-parallel rank's micro-batches, in a
// stream every rank draws from alike (its position saved in checkpoints), and
// held-out micro-batches for evaluation. Two kinds:
//
//   token windows: a token file cut into windows of seq_len + 1 tokens, the
//     last eval_fraction of the tokens held out (split.h, sampler.h); with
//     DocumentWindows::separate, each window carries the layout of the
//     documents it holds (the token file's document index, token_file.h):
//     a segment per document, so attention keeps them apart, positions
//     restarting at each document's first token (or running on through the
//     window), and, if asked, no loss on a target that begins a document
//     (Megatron's eod_mask_loss). The layout is a function of the window's
//     place in the file alone, so it is the same after a resume and at every
//     data-parallel size;
//   packed rows: instruction examples packed into rows (packing.h), each
//     micro-batch with the rows' layout (segment and position ids) so that
//     attention keeps the examples apart and the loss counts only the
//     completion or assistant tokens; the last eval_fraction of the rows (the
//     file's last examples) held out.
//
// Evaluation: the same number of micro-batches on every rank (ZeRO-3's and
// the stages' forwards are collective), of one size, so the mean of their
// means is the mean over the held-out micro-batches; a held-out part with
// fewer sequences than ranks lends some ranks one twice.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "stratum/data/instruction_file.h"
#include "stratum/data/packing.h"
#include "stratum/data/sampler.h"
#include "stratum/data/token_file.h"

namespace stratum::data {

// int64 tokens and targets [B, T] (targets -100 where nothing is learned); for
// packed rows int32 segment_ids and int64 position_ids [B, T], else undefined.
struct TrainingBatch {
  at::Tensor tokens, targets, segment_ids, position_ids;
};

// How token windows treat the documents they span.
struct DocumentWindows {
  // false: one sequence per window, attention across document boundaries
  // (GPT-2's and nanoGPT's way); true: a segment per document.
  bool separate = false;
  // Positions restart at 0 with each document (else they run 0..seq_len-1
  // through the window, as Megatron without reset_position_ids).
  bool restart_positions = true;
  // No loss where a target begins a document: the prediction of the next
  // document's first token from the end of the one before.
  bool mask_cross_document_targets = false;
};

struct TrainingSourceOptions {
  int64_t seq_len = 0, micro_batch = 1, eval_batches = 4;
  double eval_fraction = 0.05;
  int dp_rank = 0, dp_size = 1;
  uint64_t seed = 0;
  DocumentWindows documents;
};

class TrainingSource {
 public:
  virtual ~TrainingSource() = default;
  // This rank's next training micro-batch (micro_batch rows).
  virtual TrainingBatch next() = 0;
  virtual SamplerState state() const = 0;
  // A checkpoint's position. Throws if it lies beyond an epoch.
  virtual void load_state(const SamplerState& state) = 0;
  // Held-out micro-batches per evaluation, the same on every rank (0: none),
  // and sequences evaluated over every rank.
  virtual int eval_micro_batches() const = 0;
  virtual int64_t eval_sequences() const = 0;
  virtual TrainingBatch eval_batch(int index) const = 0;
  // Training sequences over every rank.
  virtual int64_t train_sequences() const = 0;
  virtual const std::string& path() const = 0;
  virtual const std::string& tokenizer_name() const = 0;
  // What the file holds, for the run's log: "1048576 tokens", or "812 examples,
  // 190000 tokens packed into 96 rows of 2049, 3.1% padding".
  virtual std::string details() const = 0;
};

// Throws stratum::Error naming the file when it holds too few tokens, or, for
// separate documents, when it has no document index.
std::unique_ptr<TrainingSource> token_window_source(TokenFile file, const TrainingSourceOptions& options);
// Throws stratum::Error naming the file when it packs into fewer rows than
// data-parallel ranks. `pad_id`: the token on padding (never a target).
std::unique_ptr<TrainingSource> packed_row_source(InstructionFile file, const TrainingSourceOptions& options,
                                                  int32_t pad_id = 0);

}  // namespace stratum::data
