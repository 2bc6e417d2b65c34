// relu, the elementwise operations and the pairwise sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/error.h"
#include "kernel_checks.h"
#include "kernels/cpu/kernels.h"

namespace dpcore::testing {
namespace {

namespace cpu = kernels::cpu;

template <class T>
class ElementwiseTest : public ::testing::Test {};
TYPED_TEST_SUITE(ElementwiseTest, KernelTypes);

// Long enough to take the threaded path, with a ragged end.
constexpr int64_t kLong = 100003;

TYPED_TEST(ElementwiseTest, ReluForwardAndBackwardFollowPyTorch) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (int threads : kernel_thread_counts()) {
    ScopedKernelThreads scope(threads);
    auto x = random_vector<T>(kLong, 1), dy = random_vector<T>(kLong, 2);
    x[0] = T(0), x[1] = nan, x[2] = -std::numeric_limits<T>::infinity();
    auto y = nan_filled<T>(kLong), dx = nan_filled<T>(kLong);
    cpu::relu_forward(kLong, x.data(), y.data());
    cpu::relu_backward(kLong, dy.data(), y.data(), dx.data());
    EXPECT_TRUE(std::isnan(y[1])) << "relu(NaN) is NaN in PyTorch";
    EXPECT_EQ(dx[1], dy[1]) << "a NaN output does not mask the gradient in PyTorch";
    for (int64_t i = 0; i < kLong; ++i) {
      if (i == 1) continue;
      ASSERT_EQ(y[i], x[i] > T(0) ? x[i] : T(0)) << i;
      ASSERT_EQ(dx[i], x[i] > T(0) ? dy[i] : T(0)) << i;
    }
  }
}

TYPED_TEST(ElementwiseTest, FillAddAxpyScaleMatchScalarLoops) {
  using T = TypeParam;
  for (int threads : kernel_thread_counts()) {
    ScopedKernelThreads scope(threads);
    auto a = random_vector<T>(kLong, 3), b = random_vector<T>(kLong, 4);
    auto y = nan_filled<T>(kLong);

    cpu::fill(kLong, T(2.5), y.data());
    for (T v : y) ASSERT_EQ(v, T(2.5));

    cpu::add(kLong, a.data(), b.data(), y.data());
    for (int64_t i = 0; i < kLong; ++i) ASSERT_EQ(y[i], a[i] + b[i]) << i;

    auto acc = b;
    cpu::axpy(kLong, T(-0.75), a.data(), acc.data());
    // Within rounding only: a build with FMA may contract the multiply-add.
    const double eps = std::numeric_limits<T>::epsilon();
    for (int64_t i = 0; i < kLong; ++i) ASSERT_NEAR(acc[i], b[i] + T(-0.75) * a[i], 4 * eps) << i;

    cpu::scale(kLong, T(3), a.data(), y.data());
    for (int64_t i = 0; i < kLong; ++i) ASSERT_EQ(y[i], T(3) * a[i]) << i;
  }
}

TYPED_TEST(ElementwiseTest, AddAndScaleMayWorkInPlace) {
  using T = TypeParam;
  auto a = random_vector<T>(kLong, 5), b = random_vector<T>(kLong, 6);
  auto sum_in_a = a, scaled = a;
  cpu::add(kLong, sum_in_a.data(), b.data(), sum_in_a.data());
  cpu::scale(kLong, T(0.5), scaled.data(), scaled.data());
  for (int64_t i = 0; i < kLong; ++i) {
    ASSERT_EQ(sum_in_a[i], a[i] + b[i]) << i;
    ASSERT_EQ(scaled[i], T(0.5) * a[i]) << i;
  }
}

TYPED_TEST(ElementwiseTest, SumIsAccurateForAllLengths) {
  using T = TypeParam;
  for (int64_t n : {0, 1, 7, 4096, 4097, 1000003}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto x = random_vector<T>(n, 7, 0.0, 1.0);
    long double exact = 0;
    for (T v : x) exact += v;
    T out = std::numeric_limits<T>::quiet_NaN();
    cpu::sum(n, x.data(), &out);
    // The sum is accumulated in double, so even the float result is the rounded true sum.
    const double tolerance = std::is_same_v<T, float> ? 6e-8 : 1e-14;
    EXPECT_NEAR(double(out), double(exact), tolerance * std::max(1.0L, exact));
  }
}

TYPED_TEST(ElementwiseTest, SumDoesNotDependOnTheThreadCount) {
  using T = TypeParam;
  auto x = random_vector<T>(1000003, 8);
  T one = 0, two = 0;
  {
    ScopedKernelThreads scope(1);
    cpu::sum(int64_t(x.size()), x.data(), &one);
  }
  {
    ScopedKernelThreads scope(2);
    cpu::sum(int64_t(x.size()), x.data(), &two);
  }
  EXPECT_EQ(std::memcmp(&one, &two, sizeof(T)), 0) << one << " vs " << two;
}

TEST(KernelThreadsTest, SetAndQueryTheThreadCount) {
  cpu::set_num_threads(3);
  EXPECT_EQ(cpu::num_threads(), 3);
  cpu::set_num_threads(0);
  EXPECT_GE(cpu::num_threads(), 1);
  EXPECT_THROW(cpu::set_num_threads(-1), dpcore::Error);
}

}  // namespace
}  // namespace dpcore::testing
