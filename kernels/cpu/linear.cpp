// Linear layers as single GEMMs (PyTorch's layout: x[N,in], W[out,in], y[N,out]), each
// split across the threads by blocks of the output matrix.
#include <algorithm>
#include <vector>

#include "kernels/cpu/column_sums.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"

namespace dpcore::kernels::cpu {

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
  if (!dbias) return;
  const std::vector<double> total = column_sums(s.N, s.out, dy, [](T v) { return double(v); });
  for (int64_t j = 0; j < s.out; ++j) dbias[j] = accumulate ? dbias[j] + T(total[j]) : T(total[j]);
}

#define DPCORE_INSTANTIATE(T)                                                                      \
  template void linear_forward<T>(const LinearShape&, const T*, const T*, const T*, T*);           \
  template void linear_backward_data<T>(const LinearShape&, const T*, const T*, T*);               \
  template void linear_backward_weight<T>(const LinearShape&, const T*, const T*, T*, T*, bool);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
