#pragma once
// What a model's FP8 projections share across micro-batches: which optimizer
// step their weights' FP8 copies belong to. A projection casts its weight at
// its first use after invalidate() and reuses the copy until the next
// invalidate() (the engine calls it after each optimizer step: one cast a
// step, not one a micro-batch). Passed to each projection explicitly; no
// global state.
#include <cstdint>
#include <vector>

namespace stratum::nn::float8 {

class Float8Projection;

class WeightCache {
 public:
  // The weights changed (an optimizer step, a load): every copy is stale.
  void invalidate() { ++generation_; }
  int64_t generation() const { return generation_; }
  // Whether projections keep their weights' FP8 copies between uses (the
  // default). Off (ZeRO-3, whose layers hold their whole weights only while
  // gathered): W is cast at every forward and Wᵀ in backward from the weight
  // gathered again, and neither is kept: memory stays at one layer's copies.
  bool holds_weights() const { return holds_weights_; }
  void set_holds_weights(bool hold) { holds_weights_ = hold; }
  // Weight casts made so far (the tests count them; a report may print them).
  int64_t casts() const { return casts_; }
  void count_cast() { ++casts_; }

  // Throws stratum::Error naming the first projection and operand whose amax
  // was Inf or NaN since the last check (on a GPU the casts only record it:
  // one device sync here a step instead of one a GEMM), then clears the flags.
  void check_finite();

  // Projections register themselves for check_finite (Float8Projection's
  // constructor and destructor).
  void add(Float8Projection* p) { projections_.push_back(p); }
  void remove(const Float8Projection* p);

 private:
  int64_t generation_ = 0;
  int64_t casts_ = 0;
  bool holds_weights_ = true;
  std::vector<Float8Projection*> projections_;
};

}  // namespace stratum::nn::float8
