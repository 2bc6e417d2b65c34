// log_softmax over the last dimension on every backend (tests/support/op_backends.h):
// forward and backward against float64 computations, the rows as normalised log
// probabilities (also for logits of 1e4, where a naive exp overflows), and, on the CPU in
// double, the backward against finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/op_backends.h"
#include "support/row_cases.h"

namespace dpcore::testing {
namespace {

// y = x - log(sum(exp(x))) per row, in double from the inputs as given.
template <class T>
std::vector<double> log_softmax_float64(int64_t rows, int64_t cols, const std::vector<T>& x) {
  std::vector<double> y(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    double max = -INFINITY, total = 0.0;
    for (int64_t j = 0; j < cols; ++j) max = std::max(max, double(x[r * cols + j]));
    for (int64_t j = 0; j < cols; ++j) total += std::exp(double(x[r * cols + j]) - max);
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = double(x[r * cols + j]) - max - std::log(total);
  }
  return y;
}

template <class T>
std::vector<T> rounded(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class B>
class LogSoftmaxTest : public OpTest<B> {};
TYPED_TEST_SUITE(LogSoftmaxTest, KernelBackends, BackendName);

TYPED_TEST(LogSoftmaxTest, ForwardAndBackwardMatchFloat64) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const RowsCase& c : kRowsCases) {
    const auto [rows, cols] = c;
    const auto x = random_vector<T>(rows * cols, 1, -5.0, 5.0), dy = random_vector<T>(rows * cols, 2);
    const std::vector<double> want_y = log_softmax_float64(rows, cols, x);
    // dx = dy - exp(y) * sum(dy) per row.
    std::vector<double> want_dx(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      double dy_sum = 0.0;
      for (int64_t j = 0; j < cols; ++j) dy_sum += double(dy[r * cols + j]);
      for (int64_t j = 0; j < cols; ++j)
        want_dx[r * cols + j] = double(dy[r * cols + j]) - std::exp(want_y[r * cols + j]) * dy_sum;
    }
    typename B::template Array<T> dev_x(x), dev_dy(dy);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> y(rows * cols), dx(rows * cols);
      B::log_softmax_forward(rows, cols, dev_x.get(), y.get());
      EXPECT_OP_CLOSE(B, y.download(), rounded<T>(want_y));
      B::log_softmax_backward(rows, cols, dev_dy.get(), y.get(), dx.get());
      EXPECT_OP_CLOSE(B, dx.download(), rounded<T>(want_dx));
    }
  }
}

TYPED_TEST(LogSoftmaxTest, RowsAreNormalisedLogProbabilities) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const RowsCase& c : kRowsCases) {
    const auto [rows, cols] = c;
    for (double magnitude : {1.0, 1e4}) {  // 1e4: a naive exp overflows, the max-subtracted one must not
      const auto x = random_vector<T>(rows * cols, 1, -magnitude, magnitude);
      typename B::template Array<T> dev_x(x);
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c, threads) + ", inputs in +-" + std::to_string(magnitude));
        ScopedKernelThreads scope(threads);
        typename B::template Array<T> dev_y(rows * cols);
        B::log_softmax_forward(rows, cols, dev_x.get(), dev_y.get());
        const std::vector<T> y = dev_y.download();
        for (int64_t r = 0; r < rows; ++r) {
          double total = 0.0;
          for (int64_t j = 0; j < cols; ++j) {
            ASSERT_TRUE(std::isfinite(y[r * cols + j])) << "row " << r << " col " << j;
            EXPECT_LE(y[r * cols + j], T(0));
            total += std::exp(double(y[r * cols + j]));
            // Differences within a row are kept: y_j - y_0 = x_j - x_0.
            EXPECT_NEAR(double(y[r * cols + j]) - double(y[r * cols]), double(x[r * cols + j]) - double(x[r * cols]),
                        B::rounding_tolerance() * std::max(1.0, magnitude) * 4);
          }
          EXPECT_NEAR(total, 1.0, 4 * cols * B::rounding_tolerance()) << "row " << r;
        }
      }
    }
  }
}

TYPED_TEST(LogSoftmaxTest, EqualLogitsGiveMinusLogCols) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const RowsCase& c : kRowsCases) {
    SCOPED_TRACE(describe(c, 0));
    const auto [rows, cols] = c;
    typename B::template Array<T> x(std::vector<T>(rows * cols, T(3.5))), y(rows * cols);
    B::log_softmax_forward(rows, cols, x.get(), y.get());
    for (T v : y.download()) EXPECT_NEAR(double(v), -std::log(double(cols)), B::rounding_tolerance());
  }
}

// Central differences of L(x) = sum(dy * log_softmax(x)), in double on the CPU.
TEST(LogSoftmaxBackwardTest, MatchesFiniteDifferences) {
  using B = CpuBackend<double>;
  const int64_t rows = 3, cols = 6;
  auto x = random_vector<double>(rows * cols, 2, -2.0, 2.0), dy = random_vector<double>(rows * cols, 3);
  std::vector<double> y(rows * cols), dx = nan_filled<double>(rows * cols);
  B::log_softmax_forward(rows, cols, x.data(), y.data());
  B::log_softmax_backward(rows, cols, dy.data(), y.data(), dx.data());
  auto loss = [&](const std::vector<double>& in) {
    std::vector<double> out(in.size());
    B::log_softmax_forward(rows, cols, in.data(), out.data());
    double l = 0.0;
    for (size_t i = 0; i < out.size(); ++i) l += dy[i] * out[i];
    return l;
  };
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    auto plus = x, minus = x;
    plus[i] += h, minus[i] -= h;
    EXPECT_NEAR(dx[i], (loss(plus) - loss(minus)) / (2 * h), 1e-8) << "element " << i;
  }
}

}  // namespace
}  // namespace dpcore::testing
