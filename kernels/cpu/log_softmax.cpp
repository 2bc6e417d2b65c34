// log_softmax over the last dimension, one row at a time.
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/log_softmax.h"

namespace dpcore::kernels::cpu {

template <class T>
void log_softmax_forward(int64_t rows, int64_t cols, const T* x, T* y) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const double lse = log_sum_exp(cols, xr);
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = T(double(xr[j]) - lse);
  }
}

template <class T>
void log_softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* yr = y + r * cols;
    double dy_sum = 0.0;
    for (int64_t j = 0; j < cols; ++j) dy_sum += dyr[j];
    for (int64_t j = 0; j < cols; ++j) dx[r * cols + j] = T(double(dyr[j]) - std::exp(double(yr[j])) * dy_sum);
  }
}

#define DPCORE_INSTANTIATE(T) \
  template void log_softmax_forward<T>(int64_t, int64_t, const T*, T*); \
  template void log_softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
