// layer_norm over the last dimension, a row at a time for the forward and dx, in double. A
// row's sums keep one double partial sum per lane of kFloatBlock (kernels/cpu/float_blocks.h),
// added in a fixed tree: independent additions the compiler vectorises, where one running
// sum waited on each addition in turn, and one order whatever the thread count.
// The parameter gradients are column sums over every row: each thread owns a contiguous
// range of columns and adds its rows in row order, so every column's sum has one fixed
// order whatever the thread count (and the rows stream through the cache once per thread).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/float_blocks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/log_softmax.h"

namespace dpcore::kernels::cpu {

template <class T>
void layer_norm_forward(int64_t rows, int64_t cols, const T* x, const T* weight, const T* bias, double eps, T* y,
                        T* mean, T* rstd) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    // Two passes: the mean, then the mean squared deviation from it (E[x^2] - E[x]^2
    // cancels when the mean is large against the spread).
    const double m = lane_sum<double>(cols, [xr](int64_t j) { return double(xr[j]); }) / double(cols);
    const double squares = lane_sum<double>(cols, [xr, m](int64_t j) { return (double(xr[j]) - m) * (double(xr[j]) - m); });
    const double s = 1.0 / std::sqrt(squares / double(cols) + eps);
    T* yr = y + r * cols;
    if (weight) {
      for (int64_t j = 0; j < cols; ++j) yr[j] = T((double(xr[j]) - m) * s * double(weight[j]) + double(bias[j]));
    } else {
      for (int64_t j = 0; j < cols; ++j) yr[j] = T((double(xr[j]) - m) * s);
    }
    mean[r] = T(m), rstd[r] = T(s);
  }
}

namespace {

// dx of each row: rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
template <class T>
void layer_norm_input_grad(int64_t rows, int64_t cols, const T* dy, const T* x, const T* weight, const T* mean,
                           const T* rstd, T* dx) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* xr = x + r * cols;
    const double m = mean[r], s = rstd[r];
    const auto g = [dyr, weight](int64_t j) { return double(dyr[j]) * (weight ? double(weight[j]) : 1.0); };
    const double g_mean = lane_sum<double>(cols, g) / double(cols);
    const double gx_mean = lane_sum<double>(cols, [&](int64_t j) { return g(j) * (double(xr[j]) - m) * s; }) / double(cols);
    T* dxr = dx + r * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) dxr[j] = T(s * (g(j) - g_mean - (double(xr[j]) - m) * s * gx_mean));
  }
}

// dweight = sum over rows of dy * xhat, dbias = sum of dy (either may be null).
template <class T>
void layer_norm_param_grads(int64_t rows, int64_t cols, const T* dy, const T* x, const T* mean, const T* rstd,
                            T* dweight, T* dbias, bool accumulate) {
  const int parts = int(std::min<int64_t>(kernel_threads(), cols));
#pragma omp parallel for num_threads(parts) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int part = 0; part < parts; ++part) {
    const Range c = split_range(cols, parts, part);
    std::vector<double> dw(c.end - c.begin, 0.0), db(c.end - c.begin, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const double m = mean[r], s = rstd[r];
      for (int64_t j = c.begin; j < c.end; ++j) {
        const double g = dy[r * cols + j];
        dw[j - c.begin] += g * (double(x[r * cols + j]) - m) * s;
        db[j - c.begin] += g;
      }
    }
    for (int64_t j = c.begin; j < c.end; ++j) {
      if (dweight) dweight[j] = accumulate ? T(dweight[j] + T(dw[j - c.begin])) : T(dw[j - c.begin]);
      if (dbias) dbias[j] = accumulate ? T(dbias[j] + T(db[j - c.begin])) : T(db[j - c.begin]);
    }
  }
}

}  // namespace

template <class T>
void layer_norm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* weight, const T* mean,
                         const T* rstd, T* dx, T* dweight, T* dbias, bool accumulate) {
  if (dx) layer_norm_input_grad(rows, cols, dy, x, weight, mean, rstd, dx);
  if (dweight || dbias) layer_norm_param_grads(rows, cols, dy, x, mean, rstd, dweight, dbias, accumulate);
}

#define DPCORE_INSTANTIATE(T)                                                                                    \
  template void layer_norm_forward<T>(int64_t, int64_t, const T*, const T*, const T*, double, T*, T*, T*);     \
  template void layer_norm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*, \
                                       T*, T*, bool);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
