// Elementwise kernels, the deterministic sum and the fused SGD step against the CPU
// reference, on sizes around the float4 boundary and on unaligned pointers (which must
// take the scalar path).
#include <gtest/gtest.h>

#include <functional>

#include "cuda_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"

namespace dpcore::testing {
namespace {

struct FlatCase {
  int64_t n;
  int offset;  // elements; 1..3 makes every pointer misaligned for float4
};

class ElementwiseTest : public ::testing::TestWithParam<FlatCase> {
 protected:
  void SetUp() override { SKIP_WITHOUT_CUDA(); }

  // Runs `gpu` on device copies of a and b (at the case's offset) and `cpu` on the host
  // copies; the outputs must be identical (the elementwise kernels round like the CPU).
  void expect_same(const std::function<void(const float*, const float*, float*)>& gpu,
                   const std::function<void(const float*, const float*, float*)>& cpu, bool y_starts_as_b = false) {
    const auto [n, offset] = GetParam();
    const auto a = random_floats(n + offset, 1), b = random_floats(n + offset, 2);
    DeviceArray<float> da(a), db(b), dy(n + offset);
    if (y_starts_as_b) dy.upload(b);
    gpu(da.get() + offset, db.get() + offset, dy.get() + offset);
    std::vector<float> want = y_starts_as_b ? b : std::vector<float>(n + offset, NAN);
    cpu(a.data() + offset, b.data() + offset, want.data() + offset);
    const auto got = dy.download();
    EXPECT_EQ(std::vector<float>(got.begin() + offset, got.end()), std::vector<float>(want.begin() + offset, want.end()));
  }
};

namespace gpu = kernels::cuda;
namespace cpu = kernels::cpu;

TEST_P(ElementwiseTest, Add) {
  const int64_t n = GetParam().n;
  expect_same([&](const float* a, const float* b, float* y) { gpu::add(n, a, b, y, nullptr); },
              [&](const float* a, const float* b, float* y) { cpu::add<float>(n, a, b, y); });
}

TEST_P(ElementwiseTest, AddInPlace) {
  const int64_t n = GetParam().n;
  expect_same([&](const float* a, const float*, float* y) { gpu::add(n, y, a, y, nullptr); },
              [&](const float* a, const float*, float* y) { cpu::add<float>(n, y, a, y); }, true);
}

TEST_P(ElementwiseTest, Scale) {
  const int64_t n = GetParam().n;
  expect_same([&](const float* a, const float*, float* y) { gpu::scale(n, 1.5f, a, y, nullptr); },
              [&](const float* a, const float*, float* y) { cpu::scale<float>(n, 1.5f, a, y); });
}

TEST_P(ElementwiseTest, ScaleByDeviceFactor) {
  const int64_t n = GetParam().n;
  DeviceArray<float> factor(std::vector<float>{-0.75f});
  expect_same([&](const float* a, const float*, float* y) { gpu::scale_by(n, factor.get(), a, y, nullptr); },
              [&](const float* a, const float*, float* y) { cpu::scale<float>(n, -0.75f, a, y); });
}

TEST_P(ElementwiseTest, Relu) {
  const int64_t n = GetParam().n;
  expect_same([&](const float* a, const float*, float* y) { gpu::relu_forward(n, a, y, nullptr); },
              [&](const float* a, const float*, float* y) { cpu::relu_forward<float>(n, a, y); });
  expect_same([&](const float* a, const float* b, float* y) { gpu::relu_backward(n, a, b, y, nullptr); },
              [&](const float* a, const float* b, float* y) { cpu::relu_backward<float>(n, a, b, y); });
}

TEST_P(ElementwiseTest, Fill) {
  const int64_t n = GetParam().n;
  expect_same([&](const float*, const float*, float* y) { gpu::fill<float>(n, 2.5f, y, nullptr); },
              [&](const float*, const float*, float* y) { cpu::fill<float>(n, 2.5f, y); });
}

// axpy may be contracted to one fused multiply-add on the GPU: equal to FP32 rounding.
TEST_P(ElementwiseTest, Axpy) {
  const auto [n, offset] = GetParam();
  const auto x = random_floats(n + offset, 1), y0 = random_floats(n + offset, 2);
  DeviceArray<float> dx(x), dy(y0);
  gpu::axpy(n, 0.3f, dx.get() + offset, dy.get() + offset, nullptr);
  std::vector<float> want = y0;
  cpu::axpy<float>(n, 0.3f, x.data() + offset, want.data() + offset);
  EXPECT_LE(scaled_error(dy.download(), want), kFp32Tolerance);
}

TEST_P(ElementwiseTest, SumMatchesCpuAndRepeatsBitForBit) {
  const auto [n, offset] = GetParam();
  const auto x = random_floats(n + offset, 3, 0.0, 1.0);  // positive: no cancellation to hide behind
  DeviceArray<float> dx(x), first(1), second(1);
  gpu::sum(n, dx.get() + offset, first.get(), nullptr);
  gpu::sum(n, dx.get() + offset, second.get(), nullptr);
  float want = NAN;
  cpu::sum<float>(n, x.data() + offset, &want);
  EXPECT_LE(scaled_error(first.download(), {want}), kFp32Tolerance);
  EXPECT_EQ(first.download(), second.download());
}

// Every torch.optim.SGD variant; the GPU rounds every operation like the CPU: same bits.
TEST_P(ElementwiseTest, SgdStepMatchesCpuBitForBit) {
  const auto [n, offset] = GetParam();
  struct Variant {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Variant v : {Variant{0, 0, 0, false}, Variant{0.9, 0, 0, false}, Variant{0.9, 0.1, 1e-2, false},
                          Variant{0.9, 0, 1e-2, true}}) {
    for (bool first_step : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "momentum " << v.momentum << " dampening " << v.dampening << " wd "
                                        << v.weight_decay << " nesterov " << v.nesterov << " first " << first_step);
      kernels::SgdConfig cfg;
      cfg.lr = 0.1, cfg.momentum = v.momentum, cfg.dampening = v.dampening, cfg.weight_decay = v.weight_decay;
      cfg.nesterov = v.nesterov;
      auto param = random_floats(n + offset, 4), grad = random_floats(n + offset, 5), buf = random_floats(n + offset, 6);
      DeviceArray<float> dparam(param), dgrad(grad), dbuf(buf);
      float* momentum_gpu = v.momentum != 0 ? dbuf.get() + offset : nullptr;
      float* momentum_cpu = v.momentum != 0 ? buf.data() + offset : nullptr;
      gpu::sgd_step(n, cfg, first_step, dparam.get() + offset, dgrad.get() + offset, momentum_gpu, nullptr);
      cpu::sgd_step<float>(n, cfg, first_step, param.data() + offset, grad.data() + offset, momentum_cpu);
      EXPECT_EQ(dparam.download(), param);
      EXPECT_EQ(dbuf.download(), buf);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, ElementwiseTest,
                         ::testing::Values(FlatCase{1, 0}, FlatCase{3, 1}, FlatCase{4096, 0}, FlatCase{1003, 1},
                                           FlatCase{70001, 3}, FlatCase{3000000, 0}, FlatCase{2999999, 2}));

}  // namespace
}  // namespace dpcore::testing
