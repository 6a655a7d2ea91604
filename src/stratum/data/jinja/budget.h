#pragma once
// What one render may spend: templates come from strangers' files, so the
// output, each string built, the work done and the macro call depth are all
// bounded, and going past a bound is an error naming it. Plain C++.
#include <cstddef>
#include <cstdint>
#include <string>

#include "stratum/data/jinja/value.h"

namespace stratum::data::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // the render, and any one string it builds
  int64_t max_work = 10'000'000;               // statements, loop iterations, expressions, bytes built / 64
  int max_call_depth = 64;                     // macro calls in progress at once
  int64_t max_sequence = 1'000'000;            // items range() or a list operation may make
};

class Budget {
 public:
  explicit Budget(const RenderLimits& limits) : limits_(limits) {}
  const RenderLimits& limits() const { return limits_; }
  void charge(int64_t units) {
    work_ += units;
    if (work_ > limits_.max_work)
      throw ValueError("the render did more than " + std::to_string(limits_.max_work) +
                       " steps of work (a loop that does not end, or a template built to exhaust the reader?)");
  }
  // Before building a string of `bytes`.
  void string_of(size_t bytes) {
    if (bytes > limits_.max_output_bytes)
      throw ValueError("a string of " + std::to_string(bytes) + " bytes, beyond the limit of " +
                       std::to_string(limits_.max_output_bytes));
    charge(static_cast<int64_t>(bytes / 64));
  }
  void sequence_of(int64_t items) {
    if (items > limits_.max_sequence)
      throw ValueError("a sequence of " + std::to_string(items) + " items, beyond the limit of " +
                       std::to_string(limits_.max_sequence));
    charge(items);
  }

 private:
  RenderLimits limits_;
  int64_t work_ = 0;
};

}  // namespace stratum::data::jinja
