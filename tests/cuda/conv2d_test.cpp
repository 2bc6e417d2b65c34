// The hand implicit-GEMM convolutions and the cuDNN engine against the CPU reference,
// and against each other, on odd sizes, strides, paddings, non-square kernels, batch 1
// and the reference models' layers.
#include <gtest/gtest.h>

#include <ostream>

#include "cuda_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/engine_select.h"
#include "kernels/cuda/kernels.h"

namespace dpcore::testing {
namespace {

using kernels::Conv2dShape;

struct ConvCase {
  const char* name;
  int64_t N, C, H, W, K, R, S, stride_h, stride_w, pad_h, pad_w;

  Conv2dShape shape() const {
    Conv2dShape s;
    s.N = N, s.C = C, s.H = H, s.W = W, s.K = K, s.R = R, s.S = S;
    s.stride_h = stride_h, s.stride_w = stride_w, s.pad_h = pad_h, s.pad_w = pad_w;
    s.P = kernels::conv_out_size(H, R, stride_h, pad_h);
    s.Q = kernels::conv_out_size(W, S, stride_w, pad_w);
    return s;
  }
};
std::ostream& operator<<(std::ostream& os, const ConvCase& c) { return os << c.name; }

const ConvCase kCases[] = {
    {"odd_3x3_pad1", 2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1},
    {"stride2_pad0_batch1", 1, 4, 8, 8, 6, 3, 3, 2, 2, 0, 0},
    {"nonsquare_kernel_pad2", 2, 2, 9, 6, 3, 3, 2, 2, 2, 2, 2},
    {"mixed_strides_pads", 2, 3, 11, 10, 4, 3, 3, 1, 2, 0, 1},
    {"1x1", 3, 5, 5, 5, 7, 1, 1, 1, 1, 0, 0},
    {"5x5_stride3", 1, 3, 11, 10, 4, 5, 5, 3, 3, 2, 2},
    {"large_tiles", 2, 16, 10, 10, 130, 3, 3, 1, 1, 1, 1},
    {"large_weight_tiles", 1, 20, 6, 6, 130, 3, 3, 1, 1, 1, 1},
    {"simplenet_conv", 8, 3, 32, 32, 16, 3, 3, 1, 1, 1, 1},
    {"fashioncnn_c2", 4, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1},
    {"vggs_c3", 2, 128, 8, 8, 256, 3, 3, 1, 1, 1, 1},
};

// Every conv case's inputs, uploaded once per test.
struct ConvData {
  Conv2dShape s;
  std::vector<float> x, w, bias, dy;
  DeviceArray<float> dev_x, dev_w, dev_bias, dev_dy;  // device copies
  explicit ConvData(const Conv2dShape& shape)
      : s(shape),
        x(random_floats(s.x_size(), 1)),
        w(random_floats(s.w_size(), 2)),
        bias(random_floats(s.K, 3)),
        dy(random_floats(s.y_size(), 4)),
        dev_x(x),
        dev_w(w),
        dev_bias(bias),
        dev_dy(dy) {}
};

class ConvTest : public ::testing::TestWithParam<ConvCase> {
 protected:
  void SetUp() override { SKIP_WITHOUT_CUDA(); }
};

std::vector<float> cpu_forward(const ConvData& d, bool relu) {
  std::vector<float> y(d.s.y_size());
  kernels::cpu::conv2d_forward<float>(d.s, d.x.data(), d.w.data(), d.bias.data(), y.data());
  if (relu) kernels::cpu::relu_forward<float>(int64_t(y.size()), y.data(), y.data());
  return y;
}

TEST_P(ConvTest, HandForwardMatchesCpu) {
  ConvData d(GetParam().shape());
  DeviceArray<float> y(d.s.y_size());
  kernels::cuda::conv2d_forward(d.s, d.dev_x.get(), d.dev_w.get(), d.dev_bias.get(), y.get(), nullptr);
  EXPECT_LE(scaled_error(y.download(), cpu_forward(d, false)), kFp32Tolerance);
}

TEST_P(ConvTest, HandBiasReluForwardMatchesCpu) {
  ConvData d(GetParam().shape());
  DeviceArray<float> y(d.s.y_size());
  kernels::cuda::conv2d_bias_relu_forward(d.s, d.dev_x.get(), d.dev_w.get(), d.dev_bias.get(), y.get(), nullptr);
  EXPECT_LE(scaled_error(y.download(), cpu_forward(d, true)), kFp32Tolerance);
}

TEST_P(ConvTest, HandBackwardDataMatchesCpu) {
  ConvData d(GetParam().shape());
  DeviceArray<float> dx(d.s.x_size());
  kernels::cuda::conv2d_backward_data(d.s, d.dev_dy.get(), d.dev_w.get(), dx.get(), nullptr);
  std::vector<float> want(d.s.x_size());
  kernels::cpu::conv2d_backward_data<float>(d.s, d.dy.data(), d.w.data(), want.data());
  EXPECT_LE(scaled_error(dx.download(), want), kFp32Tolerance);
}

TEST_P(ConvTest, HandBackwardWeightMatchesCpu) {
  ConvData d(GetParam().shape());
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    // Overwriting starts from NaN (nothing may be read); accumulating from random values.
    std::vector<float> dw0 = accumulate ? random_floats(d.s.w_size(), 5) : std::vector<float>(d.s.w_size(), NAN);
    std::vector<float> db0 = accumulate ? random_floats(d.s.K, 6) : std::vector<float>(d.s.K, NAN);
    DeviceArray<float> dw(dw0), db(db0);
    kernels::cuda::conv2d_backward_weight(d.s, d.dev_x.get(), d.dev_dy.get(), dw.get(), db.get(), accumulate, nullptr);
    kernels::cpu::conv2d_backward_weight<float>(d.s, d.x.data(), d.dy.data(), dw0.data(), db0.data(), accumulate);
    EXPECT_LE(scaled_error(dw.download(), dw0), kFp32Tolerance);
    EXPECT_LE(scaled_error(db.download(), db0), kFp32Tolerance);
  }
}

TEST_P(ConvTest, CudnnMatchesCpu) {
  ConvData d(GetParam().shape());
  cuda::set_engine_config(cuda::EngineConfig{});  // FP32
  DeviceArray<float> y(d.s.y_size()), dx(d.s.x_size()), dw(d.s.w_size());
  cuda::cudnn::conv2d_forward(d.s, d.dev_x.get(), d.dev_w.get(), y.get(), nullptr);
  kernels::cuda::bias_activation(d.s.N, d.s.K, d.s.P * d.s.Q, d.dev_bias.get(), false, y.get(), nullptr);
  EXPECT_LE(scaled_error(y.download(), cpu_forward(d, false)), kFp32Tolerance);

  cuda::cudnn::conv2d_backward_data(d.s, d.dev_dy.get(), d.dev_w.get(), dx.get(), nullptr);
  std::vector<float> want_dx(d.s.x_size());
  kernels::cpu::conv2d_backward_data<float>(d.s, d.dy.data(), d.w.data(), want_dx.data());
  EXPECT_LE(scaled_error(dx.download(), want_dx), kFp32Tolerance);

  cuda::cudnn::conv2d_backward_weight(d.s, d.dev_x.get(), d.dev_dy.get(), dw.get(), false, nullptr);
  std::vector<float> want_dw(d.s.w_size());
  kernels::cpu::conv2d_backward_weight<float>(d.s, d.x.data(), d.dy.data(), want_dw.data(), nullptr, false);
  EXPECT_LE(scaled_error(dw.download(), want_dw), kFp32Tolerance);
}

// The two engines on the GPU, same inputs: they must agree to FP32 rounding.
TEST_P(ConvTest, HandMatchesCudnn) {
  ConvData d(GetParam().shape());
  cuda::set_engine_config(cuda::EngineConfig{});
  DeviceArray<float> hand(d.s.w_size()), library(d.s.w_size());
  kernels::cuda::conv2d_backward_weight(d.s, d.dev_x.get(), d.dev_dy.get(), hand.get(), nullptr, false, nullptr);
  cuda::cudnn::conv2d_backward_weight(d.s, d.dev_x.get(), d.dev_dy.get(), library.get(), false, nullptr);
  EXPECT_LE(scaled_error(hand.download(), library.download()), kFp32Tolerance);
  DeviceArray<float> hand_y(d.s.y_size()), library_y(d.s.y_size());
  kernels::cuda::conv2d_forward(d.s, d.dev_x.get(), d.dev_w.get(), nullptr, hand_y.get(), nullptr);
  cuda::cudnn::conv2d_forward(d.s, d.dev_x.get(), d.dev_w.get(), library_y.get(), nullptr);
  EXPECT_LE(scaled_error(hand_y.download(), library_y.download()), kFp32Tolerance);
}

// The hand kernels use no atomics: a second run gives the same bits.
TEST_P(ConvTest, HandBackwardWeightIsDeterministic) {
  ConvData d(GetParam().shape());
  DeviceArray<float> first(d.s.w_size()), second(d.s.w_size());
  kernels::cuda::conv2d_backward_weight(d.s, d.dev_x.get(), d.dev_dy.get(), first.get(), nullptr, false, nullptr);
  kernels::cuda::conv2d_backward_weight(d.s, d.dev_x.get(), d.dev_dy.get(), second.get(), nullptr, false, nullptr);
  EXPECT_EQ(first.download(), second.download());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ConvCase>& info) { return std::string(info.param.name); });

// TF32 tensor cores round the inputs to a 10-bit mantissa: relative errors around 1e-3,
// checked against 1e-2 (kTf32Tolerance).
TEST(CudnnConvTf32, ForwardWithinTf32Tolerance) {
  SKIP_WITHOUT_CUDA();
  ConvData d(ConvCase{"vggs_c2", 4, 64, 16, 16, 128, 3, 3, 1, 1, 1, 1}.shape());
  cuda::EngineConfig config;
  config.tf32 = true;
  cuda::set_engine_config(config);
  DeviceArray<float> y(d.s.y_size());
  cuda::cudnn::conv2d_forward(d.s, d.dev_x.get(), d.dev_w.get(), y.get(), nullptr);
  kernels::cuda::bias_activation(d.s.N, d.s.K, d.s.P * d.s.Q, d.dev_bias.get(), false, y.get(), nullptr);
  const std::vector<float> got = y.download();
  cuda::set_engine_config(cuda::EngineConfig{});
  EXPECT_LE(scaled_error(got, cpu_forward(d, false)), kTf32Tolerance);
}

}  // namespace
}  // namespace dpcore::testing
