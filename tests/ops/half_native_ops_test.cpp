// The kernels with native 16-bit paths between autocast's 16-bit ops (issue 27): batch_norm2d's
// passes over activations, layer norm, max and average pooling, dropout, gelu (both forms),
// tanh and scale, on every implementation
// (tests/support/half_backends.h). Each kernel is written once over its activations' type,
// so its 16-bit run must be, bit for bit, the same backend's float32 run on the widened
// tensors with each 16-bit output rounded once (the float32 kernels themselves are held to
// float64 by their own op tests). Every output starts as NaN, so one the kernel does not
// write fails; the CPU runs on 1 and 2 threads. The shapes give planes with and without a
// tail of the CPU's 16 sum lanes and of its 2x2 pooling blocks, a tensor past the CPU's
// threshold for threads, and overlapping pooling windows, whose gradients are summed; the
// flat arrays tails of the CPU's 16-float blocks and 512-float widened pieces, and (CPU)
// more than one 2^14-element share per thread.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "support/half_backends.h"

namespace dpcore::testing {
namespace {

using kernels::BatchNorm2dShape;
using kernels::BFloat16;
using kernels::Float16;
using kernels::Pool2dShape;

struct Images {
  int64_t N, C, H, W;
};
// 7x7 planes (49 = 3 x 16 + 1), 5x5, 12x12 and 16x16 (no tail); the last has 32768 values,
// the CPU kernels' threshold for sharing out over threads (left to the CPU: the CUDA
// kernels' grid-stride loops meet every index pattern in the smaller ones, and on the host
// build's emulated device it is hundreds of blocks a launch).
const Images kImages[] = {{2, 3, 7, 7}, {3, 4, 5, 5}, {2, 5, 12, 12}, {8, 16, 16, 16}};
template <class B>
bool runs(const Images& c) {
  return !B::kCuda || c.N * c.C * c.H * c.W < 32768;
}

std::string describe(const Images& c, const char* type, int threads) {
  std::ostringstream os;
  os << c.N << "x" << c.C << "x" << c.H << "x" << c.W << ", " << type << threads_label(threads);
  return os.str();
}

template <class H>
std::vector<float> widened(const std::vector<H>& v) {
  std::vector<float> w(v.size());
  for (size_t i = 0; i < v.size(); ++i) w[i] = float(to_double(v[i]));
  return w;
}

// The 16-bit results equal the float32 ones rounded once (compared as bit patterns, so a
// NaN left in an unwritten output never matches).
template <class H>
void expect_rounded(const char* what, const std::vector<H>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i].bits, to_half<H>(want[i]).bits) << what << " [" << i << "]: " << to_double(got[i]) << " against "
                                                     << want[i];
}
void expect_same_bits(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << what << " [" << i << "]: " << got[i] << " against "
                                                                << want[i];
}

template <class B>
class HalfNativeOpsTest : public HalfTest<B> {};
TYPED_TEST_SUITE(HalfNativeOpsTest, HalfBackends, BackendName);

template <class B, class H>
void batch_norm_equals_the_widened_float32_run() {
  for (const Images& c : kImages) {
    if (!runs<B>(c)) continue;
    BatchNorm2dShape s;
    s.N = c.N, s.C = c.C, s.H = c.H, s.W = c.W;
    const size_t n = size_t(s.x_size()), C = size_t(c.C);
    // x with a channel-dependent offset, so that the centring matters.
    std::vector<H> x16 = random_half<H>(n, 11), dy16 = random_half<H>(n, 12);
    for (size_t i = 0; i < n; ++i) x16[i] = to_half<H>(float(to_double(x16[i]) + double((i / size_t(c.H * c.W)) % C)));
    const std::vector<float> x32 = widened(x16), dy32 = widened(dy16);
    std::vector<float> weight = random_vector<float>(C, 13), bias = random_vector<float>(C, 14);
    const std::vector<float> old_dweight = random_vector<float>(C, 15), old_dbias = random_vector<float>(C, 16);
    typename B::template Array<H> x_h(x16), dy_h(dy16);
    typename B::template Array<float> x_f(x32), dy_f(dy32), w(weight), b(bias);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, type_name<H>(), threads));
      ScopedKernelThreads scope(threads);
      // statistics
      typename B::template Array<float> mean_h(C), var_h(C), mean_f(C), var_f(C);
      B::batch_norm2d_stats(s, x_h.get(), mean_h.get(), var_h.get());
      B::batch_norm2d_stats(s, x_f.get(), mean_f.get(), var_f.get());
      expect_same_bits("mean", mean_h.download(), mean_f.download());
      expect_same_bits("var", var_h.download(), var_f.download());
      std::vector<float> invstd(C);
      const std::vector<float> var = var_f.download();
      for (size_t k = 0; k < C; ++k) invstd[k] = float(1.0 / std::sqrt(double(var[k]) + 1e-5));
      typename B::template Array<float> is(invstd);
      // normalisation, affine and not
      for (bool affine : {true, false}) {
        typename B::template Array<H> y_h(n);
        typename B::template Array<float> y_f(n);
        B::batch_norm2d_apply(s, x_h.get(), mean_f.get(), is.get(), affine ? w.get() : nullptr,
                              affine ? b.get() : nullptr, y_h.get());
        B::batch_norm2d_apply(s, x_f.get(), mean_f.get(), is.get(), affine ? w.get() : nullptr,
                              affine ? b.get() : nullptr, y_f.get());
        expect_rounded(affine ? "y" : "y without affine", y_h.download(), y_f.download());
      }
      // the backward's sums, written and accumulated
      for (bool accumulate : {false, true}) {
        typename B::template Array<float> sum_dy_h(C), sum_xhat_h(C), sum_dy_f(C), sum_xhat_f(C);
        typename B::template Array<float> dw_h(old_dweight), db_h(old_dbias), dw_f(old_dweight), db_f(old_dbias);
        B::batch_norm2d_backward_reduce(s, dy_h.get(), x_h.get(), mean_f.get(), is.get(), sum_dy_h.get(),
                                        sum_xhat_h.get(), dw_h.get(), db_h.get(), accumulate);
        B::batch_norm2d_backward_reduce(s, dy_f.get(), x_f.get(), mean_f.get(), is.get(), sum_dy_f.get(),
                                        sum_xhat_f.get(), dw_f.get(), db_f.get(), accumulate);
        expect_same_bits("sum_dy", sum_dy_h.download(), sum_dy_f.download());
        expect_same_bits("sum_dy_xhat", sum_xhat_h.download(), sum_xhat_f.download());
        expect_same_bits("dweight", dw_h.download(), dw_f.download());
        expect_same_bits("dbias", db_h.download(), db_f.download());
        // the input gradient: training (the sums) and eval (none)
        if (accumulate) continue;
        for (bool training : {true, false}) {
          typename B::template Array<H> dx_h(n);
          typename B::template Array<float> dx_f(n);
          B::batch_norm2d_backward_apply(s, dy_h.get(), x_h.get(), mean_f.get(), is.get(), w.get(),
                                         training ? sum_dy_f.get() : nullptr, training ? sum_xhat_f.get() : nullptr,
                                         dx_h.get());
          B::batch_norm2d_backward_apply(s, dy_f.get(), x_f.get(), mean_f.get(), is.get(), w.get(),
                                         training ? sum_dy_f.get() : nullptr, training ? sum_xhat_f.get() : nullptr,
                                         dx_f.get());
          expect_rounded(training ? "dx" : "dx in eval mode", dx_h.download(), dx_f.download());
        }
      }
    }
  }
}

struct Pooling {
  int64_t kernel, stride, pad;
};
// The reference models' 2x2 (the CPU's fixed-tap path) and overlapping 3x3 windows.
const Pooling kPoolings[] = {{2, 2, 0}, {3, 2, 1}};

template <class B, class H>
void max_pool_equals_the_widened_float32_run() {
  for (const Images& c : kImages) {
    if (!runs<B>(c)) continue;
    for (const Pooling& pool : kPoolings) {
      Pool2dShape s;
      s.N = c.N, s.C = c.C, s.H = c.H, s.W = c.W;
      s.kernel_h = s.kernel_w = pool.kernel, s.stride_h = s.stride_w = pool.stride, s.pad_h = s.pad_w = pool.pad;
      s.P = kernels::conv_out_size(s.H, s.kernel_h, s.stride_h, s.pad_h);
      s.Q = kernels::conv_out_size(s.W, s.kernel_w, s.stride_w, s.pad_w);
      const size_t n = size_t(s.x_size()), m = size_t(s.y_size());
      const std::vector<H> x16 = random_half<H>(n, 21), dy16 = random_half<H>(m, 22);
      typename B::template Array<H> x_h(x16), dy_h(dy16);
      typename B::template Array<float> x_f(widened(x16)), dy_f(widened(dy16));
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c, type_name<H>(), threads) + ", " + std::to_string(pool.kernel) + "x" +
                     std::to_string(pool.kernel) + " windows");
        ScopedKernelThreads scope(threads);
        typename B::template Array<H> y_h(m), dx_h(n);
        typename B::template Array<float> y_f(m), dx_f(n);
        typename B::template Array<int32_t> argmax_h(m), argmax_f(m);
        B::max_pool2d_forward(s, x_h.get(), y_h.get(), argmax_h.get());
        B::max_pool2d_forward(s, x_f.get(), y_f.get(), argmax_f.get());
        expect_rounded("y", y_h.download(), y_f.download());
        EXPECT_EQ(argmax_h.download(), argmax_f.download());
        B::max_pool2d_backward(s, dy_h.get(), argmax_f.get(), dx_h.get());
        B::max_pool2d_backward(s, dy_f.get(), argmax_f.get(), dx_f.get());
        expect_rounded("dx", dx_h.download(), dx_f.download());
      }
    }
  }
}

// Samples of 70 values (a block of 64 and a tail), 130 and 4 x 600 (past the CPU's threshold
// for threads: 64 samples), from a first sample past 0; the mask is the same for either
// dtype, so dropped elements are zeros in both and kept ones x / (1 - p) rounded once.
template <class B, class H>
void dropout_equals_the_widened_float32_run() {
  struct Rows {
    int64_t samples, size;
  };
  for (const Rows& r : {Rows{3, 70}, Rows{5, 130}, Rows{64, 600}}) {
    if (B::kCuda && r.samples * r.size >= 32768) continue;  // as runs() above
    const size_t n = size_t(r.samples * r.size);
    const kernels::DropoutConfig cfg{0.3, 17, 4, 9};
    const std::vector<H> x16 = random_half<H>(n, 31);
    typename B::template Array<H> x_h(x16);
    typename B::template Array<float> x_f(widened(x16));
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(std::to_string(r.samples) + " samples of " + std::to_string(r.size) + ", " + type_name<H>() +
                   threads_label(threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<H> y_h(n);
      typename B::template Array<float> y_f(n);
      B::dropout(cfg, r.samples, r.size, x_h.get(), y_h.get());
      B::dropout(cfg, r.samples, r.size, x_f.get(), y_f.get());
      expect_rounded("y", y_h.download(), y_f.download());
    }
  }
}

template <class B, class H>
void average_pooling_equals_the_widened_float32_run() {
  for (const Images& c : kImages) {
    if (!runs<B>(c)) continue;
    const int64_t planes = c.N * c.C, plane_size = c.H * c.W;
    const size_t n = size_t(planes * plane_size);
    const std::vector<H> x16 = random_half<H>(n, 51), dy16 = random_half<H>(n, 52);
    typename B::template Array<H> x_h(x16), dy_h(dy16);
    typename B::template Array<float> x_f(widened(x16)), dy_f(widened(dy16));
    for (int threads : B::thread_counts()) {
      ScopedKernelThreads scope(threads);
      for (const Pooling& pool : kPoolings) {
        for (bool count_include_pad : {true, false}) {
          SCOPED_TRACE(describe(c, type_name<H>(), threads) + ", " + std::to_string(pool.kernel) + "x" +
                       std::to_string(pool.kernel) + " windows" + (count_include_pad ? "" : ", padding not counted"));
          Pool2dShape s;
          s.N = c.N, s.C = c.C, s.H = c.H, s.W = c.W;
          s.kernel_h = s.kernel_w = pool.kernel, s.stride_h = s.stride_w = pool.stride, s.pad_h = s.pad_w = pool.pad;
          s.P = kernels::conv_out_size(s.H, s.kernel_h, s.stride_h, s.pad_h);
          s.Q = kernels::conv_out_size(s.W, s.kernel_w, s.stride_w, s.pad_w);
          const size_t m = size_t(s.y_size());
          typename B::template Array<H> y_h(m), dx_h(n);
          typename B::template Array<float> y_f(m), dx_f(n);
          B::avg_pool2d_forward(s, count_include_pad, x_h.get(), y_h.get());
          B::avg_pool2d_forward(s, count_include_pad, x_f.get(), y_f.get());
          expect_rounded("y", y_h.download(), y_f.download());
          B::avg_pool2d_backward(s, count_include_pad, dy_h.get(), dx_h.get());  // dy's first m values
          B::avg_pool2d_backward(s, count_include_pad, dy_f.get(), dx_f.get());
          expect_rounded("dx", dx_h.download(), dx_f.download());
        }
      }
      SCOPED_TRACE(describe(c, type_name<H>(), threads) + ", global");
      typename B::template Array<H> g_h{size_t(planes)}, gdx_h(n);
      typename B::template Array<float> g_f{size_t(planes)}, gdx_f(n);
      B::global_avg_pool2d_forward(planes, plane_size, x_h.get(), g_h.get());
      B::global_avg_pool2d_forward(planes, plane_size, x_f.get(), g_f.get());
      expect_rounded("global y", g_h.download(), g_f.download());
      B::global_avg_pool2d_backward(planes, plane_size, dy_h.get(), gdx_h.get());  // dy's first `planes` values
      B::global_avg_pool2d_backward(planes, plane_size, dy_f.get(), gdx_f.get());
      expect_rounded("global dx", gdx_h.download(), gdx_f.download());
    }
  }
}

// gelu in both forms, tanh and scale over flat arrays: x in [-4, 4] (gelu's tails), with
// infinities, a NaN and signed zeros among them.
template <class B, class H>
void elementwise_ops_equal_the_widened_float32_run() {
  for (int64_t n : {int64_t(70), int64_t(1000), int64_t(40000)}) {
    if (B::kCuda && n >= 32768) continue;  // as runs() above
    std::vector<H> x16 = random_half<H>(size_t(n), 61);
    const std::vector<H> dy16 = random_half<H>(size_t(n), 62), y16 = random_half<H>(size_t(n), 63);
    for (H& v : x16) v = to_half<H>(4.0f * float(to_double(v)));
    const float specials[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f};
    for (size_t k = 0; k < 5; ++k) x16[size_t(n) / 2 + k] = to_half<H>(specials[k]);
    typename B::template Array<H> x_h(x16), dy_h(dy16), y_in_h(y16);
    typename B::template Array<float> x_f(widened(x16)), dy_f(widened(dy16)), y_in_f(widened(y16));
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", " + type_name<H>() + threads_label(threads));
      ScopedKernelThreads scope(threads);
      auto both = [&](const char* what, const auto& run) {
        typename B::template Array<H> out_h{size_t(n)};
        typename B::template Array<float> out_f{size_t(n)};
        run(out_h.get(), out_f.get());
        expect_rounded(what, out_h.download(), out_f.download());
      };
      for (kernels::GeluApproximate form : {kernels::GeluApproximate::None, kernels::GeluApproximate::Tanh}) {
        const bool erf = form == kernels::GeluApproximate::None;
        both(erf ? "gelu" : "gelu (tanh form)", [&](H* out_h, float* out_f) {
          B::gelu_forward(form, n, x_h.get(), out_h);
          B::gelu_forward(form, n, x_f.get(), out_f);
        });
        both(erf ? "gelu backward" : "gelu backward (tanh form)", [&](H* out_h, float* out_f) {
          B::gelu_backward(form, n, dy_h.get(), x_h.get(), out_h);
          B::gelu_backward(form, n, dy_f.get(), x_f.get(), out_f);
        });
      }
      both("tanh", [&](H* out_h, float* out_f) {
        B::tanh_forward(n, x_h.get(), out_h);
        B::tanh_forward(n, x_f.get(), out_f);
      });
      both("tanh backward", [&](H* out_h, float* out_f) {
        B::tanh_backward(n, dy_h.get(), y_in_h.get(), out_h);
        B::tanh_backward(n, dy_f.get(), y_in_f.get(), out_f);
      });
      const float alpha = float(1.0 / std::sqrt(3.0));  // every product needs rounding
      both("scale", [&](H* out_h, float* out_f) {
        B::scale(n, alpha, x_h.get(), out_h);
        B::scale(n, alpha, x_f.get(), out_f);
      });
    }
  }
}

// Layer norm over rows of 12 (a row shorter than the CPU's 16 sum lanes), 40 (two blocks and
// a tail) and 128 (BERT-tiny's, 256 rows: past the CPU's threshold for threads), with and
// without weight and bias; the statistics and the parameter gradients are float32 and must
// be the float32 run's bits, each 16-bit output that run's rounded once. x has a row
// offset, so that the centring matters.
template <class B, class H>
void layer_norm_equals_the_widened_float32_run() {
  struct Rows {
    int64_t rows, cols;
  };
  for (const Rows& r : {Rows{7, 12}, Rows{5, 40}, Rows{256, 128}}) {
    const size_t n = size_t(r.rows * r.cols), rows = size_t(r.rows), cols = size_t(r.cols);
    std::vector<H> x16 = random_half<H>(n, 71);
    for (size_t i = 0; i < n; ++i) x16[i] = to_half<H>(float(to_double(x16[i]) + double(i / cols % 5)));
    const std::vector<H> dy16 = random_half<H>(n, 72);
    typename B::template Array<H> x_h(x16), dy_h(dy16);
    typename B::template Array<float> x_f(widened(x16)), dy_f(widened(dy16));
    typename B::template Array<float> w(random_vector<float>(cols, 73)), b(random_vector<float>(cols, 74));
    const std::vector<float> old_dweight = random_vector<float>(cols, 75), old_dbias = random_vector<float>(cols, 76);
    for (int threads : B::thread_counts()) {
      for (bool affine : {true, false}) {
        SCOPED_TRACE(std::to_string(r.rows) + " rows of " + std::to_string(r.cols) + ", " + type_name<H>() +
                     threads_label(threads) + (affine ? "" : ", no weight and bias"));
        ScopedKernelThreads scope(threads);
        const float* weight = affine ? w.get() : nullptr;
        typename B::template Array<H> y_h(n), dx_h(n);
        typename B::template Array<float> y_f(n), dx_f(n), mean_h(rows), rstd_h(rows), mean_f(rows), rstd_f(rows);
        B::layer_norm_forward(r.rows, r.cols, x_h.get(), weight, affine ? b.get() : nullptr, 1e-5, y_h.get(),
                              mean_h.get(), rstd_h.get());
        B::layer_norm_forward(r.rows, r.cols, x_f.get(), weight, affine ? b.get() : nullptr, 1e-5, y_f.get(),
                              mean_f.get(), rstd_f.get());
        expect_rounded("y", y_h.download(), y_f.download());
        expect_same_bits("mean", mean_h.download(), mean_f.download());
        expect_same_bits("rstd", rstd_h.download(), rstd_f.download());
        for (bool accumulate : {false, true}) {
          typename B::template Array<float> dw_h(old_dweight), db_h(old_dbias), dw_f(old_dweight), db_f(old_dbias);
          B::layer_norm_backward(r.rows, r.cols, dy_h.get(), x_h.get(), weight, mean_f.get(), rstd_f.get(),
                                 dx_h.get(), dw_h.get(), db_h.get(), accumulate);
          B::layer_norm_backward(r.rows, r.cols, dy_f.get(), x_f.get(), weight, mean_f.get(), rstd_f.get(),
                                 dx_f.get(), dw_f.get(), db_f.get(), accumulate);
          expect_rounded("dx", dx_h.download(), dx_f.download());
          expect_same_bits(accumulate ? "dweight accumulated" : "dweight", dw_h.download(), dw_f.download());
          expect_same_bits(accumulate ? "dbias accumulated" : "dbias", db_h.download(), db_f.download());
        }
      }
    }
  }
}

TYPED_TEST(HalfNativeOpsTest, Bfloat16BatchNormIsTheWidenedFloat32BatchNormRoundedOnce) {
  batch_norm_equals_the_widened_float32_run<TypeParam, BFloat16>();
}
TYPED_TEST(HalfNativeOpsTest, Float16BatchNormIsTheWidenedFloat32BatchNormRoundedOnce) {
  if (TypeParam::kBfloat16Only) GTEST_SKIP() << "float16 runs the same kernels on every CPU path: tested as CpuConvert";
  batch_norm_equals_the_widened_float32_run<TypeParam, Float16>();
}
TYPED_TEST(HalfNativeOpsTest, Bfloat16MaxPoolIsTheWidenedFloat32MaxPoolRoundedOnce) {
  max_pool_equals_the_widened_float32_run<TypeParam, BFloat16>();
}
TYPED_TEST(HalfNativeOpsTest, Float16MaxPoolIsTheWidenedFloat32MaxPoolRoundedOnce) {
  if (TypeParam::kBfloat16Only) GTEST_SKIP() << "float16 runs the same kernels on every CPU path: tested as CpuConvert";
  max_pool_equals_the_widened_float32_run<TypeParam, Float16>();
}

TYPED_TEST(HalfNativeOpsTest, Bfloat16DropoutIsTheWidenedFloat32DropoutRoundedOnce) {
  dropout_equals_the_widened_float32_run<TypeParam, BFloat16>();
}
TYPED_TEST(HalfNativeOpsTest, Float16DropoutIsTheWidenedFloat32DropoutRoundedOnce) {
  if (TypeParam::kBfloat16Only) GTEST_SKIP() << "float16 runs the same kernels on every CPU path: tested as CpuConvert";
  dropout_equals_the_widened_float32_run<TypeParam, Float16>();
}

TYPED_TEST(HalfNativeOpsTest, Bfloat16LayerNormIsTheWidenedFloat32LayerNormRoundedOnce) {
  layer_norm_equals_the_widened_float32_run<TypeParam, BFloat16>();
}
TYPED_TEST(HalfNativeOpsTest, Float16LayerNormIsTheWidenedFloat32LayerNormRoundedOnce) {
  if (TypeParam::kBfloat16Only) GTEST_SKIP() << "float16 runs the same kernels on every CPU path: tested as CpuConvert";
  layer_norm_equals_the_widened_float32_run<TypeParam, Float16>();
}

TYPED_TEST(HalfNativeOpsTest, Bfloat16AveragePoolingIsTheWidenedFloat32PoolingRoundedOnce) {
  average_pooling_equals_the_widened_float32_run<TypeParam, BFloat16>();
}
TYPED_TEST(HalfNativeOpsTest, Float16AveragePoolingIsTheWidenedFloat32PoolingRoundedOnce) {
  if (TypeParam::kBfloat16Only) GTEST_SKIP() << "float16 runs the same kernels on every CPU path: tested as CpuConvert";
  average_pooling_equals_the_widened_float32_run<TypeParam, Float16>();
}

TYPED_TEST(HalfNativeOpsTest, Bfloat16GeluTanhAndScaleAreTheWidenedFloat32OpsRoundedOnce) {
  elementwise_ops_equal_the_widened_float32_run<TypeParam, BFloat16>();
}
TYPED_TEST(HalfNativeOpsTest, Float16GeluTanhAndScaleAreTheWidenedFloat32OpsRoundedOnce) {
  if (TypeParam::kBfloat16Only) GTEST_SKIP() << "float16 runs the same kernels on every CPU path: tested as CpuConvert";
  elementwise_ops_equal_the_widened_float32_run<TypeParam, Float16>();
}

}  // namespace
}  // namespace dpcore::testing
