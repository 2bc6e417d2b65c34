// log_softmax, nll loss and the fused cross-entropy on the GPU against the CPU reference.
#include <gtest/gtest.h>

#include <random>

#include "cuda_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"

namespace dpcore::testing {
namespace {

struct RowsCase {
  int64_t rows, cols;
};

class SoftmaxLossTest : public ::testing::TestWithParam<RowsCase> {
 protected:
  void SetUp() override { SKIP_WITHOUT_CUDA(); }
};

std::vector<int64_t> random_targets(int64_t rows, int64_t cols) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> t(rows);
  for (auto& v : t) v = int64_t(rng() % uint64_t(cols));
  return t;
}

TEST_P(SoftmaxLossTest, LogSoftmaxMatchesCpu) {
  const auto [rows, cols] = GetParam();
  const auto x = random_floats(rows * cols, 1, -5.0, 5.0), dy = random_floats(rows * cols, 2);
  std::vector<float> want_y(rows * cols), want_dx(rows * cols);
  kernels::cpu::log_softmax_forward<float>(rows, cols, x.data(), want_y.data());
  kernels::cpu::log_softmax_backward<float>(rows, cols, dy.data(), want_y.data(), want_dx.data());
  DeviceArray<float> dx_in(x), ddy(dy), y(rows * cols), dx(rows * cols);
  kernels::cuda::log_softmax_forward(rows, cols, dx_in.get(), y.get(), nullptr);
  EXPECT_LE(scaled_error(y.download(), want_y), kFp32Tolerance);
  kernels::cuda::log_softmax_backward(rows, cols, ddy.get(), y.get(), dx.get(), nullptr);
  EXPECT_LE(scaled_error(dx.download(), want_dx), kFp32Tolerance);
}

TEST_P(SoftmaxLossTest, NllLossMatchesCpu) {
  const auto [rows, cols] = GetParam();
  std::vector<float> logp(rows * cols);
  const auto x = random_floats(rows * cols, 1, -5.0, 5.0);
  kernels::cpu::log_softmax_forward<float>(rows, cols, x.data(), logp.data());
  const auto target = random_targets(rows, cols);
  float want_loss = NAN;
  kernels::cpu::nll_loss_forward<float>(rows, cols, logp.data(), target.data(), &want_loss);
  const float grad_per_row = 1.f / float(rows);
  std::vector<float> want_dlogp(rows * cols);
  kernels::cpu::nll_loss_backward<float>(rows, cols, grad_per_row, target.data(), want_dlogp.data());

  DeviceArray<float> dlogp_in(logp), loss(1), dgrad(std::vector<float>{grad_per_row}), dlogp(rows * cols);
  DeviceArray<int64_t> dtarget(target);
  kernels::cuda::nll_loss_forward(rows, cols, dlogp_in.get(), dtarget.get(), loss.get(), nullptr);
  EXPECT_LE(scaled_error(loss.download(), {want_loss}), kFp32Tolerance);
  kernels::cuda::nll_loss_backward(rows, cols, dgrad.get(), dtarget.get(), dlogp.get(), nullptr);
  EXPECT_EQ(dlogp.download(), want_dlogp);
}

TEST_P(SoftmaxLossTest, FusedCrossEntropyMatchesCpu) {
  const auto [rows, cols] = GetParam();
  const auto x = random_floats(rows * cols, 1, -5.0, 5.0);
  const auto target = random_targets(rows, cols);
  const float scale = 1.f / float(rows);
  float want_loss = NAN;
  std::vector<float> want_dlogits(rows * cols);
  kernels::cpu::cross_entropy_forward_backward<float>(rows, cols, x.data(), target.data(), scale, &want_loss,
                                                      want_dlogits.data());
  DeviceArray<float> dlogits_in(x), loss(1), dlogits(rows * cols);
  DeviceArray<int64_t> dtarget(target);
  kernels::cuda::cross_entropy_forward_backward(rows, cols, dlogits_in.get(), dtarget.get(), scale, loss.get(),
                                                dlogits.get(), nullptr);
  EXPECT_LE(scaled_error(loss.download(), {want_loss}), kFp32Tolerance);
  EXPECT_LE(scaled_error(dlogits.download(), want_dlogits), kFp32Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SoftmaxLossTest,
                         ::testing::Values(RowsCase{1, 10}, RowsCase{13, 10}, RowsCase{64, 10}, RowsCase{4096, 10},
                                           RowsCase{9, 70}, RowsCase{3, 1000}, RowsCase{64, 3}));

// Logits of 1e4 must not overflow: the max is subtracted before exp.
TEST(SoftmaxLoss, LargeLogitsStayFinite) {
  SKIP_WITHOUT_CUDA();
  const std::vector<float> x = {1e4f, 1e4f - 1.f, -1e4f, 0.f};
  DeviceArray<float> dx_in(x), y(4), loss(1), dlogits(4);
  DeviceArray<int64_t> target(std::vector<int64_t>{1});
  kernels::cuda::log_softmax_forward(1, 4, dx_in.get(), y.get(), nullptr);
  kernels::cuda::cross_entropy_forward_backward(1, 4, dx_in.get(), target.get(), 1.f, loss.get(), dlogits.get(),
                                                nullptr);
  for (float v : y.download()) EXPECT_TRUE(std::isfinite(v));
  // lse - x[1] = 1 + log(1 + 1/e); float spacing near 1e4 is 1e-3, hence the tolerance.
  EXPECT_NEAR(loss.download()[0], 1.3132617f, 2e-3f);
  for (float v : dlogits.download()) EXPECT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace dpcore::testing
