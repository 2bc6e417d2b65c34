// sgd_step on every backend (tests/support/op_backends.h) against a scalar transcription of
// torch.optim.SGD's single-tensor step, over several steps, every variant (weight decay,
// momentum, dampening, nesterov) and lengths around the vector and thread boundaries on
// misaligned pointers; and bit for bit against the CPU kernel (the CUDA kernel rounds
// every operation like it). Then the CPU kernel on hand-worked steps and invalid settings.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "support/op_backends.h"

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

const SgdConfig kConfigs[] = {
    config(0.1, 0.0, 0.0, 0.0, false),    // plain SGD
    config(0.05, 0.0, 0.0, 1e-2, false),  // weight decay without momentum
    config(0.01, 0.9, 0.0, 0.0, false),   // momentum
    config(0.1, 0.9, 0.0, 0.0, false),    // momentum, larger step
    config(0.01, 0.9, 0.1, 5e-4, false),  // momentum, dampening, weight decay
    config(0.1, 0.9, 0.1, 1e-2, false),   // the same, larger
    config(0.01, 0.9, 0.0, 5e-4, true),   // nesterov
    config(0.1, 0.9, 0.0, 1e-2, true),    // nesterov, larger
};

struct FlatCase {
  int64_t n;
  int offset;  // elements; 1..3 misaligns every pointer for float4
};

const FlatCase kCases[] = {{0, 0},    {1, 0},     {3, 1},      {7, 0},      {1003, 1},
                           {4096, 0}, {70001, 3}, {3000000, 0}, {2999999, 2}};

std::string describe(const SgdConfig& cfg, const FlatCase& c, int threads) {
  std::ostringstream os;
  os << "lr " << cfg.lr << " momentum " << cfg.momentum << " dampening " << cfg.dampening << " wd "
     << cfg.weight_decay << (cfg.nesterov ? " nesterov" : "") << ", n = " << c.n << ", offset " << c.offset
     << threads_label(threads);
  return os.str();
}

template <class B>
class SgdTest : public OpTest<B> {};
TYPED_TEST_SUITE(SgdTest, KernelBackends, BackendName);

TYPED_TEST(SgdTest, MatchesPyTorchAlgorithmOverSeveralSteps) {
  using B = TypeParam;
  using T = typename B::Scalar;
  constexpr int kSteps = 3;
  for (const FlatCase& c : kCases) {
    if (!runs_flat_optimizer_case<B>(c.n + c.offset)) continue;
    const int64_t n = c.n, at = c.offset;
    std::vector<T> padded_param0(at, std::numeric_limits<T>::quiet_NaN());
    const auto param0 = random_vector<T>(n, 1);
    padded_param0.insert(padded_param0.end(), param0.begin(), param0.end());
    std::vector<std::vector<T>> grads, grad_tails;  // each step's gradient, with and without `at` elements before it
    std::vector<std::unique_ptr<typename B::template Array<T>>> dev_grads;
    for (int step = 0; step < kSteps; ++step) {
      grads.push_back(random_vector<T>(n + at, 10 + step));
      grad_tails.push_back(tail(grads.back(), int(at)));
      dev_grads.push_back(std::make_unique<typename B::template Array<T>>(grads.back()));
    }
    for (const SgdConfig& cfg : kConfigs) {
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(cfg, c, threads));
        ScopedKernelThreads scope(threads);
        auto expected_param = param0, cpu_param = param0;
        // The first step must not read the buffer: NaN there would leak into the result.
        auto expected_buf = nan_filled<T>(n);
        HostArray<T> cpu_buf(n);  // not null when n is 0: a momentum buffer must be given
        typename B::template Array<T> param(padded_param0), buf(n + at);
        for (int step = 0; step < kSteps; ++step) {
          T* momentum = cfg.momentum != 0 ? buf.get() + at : nullptr;
          B::sgd_step(n, cfg, step == 0, param.get() + at, dev_grads[step]->get() + at, momentum);
          const std::vector<T>& grad = grad_tails[step];
          pytorch_sgd(cfg, step == 0, expected_param, grad, expected_buf);
          cpu::sgd_step<T>(n, cfg, step == 0, cpu_param.data(), grad.data(), cfg.momentum != 0 ? cpu_buf.get() : nullptr);
          const std::vector<T> got_param = tail(param.download(), at);
          // Equal up to the contraction of a multiply-add into an FMA, which a build may do.
          EXPECT_LE(normwise_error(got_param, expected_param), 4 * std::numeric_limits<T>::epsilon())
              << "step " << step;
          EXPECT_TRUE(bitwise_equal(got_param, cpu_param)) << "step " << step;
          if (momentum) {
            const std::vector<T> got_buf = tail(buf.download(), at);
            EXPECT_LE(normwise_error(got_buf, expected_buf), 4 * std::numeric_limits<T>::epsilon()) << "step " << step;
            EXPECT_TRUE(bitwise_equal(got_buf, cpu_buf.download())) << "step " << step;
          }
        }
      }
    }
    for (int step = 0; step < kSteps; ++step)
      EXPECT_TRUE(bitwise_equal(dev_grads[step]->download(), grads[step])) << "the gradient must not be modified";
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
