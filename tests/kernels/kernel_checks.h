// Helpers shared by the CPU kernel tests.
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

}  // namespace dpcore::testing
