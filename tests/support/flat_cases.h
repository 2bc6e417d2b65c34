// The flat-array cases the elementwise activation tests (gelu, tanh) share, and how they
// run one: lengths around the float4 vector width and the CPU's threading threshold
// (kMinParallelElements = 2^15, so the longer cases split over the threads), at offsets
// of 1..3 elements that misalign every pointer for float4 (the CUDA map's scalar path).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {

struct FlatCase {
  int64_t n;
  int offset;  // elements
};

inline const FlatCase kActivationCases[] = {{0, 0},    {1, 0},    {3, 1},      {7, 0},
                                            {1003, 1}, {4096, 0}, {70001, 3}, {100003, 2}};

inline std::string describe(const FlatCase& c, int threads) {
  return "n = " + std::to_string(c.n) + ", offset " + std::to_string(c.offset) + threads_label(threads);
}

// got[offset ..] against want (the float64 reference of those n elements): the largest
// |got - want| / scale, where scale[i] is the size of the terms element i is computed from
// (its rounding error is proportional to it, while the result may cancel to far less),
// within `tolerance`; and the elements before the offset still NaN (never written).
template <class T>
::testing::AssertionResult matches_reference(const std::vector<T>& got, int offset, const std::vector<double>& want,
                                             const std::vector<double>& scale, double tolerance) {
  for (int i = 0; i < offset; ++i)
    if (!std::isnan(got[size_t(i)]))
      return ::testing::AssertionFailure() << "element " << i << " before the start was written";
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double error = std::abs(double(got[size_t(offset) + i]) - want[i]) / std::max(scale[i], 1e-300);
    if (!(error <= worst)) worst = error, worst_at = i;  // NaN is never <=: it becomes the worst
  }
  if (!(worst <= tolerance))
    return ::testing::AssertionFailure() << "element " << worst_at << ": " << got[size_t(offset) + worst_at]
                                         << " against " << want[worst_at] << ", error " << worst << " of its scale > "
                                         << tolerance;
  return ::testing::AssertionSuccess() << "worst error " << worst << " of the scale";
}

// The float64 copy of a case's inputs past the offset (what the reference runs on).
template <class T>
std::vector<double> in_double(const std::vector<T>& v, int offset) {
  return std::vector<double>(v.begin() + offset, v.end());
}

}  // namespace dpcore::testing
