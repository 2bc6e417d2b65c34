// conv2d fast paths (im2col + BLAS) against the loop-nest reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "kernel_checks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/naive.h"

namespace dpcore::testing {
namespace {

namespace cpu = kernels::cpu;
using kernels::Conv2dShape;

Conv2dShape conv_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S, int64_t stride_h,
                       int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  Conv2dShape s;
  s.N = N, s.C = C, s.H = H, s.W = W, s.K = K, s.R = R, s.S = S;
  s.stride_h = stride_h, s.stride_w = stride_w, s.pad_h = pad_h, s.pad_w = pad_w;
  s.P = kernels::conv_out_size(H, R, stride_h, pad_h);
  s.Q = kernels::conv_out_size(W, S, stride_w, pad_w);
  return s;
}

std::vector<Conv2dShape> conv_shapes() {
  return {
      conv_shape(2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1),      // the reference models' 3x3/1/1, odd non-square input
      conv_shape(3, 2, 9, 8, 5, 3, 2, 2, 2, 0, 0),      // stride 2, no padding, non-square kernel, floor size
      conv_shape(1, 4, 6, 11, 3, 5, 5, 1, 1, 2, 2),     // batch 1, padding 2
      conv_shape(5, 3, 10, 7, 6, 3, 3, 2, 3, 1, 0),     // different strides and paddings per axis
      conv_shape(7, 3, 4, 4, 2, 3, 3, 1, 1, 1, 1),      // tiny planes: several images per weight-gradient GEMM
      conv_shape(3, 5, 6, 6, 4, 1, 1, 2, 2, 0, 0),      // 1x1 kernel with stride
      conv_shape(2, 3, 8, 9, 4, 3, 3, 1, 1, 0, 0),      // stride 1 without padding: output narrower than input
      conv_shape(2, 2, 7, 6, 3, 3, 3, 1, 1, 0, 1),      // padding on one axis only, width kept
      conv_shape(2, 3, 9, 7, 4, 3, 3, 2, 1, 1, 1),      // width kept, but stride 2 down the rows
      conv_shape(4, 16, 14, 14, 8, 3, 3, 1, 1, 1, 1),   // model-like channel counts
      conv_shape(1, 32, 16, 16, 64, 3, 3, 1, 1, 1, 1),  // one image large enough to split its GEMMs
  };
}

std::string describe(const Conv2dShape& s, int threads) {
  std::ostringstream os;
  os << "x[" << s.N << "," << s.C << "," << s.H << "," << s.W << "] w[" << s.K << "," << s.C << "," << s.R << ","
     << s.S << "] stride " << s.stride_h << "x" << s.stride_w << " pad " << s.pad_h << "x" << s.pad_w << ", "
     << threads << " threads";
  return os.str();
}

template <class T>
class Conv2dTest : public ::testing::Test {};
TYPED_TEST_SUITE(Conv2dTest, KernelTypes);

TYPED_TEST(Conv2dTest, ForwardMatchesReference) {
  using T = TypeParam;
  for (const Conv2dShape& s : conv_shapes()) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE(describe(s, threads));
      ScopedKernelThreads scope(threads);
      auto x = random_vector<T>(s.x_size(), 1), w = random_vector<T>(s.w_size(), 2), b = random_vector<T>(s.K, 3);
      for (const T* bias : {static_cast<const T*>(b.data()), static_cast<const T*>(nullptr)}) {
        auto y = nan_filled<T>(s.y_size()), expected = nan_filled<T>(s.y_size());
        cpu::conv2d_forward(s, x.data(), w.data(), bias, y.data());
        cpu::naive::conv2d_forward(s, x.data(), w.data(), bias, expected.data());
        EXPECT_KERNEL_CLOSE(T, y, expected) << (bias ? "with bias" : "without bias");
      }
    }
  }
}

TYPED_TEST(Conv2dTest, FusedReluEqualsConvThenReluBitForBit) {
  using T = TypeParam;
  for (const Conv2dShape& s : conv_shapes()) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE(describe(s, threads));
      ScopedKernelThreads scope(threads);
      auto x = random_vector<T>(s.x_size(), 12), w = random_vector<T>(s.w_size(), 13), b = random_vector<T>(s.K, 14);
      // A NaN at the first pixel of the first and the last image, which every shape reads
      // (strides skip pixels in the middle): relu passes the NaN outputs through.
      x[0] = x[(s.N - 1) * s.C * s.H * s.W] = std::numeric_limits<T>::quiet_NaN();
      for (const T* bias : {static_cast<const T*>(b.data()), static_cast<const T*>(nullptr)}) {
        auto y = nan_filled<T>(s.y_size()), expected = nan_filled<T>(s.y_size());
        cpu::conv2d_relu_forward(s, x.data(), w.data(), bias, y.data());
        cpu::conv2d_forward(s, x.data(), w.data(), bias, expected.data());
        cpu::relu_forward(s.y_size(), expected.data(), expected.data());
        EXPECT_TRUE(bitwise_equal(y, expected)) << (bias ? "with bias" : "without bias");
        // The case must exercise the relu: some outputs clamped to zero, some NaN let through.
        EXPECT_GT(std::count(expected.begin(), expected.end(), T(0)), 0);
        EXPECT_GT(std::count_if(expected.begin(), expected.end(), [](T v) { return std::isnan(v); }), 0);
      }
    }
  }
}

TYPED_TEST(Conv2dTest, BackwardDataMatchesReference) {
  using T = TypeParam;
  for (const Conv2dShape& s : conv_shapes()) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE(describe(s, threads));
      ScopedKernelThreads scope(threads);
      auto dy = random_vector<T>(s.y_size(), 4), w = random_vector<T>(s.w_size(), 5);
      auto dx = nan_filled<T>(s.x_size()), expected = nan_filled<T>(s.x_size());
      cpu::conv2d_backward_data(s, dy.data(), w.data(), dx.data());
      cpu::naive::conv2d_backward_data(s, dy.data(), w.data(), expected.data());
      EXPECT_KERNEL_CLOSE(T, dx, expected);
    }
  }
}

TYPED_TEST(Conv2dTest, BackwardWeightOverwritesWhenNotAccumulating) {
  using T = TypeParam;
  for (const Conv2dShape& s : conv_shapes()) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE(describe(s, threads));
      ScopedKernelThreads scope(threads);
      auto x = random_vector<T>(s.x_size(), 6), dy = random_vector<T>(s.y_size(), 7);
      auto dw = nan_filled<T>(s.w_size()), db = nan_filled<T>(s.K);
      auto expected_dw = nan_filled<T>(s.w_size()), expected_db = nan_filled<T>(s.K);
      cpu::conv2d_backward_weight(s, x.data(), dy.data(), dw.data(), db.data(), false);
      cpu::naive::conv2d_backward_weight(s, x.data(), dy.data(), expected_dw.data(), expected_db.data(), false);
      EXPECT_KERNEL_CLOSE(T, dw, expected_dw);
      EXPECT_KERNEL_CLOSE(T, db, expected_db);
    }
  }
}

TYPED_TEST(Conv2dTest, BackwardWeightAddsWhenAccumulating) {
  using T = TypeParam;
  for (const Conv2dShape& s : conv_shapes()) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE(describe(s, threads));
      ScopedKernelThreads scope(threads);
      auto x = random_vector<T>(s.x_size(), 8), dy = random_vector<T>(s.y_size(), 9);
      const auto dw_before = random_vector<T>(s.w_size(), 10), db_before = random_vector<T>(s.K, 11);
      auto dw = dw_before, db = db_before, fresh_dw = nan_filled<T>(s.w_size()), fresh_db = nan_filled<T>(s.K);
      cpu::conv2d_backward_weight(s, x.data(), dy.data(), dw.data(), db.data(), true);
      cpu::conv2d_backward_weight(s, x.data(), dy.data(), fresh_dw.data(), fresh_db.data(), false);
      // accumulate = true must equal the previous contents plus the overwritten result.
      for (size_t i = 0; i < fresh_dw.size(); ++i) fresh_dw[i] += dw_before[i];
      for (size_t i = 0; i < fresh_db.size(); ++i) fresh_db[i] += db_before[i];
      EXPECT_KERNEL_CLOSE(T, dw, fresh_dw);
      EXPECT_KERNEL_CLOSE(T, db, fresh_db);
      // And the reference agrees on the accumulated values, with no bias gradient asked for.
      auto expected_dw = dw_before;
      dw = dw_before;
      cpu::conv2d_backward_weight(s, x.data(), dy.data(), dw.data(), static_cast<T*>(nullptr), true);
      cpu::naive::conv2d_backward_weight(s, x.data(), dy.data(), expected_dw.data(), static_cast<T*>(nullptr), true);
      EXPECT_KERNEL_CLOSE(T, dw, expected_dw);
    }
  }
}

}  // namespace
}  // namespace dpcore::testing
