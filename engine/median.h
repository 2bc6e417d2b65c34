// The median of measured times: the middle value, or the mean of the two middle ones. How
// the profiles of the scaling model and of --pipeline's balance summarise repeated timings
// (the median is robust to the one slow run a noisy machine gives).
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/error.h"

namespace dpcore {

inline double median(std::vector<double> values) {
  DPCORE_CHECK(!values.empty(), "median of no values");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace dpcore
