// log_softmax, nll loss and the fused cross-entropy, one row at a time. Every row sum is
// accumulated in double and the max is subtracted before exp, so large logits (1e4) stay
// finite and float rows keep full float precision.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

namespace {

// log(sum_j exp(x_j)) of one row, as max + log(sum exp(x_j - max)).
template <class T>
double log_sum_exp(int64_t cols, const T* x) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < cols; ++j) max = std::max(max, double(x[j]));
  double total = 0.0;
  for (int64_t j = 0; j < cols; ++j) total += std::exp(double(x[j]) - max);
  return max + std::log(total);
}

bool rows_in_parallel(int64_t rows, int64_t cols) { return rows > 1 && rows * cols >= kMinParallelElements; }

}  // namespace

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

template <class T>
void nll_loss_forward(int64_t rows, int64_t cols, const T* logp, const int64_t* target, T* loss_sum) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total -= logp[r * cols + target[r]];
  loss_sum[0] = T(total);
}

template <class T>
void nll_loss_backward(int64_t rows, int64_t cols, T grad_per_row, const int64_t* target, T* dlogp) {
  std::fill(dlogp, dlogp + rows * cols, T(0));
  for (int64_t r = 0; r < rows; ++r) dlogp[r * cols + target[r]] = -grad_per_row;
}

template <class T>
void cross_entropy_forward_backward(int64_t rows, int64_t cols, const T* logits, const int64_t* target,
                                    T grad_scale, T* loss_sum, T* dlogits) {
  // Row losses are summed afterwards, in row order, so the total does not depend on threads.
  std::vector<double> row_loss(rows);
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = logits + r * cols;
    const double lse = log_sum_exp(cols, xr);
    row_loss[r] = lse - double(xr[target[r]]);
    // d(loss_r)/d(x_j) = softmax_j - [j == target]
    for (int64_t j = 0; j < cols; ++j) {
      const double p = std::exp(double(xr[j]) - lse);
      dlogits[r * cols + j] = T(double(grad_scale) * (p - (j == target[r] ? 1.0 : 0.0)));
    }
  }
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total += row_loss[r];
  loss_sum[0] = T(total);
}

#define DPCORE_INSTANTIATE(T)                                                                                  \
  template void log_softmax_forward<T>(int64_t, int64_t, const T*, T*);                                       \
  template void log_softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);                            \
  template void nll_loss_forward<T>(int64_t, int64_t, const T*, const int64_t*, T*);                          \
  template void nll_loss_backward<T>(int64_t, int64_t, T, const int64_t*, T*);                                \
  template void cross_entropy_forward_backward<T>(int64_t, int64_t, const T*, const int64_t*, T, T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
