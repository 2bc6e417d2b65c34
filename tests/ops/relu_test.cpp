// relu forward and backward on every backend (tests/support/op_backends.h), against
// PyTorch's rules element by element: y = x > 0 ? x : 0 with NaN passed through, and the
// backward masked by the forward OUTPUT (dx = y > 0 ? dy : 0, a NaN output not masking).
// Lengths around the vector and thread boundaries, on misaligned pointers too. The relu
// fused into conv2d and max_pool2d is tested with those ops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

struct FlatCase {
  int64_t n;
  int offset;  // elements; 1..3 misaligns every pointer for float4 (the CUDA kernels' vector path)
};

const FlatCase kCases[] = {{0, 0},     {1, 0},      {3, 1},      {7, 0},       {1003, 1},      {4096, 0},
                           {70001, 3}, {100003, 0}, {100003, 2}, {3000000, 0}, {2999999, 2}};

std::string describe(const FlatCase& c, int threads) {
  return "n = " + std::to_string(c.n) + ", offset " + std::to_string(c.offset) + threads_label(threads);
}

template <class B>
class ReluTest : public OpTest<B> {};
TYPED_TEST_SUITE(ReluTest, KernelBackends, BackendName);

TYPED_TEST(ReluTest, ForwardAndBackwardFollowPyTorch) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (const FlatCase& c : kCases) {
    if (!B::runs_elements(c.n + c.offset)) continue;
    const int64_t n = c.n, at = c.offset;
    auto x = random_vector<T>(n + at, 1), dy = random_vector<T>(n + at, 2);
    if (n > 2) x[at + 0] = T(0), x[at + 1] = nan, x[at + 2] = -std::numeric_limits<T>::infinity();
    typename B::template Array<T> dev_x(x), dev_dy(dy);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> dev_y(n + at), dev_dx(n + at);
      B::relu_forward(n, dev_x.get() + at, dev_y.get() + at);
      B::relu_backward(n, dev_dy.get() + at, dev_y.get() + at, dev_dx.get() + at);
      const std::vector<T> y = dev_y.download(), dx = dev_dx.download();
      if (n > 2) {
        EXPECT_TRUE(std::isnan(y[at + 1])) << "relu(NaN) is NaN in PyTorch";
        EXPECT_EQ(dx[at + 1], dy[at + 1]) << "a NaN output does not mask the gradient in PyTorch";
      }
      for (int64_t i = at; i < n + at; ++i) {
        if (n > 2 && i == at + 1) continue;
        ASSERT_EQ(y[i], x[i] > T(0) ? x[i] : T(0)) << i;
        ASSERT_EQ(dx[i], x[i] > T(0) ? dy[i] : T(0)) << i;
      }
      for (int64_t i = 0; i < at; ++i) ASSERT_TRUE(std::isnan(y[i]) && std::isnan(dx[i])) << "wrote before the start";
    }
  }
}

// The backward masks with whatever y it is given (y <= 0: zero), not only a forward output.
TYPED_TEST(ReluTest, BackwardMasksWithAnyOutput) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const FlatCase& c : kCases) {
    if (!B::runs_elements(c.n + c.offset)) continue;
    const int64_t n = c.n, at = c.offset;
    const auto y = random_vector<T>(n + at, 3), dy = random_vector<T>(n + at, 4);
    typename B::template Array<T> dev_y(y), dev_dy(dy);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> dev_dx(n + at);
      B::relu_backward(n, dev_dy.get() + at, dev_y.get() + at, dev_dx.get() + at);
      const std::vector<T> dx = dev_dx.download();
      for (int64_t i = at; i < n + at; ++i) ASSERT_EQ(dx[i], y[i] > T(0) ? dy[i] : T(0)) << i;
    }
  }
}

}  // namespace
}  // namespace dpcore::testing
