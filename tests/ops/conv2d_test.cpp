// conv2d (forward, fused conv+bias+relu, backward data, backward weight) on every backend
// (tests/support/op_backends.h) against the loop-nest reference of kernels/naive, on one
// table of shapes: odd sizes, strides, paddings, non-square kernels, batch 1 and the
// reference models' layers. Then what only the CUDA build has: the hand kernels against
// cuDNN, and cuDNN in TF32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/naive/naive.h"
#include "support/op_backends.h"

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

//                 name                          N   C   H   W    K  R  S  sh sw ph pw
const ConvCase kCases[] = {
    {"odd_nonsquare_3x3_pad1",                   2,  3,  7,  5,   4, 3, 3, 1, 1, 1, 1},  // the models' 3x3/1/1
    {"odd_3x3_pad1",                             2,  3,  7,  9,   5, 3, 3, 1, 1, 1, 1},
    {"stride2_pad0_nonsquare_kernel_floor",      3,  2,  9,  8,   5, 3, 2, 2, 2, 0, 0},
    {"stride2_pad0_batch1",                      1,  4,  8,  8,   6, 3, 3, 2, 2, 0, 0},
    {"5x5_pad2_batch1",                          1,  4,  6, 11,   3, 5, 5, 1, 1, 2, 2},
    {"nonsquare_kernel_pad2",                    2,  2,  9,  6,   3, 3, 2, 2, 2, 2, 2},
    {"per_axis_strides_and_pads",                5,  3, 10,  7,   6, 3, 3, 2, 3, 1, 0},
    {"mixed_strides_pads",                       2,  3, 11, 10,   4, 3, 3, 1, 2, 0, 1},
    {"tiny_planes_many_images",                  7,  3,  4,  4,   2, 3, 3, 1, 1, 1, 1},
    {"1x1_stride2",                              3,  5,  6,  6,   4, 1, 1, 2, 2, 0, 0},
    {"1x1",                                      3,  5,  5,  5,   7, 1, 1, 1, 1, 0, 0},
    {"stride1_pad0_narrower_output",             2,  3,  8,  9,   4, 3, 3, 1, 1, 0, 0},
    {"pad_one_axis_only",                        2,  2,  7,  6,   3, 3, 3, 1, 1, 0, 1},
    {"width_kept_stride2_rows",                  2,  3,  9,  7,   4, 3, 3, 2, 1, 1, 1},
    {"5x5_stride3",                              1,  3, 11, 10,   4, 5, 5, 3, 3, 2, 2},
    {"model_like_channels",                      4, 16, 14, 14,   8, 3, 3, 1, 1, 1, 1},
    {"one_image_split_gemms",                    1, 32, 16, 16,  64, 3, 3, 1, 1, 1, 1},
    // The large (128 x 128) tiles where the host plans for one SM (host_sm1), on small
    // depths: forward M = N*P*Q = 128 by K = 130; backward-data M = N*H*W = 128 by C = 130.
    {"large_tiles_forward_on_one_sm",            2,  2,  8,  8, 130, 3, 3, 1, 1, 1, 1},
    {"large_tiles_backward_data_on_one_sm",      2, 130, 8,  8,   2, 3, 3, 1, 1, 1, 1},
    // Partial edge tiles in every GEMM; the large (128 x 128) tiles only where the host
    // plans for one SM (host_sm1): too few of them to fill 132 SMs.
    {"k130_tile_edges",                          2, 16, 10, 10, 130, 3, 3, 1, 1, 1, 1},
    {"k130_weight_tile_edges",                   1, 20,  6,  6, 130, 3, 3, 1, 1, 1, 1},
    // The large tiles on 132 SMs (plan_gemm: at least 132 of them), with partial edge tiles:
    // forward M = N*P*Q = 9408 by K = 130 (148 tiles); backward-data M = N*H*W = 12544 by
    // C = 130 (196 tiles); backward-weight K = 130 by C*R*S = 9000 (142 tiles). Too big for
    // the host at 132 SMs, whose host_sm1 run covers the large tiles on the smaller cases.
    {"large_tiles_forward",                      3,  3, 56, 56, 130, 3, 3, 1, 1, 1, 1},
    {"large_tiles_backward_data_stride2",        4, 130, 56, 56,  3, 3, 3, 2, 2, 1, 1},
    {"large_tiles_backward_weight",              2, 1000, 4,  4, 130, 3, 3, 1, 1, 1, 1},
    {"simplenet_conv",                           8,  3, 32, 32,  16, 3, 3, 1, 1, 1, 1},
    {"fashioncnn_c2",                            4, 32, 14, 14,  64, 3, 3, 1, 1, 1, 1},
    {"vggs_c3",                                  2, 128, 8,  8, 256, 3, 3, 1, 1, 1, 1},
    // The CPU's direct stride-1 path (kernels/cpu/conv2d_direct.h) where it has AVX-512:
    // channel counts that leave partial blocks (K = 11 in the forward and C = 13 in
    // backward data: 8 + single channels; C = 13 in the weight gradient: 4 x 3 + 1), a 5x3
    // kernel and a 1x1 one (tap by tap), K = 17 (a second, mostly empty vector of output
    // channels in the weight gradient), padding past the kernel (backward data then takes
    // im2col), and a ResNet layer1 convolution.
    {"direct_partial_channel_blocks",            3, 13,  9,  7,  11, 3, 3, 1, 1, 1, 1},
    {"direct_5x3_kernel_k17",                    2, 10,  8, 10,  17, 5, 3, 1, 1, 1, 2},
    {"direct_1x1_many_channels",                 2, 40,  6,  5,  20, 1, 1, 1, 1, 0, 0},
    {"direct_pad_past_kernel",                   2,  8,  5,  5,   8, 3, 3, 1, 1, 3, 3},
    {"resnet_layer1",                            1, 16, 28, 28,  16, 3, 3, 1, 1, 1, 1},
};

std::string describe(const ConvCase& c, int threads) {
  const Conv2dShape s = c.shape();
  std::ostringstream os;
  os << c.name << ": x[" << s.N << "," << s.C << "," << s.H << "," << s.W << "] w[" << s.K << "," << s.C << ","
     << s.R << "," << s.S << "] stride " << s.stride_h << "x" << s.stride_w << " pad " << s.pad_h << "x" << s.pad_w
     << threads_label(threads);
  return os.str();
}

template <class T>
std::vector<T> with_relu(std::vector<T> y) {
  for (T& v : y) v = v < T(0) ? T(0) : v;
  return y;
}

template <class B>
class Conv2dTest : public OpTest<B> {};
TYPED_TEST_SUITE(Conv2dTest, KernelAndLibraryBackends, BackendName);

TYPED_TEST(Conv2dTest, ForwardMatchesReference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const ConvCase& c : kCases) {
    if (!B::runs_multiply_adds(c.shape().y_size() * c.C * c.R * c.S)) continue;
    const Conv2dShape s = c.shape();
    const auto x = random_vector<T>(s.x_size(), 1), w = random_vector<T>(s.w_size(), 2), b = random_vector<T>(s.K, 3);
    typename B::template Array<T> dev_x(x), dev_w(w), dev_b(b);
    for (bool with_bias : {true, false}) {
      auto want = nan_filled<T>(s.y_size());
      naive::conv2d_forward(s, x.data(), w.data(), with_bias ? b.data() : nullptr, want.data());
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c, threads) + (with_bias ? ", with bias" : ", without bias"));
        ScopedKernelThreads scope(threads);
        typename B::template Array<T> y(s.y_size());
        B::conv2d_forward(s, dev_x.get(), dev_w.get(), with_bias ? dev_b.get() : nullptr, y.get());
        EXPECT_OP_CLOSE(B, y.download(), want);
      }
    }
  }
}

// conv2d_relu_forward is relu(conv(x) + bias): within tolerance of the reference followed by
// relu, and bit for bit the backend's own conv2d_forward then relu_forward, NaN included.
TYPED_TEST(Conv2dTest, FusedReluForwardMatchesReferenceAndEqualsConvThenReluBitForBit) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const ConvCase& c : kCases) {
    if (!B::runs_multiply_adds(c.shape().y_size() * c.C * c.R * c.S)) continue;
    const Conv2dShape s = c.shape();
    auto x = random_vector<T>(s.x_size(), 12), w = random_vector<T>(s.w_size(), 13), b = random_vector<T>(s.K, 14);
    for (bool with_bias : {true, false}) {
      auto want = nan_filled<T>(s.y_size());
      naive::conv2d_forward(s, x.data(), w.data(), with_bias ? b.data() : nullptr, want.data());
      want = with_relu(want);
      typename B::template Array<T> dev_x(x), dev_w(w), dev_b(b);
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c, threads) + (with_bias ? ", with bias" : ", without bias"));
        ScopedKernelThreads scope(threads);
        typename B::template Array<T> y(s.y_size());
        B::conv2d_relu_forward(s, dev_x.get(), dev_w.get(), with_bias ? dev_b.get() : nullptr, y.get());
        EXPECT_OP_CLOSE(B, y.download(), want);
      }
    }
    // A NaN at the first pixel of the first and the last image, which every shape reads
    // (strides skip pixels in the middle): relu passes the NaN outputs through.
    x[0] = x[(s.N - 1) * s.C * s.H * s.W] = std::numeric_limits<T>::quiet_NaN();
    typename B::template Array<T> dev_x(x), dev_w(w), dev_b(b);
    for (int threads : B::thread_counts()) {
      ScopedKernelThreads scope(threads);
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(describe(c, threads) + ", NaN inputs" + (with_bias ? ", with bias" : ", without bias"));
        const T* bias = with_bias ? dev_b.get() : nullptr;
        typename B::template Array<T> fused(s.y_size()), separate(s.y_size());
        B::conv2d_relu_forward(s, dev_x.get(), dev_w.get(), bias, fused.get());
        B::conv2d_forward(s, dev_x.get(), dev_w.get(), bias, separate.get());
        B::relu_forward(s.y_size(), separate.get(), separate.get());
        const std::vector<T> expected = separate.download();
        EXPECT_TRUE(bitwise_equal(fused.download(), expected));
        // The case must exercise the relu: some outputs clamped to zero, some NaN let through.
        EXPECT_GT(std::count(expected.begin(), expected.end(), T(0)), 0);
        EXPECT_GT(std::count_if(expected.begin(), expected.end(), [](T v) { return std::isnan(v); }), 0);
      }
    }
  }
}

TYPED_TEST(Conv2dTest, BackwardDataMatchesReference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const ConvCase& c : kCases) {
    if (!B::runs_multiply_adds(c.shape().y_size() * c.C * c.R * c.S)) continue;
    const Conv2dShape s = c.shape();
    const auto dy = random_vector<T>(s.y_size(), 4), w = random_vector<T>(s.w_size(), 5);
    auto want = nan_filled<T>(s.x_size());
    naive::conv2d_backward_data(s, dy.data(), w.data(), want.data());
    typename B::template Array<T> dev_dy(dy), dev_w(w);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> dx(s.x_size());
      B::conv2d_backward_data(s, dev_dy.get(), dev_w.get(), dx.get());
      EXPECT_OP_CLOSE(B, dx.download(), want);
    }
  }
}

// accumulate overwrites or adds, with or without the bias gradient
// (expect_weight_grads_overwrite_or_accumulate in tests/support/op_backends.h).
TYPED_TEST(Conv2dTest, BackwardWeightOverwritesOrAccumulates) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const ConvCase& c : kCases) {
    if (!B::runs_multiply_adds(c.shape().y_size() * c.C * c.R * c.S)) continue;
    const Conv2dShape s = c.shape();
    const auto x = random_vector<T>(s.x_size(), 6), dy = random_vector<T>(s.y_size(), 7);
    const auto want = weight_grad_want<T>(s.w_size(), s.K, [&](T* dw, T* db, bool accumulate) {
      naive::conv2d_backward_weight(s, x.data(), dy.data(), dw, db, accumulate);
    });
    typename B::template Array<T> dev_x(x), dev_dy(dy);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      expect_weight_grads_overwrite_or_accumulate<B>(want, [&](T* dw, T* db, bool accumulate) {
        B::conv2d_backward_weight(s, dev_x.get(), dev_dy.get(), dw, db, accumulate);
      });
    }
  }
}

// Every reduction runs in a fixed order (no float atomics, deterministic library
// algorithms): a second run gives the same bits.
TYPED_TEST(Conv2dTest, BackwardWeightIsDeterministic) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const ConvCase& c : kCases) {
    if (!B::runs_multiply_adds(c.shape().y_size() * c.C * c.R * c.S)) continue;
    const Conv2dShape s = c.shape();
    typename B::template Array<T> x(random_vector<T>(s.x_size(), 6)), dy(random_vector<T>(s.y_size(), 7));
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> first_dw(s.w_size()), first_db(s.K), second_dw(s.w_size()), second_db(s.K);
      B::conv2d_backward_weight(s, x.get(), dy.get(), first_dw.get(), first_db.get(), false);
      B::conv2d_backward_weight(s, x.get(), dy.get(), second_dw.get(), second_db.get(), false);
      EXPECT_TRUE(bitwise_equal(first_dw.download(), second_dw.download()));
      EXPECT_TRUE(bitwise_equal(first_db.download(), second_db.download()));
    }
  }
}

// The CPU-only tests below are left out of the host execution builds (tests/host_exec),
// which run this file for the hand CUDA kernels under the sanitizers.
#if !defined(DPCORE_HOST_OPS_TEST)
// The CPU's float stride-1 convolutions have two paths (kernels/cpu/conv2d_direct.h): the
// typed tests above take the direct one where the CPU has AVX-512. With it turned off,
// im2col + GEMM must meet the reference on the same cases, so that both paths stay
// checked on every machine, with or without AVX-512.
class DirectConv2dOff {
 public:
  DirectConv2dOff() { kernels::cpu::set_direct_conv2d(false); }
  ~DirectConv2dOff() { kernels::cpu::set_direct_conv2d(true); }
};

TEST(Conv2dCpuPaths, Im2colMatchesReferenceWithTheDirectPathOff) {
  using B = CpuBackend<float>;
  DirectConv2dOff off;
  for (const ConvCase& c : kCases) {
    const Conv2dShape s = c.shape();
    SCOPED_TRACE(describe(c, 0));
    const auto x = random_vector<float>(s.x_size(), 1), w = random_vector<float>(s.w_size(), 2), b = random_vector<float>(s.K, 3);
    const auto dy = random_vector<float>(s.y_size(), 4);
    std::vector<float> want_y(s.y_size()), want_dx(s.x_size()), want_dw(s.w_size()), want_db(s.K);
    naive::conv2d_forward(s, x.data(), w.data(), b.data(), want_y.data());
    naive::conv2d_backward_data(s, dy.data(), w.data(), want_dx.data());
    naive::conv2d_backward_weight(s, x.data(), dy.data(), want_dw.data(), want_db.data(), false);
    auto y = nan_filled<float>(s.y_size()), dx = nan_filled<float>(s.x_size());
    auto dw = nan_filled<float>(s.w_size()), db = nan_filled<float>(s.K);
    B::conv2d_forward(s, x.data(), w.data(), b.data(), y.data());
    B::conv2d_backward_data(s, dy.data(), w.data(), dx.data());
    B::conv2d_backward_weight(s, x.data(), dy.data(), dw.data(), db.data(), false);
    EXPECT_OP_CLOSE(B, y, want_y);
    EXPECT_OP_CLOSE(B, dx, want_dx);
    EXPECT_OP_CLOSE(B, dw, want_dw);
    EXPECT_OP_CLOSE(B, db, want_db);
  }
}

// A NaN input reaches exactly the weight gradients it reaches in the reference: the ones
// whose taps pair it with an output that exists (at a corner with padding 1, the taps
// that look up and left of an output, not the others). Both CPU paths, both precisions.
template <class T>
void expect_nan_reaches_the_reference_weight_grads(const char* path) {
  for (const ConvCase& c : kCases) {
    const Conv2dShape s = c.shape();
    SCOPED_TRACE(describe(c, 0) + ", " + path);
    auto x = random_vector<T>(s.x_size(), 6);
    const auto dy = random_vector<T>(s.y_size(), 7);
    x[0] = std::numeric_limits<T>::quiet_NaN();  // image 0, channel 0, top-left pixel
    std::vector<T> want(s.w_size()), want_db(s.K), got(s.w_size()), got_db(s.K);
    naive::conv2d_backward_weight(s, x.data(), dy.data(), want.data(), want_db.data(), false);
    kernels::cpu::conv2d_backward_weight(s, x.data(), dy.data(), got.data(), got_db.data(), false);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "dw[" << i << "]";
    if (s.pad_h == 1 && s.pad_w == 1 && s.R == 3 && s.S == 3 && s.stride_h == 1 && s.stride_w == 1) {
      // The case exercises both sides: taps the NaN reaches and taps it misses.
      EXPECT_GT(std::count_if(want.begin(), want.end(), [](T v) { return std::isnan(v); }), 0);
      EXPECT_GT(std::count_if(want.begin(), want.end(), [](T v) { return !std::isnan(v); }), 0);
    }
  }
}

TEST(Conv2dCpuPaths, NanInputReachesTheReferenceWeightGradsOnly) {
  expect_nan_reaches_the_reference_weight_grads<float>("default path (direct where it applies)");
  expect_nan_reaches_the_reference_weight_grads<double>("double (im2col)");
  DirectConv2dOff off;
  expect_nan_reaches_the_reference_weight_grads<float>("im2col");
}
#endif  // !DPCORE_HOST_OPS_TEST

#ifdef DPCORE_CUDA_LIBRARIES
// The two CUDA engines on the same inputs: they must agree to FP32 rounding.
TEST(Conv2dEngines, HandMatchesCudnn) {
  SKIP_WITHOUT_CUDA();
  kernels::cuda_libraries::set_engine_config(kernels::cuda_libraries::EngineConfig{});
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE(describe(c, 0));
    const Conv2dShape s = c.shape();
    DeviceArray<float> x(random_floats(s.x_size(), 1)), w(random_floats(s.w_size(), 2)), dy(random_floats(s.y_size(), 4));
    DeviceArray<float> hand(s.w_size()), library(s.w_size());
    CudaBackend::conv2d_backward_weight(s, x.get(), dy.get(), hand.get(), nullptr, false);
    CudaLibraryBackend::conv2d_backward_weight(s, x.get(), dy.get(), library.get(), nullptr, false);
    EXPECT_LE(scaled_error(hand.download(), library.download()), kFp32Tolerance);
    DeviceArray<float> hand_y(s.y_size()), library_y(s.y_size());
    CudaBackend::conv2d_forward(s, x.get(), w.get(), nullptr, hand_y.get());
    CudaLibraryBackend::conv2d_forward(s, x.get(), w.get(), nullptr, library_y.get());
    EXPECT_LE(scaled_error(hand_y.download(), library_y.download()), kFp32Tolerance);
  }
}

// TF32 tensor cores round the inputs to a 10-bit mantissa: relative errors around 1e-3,
// checked against 1e-2 (kTf32Tolerance).
TEST(Conv2dEngines, CudnnTf32ForwardWithinTf32Tolerance) {
  SKIP_WITHOUT_CUDA();
  const Conv2dShape s = ConvCase{"vggs_c2", 4, 64, 16, 16, 128, 3, 3, 1, 1, 1, 1}.shape();
  const auto x = random_floats(s.x_size(), 1), w = random_floats(s.w_size(), 2), bias = random_floats(s.K, 3);
  std::vector<float> want(s.y_size());
  naive::conv2d_forward(s, x.data(), w.data(), bias.data(), want.data());
  kernels::cuda_libraries::EngineConfig config;
  config.tf32 = true;
  kernels::cuda_libraries::set_engine_config(config);
  DeviceArray<float> dev_x(x), dev_w(w), dev_bias(bias), y(s.y_size());
  libraries().conv.forward(s, dev_x.get(), dev_w.get(), y.get(), false, nullptr);
  kernels::cuda::bias_activation(s.N, s.K, s.P * s.Q, dev_bias.get(), false, y.get(), nullptr);
  const std::vector<float> got = y.download();
  kernels::cuda_libraries::set_engine_config(kernels::cuda_libraries::EngineConfig{});
  EXPECT_LE(scaled_error(got, want), kTf32Tolerance);
}
#endif

}  // namespace
}  // namespace dpcore::testing
