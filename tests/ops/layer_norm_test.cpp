// layer_norm over the last dimension on every backend (tests/support/op_backends.h): the
// forward (y, and the saved mean and rstd) and the backward (dx, dweight, dbias; fresh,
// accumulated, or not asked for) against the float64 loop nests of kernels/naive, with and
// without the affine parameters, rows whose mean is large against their spread (where a
// one-pass E[x^2] - E[x]^2 in float loses every digit), and the parameter gradients the
// same bits for every CPU thread count.
//
// Tolerances: the CPU's forward accumulates in double and rounds once (a few float ulps).
// Its float dx is computed in float, u = 2^-24: g = dy w and xhat = (x - m) rstd round 2 or
// 3 times (x - m is exact for x within a factor 2 of m, as in the rows offset by 1000); the
// sums of g and g xhat add in 16 lanes, cols/16 + 1 additions each and 4 in the tree, so
// within (cols/16 + 5) u of the sum of |terms| (cols <= 768 here: 53 u); the means and the
// 4 operations of rstd (g - mean(g) - xhat mean(g xhat)) add some 6 more: about 62 u, 3.7e-6
// of the terms' scale rstd (|g| + |xhat| |mean(g xhat)|), which for these random dy is the
// scale of dx itself. The CUDA kernel's row statistics are float sums of at most cols/32 + 5
// terms per lane and tree level (cols <= 1024 here: 37 additions, 37 * 2^-24 = 2.2e-6 of the
// sum of |terms|), its column sums at most 36 + 256 chunked additions whose rounding errors, of random sign,
// grow as their square root (about 1e-6 of the result for the 9000 rows). Both are within
// the FP32 tolerance, 1e-5 of the rms of the reference (EXPECT_OP_CLOSE); in double, 1e-12.
// Rows offset by 1000 add what no float kernel avoids: the mean itself rounds to T, by up
// to u * 1000 (u = 2^-24 in float), which xhat inherits times rstd (sqrt(3) for inputs
// uniform in +-1). A one-pass variance would be off by u * 1e6 against a variance of 1/3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

struct LayerNormCase {
  int64_t rows, cols;
  double offset;              // added to every input: the mean is this far from 0, the spread stays 1
  bool affine_only = false;   // a case there for the parameter gradients: not run without them
};

// A single column (variance 0: y is the bias), a warp's width and either side of it, a
// block of rows that is not a multiple of a block's 8 warps, a transformer's width, and
// enough rows (over 256 chunks of 32) that the CUDA column sums take longer chunks.
const LayerNormCase kCases[] = {{1, 1, 0.0},     {1, 2, 0.0},   {3, 31, 0.0},   {9, 32, 0.0},     {13, 33, 0.0},
                                {16, 768, 0.0}, {40, 130, 0.0}, {9000, 3, 0.0, true}, {17, 100, 1000.0}};

std::string describe(const LayerNormCase& c, bool affine, int threads) {
  return std::to_string(c.rows) + "x" + std::to_string(c.cols) + (c.offset != 0.0 ? ", offset 1000" : "") +
         (affine ? ", affine" : ", no affine") + threads_label(threads);
}

template <class B>
class LayerNormTest : public OpTest<B> {};
TYPED_TEST_SUITE(LayerNormTest, KernelBackends, BackendName);

TYPED_TEST(LayerNormTest, ForwardAndBackwardMatchReference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const double eps = 1e-5;
  for (const LayerNormCase& c : kCases) {
    const auto [rows, cols, offset, affine_only] = c;
    // The CUDA kernels run a warp per row however short: 32 threads a row count as elements.
    if (!B::runs_elements(std::max(rows * cols, rows * 32))) continue;
    const auto x = random_vector<T>(rows * cols, 1, offset - 1.0, offset + 1.0), dy = random_vector<T>(rows * cols, 2);
    const auto weight = random_vector<T>(cols, 3, 0.5, 1.5), bias = random_vector<T>(cols, 4);
    for (bool affine : {true, false}) {
      if (affine_only && !affine) continue;
      const T* w = affine ? weight.data() : nullptr;
      const T* b = affine ? bias.data() : nullptr;
      auto want_y = nan_filled<T>(rows * cols), want_mean = nan_filled<T>(rows), want_rstd = nan_filled<T>(rows);
      naive::layer_norm_forward<T>(rows, cols, x.data(), w, b, eps, want_y.data(), want_mean.data(), want_rstd.data());
      auto want_dx = nan_filled<T>(rows * cols);
      naive::layer_norm_backward<T>(rows, cols, dy.data(), x.data(), w, want_mean.data(), want_rstd.data(),
                                    want_dx.data(), nullptr, nullptr, false);
      typename B::template Array<T> dev_x(x), dev_dy(dy), dev_w(weight), dev_b(bias);
      std::vector<T> first_dw, first_db;
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c, affine, threads));
        ScopedKernelThreads scope(threads);
        typename B::template Array<T> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols);
        const T* dw_in = affine ? dev_w.get() : nullptr;
        B::layer_norm_forward(rows, cols, dev_x.get(), dw_in, affine ? dev_b.get() : nullptr, eps, y.get(), mean.get(),
                              rstd.get());
        const double mean_rounding = 2 * offset * std::numeric_limits<T>::epsilon() / 2 * std::sqrt(3.0);
        EXPECT_LE(scaled_error(y.download(), want_y), B::tolerance() + mean_rounding);
        EXPECT_OP_CLOSE(B, mean.download(), want_mean);
        EXPECT_OP_CLOSE(B, rstd.download(), want_rstd);
        // The backward from the reference's statistics, so that it is checked on its own.
        typename B::template Array<T> ref_mean(want_mean), ref_rstd(want_rstd);
        B::layer_norm_backward(rows, cols, dev_dy.get(), dev_x.get(), dw_in, ref_mean.get(), ref_rstd.get(), dx.get(),
                               nullptr, nullptr, false);
        EXPECT_OP_CLOSE(B, dx.download(), want_dx);
        if (!affine) continue;
        const auto want = weight_grad_want<T>(cols, cols, [&](T* dweight, T* dbias, bool accumulate) {
          naive::layer_norm_backward<T>(rows, cols, dy.data(), x.data(), w, want_mean.data(), want_rstd.data(),
                                        nullptr, dweight, dbias, accumulate);
        });
        expect_weight_grads_overwrite_or_accumulate<B>(want, [&](T* dweight, T* dbias, bool accumulate) {
          B::layer_norm_backward(rows, cols, dev_dy.get(), dev_x.get(), dw_in, ref_mean.get(), ref_rstd.get(), nullptr,
                                 dweight, dbias, accumulate);
        });
        // The column sums have one order: the same bits for every thread count.
        typename B::template Array<T> dw(cols), db(cols);
        B::layer_norm_backward(rows, cols, dev_dy.get(), dev_x.get(), dw_in, ref_mean.get(), ref_rstd.get(), nullptr,
                               dw.get(), db.get(), false);
        if (first_dw.empty()) {
          first_dw = dw.download(), first_db = db.download();
        } else {
          EXPECT_TRUE(bitwise_equal(dw.download(), first_dw));
          EXPECT_TRUE(bitwise_equal(db.download(), first_db));
        }
      }
    }
  }
}

}  // namespace
}  // namespace dpcore::testing
