// Linear layers as single GEMMs (PyTorch's layout: x[N,in], W[out,in], y[N,out]), each
// split across the threads by blocks of the output matrix.
#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

namespace {

// Columns of dy a thread sums at once: their double accumulators (4 KB) stay in L1.
constexpr int64_t kBiasColumns = 512;

// dbias[j] (+)= the sum of column j of dy[N, out], over the rows in order, in double. Each
// thread owns a contiguous range of columns and walks dy row by row across a block of them,
// adding each row to the block's accumulators: every column still has the one sequential
// sum (the bits do not depend on the thread count), but the reads are contiguous and the
// additions of neighbouring columns independent, so they vectorise. A walk down each
// column in turn strode out elements per addition: at bert-tiny's 4096 x 512 that missed
// the caches on every row and took 5x the GEMM of the weight gradient.
template <class T>
void bias_gradient(const LinearShape& s, const T* dy, T* dbias, bool accumulate) {
  const int parts = int(std::min<int64_t>(kernel_threads(), s.out));
#pragma omp parallel for num_threads(parts) if (s.N * s.out >= kMinParallelElements) schedule(static)
  for (int part = 0; part < parts; ++part) {
    const Range columns = split_range(s.out, parts, part);
    std::vector<double> total(size_t(std::min(kBiasColumns, columns.end - columns.begin)));
    for (int64_t begin = columns.begin; begin < columns.end; begin += kBiasColumns) {
      const int64_t width = std::min(kBiasColumns, columns.end - begin);
      std::fill_n(total.data(), width, 0.0);
      for (int64_t n = 0; n < s.N; ++n) {
        const T* row = dy + n * s.out + begin;
        for (int64_t j = 0; j < width; ++j) total[j] += double(row[j]);
      }
      for (int64_t j = 0; j < width; ++j)
        dbias[begin + j] = accumulate ? dbias[begin + j] + T(total[j]) : T(total[j]);
    }
  }
}

}  // namespace

template <class T>
void linear_forward(const LinearShape& s, const T* x, const T* w, const T* bias, T* y) {
  if (bias) {
    for (int64_t n = 0; n < s.N; ++n) std::copy_n(bias, s.out, y + n * s.out);
  }
  // y[N,out] = x[N,in] * W^T[in,out] (+ the bias already in y)
  gemm_parallel(false, true, s.N, s.out, s.in, T(1), x, s.in, w, s.in, T(bias ? 1 : 0), y, s.out);
}

template <class T>
void linear_backward_data(const LinearShape& s, const T* dy, const T* w, T* dx) {
  // dx[N,in] = dy[N,out] * W[out,in]
  gemm_parallel(false, false, s.N, s.in, s.out, T(1), dy, s.out, w, s.in, T(0), dx, s.in);
}

template <class T>
void linear_backward_weight(const LinearShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate) {
  // dW[out,in] (+)= dy^T[out,N] * x[N,in]
  gemm_parallel(true, false, s.out, s.in, s.N, T(1), dy, s.out, x, s.in, T(accumulate ? 1 : 0), dw, s.in);
  if (dbias) bias_gradient(s, dy, dbias, accumulate);
}

#define DPCORE_INSTANTIATE(T)                                                                      \
  template void linear_forward<T>(const LinearShape&, const T*, const T*, const T*, T*);           \
  template void linear_backward_data<T>(const LinearShape&, const T*, const T*, T*);               \
  template void linear_backward_weight<T>(const LinearShape&, const T*, const T*, T*, T*, bool);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
