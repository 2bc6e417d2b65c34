// The reference loop nests of linear. Each gradient is written as a gather (one output
// element, the sum of everything that feeds it), not as the scatter the fast paths use, so
// the two formulations check each other.
#include "kernels/naive/naive.h"
#include "kernels/naive/loop_helpers.h"

namespace dpcore::kernels::naive {

template <class T>
void linear_forward(const LinearShape& s, const T* x, const T* w, const T* bias, T* y) {
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.out; ++o) {
      double acc = bias ? double(bias[o]) : 0.0;
      for (int64_t i = 0; i < s.in; ++i) acc += double(x[n * s.in + i]) * double(w[o * s.in + i]);
      y[n * s.out + o] = T(acc);
    }
}

template <class T>
void linear_backward_data(const LinearShape& s, const T* dy, const T* w, T* dx) {
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t i = 0; i < s.in; ++i) {
      double acc = 0.0;
      for (int64_t o = 0; o < s.out; ++o) acc += double(dy[n * s.out + o]) * double(w[o * s.in + i]);
      dx[n * s.in + i] = T(acc);
    }
}

template <class T>
void linear_backward_weight(const LinearShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate) {
  for (int64_t o = 0; o < s.out; ++o) {
    for (int64_t i = 0; i < s.in; ++i) {
      double acc = 0.0;
      for (int64_t n = 0; n < s.N; ++n) acc += double(dy[n * s.out + o]) * double(x[n * s.in + i]);
      dw[o * s.in + i] = accumulated(accumulate, dw[o * s.in + i], acc);
    }
    if (dbias) {
      double acc = 0.0;
      for (int64_t n = 0; n < s.N; ++n) acc += double(dy[n * s.out + o]);
      dbias[o] = accumulated(accumulate, dbias[o], acc);
    }
  }
}

#define DPCORE_INSTANTIATE(T) \
  template void linear_forward<T>(const LinearShape&, const T*, const T*, const T*, T*);         \
  template void linear_backward_data<T>(const LinearShape&, const T*, const T*, T*);             \
  template void linear_backward_weight<T>(const LinearShape&, const T*, const T*, T*, T*, bool);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::naive
