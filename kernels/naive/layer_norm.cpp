// The reference of layer_norm over the last dimension, from the definition: each row's
// mean, then its biased variance as the mean squared deviation, with double accumulators;
// the backward differentiates y = xhat * w + b through the row statistics element by
// element (dx_j = sum_k dy_k w_k dxhat_k/dx_j), not through the two row means the fast
// kernels use, so the two formulations check each other.
#include <cmath>

#include "kernels/naive/loop_helpers.h"
#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

template <class T>
void layer_norm_forward(int64_t rows, int64_t cols, const T* x, const T* weight, const T* bias, double eps, T* y,
                        T* mean, T* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    double m = 0.0, var = 0.0;
    for (int64_t j = 0; j < cols; ++j) m += double(xr[j]);
    m /= double(cols);
    for (int64_t j = 0; j < cols; ++j) var += (double(xr[j]) - m) * (double(xr[j]) - m);
    var /= double(cols);
    const double s = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = (double(xr[j]) - m) * s;
      y[r * cols + j] = T(weight ? xhat * double(weight[j]) + double(bias[j]) : xhat);
    }
    mean[r] = T(m), rstd[r] = T(s);
  }
}

template <class T>
void layer_norm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* weight, const T* mean,
                         const T* rstd, T* dx, T* dweight, T* dbias, bool accumulate) {
  const double n = double(cols);
  for (int64_t r = 0; r < rows && dx; ++r) {
    const double m = mean[r], s = rstd[r];
    for (int64_t j = 0; j < cols; ++j) {
      // xhat_k = (x_k - m) s with dm/dx_j = 1/n and ds/dx_j = -s^3 (x_j - m) / n, so
      // dxhat_k/dx_j = s ([k == j] - 1/n) - (x_k - m) s^3 (x_j - m) / n.
      double acc = 0.0;
      for (int64_t k = 0; k < cols; ++k) {
        const double g = double(dy[r * cols + k]) * (weight ? double(weight[k]) : 1.0);
        const double dxhat = s * ((k == j ? 1.0 : 0.0) - 1.0 / n) -
                             (double(x[r * cols + k]) - m) * s * s * s * (double(x[r * cols + j]) - m) / n;
        acc += g * dxhat;
      }
      dx[r * cols + j] = T(acc);
    }
  }
  for (int64_t j = 0; j < cols && (dweight || dbias); ++j) {
    double dw = 0.0, db = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      dw += double(dy[r * cols + j]) * (double(x[r * cols + j]) - double(mean[r])) * double(rstd[r]);
      db += double(dy[r * cols + j]);
    }
    if (dweight) dweight[j] = accumulated(accumulate, dweight[j], dw);
    if (dbias) dbias[j] = accumulated(accumulate, dbias[j], db);
  }
}

#define DPCORE_INSTANTIATE(T)                                                                                    \
  template void layer_norm_forward<T>(int64_t, int64_t, const T*, const T*, const T*, double, T*, T*, T*);     \
  template void layer_norm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*, \
                                       T*, T*, bool);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::naive
