// tanh, and its derivative from the output (d tanh(x) / dx = 1 - tanh(x)^2).
#include <cmath>

#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

template <class T>
void tanh_forward(int64_t n, const T* x, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

template <class T>
void tanh_backward(int64_t n, const T* dy, const T* y, T* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (T(1) - y[i] * y[i]);
}

template void tanh_forward<float>(int64_t, const float*, float*);
template void tanh_forward<double>(int64_t, const double*, double*);
template void tanh_backward<float>(int64_t, const float*, const float*, float*);
template void tanh_backward<double>(int64_t, const double*, const double*, double*);

}  // namespace dpcore::kernels::naive
