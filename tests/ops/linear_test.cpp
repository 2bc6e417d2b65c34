// linear (y = x W^T + b: forward, backward data, backward weight) on every backend
// (tests/support/op_backends.h: BLAS on the CPU, the hand SGEMM and cuBLAS on CUDA) against
// the loop-nest reference of kernels/naive, on one table of shapes. The matrix product
// itself is tested in gemm_test.cpp.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kernels/naive/naive.h"
#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

using kernels::LinearShape;

struct LinearCase {
  const char* name;
  int64_t N, in, out;
  LinearShape shape() const { return LinearShape{N, in, out}; }
};

const LinearCase kCases[] = {
    {"batch1", 1, 7, 3},
    {"tiny", 5, 7, 3},
    {"odd", 5, 33, 17},
    {"batch1_odd", 1, 33, 17},
    {"fashioncnn_classifier", 64, 128, 10},
    {"split_by_columns", 64, 300, 70},   // the CPU splits the product by columns across threads
    {"split_by_rows", 200, 120, 48},     // taller than wide: split by rows
    {"wide", 130, 129, 140},
    {"simplenet_fc", 64, 4096, 10},
    {"fashioncnn_f1", 512, 3136, 128},
    {"fashioncnn_f2", 512, 128, 10},
};

std::string describe(const LinearCase& c, int threads) {
  std::ostringstream os;
  os << c.name << ": N " << c.N << ", in " << c.in << ", out " << c.out << threads_label(threads);
  return os.str();
}

template <class B>
class LinearTest : public OpTest<B> {};
TYPED_TEST_SUITE(LinearTest, KernelAndLibraryBackends, BackendName);

TYPED_TEST(LinearTest, ForwardMatchesReference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const LinearCase& c : kCases) {
    if (!B::runs_multiply_adds(c.shape().N * c.shape().in * c.shape().out)) continue;
    const LinearShape s = c.shape();
    const auto x = random_vector<T>(s.N * s.in, 1), w = random_vector<T>(s.out * s.in, 2), b = random_vector<T>(s.out, 3);
    typename B::template Array<T> dev_x(x), dev_w(w), dev_b(b);
    for (bool with_bias : {true, false}) {
      auto want = nan_filled<T>(s.N * s.out);
      naive::linear_forward(s, x.data(), w.data(), with_bias ? b.data() : nullptr, want.data());
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c, threads) + (with_bias ? ", with bias" : ", without bias"));
        ScopedKernelThreads scope(threads);
        typename B::template Array<T> y(s.N * s.out);
        B::linear_forward(s, dev_x.get(), dev_w.get(), with_bias ? dev_b.get() : nullptr, y.get());
        EXPECT_OP_CLOSE(B, y.download(), want);
      }
    }
  }
}

TYPED_TEST(LinearTest, BackwardDataMatchesReference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const LinearCase& c : kCases) {
    if (!B::runs_multiply_adds(c.shape().N * c.shape().in * c.shape().out)) continue;
    const LinearShape s = c.shape();
    const auto dy = random_vector<T>(s.N * s.out, 4), w = random_vector<T>(s.out * s.in, 5);
    auto want = nan_filled<T>(s.N * s.in);
    naive::linear_backward_data(s, dy.data(), w.data(), want.data());
    typename B::template Array<T> dev_dy(dy), dev_w(w);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> dx(s.N * s.in);
      B::linear_backward_data(s, dev_dy.get(), dev_w.get(), dx.get());
      EXPECT_OP_CLOSE(B, dx.download(), want);
    }
  }
}

// accumulate overwrites or adds, with or without the bias gradient
// (expect_weight_grads_overwrite_or_accumulate in tests/support/op_backends.h).
TYPED_TEST(LinearTest, BackwardWeightOverwritesOrAccumulates) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const LinearCase& c : kCases) {
    if (!B::runs_multiply_adds(c.shape().N * c.shape().in * c.shape().out)) continue;
    const LinearShape s = c.shape();
    const auto x = random_vector<T>(s.N * s.in, 6), dy = random_vector<T>(s.N * s.out, 7);
    const auto want = weight_grad_want<T>(s.out * s.in, s.out, [&](T* dw, T* db, bool accumulate) {
      naive::linear_backward_weight(s, x.data(), dy.data(), dw, db, accumulate);
    });
    typename B::template Array<T> dev_x(x), dev_dy(dy);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      expect_weight_grads_overwrite_or_accumulate<B>(want, [&](T* dw, T* db, bool accumulate) {
        B::linear_backward_weight(s, dev_x.get(), dev_dy.get(), dw, db, accumulate);
      });
    }
  }
}

}  // namespace
}  // namespace dpcore::testing
