// The reference of softmax(x + mask) over the last dimension, from the definition in double:
// the max-subtracted exponentials over their sum. The backward multiplies dy by the full
// Jacobian of each row, dx_j = sum_k dy_k * y_k * ([j == k] - y_j), not the fast kernels'
// y * (dy - sum(dy * y)), so the two formulations check each other.
#include <algorithm>
#include <cmath>

#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

template <class T>
void softmax_forward(const SoftmaxShape& s, const T* x, const T* mask, T* y) {
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* xr = x + r * s.cols;
    const T* mr = mask ? mask + softmax_mask_row(s, r) : nullptr;
    double max = -INFINITY, total = 0.0;
    for (int64_t j = 0; j < s.cols; ++j) max = std::max(max, softmax_logit<double>(s, xr, mr, r, j));
    for (int64_t j = 0; j < s.cols; ++j) total += std::exp(softmax_logit<double>(s, xr, mr, r, j) - max);
    for (int64_t j = 0; j < s.cols; ++j)
      y[r * s.cols + j] = T(std::exp(softmax_logit<double>(s, xr, mr, r, j) - max) / total);
  }
}

template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < cols; ++k)
        acc += double(dy[r * cols + k]) * double(y[r * cols + k]) * ((j == k ? 1.0 : 0.0) - double(y[r * cols + j]));
      dx[r * cols + j] = T(acc);
    }
}

#define DPCORE_INSTANTIATE(T)                                                          \
  template void softmax_forward<T>(const SoftmaxShape&, const T*, const T*, T*); \
  template void softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::naive
