// log_softmax, nll loss and the fused cross-entropy.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kernel_checks.h"
#include "kernels/cpu/kernels.h"

namespace dpcore::testing {
namespace {

namespace cpu = kernels::cpu;

template <class T>
class SoftmaxLossTest : public ::testing::Test {};
TYPED_TEST_SUITE(SoftmaxLossTest, KernelTypes);

// Tolerance for quantities that pass through one rounding to T plus a few exp/log calls.
template <class T>
double rounding_tolerance() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-13;
}

std::vector<int64_t> targets(int64_t rows, int64_t cols) {
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = (r * 7 + 3) % cols;
  return t;
}

TYPED_TEST(SoftmaxLossTest, LogSoftmaxRowsAreNormalisedLogProbabilities) {
  using T = TypeParam;
  for (double magnitude : {1.0, 1e4}) {  // 1e4: a naive exp overflows, the max-subtracted one must not
    SCOPED_TRACE("inputs in +-" + std::to_string(magnitude));
    const int64_t rows = 9, cols = 13;
    auto x = random_vector<T>(rows * cols, 1, -magnitude, magnitude);
    auto y = nan_filled<T>(rows * cols);
    cpu::log_softmax_forward(rows, cols, x.data(), y.data());
    for (int64_t r = 0; r < rows; ++r) {
      double total = 0.0;
      for (int64_t j = 0; j < cols; ++j) {
        ASSERT_TRUE(std::isfinite(y[r * cols + j])) << "row " << r << " col " << j;
        EXPECT_LE(y[r * cols + j], T(0));
        total += std::exp(double(y[r * cols + j]));
        // Differences within a row are kept: y_j - y_0 = x_j - x_0.
        EXPECT_NEAR(double(y[r * cols + j]) - double(y[r * cols]), double(x[r * cols + j]) - double(x[r * cols]),
                    rounding_tolerance<T>() * std::max(1.0, magnitude) * 4);
      }
      EXPECT_NEAR(total, 1.0, 4 * cols * rounding_tolerance<T>()) << "row " << r;
    }
  }
}

TYPED_TEST(SoftmaxLossTest, LogSoftmaxOfEqualLogitsIsMinusLogCols) {
  using T = TypeParam;
  const int64_t cols = 10;
  std::vector<T> x(cols, T(3.5)), y = nan_filled<T>(cols);
  cpu::log_softmax_forward(1, cols, x.data(), y.data());
  for (T v : y) EXPECT_NEAR(double(v), -std::log(10.0), rounding_tolerance<T>());
}

// Central differences of L(x) = sum(dy * log_softmax(x)) in double.
TEST(LogSoftmaxBackwardTest, MatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 6;
  auto x = random_vector<double>(rows * cols, 2, -2.0, 2.0), dy = random_vector<double>(rows * cols, 3);
  std::vector<double> y(rows * cols), dx = nan_filled<double>(rows * cols);
  cpu::log_softmax_forward(rows, cols, x.data(), y.data());
  cpu::log_softmax_backward(rows, cols, dy.data(), y.data(), dx.data());
  auto loss = [&](const std::vector<double>& in) {
    std::vector<double> out(in.size());
    cpu::log_softmax_forward(rows, cols, in.data(), out.data());
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

TYPED_TEST(SoftmaxLossTest, NllPicksTheTargetLogProbabilities) {
  using T = TypeParam;
  const int64_t rows = 3, cols = 4;
  std::vector<T> logp = {-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -0.25, -9, -10};
  std::vector<int64_t> target = {2, 0, 1};
  T loss = std::numeric_limits<T>::quiet_NaN();
  cpu::nll_loss_forward(rows, cols, logp.data(), target.data(), &loss);
  EXPECT_EQ(loss, T(3 + 5 + 0.25));

  auto dlogp = nan_filled<T>(rows * cols);
  cpu::nll_loss_backward(rows, cols, T(0.5), target.data(), dlogp.data());
  std::vector<T> expected(rows * cols, T(0));
  expected[0 * cols + 2] = expected[1 * cols + 0] = expected[2 * cols + 1] = T(-0.5);
  EXPECT_EQ(dlogp, expected);
}

// The fused kernel must equal log_softmax -> nll forward, then nll -> log_softmax backward.
TYPED_TEST(SoftmaxLossTest, FusedCrossEntropyEqualsComposition) {
  using T = TypeParam;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 2}, {64, 10}, {5, 1000}, {300, 130}}) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + ", " + std::to_string(threads) + " threads");
      ScopedKernelThreads scope(threads);
      auto x = random_vector<T>(rows * cols, 4, -5.0, 5.0);
      auto target = targets(rows, cols);
      const T grad_scale = T(1.0 / rows);

      T fused_loss = std::numeric_limits<T>::quiet_NaN();
      auto fused_grad = nan_filled<T>(rows * cols);
      cpu::cross_entropy_forward_backward(rows, cols, x.data(), target.data(), grad_scale, &fused_loss,
                                          fused_grad.data());

      auto logp = nan_filled<T>(rows * cols), dlogp = nan_filled<T>(rows * cols), grad = nan_filled<T>(rows * cols);
      T loss = std::numeric_limits<T>::quiet_NaN();
      cpu::log_softmax_forward(rows, cols, x.data(), logp.data());
      cpu::nll_loss_forward(rows, cols, logp.data(), target.data(), &loss);
      cpu::nll_loss_backward(rows, cols, grad_scale, target.data(), dlogp.data());
      cpu::log_softmax_backward(rows, cols, dlogp.data(), logp.data(), grad.data());

      EXPECT_NEAR(double(fused_loss), double(loss), 4 * rounding_tolerance<T>() * std::abs(double(loss)));
      EXPECT_LE(normwise_error(fused_grad, grad), 4 * rounding_tolerance<T>());
      // Each row of softmax - onehot sums to zero.
      for (int64_t r = 0; r < rows; ++r) {
        double row_sum = 0.0;
        for (int64_t j = 0; j < cols; ++j) row_sum += fused_grad[r * cols + j];
        EXPECT_NEAR(row_sum, 0.0, 4 * rounding_tolerance<T>() * double(grad_scale)) << "row " << r;
      }
    }
  }
}

TYPED_TEST(SoftmaxLossTest, FusedCrossEntropyStaysFiniteOnLargeLogits) {
  using T = TypeParam;
  const int64_t rows = 4, cols = 10;
  auto x = random_vector<T>(rows * cols, 5, -1e4, 1e4);
  auto target = targets(rows, cols);
  T loss = 0;
  auto grad = nan_filled<T>(rows * cols);
  cpu::cross_entropy_forward_backward(rows, cols, x.data(), target.data(), T(1), &loss, grad.data());
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GE(loss, T(0));
  for (T g : grad) EXPECT_TRUE(std::isfinite(g));
}

}  // namespace
}  // namespace dpcore::testing
