// adam_step on every backend (tests/support/op_backends.h) against a scalar transcription of
// torch.optim.Adam's and AdamW's single-tensor step, over several steps (bias correction
// changes with each), with and without weight decay (on every element, or where a bit mask
// says: PyTorch's parameter groups with weight_decay 0), and lengths around the vector and
// thread boundaries on misaligned pointers; and bit for bit against the CPU kernel (the CUDA
// kernel rounds every operation like it). Then the CPU kernel in float64 on steps worked out
// by hand, and invalid calls.
#include <gtest/gtest.h>

#include <cmath>
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
using kernels::AdamConfig;

// torch/optim/adam.py and adamw.py (_single_tensor_adam(w), not capturable), one element at
// a time from PyTorch's zero state, one tensor operation per line, each rounded to T. Element
// i is in a group with weight decay when decays[i].
template <class T>
void pytorch_adam(const AdamConfig& cfg, int64_t step, std::vector<T>& param, const std::vector<T>& grad,
                  std::vector<T>& exp_avg, std::vector<T>& exp_avg_sq, const std::vector<bool>& decays) {
  const double bias_correction1 = 1 - std::pow(cfg.beta1, double(step));
  const double bias_correction2 = 1 - std::pow(cfg.beta2, double(step));
  const double step_size = cfg.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (size_t i = 0; i < param.size(); ++i) {
    T g = grad[i];
    const double weight_decay = decays[i] ? cfg.weight_decay : 0.0;
    if (weight_decay != 0 && cfg.decoupled) param[i] = param[i] * T(1 - cfg.lr * weight_decay);
    if (weight_decay != 0 && !cfg.decoupled) g = g + T(weight_decay) * param[i];
    exp_avg[i] = exp_avg[i] * T(cfg.beta1);
    exp_avg[i] = exp_avg[i] + T(1 - cfg.beta1) * g;
    exp_avg_sq[i] = exp_avg_sq[i] * T(cfg.beta2);
    exp_avg_sq[i] = exp_avg_sq[i] + T(1 - cfg.beta2) * g * g;
    T denom = std::sqrt(exp_avg_sq[i]) / T(bias_correction2_sqrt);
    denom = denom + T(cfg.eps);
    param[i] = param[i] + T(-step_size) * exp_avg[i] / denom;
  }
}

AdamConfig config(double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled) {
  AdamConfig c;
  c.lr = lr, c.beta1 = beta1, c.beta2 = beta2, c.eps = eps, c.weight_decay = weight_decay, c.decoupled = decoupled;
  return c;
}

const AdamConfig kConfigs[] = {
    config(1e-3, 0.9, 0.999, 1e-8, 0.0, false),  // PyTorch's defaults
    config(0.1, 0.8, 0.99, 1e-3, 0.0, false),    // large steps, eps that matters
    config(1e-2, 0.9, 0.999, 1e-8, 1e-2, false), // Adam: L2 weight decay
    config(1e-2, 0.9, 0.999, 1e-8, 1e-2, true),  // AdamW: decoupled weight decay
    config(0.5, 0.0, 0.5, 1e-6, 0.1, true),      // beta1 0 (RMSprop-like), large decay
};

struct FlatCase {
  int64_t n;
  int offset;  // elements; 1..3 misaligns every pointer for float4
};

const FlatCase kCases[] = {{0, 0},    {1, 0},     {3, 1},      {7, 0},      {1003, 1},
                           {4096, 0}, {70001, 3}, {3000000, 0}, {2999999, 2}};

std::string describe(const AdamConfig& cfg, bool masked, const FlatCase& c, int threads) {
  std::ostringstream os;
  os << (cfg.decoupled ? "AdamW" : "Adam") << " lr " << cfg.lr << " betas " << cfg.beta1 << ", " << cfg.beta2
     << " eps " << cfg.eps << " wd " << cfg.weight_decay << (masked ? " on masked elements" : "") << ", n = " << c.n
     << ", offset " << c.offset << threads_label(threads);
  return os.str();
}

// Which of n elements decay: runs of 37 (across the 32-bit words of the mask), one in three
// left out, as a layout's biases would be; and the same as a mask with one bit per element.
std::vector<bool> decaying_elements(int64_t n) {
  std::vector<bool> decays(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) decays[size_t(i)] = (i / 37) % 3 != 0;
  return decays;
}
std::vector<uint32_t> mask_bits(const std::vector<bool>& decays) {
  std::vector<uint32_t> words((decays.size() + 31) / 32, 0u);
  for (size_t i = 0; i < decays.size(); ++i)
    if (decays[i]) words[i / 32] |= uint32_t(1) << (i % 32);
  return words;
}

template <class B>
class AdamTest : public OpTest<B> {};
TYPED_TEST_SUITE(AdamTest, KernelBackends, BackendName);

TYPED_TEST(AdamTest, MatchesPyTorchAlgorithmOverSeveralSteps) {
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
    const std::vector<bool> all_decay(size_t(n), true), some_decay = decaying_elements(n);
    const std::vector<uint32_t> host_mask = mask_bits(some_decay);
    const typename B::template Array<uint32_t> mask(host_mask);
    // The millions of elements are there to span every thread's chunk and a GPU's grid:
    // PyTorch's defaults and AdamW with its mask cover that, and the other settings run at
    // the smaller lengths (each pass of the CPU's scalar references costs a second there).
    const bool large = n > (1 << 20);
    for (const AdamConfig& cfg : kConfigs) {
      for (const bool masked : {false, true}) {
        if (masked && cfg.weight_decay == 0) continue;
        if (large && &cfg != &kConfigs[0] && !(cfg.decoupled && masked)) continue;
        const std::vector<bool>& decays = masked ? some_decay : all_decay;
        for (int threads : B::thread_counts()) {
          SCOPED_TRACE(describe(cfg, masked, c, threads));
          ScopedKernelThreads scope(threads);
          auto expected_param = param0, cpu_param = param0;
          std::vector<T> expected_m(n, T(0)), expected_v(n, T(0));  // PyTorch's initial state
          // The first step must not read the moments: NaN there would leak into the result.
          HostArray<T> cpu_m(n), cpu_v(n);
          typename B::template Array<T> param(padded_param0), m(n + at), v(n + at);
          for (int step = 1; step <= kSteps; ++step) {
            B::adam_step(n, cfg, step, param.get() + at, dev_grads[step - 1]->get() + at, m.get() + at, v.get() + at,
                         masked ? mask.get() : nullptr);
            const std::vector<T>& grad = grad_tails[step - 1];
            pytorch_adam(cfg, step, expected_param, grad, expected_m, expected_v, decays);
            cpu::adam_step<T>(n, cfg, step, cpu_param.data(), grad.data(), cpu_m.get(), cpu_v.get(),
                              masked ? host_mask.data() : nullptr);
            const std::vector<T> got_param = tail(param.download(), at), got_m = tail(m.download(), at),
                                 got_v = tail(v.download(), at);
            // Equal up to the contraction of a multiply-add into an FMA, which a build may do.
            EXPECT_LE(normwise_error(got_param, expected_param), 4 * std::numeric_limits<T>::epsilon())
                << "step " << step;
            EXPECT_LE(normwise_error(got_m, expected_m), 4 * std::numeric_limits<T>::epsilon()) << "step " << step;
            EXPECT_LE(normwise_error(got_v, expected_v), 4 * std::numeric_limits<T>::epsilon()) << "step " << step;
            EXPECT_TRUE(bitwise_equal(got_param, cpu_param)) << "step " << step;
            EXPECT_TRUE(bitwise_equal(got_m, cpu_m.download())) << "step " << step;
            EXPECT_TRUE(bitwise_equal(got_v, cpu_v.download())) << "step " << step;
          }
        }
      }
    }
    for (int step = 0; step < kSteps; ++step)
      EXPECT_TRUE(bitwise_equal(dev_grads[step]->download(), grads[step])) << "the gradient must not be modified";
  }
}

// p = 1 and a constant gradient 0.5, lr 0.1, betas 0.9, 0.999, eps 1e-3, in float64. With
// bias correction, m_hat = 0.5 and v_hat = 0.25 at every step, so each step moves p by
// lr * 0.5 / (sqrt(0.25) + eps) = 0.1 / 1.002 (eps inside the root would give 0.1 * 0.5 /
// sqrt(0.251), 1e-6 relative away; no bias correction, 0.1 * 0.05 / (0.0158 + eps)).
// Tolerances: 1 - beta is not exact in binary (up to 9e-16 relative), and 1 - beta2^2
// loses two digits to cancellation (5e-14 relative, halved by the square root).
TEST(AdamHandWorkedTest, BiasCorrectedStepsAndWeightDecay) {
  const double grad = 0.5, move = 0.1 / 1.002;
  {
    const AdamConfig cfg = config(0.1, 0.9, 0.999, 1e-3, 0.0, false);
    double p = 1.0, m = 0.0, v = 0.0;
    cpu::adam_step(1, cfg, 1, &p, &grad, &m, &v, nullptr);  // m = 0.1 * 0.5, v = 0.001 * 0.25
    EXPECT_NEAR(m, 0.05, 1e-16);
    EXPECT_NEAR(v, 0.00025, 1e-18);
    EXPECT_NEAR(p, 1 - move, 1e-13);
    cpu::adam_step(1, cfg, 2, &p, &grad, &m, &v, nullptr);  // m = 0.045 + 0.05, v = 0.00024975 + 0.00025
    EXPECT_NEAR(m, 0.095, 1e-16);
    EXPECT_NEAR(v, 0.00049975, 1e-18);
    EXPECT_NEAR(p, 1 - 2 * move, 1e-13);  // m_hat = 0.095 / 0.19, v_hat = 0.00049975 / 0.001999
  }
  {
    // Adam: the L2 term joins the gradient, g = 0.5 + 0.1 * 1 = 0.6, and so the moments.
    const AdamConfig cfg = config(0.1, 0.9, 0.999, 1e-3, 0.1, false);
    double p = 1.0, m = 0.0, v = 0.0;
    cpu::adam_step(1, cfg, 1, &p, &grad, &m, &v, nullptr);
    EXPECT_NEAR(m, 0.06, 1e-16);
    EXPECT_NEAR(v, 0.00036, 1e-18);
    EXPECT_NEAR(p, 1 - 0.1 * 0.6 / 0.601, 1e-13);
  }
  {
    // AdamW: p = 1 * (1 - 0.1 * 0.1) first; the moments see the bare gradient.
    const AdamConfig cfg = config(0.1, 0.9, 0.999, 1e-3, 0.1, true);
    double p = 1.0, m = 0.0, v = 0.0;
    cpu::adam_step(1, cfg, 1, &p, &grad, &m, &v, nullptr);
    EXPECT_NEAR(m, 0.05, 1e-16);
    EXPECT_NEAR(v, 0.00025, 1e-18);
    EXPECT_NEAR(p, 0.99 - move, 1e-13);
  }
}

// PyTorch's moments start as zeros and the first step adds to them: a gradient of -0 gives
// moments of +0 (+0 + -0 is +0), not the -0 of (1 - beta) * g alone. Over 100 elements (the
// vector loops and their tails), float32 and float64, Adam without weight decay and AdamW
// (both hand the moments the bare gradient).
TEST(AdamHandWorkedTest, FirstStepOfNegativeZeroGradientsGivesPositiveZeroMoments) {
  auto check = [](auto zero, const AdamConfig& cfg) {
    using T = decltype(zero);
    std::vector<T> p(100, T(1)), g(100, -T(0)), m(100, T(7)), v(100, T(7));
    cpu::adam_step(100, cfg, 1, p.data(), g.data(), m.data(), v.data(), nullptr);
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_TRUE(m[i] == T(0) && !std::signbit(m[i])) << "exp_avg[" << i << "] = " << m[i];
      EXPECT_TRUE(v[i] == T(0) && !std::signbit(v[i])) << "exp_avg_sq[" << i << "] = " << v[i];
    }
  };
  for (const AdamConfig& cfg : {config(0.1, 0.9, 0.999, 1e-8, 0.0, false), config(0.1, 0.9, 0.999, 1e-8, 0.01, true)}) {
    check(float(0), cfg);
    check(double(0), cfg);
  }
}

TEST(AdamHandWorkedTest, RejectsInvalidCalls) {
  const AdamConfig cfg = config(0.1, 0.9, 0.999, 1e-8, 0.0, false);
  double p = 1, g = 1, m = 0, v = 0;
  EXPECT_THROW(cpu::adam_step(1, cfg, 0, &p, &g, &m, &v, nullptr), dpcore::Error);  // steps count from 1
  EXPECT_THROW(cpu::adam_step(1, cfg, 1, &p, &g, static_cast<double*>(nullptr), &v, nullptr), dpcore::Error);
  EXPECT_THROW(cpu::adam_step(1, cfg, 1, &p, &g, &m, static_cast<double*>(nullptr), nullptr), dpcore::Error);
}

}  // namespace
}  // namespace dpcore::testing
