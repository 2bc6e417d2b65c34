// softmax(x + mask) over the last dimension, a row at a time in double (kernels/softmax_mask.h
// says how the mask broadcasts and what causal masks).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/log_softmax.h"

namespace dpcore::kernels::cpu {

template <class T>
void softmax_forward(const SoftmaxShape& s, const T* x, const T* mask, T* y) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(s.rows, s.cols)) schedule(static)
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* xr = x + r * s.cols;
    const T* mr = mask ? mask + softmax_mask_row(s, r) : nullptr;
    T* yr = y + r * s.cols;
    // A row masked everywhere has max -inf, and -inf - -inf is NaN: the row is NaN, as in PyTorch.
    double max = -INFINITY;
    for (int64_t j = 0; j < s.cols; ++j) max = std::max(max, softmax_logit<double>(s, xr, mr, r, j));
    double total = 0.0;
    for (int64_t j = 0; j < s.cols; ++j) total += std::exp(softmax_logit<double>(s, xr, mr, r, j) - max);
    const double inverse = 1.0 / total;
    for (int64_t j = 0; j < s.cols; ++j) yr[j] = T(std::exp(softmax_logit<double>(s, xr, mr, r, j) - max) * inverse);
  }
}

template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* yr = y + r * cols;
    double dot = 0.0;
    for (int64_t j = 0; j < cols; ++j) dot += double(dyr[j]) * double(yr[j]);
    for (int64_t j = 0; j < cols; ++j) dx[r * cols + j] = T(double(yr[j]) * (double(dyr[j]) - dot));
  }
}

#define DPCORE_INSTANTIATE(T)                                                    \
  template void softmax_forward<T>(const SoftmaxShape&, const T*, const T*, T*); \
  template void softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
