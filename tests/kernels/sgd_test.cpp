// sgd_step against a scalar transcription of torch.optim.SGD's single-tensor step.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "engine/error.h"
#include "kernel_checks.h"
#include "kernels/cpu/kernels.h"

namespace dpcore::testing {
namespace {

namespace cpu = kernels::cpu;
using kernels::SgdConfig;

// torch/optim/sgd.py (_single_tensor_sgd), one element at a time, each operation rounded to T.
template <class T>
void pytorch_sgd(const SgdConfig& cfg, bool first_step, std::vector<T>& param, const std::vector<T>& grad,
                 std::vector<T>& buf) {
  for (size_t i = 0; i < param.size(); ++i) {
    T d_p = grad[i];
    if (cfg.weight_decay != 0) d_p = d_p + T(cfg.weight_decay) * param[i];
    if (cfg.momentum != 0) {
      if (first_step) {
        buf[i] = d_p;
      } else {
        buf[i] = T(cfg.momentum) * buf[i];
        buf[i] = buf[i] + T(1 - cfg.dampening) * d_p;
      }
      d_p = cfg.nesterov ? d_p + T(cfg.momentum) * buf[i] : buf[i];
    }
    param[i] = param[i] + T(-cfg.lr) * d_p;
  }
}

SgdConfig config(double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
  SgdConfig c;
  c.lr = lr, c.momentum = momentum, c.dampening = dampening, c.weight_decay = weight_decay, c.nesterov = nesterov;
  return c;
}

template <class T>
class SgdTest : public ::testing::Test {};
TYPED_TEST_SUITE(SgdTest, KernelTypes);

TYPED_TEST(SgdTest, MatchesPyTorchAlgorithmOverSeveralSteps) {
  using T = TypeParam;
  const std::vector<SgdConfig> configs = {
      config(0.1, 0.0, 0.0, 0.0, false),    // plain SGD
      config(0.05, 0.0, 0.0, 1e-2, false),  // weight decay without momentum
      config(0.01, 0.9, 0.0, 0.0, false),   // momentum
      config(0.01, 0.9, 0.1, 5e-4, false),  // momentum, dampening, weight decay
      config(0.01, 0.9, 0.0, 5e-4, true),   // nesterov
  };
  const int64_t n = 70001;  // threaded path, ragged end
  for (const SgdConfig& cfg : configs) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE("lr " + std::to_string(cfg.lr) + " momentum " + std::to_string(cfg.momentum) + " dampening " +
                   std::to_string(cfg.dampening) + " wd " + std::to_string(cfg.weight_decay) +
                   (cfg.nesterov ? " nesterov" : "") + ", " + std::to_string(threads) + " threads");
      ScopedKernelThreads scope(threads);
      auto param = random_vector<T>(n, 1), expected_param = param;
      // The first step must not read the buffer: NaN there would leak into the result.
      auto buf = nan_filled<T>(n), expected_buf = nan_filled<T>(n);
      for (int step = 0; step < 3; ++step) {
        const auto grad = random_vector<T>(n, 10 + step), grad_before = grad;
        T* momentum = cfg.momentum != 0 ? buf.data() : nullptr;
        cpu::sgd_step(n, cfg, step == 0, param.data(), grad.data(), momentum);
        pytorch_sgd(cfg, step == 0, expected_param, grad, expected_buf);
        EXPECT_EQ(grad, grad_before) << "the gradient must not be modified";
        // Equal up to the contraction of a multiply-add into an FMA, which a build may do.
        EXPECT_LE(normwise_error(param, expected_param), 4 * std::numeric_limits<T>::epsilon()) << "step " << step;
        if (momentum) EXPECT_LE(normwise_error(buf, expected_buf), 4 * std::numeric_limits<T>::epsilon());
      }
    }
  }
}

// Two steps worked out by hand: p = 1, grad = 0.5, lr 0.1, momentum 0.9, weight decay 0.1.
TEST(SgdHandWorkedTest, MomentumAndNesterovTwoSteps) {
  const double grad = 0.5;
  {
    SgdConfig cfg = config(0.1, 0.9, 0.0, 0.1, false);
    double p = 1.0, buf = 0.0;
    cpu::sgd_step(1, cfg, true, &p, &grad, &buf);  // g = 0.6, buf = 0.6, p = 1 - 0.06
    EXPECT_DOUBLE_EQ(buf, 0.6);
    EXPECT_DOUBLE_EQ(p, 0.94);
    cpu::sgd_step(1, cfg, false, &p, &grad, &buf);  // g = 0.594, buf = 0.54 + 0.594, p = 0.94 - 0.1134
    EXPECT_DOUBLE_EQ(buf, 1.134);
    EXPECT_DOUBLE_EQ(p, 0.8266);
  }
  {
    SgdConfig cfg = config(0.1, 0.9, 0.0, 0.1, true);
    double p = 1.0, buf = 0.0;
    cpu::sgd_step(1, cfg, true, &p, &grad, &buf);  // g = 0.6, buf = 0.6, g = 0.6 + 0.54, p = 1 - 0.114
    EXPECT_DOUBLE_EQ(p, 0.886);
  }
  {
    SgdConfig cfg = config(0.1, 0.9, 0.5, 0.0, false);
    double p = 1.0, buf = 0.0;
    cpu::sgd_step(1, cfg, true, &p, &grad, &buf);  // first step ignores dampening: buf = 0.5
    EXPECT_DOUBLE_EQ(buf, 0.5);
    cpu::sgd_step(1, cfg, false, &p, &grad, &buf);  // buf = 0.45 + 0.5 * 0.5
    EXPECT_DOUBLE_EQ(buf, 0.7);
    EXPECT_DOUBLE_EQ(p, 1.0 - 0.05 - 0.07);
  }
}

TEST(SgdHandWorkedTest, RejectsInvalidConfigurations) {
  double p = 1, g = 1, buf = 0;
  EXPECT_THROW(cpu::sgd_step(1, config(0.1, 0.9, 0.0, 0.0, false), true, &p, &g, static_cast<double*>(nullptr)),
               dpcore::Error);
  EXPECT_THROW(cpu::sgd_step(1, config(0.1, 0.9, 0.1, 0.0, true), true, &p, &g, &buf), dpcore::Error);
  EXPECT_THROW(cpu::sgd_step(1, config(0.1, 0.0, 0.0, 0.0, true), true, &p, &g, &buf), dpcore::Error);
}

}  // namespace
}  // namespace dpcore::testing
