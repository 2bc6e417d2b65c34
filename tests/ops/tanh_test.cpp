// tanh forward and backward (from the output, dx = dy (1 - y^2)) on every backend
// (tests/support/op_backends.h), against the float64 loop-nest reference of
// kernels/naive/tanh.cpp. Inputs span [-5, 5], where tanh saturates to within 1e-4 of +-1.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/flat_cases.h"

namespace dpcore::testing {
namespace {

// Error analysis, per element against the size of its terms: forward, one tanh call within
// 2 ulp (glibc, CUDA's tanhf) of |y| itself (tanh's condition number |x (1 - y^2) / y| is
// at most 1). Backward on the backend's own y (converted exactly to double, so the
// forward's rounding does not count twice): three roundings of terms at most |dy|, while
// 1 - y*y may cancel to 1e-4 near saturation. So 4 ulp of the scale: 3e-7 in float, 1e-15
// in double; 1e-6 and 1e-14 leave room.
template <class T>
constexpr double tanh_tolerance() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-14;
}

template <class B>
class TanhTest : public OpTest<B> {};
TYPED_TEST_SUITE(TanhTest, KernelBackends, BackendName);

TYPED_TEST(TanhTest, ForwardAndBackwardMatchTheFloat64Reference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const FlatCase& c : kActivationCases) {
    if (!B::runs_elements(c.n + c.offset)) continue;
    const int64_t n = c.n;
    const int at = c.offset;
    const auto x = random_vector<T>(size_t(n + at), 21, -5.0, 5.0), dy = random_vector<T>(size_t(n + at), 22);
    std::vector<double> want_y(static_cast<size_t>(n));
    const std::vector<double> x64 = in_double(x, at), dy64 = in_double(dy, at);
    naive::tanh_forward<double>(n, x64.data(), want_y.data());
    std::vector<double> y_scale(static_cast<size_t>(n)), dx_scale(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) y_scale[i] = std::abs(want_y[i]), dx_scale[i] = std::abs(dy64[i]);
    typename B::template Array<T> dev_x(x), dev_dy(dy);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> dev_y(static_cast<size_t>(n + at)), dev_dx(static_cast<size_t>(n + at));
      B::tanh_forward(n, dev_x.get() + at, dev_y.get() + at);
      B::tanh_backward(n, dev_dy.get() + at, dev_y.get() + at, dev_dx.get() + at);
      const std::vector<T> y = dev_y.download();
      EXPECT_TRUE(matches_reference(y, at, want_y, y_scale, tanh_tolerance<T>())) << "forward";
      std::vector<double> want_dx(static_cast<size_t>(n));
      const std::vector<double> y64 = in_double(y, at);
      naive::tanh_backward<double>(n, dy64.data(), y64.data(), want_dx.data());
      EXPECT_TRUE(matches_reference(dev_dx.download(), at, want_dx, dx_scale, tanh_tolerance<T>())) << "backward";
    }
  }
}

}  // namespace
}  // namespace dpcore::testing
