// Every reduction runs in a fixed order: two runs with the same thread count give
// bit-identical results (here with 2 threads, where a racy reduction would show), and the
// row-wise transformer kernels, the convolution's weight gradient and the GEMMs give the
// same bits on any thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "support/kernel_checks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/index_check.h"
#include "kernels/naive/naive.h"

namespace dpcore::testing {
namespace {

namespace cpu = kernels::cpu;
namespace naive = kernels::naive;

template <class T>
bool bit_identical(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Runs `compute` (which fills its output from scratch) several times and expects the same bits.
template <class T>
void expect_repeatable(const char* what, size_t n, const std::function<void(std::vector<T>&)>& compute) {
  std::vector<T> first = nan_filled<T>(n);
  compute(first);
  for (int run = 0; run < 5; ++run) {
    std::vector<T> again = nan_filled<T>(n);
    compute(again);
    ASSERT_TRUE(bit_identical(first, again)) << what << " differs on run " << run + 2;
  }
}

// Runs `compute` on 1 thread and on each of `counts` and expects the same bits.
template <class T>
void expect_thread_count_free(const std::string& what, size_t n, const std::function<void(std::vector<T>&)>& compute,
                              const std::vector<int>& counts = {2}) {
  std::vector<T> one = nan_filled<T>(n);
  {
    ScopedKernelThreads scope(1);
    compute(one);
  }
  for (int threads : counts) {
    std::vector<T> other = nan_filled<T>(n);
    ScopedKernelThreads scope(threads);
    compute(other);
    ASSERT_TRUE(bit_identical(one, other)) << what << " differs between 1 and " << threads << " threads";
  }
}

// gelu's float path works in blocks of 16 with a padded tail, softmax's and layer_norm's
// rows in lanes (kernels/cpu/float_blocks.h): sizes that are no multiple of 16, large enough
// that 2 threads split them, so that a thread's share starting mid-block or a row's tail
// taking another path would show.
TEST(DeterminismTest, GeluSoftmaxAndLayerNormAreTheSameBitsOnOneAndTwoThreads) {
  const int64_t n = 100003;
  const auto x = random_vector<float>(n, 12, -6.0, 6.0), dy = random_vector<float>(n, 13);
  for (kernels::GeluApproximate form : {kernels::GeluApproximate::None, kernels::GeluApproximate::Tanh}) {
    expect_thread_count_free<float>("gelu_forward", n, [&](std::vector<float>& y) {
      cpu::gelu_forward(form, n, x.data(), y.data());
    });
    expect_thread_count_free<float>("gelu_backward", n, [&](std::vector<float>& dx) {
      cpu::gelu_backward(form, n, dy.data(), x.data(), dx.data());
    });
  }
  const std::vector<int64_t> scores = {4, 3, 67, 131}, key_mask = {4, 1, 1, 131};
  const int64_t elements = 4 * 3 * 67 * 131;
  const auto logits = random_vector<float>(elements, 14, -4.0, 4.0), mask = random_vector<float>(4 * 131, 15),
             dprob = random_vector<float>(elements, 16);
  const kernels::SoftmaxShape shape = kernels::softmax_shape(scores, &key_mask, true);
  expect_thread_count_free<float>("softmax_forward", elements, [&](std::vector<float>& y) {
    cpu::softmax_forward(shape, logits.data(), mask.data(), y.data());
  });
  expect_thread_count_free<float>("softmax_backward", elements, [&](std::vector<float>& dx) {
    cpu::softmax_backward(shape.rows, shape.cols, dprob.data(), logits.data(), dx.data());
  });
  const int64_t rows = 771, cols = 131;
  const auto weight = random_vector<float>(cols, 17, 0.5, 1.5), bias = random_vector<float>(cols, 18);
  // y, mean and rstd side by side in one buffer; then dx from those statistics.
  expect_thread_count_free<float>("layer_norm_forward", rows * cols + 2 * rows, [&](std::vector<float>& out) {
    cpu::layer_norm_forward(rows, cols, logits.data(), weight.data(), bias.data(), 1e-5, out.data(),
                            out.data() + rows * cols, out.data() + rows * cols + rows);
  });
  const auto mean = random_vector<float>(rows, 19), rstd = random_vector<float>(rows, 20, 0.5, 2.0);
  expect_thread_count_free<float>("layer_norm_backward", rows * cols, [&](std::vector<float>& dx) {
    cpu::layer_norm_backward(rows, cols, dprob.data(), logits.data(), weight.data(), mean.data(), rstd.data(),
                             dx.data(), static_cast<float*>(nullptr), static_cast<float*>(nullptr), false);
  });
}

TEST(DeterminismTest, ConvAndLinearGradientsAreBitIdenticalWithTwoThreads) {
  ScopedKernelThreads scope(2);
  kernels::Conv2dShape s;
  s.N = 9, s.C = 16, s.H = 14, s.W = 14, s.K = 32, s.R = 3, s.S = 3, s.pad_h = 1, s.pad_w = 1;
  s.P = kernels::conv_out_size(s.H, s.R, s.stride_h, s.pad_h);
  s.Q = kernels::conv_out_size(s.W, s.S, s.stride_w, s.pad_w);
  auto x = random_vector<float>(s.x_size(), 1), w = random_vector<float>(s.w_size(), 2),
       b = random_vector<float>(s.K, 10), dy = random_vector<float>(s.y_size(), 3),
       start = random_vector<float>(s.w_size() + s.K, 4);

  expect_repeatable<float>("conv2d_forward", s.y_size(), [&](std::vector<float>& y) {
    cpu::conv2d_forward(s, x.data(), w.data(), b.data(), y.data());
  });
  expect_repeatable<float>("conv2d_backward_data", s.x_size(), [&](std::vector<float>& dx) {
    cpu::conv2d_backward_data(s, dy.data(), w.data(), dx.data());
  });
  // Weight and bias gradient side by side in one buffer, accumulated onto fixed contents.
  expect_repeatable<float>("conv2d_backward_weight", start.size(), [&](std::vector<float>& grads) {
    grads = start;
    cpu::conv2d_backward_weight(s, x.data(), dy.data(), grads.data(), grads.data() + s.w_size(), true);
  });

  const kernels::LinearShape ls{64, 3136, 128};
  auto lx = random_vector<float>(ls.N * ls.in, 5), lw = random_vector<float>(ls.out * ls.in, 6),
       lb = random_vector<float>(ls.out, 11), ldy = random_vector<float>(ls.N * ls.out, 7);
  expect_repeatable<float>("linear_backward_weight", ls.out * ls.in + ls.out, [&](std::vector<float>& grads) {
    cpu::linear_backward_weight(ls, lx.data(), ldy.data(), grads.data(), grads.data() + ls.out * ls.in, false);
  });
  expect_repeatable<float>("linear_forward", ls.N * ls.out, [&](std::vector<float>& y) {
    cpu::linear_forward(ls, lx.data(), lw.data(), lb.data(), y.data());
  });
}

// The convolution's weight and bias gradient sums each chunk of the batch on its own and adds
// the chunks in order, the chunks fixed by the batch size: the same bits on any thread
// count, so a pipeline stage on a team of fewer threads gives one device's bits. Batches
// of fewer chunks than threads (their GEMMs split over the threads instead), as many, and
// more (16 chunks of uneven images); the direct kernel and im2col + GEMM; float and double.
template <class T>
void expect_conv_weight_grad_thread_count_free(int64_t N, const std::string& path) {
  kernels::Conv2dShape s;
  s.N = N, s.C = 16, s.H = 14, s.W = 14, s.K = 32, s.R = 3, s.S = 3, s.pad_h = 1, s.pad_w = 1;
  s.P = kernels::conv_out_size(s.H, s.R, s.stride_h, s.pad_h);
  s.Q = kernels::conv_out_size(s.W, s.S, s.stride_w, s.pad_w);
  const auto x = random_vector<T>(s.x_size(), 1), dy = random_vector<T>(s.y_size(), 3),
             start = random_vector<T>(s.w_size() + s.K, 4);
  expect_thread_count_free<T>("conv2d_backward_weight N " + std::to_string(N) + " " + path, start.size(),
                              [&](std::vector<T>& grads) {
                                grads = start;
                                cpu::conv2d_backward_weight(s, x.data(), dy.data(), grads.data(),
                                                            grads.data() + s.w_size(), true);
                              },
                              {2, 3, 5, 16});
}

TEST(DeterminismTest, ConvWeightGradientIsTheSameBitsOnAnyThreadCount) {
  for (bool direct : {true, false}) {
    cpu::set_direct_conv2d(direct);
    const std::string path = direct ? "(direct where the CPU has it)" : "(im2col)";
    for (int64_t N : {2, 9, 37}) {
      expect_conv_weight_grad_thread_count_free<float>(N, path);
      expect_conv_weight_grad_thread_count_free<double>(N, path);
    }
  }
  cpu::set_direct_conv2d(true);
}

// A GEMM's blocks follow its shape, never the thread count (kernels/cpu/gemm.cpp): OpenBLAS
// picks its kernel, and its order of sums, by each call's sizes, so blocks that followed the
// threads gave other bits on other thread counts. linear's three products on fashioncnn's
// and bert-tiny's shapes and one of uneven sizes, on 1 against 2, 3, 5 and 16 threads; the
// weight gradients over 4096 and 20,000 rows are cut along their depth instead (2 and 9
// chunks), whose partial products are added in a fixed order.
TEST(DeterminismTest, LinearIsTheSameBitsOnAnyThreadCount) {
  for (const kernels::LinearShape& s : {kernels::LinearShape{64, 3136, 10}, kernels::LinearShape{64, 3136, 128},
                                        kernels::LinearShape{4096, 128, 512}, kernels::LinearShape{37, 1000, 300},
                                        kernels::LinearShape{20000, 16, 24}}) {
    const std::string shape = " " + std::to_string(s.N) + "x" + std::to_string(s.in) + "->" + std::to_string(s.out);
    const auto x = random_vector<float>(s.N * s.in, 5), w = random_vector<float>(s.out * s.in, 6),
               b = random_vector<float>(s.out, 11), dy = random_vector<float>(s.N * s.out, 7);
    const std::vector<int> counts = {2, 3, 5, 16};
    expect_thread_count_free<float>("linear_forward" + shape, s.N * s.out, [&](std::vector<float>& y) {
      cpu::linear_forward(s, x.data(), w.data(), b.data(), y.data());
    }, counts);
    expect_thread_count_free<float>("linear_backward_data" + shape, s.N * s.in, [&](std::vector<float>& dx) {
      cpu::linear_backward_data(s, dy.data(), w.data(), dx.data());
    }, counts);
    expect_thread_count_free<float>("linear_backward_weight" + shape, s.out * s.in + s.out, [&](std::vector<float>& g) {
      cpu::linear_backward_weight(s, x.data(), dy.data(), g.data(), g.data() + s.out * s.in, false);
    }, counts);
  }
}

// linear's bias gradient is each column of dy summed over the rows in row order, in double,
// then rounded once (and added to the old value when accumulating), on any thread count:
// the same bits as the reference loop nest. Wider than one thread's block of columns and
// no multiple of 16, with more rows than the cache holds down one column.
TEST(DeterminismTest, LinearBiasGradientIsTheReferenceBitForBitOnOneAndTwoThreads) {
  const kernels::LinearShape s{3001, 3, 1100};
  const auto x = random_vector<float>(s.N * s.in, 21), dy = random_vector<float>(s.N * s.out, 22),
             start = random_vector<float>(s.out, 23);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    std::vector<float> want_dw(s.out * s.in), want_db = start;
    naive::linear_backward_weight(s, x.data(), dy.data(), want_dw.data(), want_db.data(), accumulate);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      ScopedKernelThreads scope(threads);
      std::vector<float> dw(s.out * s.in), db = start;
      cpu::linear_backward_weight(s, x.data(), dy.data(), dw.data(), db.data(), accumulate);
      EXPECT_TRUE(bit_identical(db, want_db));
    }
  }
}

TEST(DeterminismTest, LossAndSumAreBitIdenticalWithTwoThreads) {
  ScopedKernelThreads scope(2);
  const int64_t rows = 512, cols = 100;
  auto logits = random_vector<float>(rows * cols, 8, -4.0, 4.0);
  std::vector<int64_t> target(rows);
  for (int64_t r = 0; r < rows; ++r) target[r] = r % cols;
  expect_repeatable<float>("cross_entropy_forward_backward", rows * cols + 1, [&](std::vector<float>& out) {
    cpu::cross_entropy_forward_backward(rows, cols, logits.data(), target.data(), kernels::kDefaultIgnoreIndex,
                                        1.0f / rows, nullptr, out.data() + rows * cols, out.data());
  });
  auto big = random_vector<double>(3000001, 9);
  expect_repeatable<double>("sum", 1, [&](std::vector<double>& out) {
    cpu::sum(int64_t(big.size()), big.data(), out.data());
  });
}

}  // namespace
}  // namespace dpcore::testing
