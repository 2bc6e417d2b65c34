// max_pool2d: against the loop-nest reference, and PyTorch's tie, padding and NaN rules.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "engine/error.h"
#include "kernel_checks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/naive.h"

namespace dpcore::testing {
namespace {

namespace cpu = kernels::cpu;
using kernels::Pool2dShape;

Pool2dShape pool_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                       int64_t ph, int64_t pw) {
  Pool2dShape s;
  s.N = N, s.C = C, s.H = H, s.W = W, s.kernel_h = kh, s.kernel_w = kw;
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  s.P = kernels::conv_out_size(H, kh, sh, ph);
  s.Q = kernels::conv_out_size(W, kw, sw, pw);
  return s;
}

std::vector<Pool2dShape> pool_shapes() {
  return {
      pool_shape(2, 3, 8, 8, 2, 2, 2, 2, 0, 0),  // the reference models' pool
      pool_shape(1, 2, 7, 9, 2, 2, 2, 2, 0, 0),  // odd sizes: floor drops the last row and column
      pool_shape(3, 2, 9, 6, 3, 3, 2, 2, 1, 1),  // overlapping windows with padding
      pool_shape(2, 1, 5, 8, 3, 2, 1, 2, 1, 0),  // non-square kernel, per-axis stride and padding
      pool_shape(4, 16, 28, 28, 2, 2, 2, 2, 0, 0),  // enough planes to run in parallel; 14-wide rows
      pool_shape(2, 3, 14, 14, 2, 2, 2, 2, 0, 0),   // fashioncnn's second pool: 7-wide rows
      pool_shape(2, 2, 11, 13, 2, 2, 2, 2, 0, 0),   // 6-wide rows, odd height and width
      pool_shape(3, 2, 5, 7, 2, 2, 2, 2, 0, 0),     // rows narrower than a vector (3 outputs)
  };
}

std::string describe(const Pool2dShape& s) {
  std::ostringstream os;
  os << "x[" << s.N << "," << s.C << "," << s.H << "," << s.W << "] kernel " << s.kernel_h << "x" << s.kernel_w
     << " stride " << s.stride_h << "x" << s.stride_w << " pad " << s.pad_h << "x" << s.pad_w;
  return os.str();
}

// Inputs drawn from a handful of values, so most windows hold ties.
template <class T>
std::vector<T> tie_heavy_input(size_t n, uint64_t seed) {
  auto v = random_vector<T>(n, seed, -3.0, 3.0);
  for (T& x : v) x = std::floor(x);
  return v;
}

template <class T>
class MaxPoolTest : public ::testing::Test {};
TYPED_TEST_SUITE(MaxPoolTest, KernelTypes);

TYPED_TEST(MaxPoolTest, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  for (const Pool2dShape& s : pool_shapes()) {
    for (int threads : kernel_thread_counts()) {
      for (bool ties : {false, true}) {
        SCOPED_TRACE(describe(s) + (ties ? ", tied values" : ", random values") + ", " + std::to_string(threads) +
                     " threads");
        ScopedKernelThreads scope(threads);
        auto x = ties ? tie_heavy_input<T>(s.x_size(), 1) : random_vector<T>(s.x_size(), 1);
        auto y = nan_filled<T>(s.y_size()), expected_y = nan_filled<T>(s.y_size());
        std::vector<int32_t> argmax(s.y_size(), -7), expected_argmax(s.y_size(), -7);
        cpu::max_pool2d_forward(s, x.data(), y.data(), argmax.data());
        cpu::naive::max_pool2d_forward(s, x.data(), expected_y.data(), expected_argmax.data());
        EXPECT_EQ(y, expected_y);
        EXPECT_EQ(argmax, expected_argmax);

        auto dy = random_vector<T>(s.y_size(), 2);
        auto dx = nan_filled<T>(s.x_size()), expected_dx = nan_filled<T>(s.x_size());
        cpu::max_pool2d_backward(s, dy.data(), argmax.data(), dx.data());
        cpu::naive::max_pool2d_backward(s, dy.data(), argmax.data(), expected_dx.data());
        EXPECT_KERNEL_CLOSE(T, dx, expected_dx);
      }
    }
  }
}

// The 2x2 fast path splits each row into whole vectors and a last, overlapping one: every
// row width from 1 to 12 outputs, even and odd, against the reference.
TYPED_TEST(MaxPoolTest, TwoByTwoMatchesReferenceAtEveryRowWidth) {
  using T = TypeParam;
  for (int64_t W = 2; W <= 25; ++W) {
    const Pool2dShape s = pool_shape(2, 3, 5, W, 2, 2, 2, 2, 0, 0);
    SCOPED_TRACE(describe(s));
    const auto x = tie_heavy_input<T>(s.x_size(), uint64_t(W));
    auto y = nan_filled<T>(s.y_size()), expected_y = nan_filled<T>(s.y_size());
    std::vector<int32_t> argmax(s.y_size(), -7), expected_argmax(s.y_size(), -7);
    cpu::max_pool2d_forward(s, x.data(), y.data(), argmax.data());
    cpu::naive::max_pool2d_forward(s, x.data(), expected_y.data(), expected_argmax.data());
    EXPECT_EQ(y, expected_y);
    EXPECT_EQ(argmax, expected_argmax);
  }
}

TYPED_TEST(MaxPoolTest, TiesGoToTheFirstElementInRowMajorOrder) {
  using T = TypeParam;
  const Pool2dShape s = pool_shape(1, 1, 4, 4, 2, 2, 2, 2, 0, 0);
  std::vector<T> x(16, T(5));
  x[1 * 4 + 3] = T(6);  // the top-right window's max is unique, at (1, 3)
  x[3 * 4 + 0] = T(5);  // the bottom-left window stays all ties
  std::vector<T> y(4);
  std::vector<int32_t> argmax(4);
  cpu::max_pool2d_forward(s, x.data(), y.data(), argmax.data());
  EXPECT_EQ(y, (std::vector<T>{5, 6, 5, 5}));
  EXPECT_EQ(argmax, (std::vector<int32_t>{0 * 4 + 0, 1 * 4 + 3, 2 * 4 + 0, 2 * 4 + 2}));
}

TYPED_TEST(MaxPoolTest, PaddingNeverWinsEvenOverNegativeValues) {
  using T = TypeParam;
  // 3x3 windows, stride 2, padding 1 over a 3x3 plane of negative values: padding is -inf,
  // not 0, so each output is a real (negative) element and argmax points inside the plane.
  const Pool2dShape s = pool_shape(1, 1, 3, 3, 3, 3, 2, 2, 1, 1);
  std::vector<T> x = {-9, -8, -7, -6, -5, -4, -3, -2, -1};
  std::vector<T> y(s.y_size());
  std::vector<int32_t> argmax(s.y_size());
  cpu::max_pool2d_forward(s, x.data(), y.data(), argmax.data());
  ASSERT_EQ(s.P, 2);
  ASSERT_EQ(s.Q, 2);
  EXPECT_EQ(y, (std::vector<T>{-5, -4, -2, -1}));
  EXPECT_EQ(argmax, (std::vector<int32_t>{4, 5, 7, 8}));
}

TYPED_TEST(MaxPoolTest, AllMinusInfinityWindowPointsAtItsFirstRealElement) {
  using T = TypeParam;
  const T inf = std::numeric_limits<T>::infinity();
  const Pool2dShape s = pool_shape(1, 1, 2, 2, 2, 2, 1, 1, 1, 1);
  std::vector<T> x = {-inf, -inf, -inf, -inf};
  std::vector<T> y(s.y_size());
  std::vector<int32_t> argmax(s.y_size());
  cpu::max_pool2d_forward(s, x.data(), y.data(), argmax.data());
  for (T v : y) EXPECT_EQ(v, -inf);
  // Windows start at (-1,-1), (-1,0), (0,-1)... : first real elements are (0,0), (0,0), (0,1), ...
  EXPECT_EQ(argmax, (std::vector<int32_t>{0, 0, 1, 0, 0, 1, 2, 2, 3}));
}

TYPED_TEST(MaxPoolTest, NanWinsItsWindowOnly) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const Pool2dShape s = pool_shape(1, 1, 2, 4, 2, 2, 2, 2, 0, 0);
  std::vector<T> x = {1, 9, 2, 3,
                      nan, 4, 5, 6};
  std::vector<T> y(2);
  std::vector<int32_t> argmax(2);
  cpu::max_pool2d_forward(s, x.data(), y.data(), argmax.data());
  EXPECT_TRUE(std::isnan(y[0])) << "a NaN after a larger value must still win";
  EXPECT_EQ(argmax[0], 4);
  EXPECT_EQ(y[1], T(6));
  EXPECT_EQ(argmax[1], 7);
}

TYPED_TEST(MaxPoolTest, BackwardAccumulatesOverlappingWindows) {
  using T = TypeParam;
  // 3x3 windows, stride 1 on a 3x4 plane: the large centre value is the max of both windows.
  const Pool2dShape s = pool_shape(1, 1, 3, 4, 3, 3, 1, 1, 0, 0);
  std::vector<T> x = {0, 0, 0, 0,
                      0, 0, 9, 0,
                      0, 0, 0, 0};
  std::vector<T> y(2), dy = {T(0.5), T(0.25)}, dx = nan_filled<T>(12);
  std::vector<int32_t> argmax(2);
  cpu::max_pool2d_forward(s, x.data(), y.data(), argmax.data());
  cpu::max_pool2d_backward(s, dy.data(), argmax.data(), dx.data());
  std::vector<T> expected(12, T(0));
  expected[6] = T(0.75);
  EXPECT_EQ(dx, expected);
}

// The pool's input as a relu's output: zeros (tied within many windows), positive values
// and a few NaN, which relu lets through.
template <class T>
std::vector<T> relu_output(size_t n, bool ties, uint64_t seed) {
  auto v = ties ? tie_heavy_input<T>(n, seed) : random_vector<T>(n, seed);
  for (T& x : v) x = x < T(0) ? T(0) : x;
  for (size_t i = 5; i < n; i += 23) v[i] = std::numeric_limits<T>::quiet_NaN();
  return v;
}

TYPED_TEST(MaxPoolTest, FusedReluBackwardEqualsBackwardThenReluBackwardBitForBit) {
  using T = TypeParam;
  for (const Pool2dShape& s : pool_shapes()) {
    for (int threads : kernel_thread_counts()) {
      for (bool ties : {false, true}) {
        SCOPED_TRACE(describe(s) + (ties ? ", tied values" : ", random values") + ", " + std::to_string(threads) +
                     " threads");
        ScopedKernelThreads scope(threads);
        const auto relu_y = relu_output<T>(s.x_size(), ties, 3);
        std::vector<T> y(s.y_size());
        std::vector<int32_t> argmax(s.y_size());
        cpu::max_pool2d_forward(s, relu_y.data(), y.data(), argmax.data());
        auto dy = random_vector<T>(s.y_size(), 4);
        dy[0] = -T(0);  // the scatter adds it to zero: +0 where it is not masked
        dy[s.y_size() - 1] = std::numeric_limits<T>::quiet_NaN();

        auto dx = nan_filled<T>(s.x_size()), expected = nan_filled<T>(s.x_size());
        cpu::max_pool2d_relu_backward(s, dy.data(), argmax.data(), relu_y.data(), dx.data());
        cpu::max_pool2d_backward(s, dy.data(), argmax.data(), expected.data());
        cpu::relu_backward(s.x_size(), expected.data(), relu_y.data(), expected.data());
        EXPECT_TRUE(bitwise_equal(dx, expected));
      }
    }
  }
}

TYPED_TEST(MaxPoolTest, FusedReluBackwardMasksWhereTheReluOutputIsNotPositive) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const Pool2dShape s = pool_shape(1, 1, 2, 6, 2, 2, 2, 2, 0, 0);
  // Window 0 is won by a NaN (its gradient passes), window 1 is all zeros (the tie goes to
  // its first element, whose relu output is 0: masked), window 2 by the positive 4.
  std::vector<T> relu_y = {1, nan, 0, 0, 2, 4,
                           0, 3,   0, 0, 1, 0};
  std::vector<T> y(3), dy = {T(0.5), T(0.25), T(-2)}, dx = nan_filled<T>(12);
  std::vector<int32_t> argmax(3);
  cpu::max_pool2d_forward(s, relu_y.data(), y.data(), argmax.data());
  ASSERT_EQ(argmax, (std::vector<int32_t>{1, 2, 5}));
  cpu::max_pool2d_relu_backward(s, dy.data(), argmax.data(), relu_y.data(), dx.data());
  std::vector<T> expected(12, T(0));
  expected[1] = T(0.5);
  expected[5] = T(-2);
  EXPECT_TRUE(bitwise_equal(dx, expected));
}

TEST(MaxPoolShapeTest, RejectsPaddingBeyondHalfTheKernel) {
  const Pool2dShape s = pool_shape(1, 1, 4, 4, 2, 2, 2, 2, 2, 0);
  std::vector<float> x(16), y(s.y_size());
  std::vector<int32_t> argmax(s.y_size());
  EXPECT_THROW(cpu::max_pool2d_forward(s, x.data(), y.data(), argmax.data()), dpcore::Error);
}

}  // namespace
}  // namespace dpcore::testing
