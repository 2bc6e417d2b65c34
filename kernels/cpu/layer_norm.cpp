// layer_norm over the last dimension, a row at a time for the forward and dx: the forward's
// statistics in double, dx in double for double and in float for float. A row's sums keep
// one partial sum per lane of kFloatBlock (kernels/cpu/float_blocks.h), added in a fixed
// tree: independent additions the compiler vectorises, where one running sum waited on
// each addition in turn, and one order whatever the thread count.
// The parameter gradients are column sums over every row: each thread owns a contiguous
// range of columns and adds its rows in row order, so every column's sum has one fixed
// order whatever the thread count (and the rows stream through the cache once per thread).
// Written once over the storage type X of x, y, dy and dx (kernels/cpu/stored_values.h),
// S = computed_t<X> that of weight, bias, mean, rstd and the parameter gradients: a 16-bit
// X reads its values widened and rounds each output once, beside float32 statistics, which
// gives the float32 kernel's bits on the widened tensors.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/float_blocks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/log_softmax.h"
#include "kernels/cpu/stored_values.h"
#include "kernels/cpu/vector_variants.h"

namespace dpcore::kernels::cpu {

namespace {

// One row of the forward: two passes for the statistics, the mean, then the mean squared
// deviation from it (E[x^2] - E[x]^2 cancels when the mean is large against the spread).
template <class X, class S>
DPCORE_VECTOR_LOOP void forward_row(int64_t cols, const X* xr, const S* weight, const S* bias, double eps, X* yr,
                                    S& mean, S& rstd) {
  const auto at = [xr](int64_t j) { return double(value(xr[j])); };
  const double m = lane_sum<double>(cols, at) / double(cols);
  const auto deviation_squared = [at, m](int64_t j) { return (at(j) - m) * (at(j) - m); };
  const double squares = lane_sum<double>(cols, deviation_squared);
  const double s = 1.0 / std::sqrt(squares / double(cols) + eps);
  if (weight) {
    for (int64_t j = 0; j < cols; ++j) yr[j] = stored<X>(S((at(j) - m) * s * double(weight[j]) + double(bias[j])));
  } else {
    for (int64_t j = 0; j < cols; ++j) yr[j] = stored<X>(S((at(j) - m) * s));
  }
  mean = S(m), rstd = S(s);
}

// float32's rows built for AVX-512, AVX2 and the baseline (vector_variants.h): 8, 4 or 2
// doubles a vector where the baseline's SSE2 has 2 (1.7-1.9x the rows a second on one
// AVX-512 thread); the lanes of lane_sum and the operations are the same at every width, and the
// file has no fused multiply-adds (CMakeLists.txt), so every width gives the same bits.
DPCORE_VECTOR_LOOP void forward_row_float_loop(int64_t cols, const float* xr, const float* weight, const float* bias,
                                               double eps, float* yr, float& mean, float& rstd) {
  forward_row(cols, xr, weight, bias, eps, yr, mean, rstd);
}
DPCORE_VECTOR_VARIANTS(forward_row_float,
                       (int64_t cols, const float* xr, const float* weight, const float* bias, double eps, float* yr,
                        float& mean, float& rstd),
                       (cols, xr, weight, bias, eps, yr, mean, rstd))

}  // namespace

template <class X, class S>
void layer_norm_forward(int64_t rows, int64_t cols, const X* x, const S* weight, const S* bias, double eps, X* y,
                        S* mean, S* rstd) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<X, float>) {
      forward_row_float(cols, x + r * cols, weight, bias, eps, y + r * cols, mean[r], rstd[r]);
    } else {
      forward_row(cols, x + r * cols, weight, bias, eps, y + r * cols, mean[r], rstd[r]);
    }
  }
}

namespace {

// dx of one row: rstd * (g - mean(g) - xhat * mean(g * xhat)), g(j) = dy * w, in the
// statistics' type S: double for double, float for float and the 16-bit types (the error
// analysis is in tests/ops/layer_norm_test.cpp). g is a function of its own with and
// without weight, so that no loop tests for the weight.
template <class S, class X, class G>
DPCORE_VECTOR_LOOP void layer_norm_row_input_grad(int64_t cols, const X* xr, S m, S s, const G& g, X* dxr) {
  const S g_mean = lane_sum<S>(cols, g) / S(cols);
  const auto gx = [g, xr, m, s](int64_t j) { return g(j) * ((S(value(xr[j])) - m) * s); };
  const S gx_mean = lane_sum<S>(cols, gx) / S(cols);
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j) dxr[j] = stored<X>(S(s * (g(j) - g_mean - (S(value(xr[j])) - m) * s * gx_mean)));
}

// dx of one row, with or without weight.
template <class X, class S>
DPCORE_VECTOR_LOOP void input_grad_row(int64_t cols, const X* dyr, const X* xr, const S* weight, S m, S s, X* dxr) {
  if (weight) {
    const auto g = [dyr, weight](int64_t j) { return S(value(dyr[j])) * weight[j]; };
    layer_norm_row_input_grad<S>(cols, xr, m, s, g, dxr);
  } else {
    layer_norm_row_input_grad<S>(cols, xr, m, s, [dyr](int64_t j) { return S(value(dyr[j])); }, dxr);
  }
}

// The parameter gradients' sums of rows [0, rows) over columns [begin, end), into dw and db
// (indexed from begin): rows in order, each column's sum one running double.
template <class X, class S>
DPCORE_VECTOR_LOOP void param_grad_sums(int64_t rows, int64_t cols, int64_t begin, int64_t end, const X* dy,
                                        const X* x, const S* mean, const S* rstd, double* dw, double* db) {
  for (int64_t r = 0; r < rows; ++r) {
    const double m = mean[r], s = rstd[r];
    const X* dyr = dy + r * cols;
    const X* xr = x + r * cols;
    for (int64_t j = begin; j < end; ++j) {
      const double g = value(dyr[j]);
      dw[j - begin] += g * (double(value(xr[j])) - m) * s;
      db[j - begin] += g;
    }
  }
}

// float32's two, built per vector width as forward_row_float is.
DPCORE_VECTOR_LOOP void input_grad_row_float_loop(int64_t cols, const float* dyr, const float* xr, const float* weight,
                                                  float m, float s, float* dxr) {
  input_grad_row(cols, dyr, xr, weight, m, s, dxr);
}
DPCORE_VECTOR_VARIANTS(input_grad_row_float,
                       (int64_t cols, const float* dyr, const float* xr, const float* weight, float m, float s,
                        float* dxr),
                       (cols, dyr, xr, weight, m, s, dxr))
DPCORE_VECTOR_LOOP void param_grad_sums_float_loop(int64_t rows, int64_t cols, int64_t begin, int64_t end,
                                                   const float* dy, const float* x, const float* mean,
                                                   const float* rstd, double* dw, double* db) {
  param_grad_sums(rows, cols, begin, end, dy, x, mean, rstd, dw, db);
}
DPCORE_VECTOR_VARIANTS(param_grad_sums_float,
                       (int64_t rows, int64_t cols, int64_t begin, int64_t end, const float* dy, const float* x,
                        const float* mean, const float* rstd, double* dw, double* db),
                       (rows, cols, begin, end, dy, x, mean, rstd, dw, db))

template <class X, class S>
void layer_norm_input_grad(int64_t rows, int64_t cols, const X* dy, const X* x, const S* weight, const S* mean,
                           const S* rstd, X* dx) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = r * cols;
    if constexpr (std::is_same_v<X, float>) {
      input_grad_row_float(cols, dy + at, x + at, weight, mean[r], rstd[r], dx + at);
    } else {
      input_grad_row(cols, dy + at, x + at, weight, mean[r], rstd[r], dx + at);
    }
  }
}

// dweight = sum over rows of dy * xhat, dbias = sum of dy (either may be null).
template <class X, class S>
void layer_norm_param_grads(int64_t rows, int64_t cols, const X* dy, const X* x, const S* mean, const S* rstd,
                            S* dweight, S* dbias, bool accumulate) {
  const int parts = int(std::min<int64_t>(kernel_threads(), cols));
#pragma omp parallel for num_threads(parts) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int part = 0; part < parts; ++part) {
    const Range c = split_range(cols, parts, part);
    std::vector<double> dw(c.end - c.begin, 0.0), db(c.end - c.begin, 0.0);
    if constexpr (std::is_same_v<X, float>) {
      param_grad_sums_float(rows, cols, c.begin, c.end, dy, x, mean, rstd, dw.data(), db.data());
    } else {
      param_grad_sums(rows, cols, c.begin, c.end, dy, x, mean, rstd, dw.data(), db.data());
    }
    for (int64_t j = c.begin; j < c.end; ++j) {
      if (dweight) dweight[j] = accumulate ? S(dweight[j] + S(dw[j - c.begin])) : S(dw[j - c.begin]);
      if (dbias) dbias[j] = accumulate ? S(dbias[j] + S(db[j - c.begin])) : S(db[j - c.begin]);
    }
  }
}

}  // namespace

template <class X, class S>
void layer_norm_backward(int64_t rows, int64_t cols, const X* dy, const X* x, const S* weight, const S* mean,
                         const S* rstd, X* dx, S* dweight, S* dbias, bool accumulate) {
  if (dx) layer_norm_input_grad(rows, cols, dy, x, weight, mean, rstd, dx);
  if (dweight || dbias) layer_norm_param_grads(rows, cols, dy, x, mean, rstd, dweight, dbias, accumulate);
}

#define DPCORE_INSTANTIATE(X, S)                                                                                   \
  template void layer_norm_forward<X, S>(int64_t, int64_t, const X*, const S*, const S*, double, X*, S*, S*);     \
  template void layer_norm_backward<X, S>(int64_t, int64_t, const X*, const X*, const S*, const S*, const S*, X*, \
                                          S*, S*, bool);
DPCORE_INSTANTIATE(float, float)
DPCORE_INSTANTIATE(double, double)
DPCORE_INSTANTIATE(BFloat16, float)
DPCORE_INSTANTIATE(Float16, float)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
