// The reference loop nests. Each gradient is written as a gather (one output element, the
// sum of everything that feeds it), not as the scatter the fast paths use, so the two
// formulations check each other.
#include "kernels/cpu/naive.h"

#include <cmath>
#include <limits>

namespace dpcore::kernels::cpu::naive {

namespace {

// The input index along one dimension under output o and kernel tap k, or -1 in the padding.
int64_t input_at(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t size) {
  int64_t i = o * stride - pad + k;
  return i >= 0 && i < size ? i : -1;
}

// The output index along one dimension whose tap k reads input i, or -1 if none does.
int64_t output_at(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t size) {
  int64_t shifted = i + pad - k;
  if (shifted < 0 || shifted % stride != 0) return -1;
  int64_t o = shifted / stride;
  return o < size ? o : -1;
}

template <class T>
T accumulated(bool accumulate, T old, double fresh) {
  return accumulate ? old + T(fresh) : T(fresh);
}

}  // namespace

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

// Visits the whole window, padding included (as -inf), in row-major order.
template <class T>
void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, int32_t* argmax) {
  for (int64_t plane = 0; plane < s.N * s.C; ++plane)
    for (int64_t p = 0; p < s.P; ++p)
      for (int64_t q = 0; q < s.Q; ++q) {
        T best = -std::numeric_limits<T>::infinity();
        int64_t best_index = -1;
        for (int64_t i = 0; i < s.kernel_h; ++i)
          for (int64_t j = 0; j < s.kernel_w; ++j) {
            int64_t h = input_at(p, i, s.stride_h, s.pad_h, s.H), v = input_at(q, j, s.stride_w, s.pad_w, s.W);
            if (h < 0 || v < 0) continue;  // padding: -inf never replaces anything
            T value = x[(plane * s.H + h) * s.W + v];
            if (best_index < 0 || value > best || std::isnan(value)) {
              best = value;
              best_index = h * s.W + v;
            }
          }
        y[(plane * s.P + p) * s.Q + q] = best;
        argmax[(plane * s.P + p) * s.Q + q] = int32_t(best_index);
      }
}

template <class T>
void max_pool2d_backward(const Pool2dShape& s, const T* dy, const int32_t* argmax, T* dx) {
  const int64_t out_plane = s.P * s.Q;
  for (int64_t plane = 0; plane < s.N * s.C; ++plane)
    for (int64_t i = 0; i < s.H * s.W; ++i) {
      double acc = 0.0;
      for (int64_t o = 0; o < out_plane; ++o)
        if (argmax[plane * out_plane + o] == i) acc += double(dy[plane * out_plane + o]);
      dx[plane * s.H * s.W + i] = T(acc);
    }
}

#define DPCORE_INSTANTIATE(T)                                                                      \
  template void conv2d_forward<T>(const Conv2dShape&, const T*, const T*, const T*, T*);           \
  template void conv2d_backward_data<T>(const Conv2dShape&, const T*, const T*, T*);               \
  template void conv2d_backward_weight<T>(const Conv2dShape&, const T*, const T*, T*, T*, bool);   \
  template void linear_forward<T>(const LinearShape&, const T*, const T*, const T*, T*);           \
  template void linear_backward_data<T>(const LinearShape&, const T*, const T*, T*);               \
  template void linear_backward_weight<T>(const LinearShape&, const T*, const T*, T*, T*, bool);   \
  template void max_pool2d_forward<T>(const Pool2dShape&, const T*, T*, int32_t*);                 \
  template void max_pool2d_backward<T>(const Pool2dShape&, const T*, const int32_t*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu::naive
