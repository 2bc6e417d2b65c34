// gelu in both of PyTorch's forms, and its derivative, from the formulas.
#include <cmath>

#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

namespace {

// sqrt(2 / pi) and the cubic coefficient of the tanh form.
constexpr double kSqrt2OverPi = 0.7978845608028653558798921198687637369517;
constexpr double kCubic = 0.044715;

template <class T>
T gelu_value(GeluApproximate form, T x) {
  if (form == GeluApproximate::None) return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2))));
  return T(0.5) * x * (T(1) + std::tanh(T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x)));
}

// None: Phi(x) + x phi(x), phi the standard normal density. Tanh: the product rule on
// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
template <class T>
T gelu_derivative(GeluApproximate form, T x) {
  if (form == GeluApproximate::None) {
    const T cdf = T(0.5) * (T(1) + std::erf(x / std::sqrt(T(2))));
    const T pdf = std::exp(-x * x / T(2)) / std::sqrt(T(2) * T(M_PI));
    return cdf + x * pdf;
  }
  const T t = std::tanh(T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x));
  const T du_dx = T(kSqrt2OverPi) * (T(1) + T(3) * T(kCubic) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du_dx;
}

}  // namespace

template <class T>
void gelu_forward(GeluApproximate form, int64_t n, const T* x, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = gelu_value(form, x[i]);
}

template <class T>
void gelu_backward(GeluApproximate form, int64_t n, const T* dy, const T* x, T* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_derivative(form, x[i]);
}

template void gelu_forward<float>(GeluApproximate, int64_t, const float*, float*);
template void gelu_forward<double>(GeluApproximate, int64_t, const double*, double*);
template void gelu_backward<float>(GeluApproximate, int64_t, const float*, const float*, float*);
template void gelu_backward<double>(GeluApproximate, int64_t, const double*, const double*, double*);

}  // namespace dpcore::kernels::naive
