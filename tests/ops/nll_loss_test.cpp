// nll loss on log-probabilities on every backend (tests/support/op_backends.h): a
// hand-worked case, and the forward against a float64 sum and the backward exactly, on one
// table of shapes.
#include <gtest/gtest.h>

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
class NllLossTest : public OpTest<B> {};
TYPED_TEST_SUITE(NllLossTest, KernelBackends, BackendName);

TYPED_TEST(NllLossTest, PicksTheTargetLogProbabilities) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const int64_t rows = 3, cols = 4;
  typename B::template Array<T> logp(std::vector<T>{-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -0.25, -9, -10});
  typename B::template Array<int64_t> target(std::vector<int64_t>{2, 0, 1});
  typename B::template Array<T> loss(1), dlogp(rows * cols);
  B::nll_loss_forward(rows, cols, logp.get(), target.get(), loss.get());
  EXPECT_EQ(loss.download()[0], T(3 + 5 + 0.25));

  B::nll_loss_backward(rows, cols, T(0.5), target.get(), dlogp.get());
  std::vector<T> expected(rows * cols, T(0));
  expected[0 * cols + 2] = expected[1 * cols + 0] = expected[2 * cols + 1] = T(-0.5);
  EXPECT_EQ(dlogp.download(), expected);
}

TYPED_TEST(NllLossTest, MatchesFloat64Reference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const RowsCase& c : kRowsCases) {
    const auto [rows, cols] = c;
    const auto x = random_vector<T>(rows * cols, 1, -5.0, 5.0);
    std::vector<T> logp(rows * cols);
    kernels::cpu::log_softmax_forward<T>(rows, cols, x.data(), logp.data());
    const auto target = random_targets(rows, cols);
    double want_loss = 0.0;
    for (int64_t r = 0; r < rows; ++r) want_loss -= double(logp[r * cols + target[r]]);
    const T grad_per_row = T(1.0 / double(rows));
    std::vector<T> want_dlogp(rows * cols, T(0));
    for (int64_t r = 0; r < rows; ++r) want_dlogp[r * cols + target[r]] = -grad_per_row;

    typename B::template Array<T> dev_logp(logp);
    typename B::template Array<int64_t> dev_target(target);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> loss(1), dlogp(rows * cols);
      B::nll_loss_forward(rows, cols, dev_logp.get(), dev_target.get(), loss.get());
      EXPECT_NEAR(double(loss.download()[0]), want_loss, B::tolerance() * std::abs(want_loss));
      B::nll_loss_backward(rows, cols, grad_per_row, dev_target.get(), dlogp.get());
      EXPECT_EQ(dlogp.download(), want_dlogp);
    }
  }
}

}  // namespace
}  // namespace dpcore::testing
