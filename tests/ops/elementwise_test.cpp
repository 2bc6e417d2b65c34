// The elementwise operations (fill, add, axpy, scale, GradScaler's unscale) and the deterministic sum on every
// backend (tests/support/op_backends.h), against scalar loops and a long-double sum, on
// lengths around the vector and thread boundaries and on misaligned pointers (which must
// take the CUDA kernels' scalar path).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

struct FlatCase {
  int64_t n;
  int offset;  // elements; 1..3 misaligns every pointer for float4
};

const FlatCase kCases[] = {{0, 0},     {1, 0},       {3, 1},      {7, 0},        {1003, 1},      {4096, 0},
                           {4097, 0},  {70001, 3},   {100003, 0}, {100003, 2},   {1000003, 0},   {2999999, 2},
                           {3000000, 0}};

std::string describe(const FlatCase& c, int threads) {
  return "n = " + std::to_string(c.n) + ", offset " + std::to_string(c.offset) + threads_label(threads);
}

template <class T>
::testing::AssertionResult untouched_before(const std::vector<T>& y, int offset) {
  for (int i = 0; i < offset; ++i)
    if (!std::isnan(y[i])) return ::testing::AssertionFailure() << "element " << i << " before the start was written";
  return ::testing::AssertionSuccess();
}

template <class B>
class ElementwiseTest : public OpTest<B> {};
TYPED_TEST_SUITE(ElementwiseTest, KernelBackends, BackendName);

TYPED_TEST(ElementwiseTest, FillAddAxpyScaleMatchScalarLoops) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const FlatCase& c : kCases) {
    if (!B::runs_elements(c.n + c.offset)) continue;
    const int64_t n = c.n, at = c.offset;
    const auto a = random_vector<T>(n + at, 3), b = random_vector<T>(n + at, 4);
    typename B::template Array<T> dev_a(a), dev_b(b);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> dev_y(n + at);

      B::fill(n, T(2.5), dev_y.get() + at);
      auto y = dev_y.download();
      EXPECT_TRUE(untouched_before(y, at));
      for (int64_t i = at; i < n + at; ++i) ASSERT_EQ(y[i], T(2.5)) << i;

      dev_y.upload(nan_filled<T>(n + at));
      B::add(n, dev_a.get() + at, dev_b.get() + at, dev_y.get() + at);
      y = dev_y.download();
      EXPECT_TRUE(untouched_before(y, at));
      for (int64_t i = at; i < n + at; ++i) ASSERT_EQ(y[i], a[i] + b[i]) << i;

      typename B::template Array<T> dev_acc(b);
      B::axpy(n, T(-0.75), dev_a.get() + at, dev_acc.get() + at);
      const auto acc = dev_acc.download();
      // Within rounding only: a build (or the GPU) may contract the multiply-add into an FMA.
      const double eps = std::numeric_limits<T>::epsilon();
      for (int64_t i = 0; i < at; ++i) ASSERT_EQ(acc[i], b[i]) << "element before the start was written";
      for (int64_t i = at; i < n + at; ++i) ASSERT_NEAR(acc[i], b[i] + T(-0.75) * a[i], 4 * eps) << i;
      auto cpu_acc = b;
      kernels::cpu::axpy<T>(n, T(-0.75), a.data() + at, cpu_acc.data() + at);
      EXPECT_OP_CLOSE(B, acc, cpu_acc);

      dev_y.upload(nan_filled<T>(n + at));
      B::scale(n, T(3), dev_a.get() + at, dev_y.get() + at);
      y = dev_y.download();
      EXPECT_TRUE(untouched_before(y, at));
      for (int64_t i = at; i < n + at; ++i) ASSERT_EQ(y[i], T(3) * a[i]) << i;
    }
  }
}

// GradScaler's unscale: every element times inv_scale, and the flag set exactly when an
// Inf, -Inf or NaN was there (first, in the middle or last); a clean buffer leaves the flag
// as it was (0 or already 1).
template <class B, class T>
void expect_unscaled(std::vector<T> x, int64_t at, int64_t n, int64_t bad_at, T bad, T preset) {
  SCOPED_TRACE("bad at " + std::to_string(bad_at) + ", flag " + std::to_string(preset));
  if (bad_at >= 0) x[size_t(at + bad_at)] = bad;
  typename B::template Array<T> dev_x(x), flag(std::vector<T>{preset});
  B::unscale_and_check_finite(n, T(0.125), dev_x.get() + at, flag.get());
  ASSERT_EQ(flag.download()[0], bad_at >= 0 ? T(1) : preset);
  const auto got = dev_x.download();
  for (int64_t i = 0; i < at; ++i) ASSERT_EQ(got[i], x[i]) << "element before the start was written";
  for (int64_t i = at; i < n + at; ++i) ASSERT_TRUE(std::isnan(x[i]) ? std::isnan(got[i]) : got[i] == x[i] * T(0.125)) << i;
}

TYPED_TEST(ElementwiseTest, UnscaleFindsAnInfOrNaNAnywhere) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const T bads[] = {std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                    std::numeric_limits<T>::quiet_NaN()};
  for (const FlatCase& c : kCases) {
    if (c.n == 0 || !B::runs_elements(c.n + c.offset)) continue;
    const int64_t n = c.n, at = c.offset;
    const auto x = random_vector<T>(n + at, 7, -4.0, 4.0);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      expect_unscaled<B>(x, at, n, -1, T(0), T(0));
      expect_unscaled<B>(x, at, n, -1, T(0), T(1));
      if (n > 70001) {  // the long buffers once, with a NaN last (the others cost time, not coverage)
        expect_unscaled<B>(x, at, n, n - 1, bads[2], T(0));
        continue;
      }
      for (int64_t bad_at : {int64_t(0), n / 2, n - 1})
        for (const T bad : bads) expect_unscaled<B>(x, at, n, bad_at, bad, T(0));
    }
  }
}

TYPED_TEST(ElementwiseTest, AddAndScaleMayWorkInPlace) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const FlatCase& c : kCases) {
    if (!B::runs_elements(c.n + c.offset)) continue;
    const int64_t n = c.n, at = c.offset;
    SCOPED_TRACE(describe(c, 0));
    const auto a = random_vector<T>(n + at, 5), b = random_vector<T>(n + at, 6);
    typename B::template Array<T> sum_in_a(a), sum_in_b(b), dev_b(b), dev_a(a), scaled(a);
    B::add(n, sum_in_a.get() + at, dev_b.get() + at, sum_in_a.get() + at);  // y aliases a
    B::add(n, dev_a.get() + at, sum_in_b.get() + at, sum_in_b.get() + at);  // y aliases b
    B::scale(n, T(0.5), scaled.get() + at, scaled.get() + at);
    const auto got_a = sum_in_a.download(), got_b = sum_in_b.download(), got_scaled = scaled.download();
    for (int64_t i = at; i < n + at; ++i) {
      ASSERT_EQ(got_a[i], a[i] + b[i]) << i;
      ASSERT_EQ(got_b[i], a[i] + b[i]) << i;
      ASSERT_EQ(got_scaled[i], T(0.5) * a[i]) << i;
    }
  }
}

// The sum against the exact (long double) sum of positive values (no cancellation to hide
// behind): the CPU accumulates in double, so even its float result is the rounded true
// sum; the CUDA block-tree sum accumulates in float (B::sum_tolerance).
TYPED_TEST(ElementwiseTest, SumIsAccurateForAllLengths) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const FlatCase& c : kCases) {
    if (!B::runs_elements(c.n + c.offset)) continue;
    const int64_t n = c.n, at = c.offset;
    const auto x = random_vector<T>(n + at, 7, 0.0, 1.0);
    long double exact = 0;
    for (int64_t i = at; i < n + at; ++i) exact += x[i];
    typename B::template Array<T> dev_x(x);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> out(1);
      B::sum(n, dev_x.get() + at, out.get());
      EXPECT_NEAR(double(out.download()[0]), double(exact), B::sum_tolerance() * double(exact));
    }
  }
}

// The sum of squares (the gradient norm of --clip-grad-norm) against the exact (long double)
// one, of values of both signs: the sum's bound, plus, where the squares are rounded to the
// element type before they are added (CUDA, in float), one rounding of each square, half an
// epsilon relative (the CPU squares in double, exactly for float).
TYPED_TEST(ElementwiseTest, SumOfSquaresIsAccurateForAllLengths) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const double square_rounding = std::numeric_limits<T>::epsilon() / 2;
  for (const FlatCase& c : kCases) {
    if (!B::runs_elements(c.n + c.offset)) continue;
    const int64_t n = c.n, at = c.offset;
    const auto x = random_vector<T>(n + at, 9, -1.0, 1.0);
    long double exact = 0;
    for (int64_t i = at; i < n + at; ++i) exact += (long double)x[i] * (long double)x[i];
    typename B::template Array<T> dev_x(x);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> out(1);
      B::sum_of_squares(n, dev_x.get() + at, out.get());
      EXPECT_NEAR(double(out.download()[0]), double(exact), (B::sum_tolerance() + square_rounding) * double(exact));
      typename B::template Array<T> again(1);
      B::sum_of_squares(n, dev_x.get() + at, again.get());
      EXPECT_EQ(std::memcmp(&out.download()[0], &again.download()[0], sizeof(T)), 0) << "the same bits every run";
    }
  }
}

// A fixed order of additions: the same bits on every run, and on the CPU for every thread count.
TYPED_TEST(ElementwiseTest, SumRepeatsBitForBit) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const FlatCase& c : kCases) {
    if (!B::runs_elements(c.n + c.offset)) continue;
    SCOPED_TRACE(describe(c, 0));
    const int64_t n = c.n, at = c.offset;
    typename B::template Array<T> x(random_vector<T>(n + at, 8));
    std::vector<T> results;
    for (int threads : B::thread_counts()) {
      ScopedKernelThreads scope(threads);
      for (int run = 0; run < 2; ++run) {
        typename B::template Array<T> out(1);
        B::sum(n, x.get() + at, out.get());
        results.push_back(out.download()[0]);
      }
    }
    for (size_t i = 1; i < results.size(); ++i)
      EXPECT_EQ(std::memcmp(&results[0], &results[i], sizeof(T)), 0) << results[0] << " vs " << results[i];
  }
}

#ifdef DPCORE_HAVE_CUDA
// y = s[0] * x with the factor read from the device (what a captured graph updates): the
// same bits as scaling by the value.
TEST(ElementwiseCuda, ScaleByDeviceFactorEqualsScale) {
  SKIP_WITHOUT_CUDA();
  DeviceArray<float> factor(std::vector<float>{-0.75f});
  for (const FlatCase& c : kCases) {
    if (!CudaBackend::runs_elements(c.n + c.offset)) continue;
    SCOPED_TRACE(describe(c, 0));
    const int64_t n = c.n, at = c.offset;
    const auto a = random_floats(n + at, 1);
    DeviceArray<float> dev_a(a), y(n + at);
    kernels::cuda::scale_by(n, factor.get(), dev_a.get() + at, y.get() + at, nullptr);
    std::vector<float> want(n);
    kernels::cpu::scale<float>(n, -0.75f, a.data() + at, want.data());
    const std::vector<float> got = y.download();
    EXPECT_TRUE(untouched_before(got, at));
    EXPECT_TRUE(bitwise_equal(std::vector<float>(got.begin() + at, got.end()), want));
  }
}
#endif

}  // namespace
}  // namespace dpcore::testing
