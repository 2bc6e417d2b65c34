// Finite-difference gradient checking in float64 (Caffe's GradientChecker, in spirit).
//
// For each checked element x_i of an input, the numeric derivative is the central
// difference (f(x + e) - f(x - e)) / 2e, compared with the analytic gradient from
// backward() as |a - n| <= threshold * max(|a|, |n|, 1). Points near a kink of relu or max
// (where the one-sided differences disagree) are skipped, and the test reports how many.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace dpcore::testing {

struct GradcheckOptions {
  double step = 1e-6;
  double threshold = 1e-6;
  // Elements checked per input: all when <= 0, else this many chosen at random (seeded).
  int64_t samples_per_input = 0;
  uint64_t seed = 1;
};

struct GradcheckResult {
  int64_t checked = 0;
  int64_t skipped_near_kink = 0;
  double worst_error = 0.0;  // max |a - n| / max(|a|, |n|, 1)
  std::string worst_where;   // "input 1 element 17: analytic ..., numeric ..."
  std::vector<std::string> failures;
};

// f maps the inputs (float64 CPU leaves that require grad) to a one-element tensor.
// Gradients are read from each input's .grad after one backward; inputs must start with
// zero or undefined gradients.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          const GradcheckOptions& options = {});

// A weighted sum turns any float64 output into a scalar whose gradient reaches every
// element with a different weight (uniform in [-1, 1) from `seed`; a plain sum would hide
// transposed or permuted gradients).
Tensor weighted_sum(const Tensor& y, uint64_t seed);

// Float64 CPU leaf with values uniform in [lo, hi).
Tensor random_leaf(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0);

}  // namespace dpcore::testing
