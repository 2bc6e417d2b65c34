// gelu forward and backward in both forms, approximate "none" and "tanh", on every backend
// (tests/support/op_backends.h), against the float64 loop-nest reference of
// kernels/naive/gelu.cpp run on the same inputs. Inputs span [-6, 6]: the tails where
// erf and tanh saturate (and 1 + erf(x / sqrt 2) cancels) as well as the curved middle.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/flat_cases.h"

namespace dpcore::testing {
namespace {

using kernels::GeluApproximate;

// Error analysis, per element against the size of its terms: the forward's terms are at
// most |x| (0.5 x and 1 + erf <= 2), the backward's at most |dy| (1 + |x|) (cdf <= 1,
// x pdf, and the tanh form's product-rule terms). In float each is about ten roundings
// (2^-24 each) plus at most two erf / tanh / exp calls of values at most 1, each within 3
// ulp (libmvec's vector erff, tanhf and expf in float on the CPU, kernels/cpu/float_blocks.h;
// glibc's scalar functions in double and on the host, CUDA's full-precision ones on a GPU,
// within 2): some 16 ulp, 1e-6 of the terms' scale (while the result itself may cancel to
// far less in the tails). In double the same count is 2e-15; 1e-14 leaves room.
template <class T>
constexpr double gelu_tolerance() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-14;
}

template <class B>
class GeluTest : public OpTest<B> {};
TYPED_TEST_SUITE(GeluTest, KernelBackends, BackendName);

TYPED_TEST(GeluTest, BothFormsForwardAndBackwardMatchTheFloat64Reference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
    for (const FlatCase& c : kActivationCases) {
      if (!B::runs_elements(c.n + c.offset)) continue;
      const int64_t n = c.n;
      const int at = c.offset;
      const auto x = random_vector<T>(size_t(n + at), 11, -6.0, 6.0), dy = random_vector<T>(size_t(n + at), 12);
      std::vector<double> want_y(static_cast<size_t>(n)), want_dx(static_cast<size_t>(n));
      const std::vector<double> x64 = in_double(x, at), dy64 = in_double(dy, at);
      naive::gelu_forward<double>(form, n, x64.data(), want_y.data());
      naive::gelu_backward<double>(form, n, dy64.data(), x64.data(), want_dx.data());
      std::vector<double> y_scale(static_cast<size_t>(n)), dx_scale(static_cast<size_t>(n));
      for (size_t i = 0; i < size_t(n); ++i)
        y_scale[i] = std::abs(x64[i]), dx_scale[i] = std::abs(dy64[i]) * (1 + std::abs(x64[i]));
      typename B::template Array<T> dev_x(x), dev_dy(dy);
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(std::string(form == GeluApproximate::None ? "none, " : "tanh, ") + describe(c, threads));
        ScopedKernelThreads scope(threads);
        typename B::template Array<T> dev_y(static_cast<size_t>(n + at)), dev_dx(static_cast<size_t>(n + at));
        B::gelu_forward(form, n, dev_x.get() + at, dev_y.get() + at);
        B::gelu_backward(form, n, dev_dy.get() + at, dev_x.get() + at, dev_dx.get() + at);
        EXPECT_TRUE(matches_reference(dev_y.download(), at, want_y, y_scale, gelu_tolerance<T>())) << "forward";
        EXPECT_TRUE(matches_reference(dev_dx.download(), at, want_dx, dx_scale, gelu_tolerance<T>())) << "backward";
      }
    }
  }
}

// The two forms are different functions (up to 2e-4 apart near |x| = 2): a kernel that
// ignored `form` would pass the reference of one of them only.
TYPED_TEST(GeluTest, TheFormsDiffer) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const std::vector<T> x = {T(-2), T(-1), T(1), T(2)};
  typename B::template Array<T> dev_x(x), exact(x.size()), approximate(x.size());
  B::gelu_forward(GeluApproximate::None, int64_t(x.size()), dev_x.get(), exact.get());
  B::gelu_forward(GeluApproximate::Tanh, int64_t(x.size()), dev_x.get(), approximate.get());
  const std::vector<T> a = exact.download(), b = approximate.download();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_GT(std::abs(double(a[i]) - double(b[i])), 1e-5) << "x = " << x[i];
}

}  // namespace
}  // namespace dpcore::testing
