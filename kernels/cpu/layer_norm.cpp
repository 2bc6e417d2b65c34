// layer_norm over the last dimension, a row at a time for the forward and dx: the forward's
// statistics in double, dx in double for double and in float for float. A row's sums keep
// one partial sum per lane of kFloatBlock (kernels/cpu/float_blocks.h), added in a fixed
// tree: independent additions the compiler vectorises, where one running sum waited on
// each addition in turn, and one order whatever the thread count.
// The parameter gradients are column sums over every row: each thread owns a contiguous
// range of columns and adds its rows in row order, so every column's sum has one fixed
// order whatever the thread count (and the rows stream through the cache once per thread).
#include <algorithm>
#include <cmath>
#include <type_traits>
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
    const auto deviation_squared = [xr, m](int64_t j) { return (double(xr[j]) - m) * (double(xr[j]) - m); };
    const double squares = lane_sum<double>(cols, deviation_squared);
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

// dx of one row: rstd * (g - mean(g) - xhat * mean(g * xhat)), g(j) = dy * w, in Acc: double
// for double, float for float (the error analysis is in tests/ops/layer_norm_test.cpp). g
// is a function of its own with and without weight, so that no loop tests for the weight.
template <class Acc, class T, class G>
void layer_norm_row_input_grad(int64_t cols, const T* xr, Acc m, Acc s, const G& g, T* dxr) {
  const Acc g_mean = lane_sum<Acc>(cols, g) / Acc(cols);
  const auto gx = [g, xr, m, s](int64_t j) { return g(j) * ((Acc(xr[j]) - m) * s); };
  const Acc gx_mean = lane_sum<Acc>(cols, gx) / Acc(cols);
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j) dxr[j] = T(s * (g(j) - g_mean - (Acc(xr[j]) - m) * s * gx_mean));
}

template <class T>
void layer_norm_input_grad(int64_t rows, int64_t cols, const T* dy, const T* x, const T* weight, const T* mean,
                           const T* rstd, T* dx) {
  using Acc = std::conditional_t<std::is_same_v<T, float>, float, double>;
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* xr = x + r * cols;
    T* dxr = dx + r * cols;
    if (weight) {
      const auto g = [dyr, weight](int64_t j) { return Acc(dyr[j]) * Acc(weight[j]); };
      layer_norm_row_input_grad<Acc>(cols, xr, Acc(mean[r]), Acc(rstd[r]), g, dxr);
    } else {
      layer_norm_row_input_grad<Acc>(cols, xr, Acc(mean[r]), Acc(rstd[r]), [dyr](int64_t j) { return Acc(dyr[j]); },
                                     dxr);
    }
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
