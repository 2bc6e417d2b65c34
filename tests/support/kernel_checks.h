// Helpers shared by the kernel and op tests: tolerances, NaN-filled outputs, error
// measures, bit-for-bit comparison, the CPU kernels' thread count.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "support/test_support.h"

namespace dpcore::testing {

using KernelTypes = ::testing::Types<float, double>;

// Tolerance of a fast kernel against the double-accumulating reference: a few float
// roundings over the dot products of the test shapes, or near-exact in double.
template <class T>
constexpr double kernel_tolerance() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

// An output buffer full of NaN, so an element the kernel forgets to write fails the check.
template <class T>
std::vector<T> nan_filled(size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

// Largest |actual - expected| relative to the largest |expected| (a normwise error): sums
// that cancel to near zero keep the absolute rounding error of their terms, so an
// elementwise relative error would flag them. Any NaN gives infinity.
template <class T>
double normwise_error(const std::vector<T>& actual, const std::vector<T>& expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double scale = 1e-30;
  for (T v : expected) scale = std::max(scale, std::abs(double(v)));
  return max_relative_error(actual.data(), expected.data(), expected.size(), scale);
}

// Largest |got - want| / max(|want|, rms(want)). The rms floor measures each error against
// the output's own scale: a sum that cancels to nearly 0 does not turn harmless rounding
// into a huge relative error, while a wrong or missing element still fails. It is never
// below normwise_error. A NaN in one array but not the other gives infinity; NaN in both
// (padding a kernel must leave untouched) is skipped, and left out of the rms as well, so
// it cannot turn the floor itself into NaN.
template <class T>
double scaled_error(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return INFINITY;
  double sum_squares = 0.0;
  size_t counted = 0;
  for (T v : want)
    if (!std::isnan(v)) sum_squares += double(v) * double(v), ++counted;
  const double floor = std::max(1e-30, std::sqrt(sum_squares / double(std::max<size_t>(counted, 1))));
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (std::isnan(got[i])) continue;
    worst = std::max(worst, std::abs(double(got[i]) - double(want[i])) / std::max(std::abs(double(want[i])), floor));
  }
  return worst;
}

#define EXPECT_KERNEL_CLOSE(T, actual, expected) \
  EXPECT_LE(::dpcore::testing::normwise_error(actual, expected), ::dpcore::testing::kernel_tolerance<T>())

// Bit-for-bit equality, NaN payloads and the sign of zero included: what a fused kernel
// owes the composition of the kernels it replaces.
template <class T>
::testing::AssertionResult bitwise_equal(const std::vector<T>& actual, const std::vector<T>& expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes differ: " << actual.size() << " vs " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i)
    if (std::memcmp(&actual[i], &expected[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << "element " << i << " is " << actual[i] << ", expected " << expected[i]
                                           << " bit for bit";
  return ::testing::AssertionSuccess();
}

// Sets the kernels' thread count for one scope and restores the default afterwards.
class ScopedKernelThreads {
 public:
  explicit ScopedKernelThreads(int threads) { kernels::cpu::set_num_threads(threads); }
  ~ScopedKernelThreads() { kernels::cpu::set_num_threads(0); }
};

// The thread counts every fast kernel is checked under: serial, and the batch or the
// matrix product split in two.
inline std::vector<int> kernel_thread_counts() { return {1, 2}; }

// The elements [offset, end) of a download: a result written at an offset into its buffer
// (the flat optimizer tests misalign every pointer that way).
template <class T>
std::vector<T> tail(const std::vector<T>& v, int offset) {
  return std::vector<T>(v.begin() + offset, v.end());
}

}  // namespace dpcore::testing
