// The reference loop nests of conv2d. Each gradient is written as a gather (one output
// element, the sum of everything that feeds it), not as the scatter the fast paths use, so
// the two formulations check each other.
#include "kernels/naive/naive.h"
#include "kernels/naive/loop_helpers.h"

namespace dpcore::kernels::naive {

template <class T>
void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t p = 0; p < s.P; ++p)
        for (int64_t q = 0; q < s.Q; ++q) {
          double acc = bias ? double(bias[k]) : 0.0;
          for (int64_t c = 0; c < s.C; ++c)
            for (int64_t r = 0; r < s.R; ++r)
              for (int64_t t = 0; t < s.S; ++t) {
                int64_t h = input_at(p, r, s.stride_h, s.pad_h, s.H), v = input_at(q, t, s.stride_w, s.pad_w, s.W);
                if (h < 0 || v < 0) continue;
                acc += double(x[((n * s.C + c) * s.H + h) * s.W + v]) * double(w[((k * s.C + c) * s.R + r) * s.S + t]);
              }
          y[((n * s.K + k) * s.P + p) * s.Q + q] = T(acc);
        }
}

template <class T>
void conv2d_backward_data(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t v = 0; v < s.W; ++v) {
          double acc = 0.0;
          for (int64_t k = 0; k < s.K; ++k)
            for (int64_t r = 0; r < s.R; ++r)
              for (int64_t t = 0; t < s.S; ++t) {
                int64_t p = output_at(h, r, s.stride_h, s.pad_h, s.P), q = output_at(v, t, s.stride_w, s.pad_w, s.Q);
                if (p < 0 || q < 0) continue;
                acc += double(dy[((n * s.K + k) * s.P + p) * s.Q + q]) * double(w[((k * s.C + c) * s.R + r) * s.S + t]);
              }
          dx[((n * s.C + c) * s.H + h) * s.W + v] = T(acc);
        }
}

template <class T>
void conv2d_backward_weight(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate) {
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t r = 0; r < s.R; ++r)
        for (int64_t t = 0; t < s.S; ++t) {
          double acc = 0.0;
          for (int64_t n = 0; n < s.N; ++n)
            for (int64_t p = 0; p < s.P; ++p)
              for (int64_t q = 0; q < s.Q; ++q) {
                int64_t h = input_at(p, r, s.stride_h, s.pad_h, s.H), v = input_at(q, t, s.stride_w, s.pad_w, s.W);
                if (h < 0 || v < 0) continue;
                acc += double(dy[((n * s.K + k) * s.P + p) * s.Q + q]) * double(x[((n * s.C + c) * s.H + h) * s.W + v]);
              }
          T& out = dw[((k * s.C + c) * s.R + r) * s.S + t];
          out = accumulated(accumulate, out, acc);
        }
  if (!dbias) return;
  for (int64_t k = 0; k < s.K; ++k) {
    double acc = 0.0;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t i = 0; i < s.P * s.Q; ++i) acc += double(dy[(n * s.K + k) * s.P * s.Q + i]);
    dbias[k] = accumulated(accumulate, dbias[k], acc);
  }
}

#define DPCORE_INSTANTIATE(T) \
  template void conv2d_forward<T>(const Conv2dShape&, const T*, const T*, const T*, T*);         \
  template void conv2d_backward_data<T>(const Conv2dShape&, const T*, const T*, T*);             \
  template void conv2d_backward_weight<T>(const Conv2dShape&, const T*, const T*, T*, T*, bool);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::naive
