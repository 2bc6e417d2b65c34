// max_pool2d (forward with argmax, backward, backward fused with the relu before it) on
// every backend (tests/support/op_backends.h) against the loop-nest reference of
// kernels/naive and the CPU kernel, on one table of shapes, and PyTorch's tie, padding and
// NaN rules on hand-made planes.
//
// Ties are placed deliberately (floored inputs, copied neighbours, relu zeros) and are
// exact by construction; the random inputs are a permutation of distinct values, so no
// window holds an accidental tie whose winner could depend on rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.h"
#include "kernels/naive/naive.h"
#include "support/op_backends.h"
#include "support/pool_cases.h"

namespace dpcore::testing {
namespace {

using kernels::Pool2dShape;

const PoolCase kCases[] = {
    {"models_2x2_stride2", pool_shape(2, 3, 8, 8, 2, 2, 2, 2, 0, 0)},
    {"odd_input_floor", pool_shape(1, 2, 7, 9, 2, 2, 2, 2, 0, 0)},  // floor drops the last row and column
    {"3x3_stride2_pad1_overlap", pool_shape(3, 2, 9, 6, 3, 3, 2, 2, 1, 1)},
    {"3x3_stride2_pad1_overlap_odd", pool_shape(1, 2, 7, 9, 3, 3, 2, 2, 1, 1)},
    {"resnet_stem_3x3_stride2_pad1", pool_shape(2, 8, 32, 32, 3, 3, 2, 2, 1, 1)},  // even plane, halved
    {"3x3_stride1_pad1_overlap", pool_shape(2, 1, 6, 5, 3, 3, 1, 1, 1, 1)},
    {"nonsquare_per_axis", pool_shape(2, 1, 5, 8, 3, 2, 1, 2, 1, 0)},  // per-axis kernel, stride, padding
    {"stride3", pool_shape(3, 2, 9, 7, 3, 3, 3, 3, 0, 0)},
    {"parallel_planes_14_wide", pool_shape(4, 16, 28, 28, 2, 2, 2, 2, 0, 0)},
    {"fashioncnn_pool2_7_wide", pool_shape(2, 3, 14, 14, 2, 2, 2, 2, 0, 0)},
    {"6_wide_odd", pool_shape(2, 2, 11, 13, 2, 2, 2, 2, 0, 0)},
    {"narrower_than_a_vector", pool_shape(3, 2, 5, 7, 2, 2, 2, 2, 0, 0)},  // rows of 3 outputs
    {"vggs_pool1", pool_shape(4, 64, 32, 32, 2, 2, 2, 2, 0, 0)},
};

std::string describe(const std::string& name, const Pool2dShape& s, int threads = 0) {
  std::ostringstream os;
  os << name << ": x[" << s.N << "," << s.C << "," << s.H << "," << s.W << "] kernel " << s.kernel_h << "x"
     << s.kernel_w << " stride " << s.stride_h << "x" << s.stride_w << " pad " << s.pad_h << "x" << s.pad_w
     << threads_label(threads);
  return os.str();
}

enum class Input { Distinct, TieHeavy, PlantedTies };
const char* input_name(Input input) {
  return input == Input::Distinct ? "distinct values" : input == Input::TieHeavy ? "tie-heavy values" : "planted ties";
}

// n distinct values in [-1, 1) in random order (spacing 2/n, far above float's resolution).
template <class T>
std::vector<T> distinct_values(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(-1.0 + 2.0 * double(order[i]) / double(n));
  return v;
}

// Inputs drawn from a handful of values, so most windows hold ties.
template <class T>
std::vector<T> tie_heavy_input(size_t n, uint64_t seed) {
  auto v = random_vector<T>(n, seed, -3.0, 3.0);
  for (T& x : v) x = std::floor(x);
  return v;
}

template <class T>
std::vector<T> pool_input(Input input, size_t n, uint64_t seed) {
  if (input == Input::TieHeavy) return tie_heavy_input<T>(n, seed);
  auto v = distinct_values<T>(n, seed);
  if (input == Input::PlantedTies)  // a copied right neighbour every 5 elements: the first must win
    for (size_t i = 0; i + 1 < n; i += 5) v[i + 1] = v[i];
  return v;
}

// The pool's input as a relu's output: zeros (tied within many windows), positive values
// and a few NaN, which relu lets through.
template <class T>
std::vector<T> relu_output(size_t n, Input input, uint64_t seed) {
  auto v = pool_input<T>(input, n, seed);
  for (T& x : v) x = x < T(0) ? T(0) : x;
  for (size_t i = 5; i < n; i += 23) v[i] = std::numeric_limits<T>::quiet_NaN();
  return v;
}

template <class B>
class MaxPool2dTest : public OpTest<B> {
 protected:
  using T = typename B::Scalar;
  // The backend's forward on host values: (y, argmax), both starting as all bits set.
  static std::pair<std::vector<T>, std::vector<int32_t>> forward(const Pool2dShape& s, const std::vector<T>& x) {
    typename B::template Array<T> dev_x(x), y(s.y_size());
    typename B::template Array<int32_t> argmax(s.y_size());
    B::max_pool2d_forward(s, dev_x.get(), y.get(), argmax.get());
    return {y.download(), argmax.download()};
  }
  static std::vector<T> backward(const Pool2dShape& s, const std::vector<T>& dy, const std::vector<int32_t>& argmax) {
    typename B::template Array<T> dev_dy(dy), dx(s.x_size());
    typename B::template Array<int32_t> dev_argmax(argmax);
    B::max_pool2d_backward(s, dev_dy.get(), dev_argmax.get(), dx.get());
    return dx.download();
  }
  static std::vector<T> relu_backward(const Pool2dShape& s, const std::vector<T>& dy, const std::vector<int32_t>& argmax,
                                      const std::vector<T>& relu_y) {
    typename B::template Array<T> dev_dy(dy), dev_relu_y(relu_y), dx(s.x_size());
    typename B::template Array<int32_t> dev_argmax(argmax);
    B::max_pool2d_relu_backward(s, dev_dy.get(), dev_argmax.get(), dev_relu_y.get(), dx.get());
    return dx.download();
  }
};
TYPED_TEST_SUITE(MaxPool2dTest, KernelBackends, BackendName);

// The same outputs and argmax as the reference, exactly; the backward within tolerance of
// the reference and bit for bit the CPU kernel's (the CUDA gather adds in the CPU
// scatter's order).
TYPED_TEST(MaxPool2dTest, ForwardAndBackwardMatchReference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const PoolCase& c : kCases) {
    const Pool2dShape& s = c.shape;
    if (!B::runs_elements(s.x_size())) continue;
    for (Input input : {Input::Distinct, Input::TieHeavy, Input::PlantedTies}) {
      const auto x = pool_input<T>(input, s.x_size(), 1);
      const auto dy = random_vector<T>(s.y_size(), 2);
      auto want_y = nan_filled<T>(s.y_size());
      std::vector<int32_t> want_argmax(s.y_size(), -7);
      naive::max_pool2d_forward(s, x.data(), want_y.data(), want_argmax.data());
      auto want_dx = nan_filled<T>(s.x_size()), cpu_dx = nan_filled<T>(s.x_size());
      naive::max_pool2d_backward(s, dy.data(), want_argmax.data(), want_dx.data());
      kernels::cpu::max_pool2d_backward(s, dy.data(), want_argmax.data(), cpu_dx.data());
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c.name, s, threads) + ", " + input_name(input));
        ScopedKernelThreads scope(threads);
        const auto [y, argmax] = TestFixture::forward(s, x);
        EXPECT_EQ(y, want_y);
        EXPECT_EQ(argmax, want_argmax);
        const std::vector<T> dx = TestFixture::backward(s, dy, want_argmax);
        EXPECT_OP_CLOSE(B, dx, want_dx);
        EXPECT_TRUE(bitwise_equal(dx, cpu_dx));
      }
    }
  }
}

// The CPU's 2x2 fast path splits each row into whole vectors and a last, overlapping one:
// every row width from 1 to 12 outputs, even and odd, against the reference.
TYPED_TEST(MaxPool2dTest, TwoByTwoMatchesReferenceAtEveryRowWidth) {
  using T = typename TypeParam::Scalar;
  for (int64_t W = 2; W <= 25; ++W) {
    const Pool2dShape s = pool_shape(2, 3, 5, W, 2, 2, 2, 2, 0, 0);
    SCOPED_TRACE(describe("2x2", s));
    const auto x = tie_heavy_input<T>(s.x_size(), uint64_t(W));
    auto want_y = nan_filled<T>(s.y_size());
    std::vector<int32_t> want_argmax(s.y_size(), -7);
    naive::max_pool2d_forward(s, x.data(), want_y.data(), want_argmax.data());
    const auto [y, argmax] = TestFixture::forward(s, x);
    EXPECT_EQ(y, want_y);
    EXPECT_EQ(argmax, want_argmax);
  }
}

TYPED_TEST(MaxPool2dTest, TiesGoToTheFirstElementInRowMajorOrder) {
  using T = typename TypeParam::Scalar;
  const Pool2dShape s = pool_shape(1, 1, 4, 4, 2, 2, 2, 2, 0, 0);
  std::vector<T> x(16, T(5));
  x[1 * 4 + 3] = T(6);  // the top-right window's max is unique, at (1, 3)
  x[3 * 4 + 0] = T(5);  // the bottom-left window stays all ties
  const auto [y, argmax] = TestFixture::forward(s, x);
  EXPECT_EQ(y, (std::vector<T>{5, 6, 5, 5}));
  EXPECT_EQ(argmax, (std::vector<int32_t>{0 * 4 + 0, 1 * 4 + 3, 2 * 4 + 0, 2 * 4 + 2}));
}

TYPED_TEST(MaxPool2dTest, PaddingNeverWinsEvenOverNegativeValues) {
  using T = typename TypeParam::Scalar;
  // 3x3 windows, stride 2, padding 1 over a 3x3 plane of negative values: padding is -inf,
  // not 0, so each output is a real (negative) element and argmax points inside the plane.
  const Pool2dShape s = pool_shape(1, 1, 3, 3, 3, 3, 2, 2, 1, 1);
  ASSERT_EQ(s.P, 2);
  ASSERT_EQ(s.Q, 2);
  const auto [y, argmax] = TestFixture::forward(s, std::vector<T>{-9, -8, -7, -6, -5, -4, -3, -2, -1});
  EXPECT_EQ(y, (std::vector<T>{-5, -4, -2, -1}));
  EXPECT_EQ(argmax, (std::vector<int32_t>{4, 5, 7, 8}));
}

TYPED_TEST(MaxPool2dTest, AllMinusInfinityWindowPointsAtItsFirstRealElement) {
  using T = typename TypeParam::Scalar;
  const T inf = std::numeric_limits<T>::infinity();
  const Pool2dShape s = pool_shape(1, 1, 2, 2, 2, 2, 1, 1, 1, 1);
  const auto [y, argmax] = TestFixture::forward(s, std::vector<T>{-inf, -inf, -inf, -inf});
  for (T v : y) EXPECT_EQ(v, -inf);
  // Windows start at (-1,-1), (-1,0), (0,-1)... : first real elements are (0,0), (0,0), (0,1), ...
  EXPECT_EQ(argmax, (std::vector<int32_t>{0, 0, 1, 0, 0, 1, 2, 2, 3}));
}

TYPED_TEST(MaxPool2dTest, NanWinsItsWindowOnly) {
  using T = typename TypeParam::Scalar;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const Pool2dShape s = pool_shape(1, 1, 2, 4, 2, 2, 2, 2, 0, 0);
  const auto [y, argmax] = TestFixture::forward(s, std::vector<T>{1, 9, 2, 3,
                                                                  nan, 4, 5, 6});
  EXPECT_TRUE(std::isnan(y[0])) << "a NaN after a larger value must still win";
  EXPECT_EQ(argmax[0], 4);
  EXPECT_EQ(y[1], T(6));
  EXPECT_EQ(argmax[1], 7);
}

TYPED_TEST(MaxPool2dTest, BackwardAccumulatesOverlappingWindows) {
  using T = typename TypeParam::Scalar;
  // 3x3 windows, stride 1 on a 3x4 plane: the large centre value is the max of both windows.
  const Pool2dShape s = pool_shape(1, 1, 3, 4, 3, 3, 1, 1, 0, 0);
  const auto [y, argmax] = TestFixture::forward(s, std::vector<T>{0, 0, 0, 0,
                                                                  0, 0, 9, 0,
                                                                  0, 0, 0, 0});
  const std::vector<T> dx = TestFixture::backward(s, {T(0.5), T(0.25)}, argmax);
  std::vector<T> expected(12, T(0));
  expected[6] = T(0.75);
  EXPECT_EQ(dx, expected);
}

// The fused backward is bit for bit the CPU's max_pool2d_backward then relu_backward,
// signed zeros and NaN included.
TYPED_TEST(MaxPool2dTest, FusedReluBackwardEqualsBackwardThenReluBackwardBitForBit) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const PoolCase& c : kCases) {
    const Pool2dShape& s = c.shape;
    if (!B::runs_elements(s.x_size())) continue;
    for (Input input : {Input::Distinct, Input::TieHeavy, Input::PlantedTies}) {
      const auto relu_y = relu_output<T>(s.x_size(), input, 3);
      std::vector<T> pooled(s.y_size());
      std::vector<int32_t> argmax(s.y_size());
      kernels::cpu::max_pool2d_forward(s, relu_y.data(), pooled.data(), argmax.data());
      auto dy = random_vector<T>(s.y_size(), 4);
      dy[0] = -T(0);  // the scatter adds it to zero: +0 where it is not masked
      dy[s.y_size() - 1] = std::numeric_limits<T>::quiet_NaN();
      auto expected = nan_filled<T>(s.x_size());
      kernels::cpu::max_pool2d_backward(s, dy.data(), argmax.data(), expected.data());
      kernels::cpu::relu_backward(s.x_size(), expected.data(), relu_y.data(), expected.data());
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c.name, s, threads) + ", " + input_name(input));
        ScopedKernelThreads scope(threads);
        EXPECT_TRUE(bitwise_equal(TestFixture::relu_backward(s, dy, argmax, relu_y), expected));
      }
    }
  }
}

TYPED_TEST(MaxPool2dTest, FusedReluBackwardMasksWhereTheReluOutputIsNotPositive) {
  using T = typename TypeParam::Scalar;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const Pool2dShape s = pool_shape(1, 1, 2, 6, 2, 2, 2, 2, 0, 0);
  // Window 0 is won by a NaN (its gradient passes), window 1 is all zeros (the tie goes to
  // its first element, whose relu output is 0: masked), window 2 by the positive 4.
  const std::vector<T> relu_y = {1, nan, 0, 0, 2, 4,
                                 0, 3,   0, 0, 1, 0};
  const auto [y, argmax] = TestFixture::forward(s, relu_y);
  ASSERT_EQ(argmax, (std::vector<int32_t>{1, 2, 5}));
  const std::vector<T> dx = TestFixture::relu_backward(s, {T(0.5), T(0.25), T(-2)}, argmax, relu_y);
  std::vector<T> expected(12, T(0));
  expected[1] = T(0.5);
  expected[5] = T(-2);
  EXPECT_TRUE(bitwise_equal(dx, expected));
}

}  // namespace
}  // namespace dpcore::testing
