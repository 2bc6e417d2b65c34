// max_pool2d on the GPU against the CPU reference: the same outputs, the same argmax
// (ties go to the first element), and a backward gather that adds in the CPU's order, so
// both are bit-identical, overlapping windows included.
#include <gtest/gtest.h>

#include <ostream>

#include "cuda_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"

namespace dpcore::testing {
namespace {

struct PoolCase {
  const char* name;
  int64_t N, C, H, W, kernel, stride, pad;

  kernels::Pool2dShape shape() const {
    kernels::Pool2dShape s;
    s.N = N, s.C = C, s.H = H, s.W = W;
    s.kernel_h = s.kernel_w = kernel;
    s.stride_h = s.stride_w = stride;
    s.pad_h = s.pad_w = pad;
    s.P = kernels::conv_out_size(H, kernel, stride, pad);
    s.Q = kernels::conv_out_size(W, kernel, stride, pad);
    return s;
  }
};
std::ostream& operator<<(std::ostream& os, const PoolCase& c) { return os << c.name; }

const PoolCase kCases[] = {
    {"2x2_stride2", 2, 3, 8, 8, 2, 2, 0},
    {"odd_input_floor", 1, 2, 7, 9, 2, 2, 0},
    {"3x3_stride2_pad1_overlap", 1, 2, 7, 9, 3, 2, 1},
    {"3x3_stride1_pad1_overlap", 2, 1, 6, 5, 3, 1, 1},
    {"stride3", 3, 2, 9, 7, 3, 3, 0},
    {"vggs_pool1", 4, 64, 32, 32, 2, 2, 0},
};

class PoolTest : public ::testing::TestWithParam<PoolCase> {
 protected:
  void SetUp() override { SKIP_WITHOUT_CUDA(); }
};

// Random values with planted ties, so the first-element rule is exercised.
std::vector<float> pool_input(int64_t n) {
  std::vector<float> x = random_floats(n, 1);
  for (int64_t i = 0; i + 1 < n; i += 5) x[i + 1] = x[i];
  return x;
}

TEST_P(PoolTest, ForwardAndBackwardMatchCpuBitForBit) {
  const kernels::Pool2dShape s = GetParam().shape();
  const std::vector<float> x = pool_input(s.x_size()), dy = random_floats(s.y_size(), 2);
  std::vector<float> want_y(s.y_size()), want_dx(s.x_size());
  std::vector<int32_t> want_argmax(s.y_size());
  kernels::cpu::max_pool2d_forward<float>(s, x.data(), want_y.data(), want_argmax.data());
  kernels::cpu::max_pool2d_backward<float>(s, dy.data(), want_argmax.data(), want_dx.data());

  DeviceArray<float> dx_in(x), ddy(dy), y(s.y_size()), dx(s.x_size());
  DeviceArray<int32_t> argmax(s.y_size());
  kernels::cuda::max_pool2d_forward(s, dx_in.get(), y.get(), argmax.get(), nullptr);
  EXPECT_EQ(y.download(), want_y);
  EXPECT_EQ(argmax.download(), want_argmax);
  kernels::cuda::max_pool2d_backward(s, ddy.get(), argmax.get(), dx.get(), nullptr);
  EXPECT_EQ(dx.download(), want_dx);
}

TEST_P(PoolTest, ReluFusedBackwardMatchesSeparatePasses) {
  const kernels::Pool2dShape s = GetParam().shape();
  std::vector<float> relu_y = pool_input(s.x_size());
  kernels::cpu::relu_forward<float>(int64_t(relu_y.size()), relu_y.data(), relu_y.data());
  const std::vector<float> dy = random_floats(s.y_size(), 2);
  std::vector<float> pooled(s.y_size()), pool_dx(s.x_size()), want(s.x_size());
  std::vector<int32_t> argmax(s.y_size());
  kernels::cpu::max_pool2d_forward<float>(s, relu_y.data(), pooled.data(), argmax.data());
  kernels::cpu::max_pool2d_backward<float>(s, dy.data(), argmax.data(), pool_dx.data());
  kernels::cpu::relu_backward<float>(s.x_size(), pool_dx.data(), relu_y.data(), want.data());

  DeviceArray<float> ddy(dy), drelu_y(relu_y), dx(s.x_size());
  DeviceArray<int32_t> dargmax(argmax);
  kernels::cuda::max_pool2d_relu_backward(s, ddy.get(), dargmax.get(), drelu_y.get(), dx.get(), nullptr);
  EXPECT_EQ(dx.download(), want);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<PoolCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dpcore::testing
