// The fused cross-entropy (log_softmax + nll forward and backward in one pass per row) on
// every backend (tests/support/op_backends.h): against a float64 computation, against the
// backend's own composition of log_softmax and nll_loss, on logits of 1e4, and with
// ignored targets (ignore_index) under the sum and the mean over the counted rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/op_backends.h"
#include "support/row_cases.h"

namespace dpcore::testing {
namespace {

template <class B>
class CrossEntropyTest : public OpTest<B> {};
TYPED_TEST_SUITE(CrossEntropyTest, KernelBackends, BackendName);

// loss_sum = sum_r (lse_r - x[r, target_r]), dlogits = grad_scale * (softmax - onehot).
TYPED_TEST(CrossEntropyTest, MatchesFloat64Reference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const RowsCase& c : kRowsCases) {
    const auto [rows, cols] = c;
    const auto x = random_vector<T>(rows * cols, 1, -5.0, 5.0);
    const auto target = random_targets(rows, cols);
    const T grad_scale = T(1.0 / double(rows));
    double want_loss = 0.0;
    std::vector<T> want_grad(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      double max = -INFINITY, total = 0.0;
      for (int64_t j = 0; j < cols; ++j) max = std::max(max, double(x[r * cols + j]));
      for (int64_t j = 0; j < cols; ++j) total += std::exp(double(x[r * cols + j]) - max);
      const double lse = max + std::log(total);
      want_loss += lse - double(x[r * cols + target[r]]);
      for (int64_t j = 0; j < cols; ++j)
        want_grad[r * cols + j] =
            T(double(grad_scale) * (std::exp(double(x[r * cols + j]) - lse) - (j == target[r] ? 1.0 : 0.0)));
    }
    typename B::template Array<T> dev_x(x);
    typename B::template Array<int64_t> dev_target(target);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> loss(1), grad(rows * cols);
      B::cross_entropy_forward_backward(rows, cols, dev_x.get(), dev_target.get(), grad_scale, loss.get(), grad.get());
      EXPECT_NEAR(double(loss.download()[0]), want_loss, B::tolerance() * std::abs(want_loss));
      EXPECT_OP_CLOSE(B, grad.download(), want_grad);
    }
  }
}

// The fused kernel must equal log_softmax -> nll forward, then nll -> log_softmax backward,
// of the same backend; and each row of softmax - onehot sums to zero.
TYPED_TEST(CrossEntropyTest, FusedEqualsComposition) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const RowsCase& c : kRowsCases) {
    const auto [rows, cols] = c;
    const auto target = random_targets(rows, cols);
    typename B::template Array<T> x(random_vector<T>(rows * cols, 4, -5.0, 5.0));
    typename B::template Array<int64_t> dev_target(target);
    const T grad_scale = T(1.0 / double(rows));
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> fused_loss(1), fused_grad(rows * cols);
      B::cross_entropy_forward_backward(rows, cols, x.get(), dev_target.get(), grad_scale, fused_loss.get(),
                                        fused_grad.get());

      typename B::template Array<T> logp(rows * cols), dlogp(rows * cols), grad(rows * cols), loss(1);
      B::log_softmax_forward(rows, cols, x.get(), logp.get());
      B::nll_loss_forward(rows, cols, logp.get(), dev_target.get(), loss.get());
      B::nll_loss_backward(rows, cols, grad_scale, dev_target.get(), dlogp.get());
      B::log_softmax_backward(rows, cols, dlogp.get(), logp.get(), grad.get());

      const double want_loss = double(loss.download()[0]);
      EXPECT_NEAR(double(fused_loss.download()[0]), want_loss, 4 * B::rounding_tolerance() * std::abs(want_loss));
      const std::vector<T> got = fused_grad.download();
      EXPECT_LE(normwise_error(got, grad.download()), 4 * B::rounding_tolerance());
      for (int64_t r = 0; r < rows; ++r) {
        double row_sum = 0.0;
        for (int64_t j = 0; j < cols; ++j) row_sum += got[r * cols + j];
        EXPECT_NEAR(row_sum, 0.0, 4 * B::rounding_tolerance() * double(grad_scale)) << "row " << r;
      }
    }
  }
}

TYPED_TEST(CrossEntropyTest, StaysFiniteOnLargeLogits) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const RowsCase& c : kRowsCases) {
    SCOPED_TRACE(describe(c, 0));
    const auto [rows, cols] = c;
    typename B::template Array<T> x(random_vector<T>(rows * cols, 5, -1e4, 1e4));
    typename B::template Array<int64_t> target(random_targets(rows, cols));
    typename B::template Array<T> loss(1), grad(rows * cols);
    B::cross_entropy_forward_backward(rows, cols, x.get(), target.get(), T(1), loss.get(), grad.get());
    const T got_loss = loss.download()[0];
    EXPECT_TRUE(std::isfinite(got_loss));
    EXPECT_GE(got_loss, T(0));
    for (T g : grad.download()) ASSERT_TRUE(std::isfinite(g));
  }
}

// Logits of 1e4 must not overflow: the max is subtracted before exp.
TYPED_TEST(CrossEntropyTest, LargeLogitsGiveTheExactLoss) {
  using B = TypeParam;
  using T = typename B::Scalar;
  typename B::template Array<T> x(std::vector<T>{T(1e4), T(1e4 - 1), T(-1e4), T(0)}), loss(1), grad(4);
  typename B::template Array<int64_t> target(std::vector<int64_t>{1});
  B::cross_entropy_forward_backward(1, 4, x.get(), target.get(), T(1), loss.get(), grad.get());
  // lse - x[1] = 1 + log(1 + 1/e); float spacing near 1e4 is 1e-3, hence the tolerance.
  EXPECT_NEAR(double(loss.download()[0]), 1.3132617, 2e-3);
  for (T g : grad.download()) EXPECT_TRUE(std::isfinite(g));
}

// ignore_index: rows whose target is ignore_index add no loss and get an exact zero
// gradient; count_targets counts the others, and as the divisor it turns the sum into
// PyTorch's mean over the counted rows. Two settings: PyTorch's default -100 on every third
// row, and a real class (1) as ignore_index, which ignores the rows that have it. The
// rows of kRowsCases short enough for the host's time (the long ones test the row
// kernel, which the ignored rows leave as it was).
TYPED_TEST(CrossEntropyTest, IgnoredRowsAddNothingAndTheMeanDividesByTheirCount) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const RowsCase& c : {RowsCase{1, 2}, RowsCase{9, 13}, RowsCase{13, 10}, RowsCase{64, 10}, RowsCase{9, 70},
                            RowsCase{5, 1000}}) {
    const auto [rows, cols] = c;
    const auto x = random_vector<T>(rows * cols, 6, -5.0, 5.0);
    for (const int64_t ignore_index : {kernels::kDefaultIgnoreIndex, int64_t(1)}) {
      auto target = random_targets(rows, cols);
      if (ignore_index < 0)
        for (int64_t r = 0; r < rows; r += 3) target[r] = ignore_index;
      int64_t want_count = 0;
      double want_sum = 0.0;
      std::vector<double> unit_grad(rows * cols, 0.0);  // softmax - onehot of the counted rows
      for (int64_t r = 0; r < rows; ++r) {
        if (target[r] == ignore_index) continue;
        ++want_count;
        double max = -INFINITY, total = 0.0;
        for (int64_t j = 0; j < cols; ++j) max = std::max(max, double(x[r * cols + j]));
        for (int64_t j = 0; j < cols; ++j) total += std::exp(double(x[r * cols + j]) - max);
        const double lse = max + std::log(total);
        want_sum += lse - double(x[r * cols + target[r]]);
        for (int64_t j = 0; j < cols; ++j)
          unit_grad[r * cols + j] = std::exp(double(x[r * cols + j]) - lse) - (j == target[r] ? 1.0 : 0.0);
      }
      typename B::template Array<T> dev_x(x);
      typename B::template Array<int64_t> dev_target(target), counted(1);
      B::count_targets(rows, dev_target.get(), ignore_index, counted.get());
      ASSERT_EQ(counted.download()[0], want_count) << describe(c, 0) << ", ignore_index " << ignore_index;
      for (const bool mean : {false, true}) {
        if (mean && want_count == 0) continue;  // every row ignored: the next test's NaN
        SCOPED_TRACE(describe(c, 0) + ", ignore_index " + std::to_string(ignore_index) + (mean ? ", mean" : ", sum"));
        const double divisor = mean ? double(want_count) : 1.0;
        std::vector<T> want_grad(rows * cols);
        for (size_t i = 0; i < want_grad.size(); ++i) want_grad[i] = T(unit_grad[i] / divisor);
        typename B::template Array<T> loss(1), grad(rows * cols);
        B::cross_entropy_forward_backward(rows, cols, dev_x.get(), dev_target.get(), ignore_index,
                                          mean ? counted.get() : nullptr, loss.get(), grad.get());
        const double want_loss = want_sum / divisor;
        EXPECT_NEAR(double(loss.download()[0]), want_loss, B::tolerance() * std::abs(want_loss));
        const std::vector<T> got = grad.download();
        EXPECT_OP_CLOSE(B, got, want_grad);
        for (int64_t r = 0; r < rows; ++r)
          if (target[r] == ignore_index)
            for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(got[r * cols + j], T(0)) << "ignored row " << r;
      }
    }
  }
}

// Every target ignored: the mean is 0/0, NaN as in PyTorch, with zero gradients; the sum is 0.
TYPED_TEST(CrossEntropyTest, AllRowsIgnoredGiveANanMeanAndZeroGradients) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const int64_t rows = 5, cols = 7;
  typename B::template Array<T> x(random_vector<T>(rows * cols, 7));
  typename B::template Array<int64_t> target(std::vector<int64_t>(rows, kernels::kDefaultIgnoreIndex)), counted(1);
  B::count_targets(rows, target.get(), kernels::kDefaultIgnoreIndex, counted.get());
  EXPECT_EQ(counted.download()[0], 0);
  for (const bool mean : {false, true}) {
    SCOPED_TRACE(mean ? "mean" : "sum");
    typename B::template Array<T> loss(1), grad(rows * cols);
    B::cross_entropy_forward_backward(rows, cols, x.get(), target.get(), kernels::kDefaultIgnoreIndex,
                                      mean ? counted.get() : nullptr, loss.get(), grad.get());
    if (mean)
      EXPECT_TRUE(std::isnan(loss.download()[0]));
    else
      EXPECT_EQ(loss.download()[0], T(0));
    for (T g : grad.download()) ASSERT_EQ(g, T(0));
  }
}

}  // namespace
}  // namespace dpcore::testing
