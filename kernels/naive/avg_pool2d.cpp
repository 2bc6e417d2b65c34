// The reference loop nests of avg_pool2d, straight from the definition: every window tap,
// padding included, is visited, and the divisor is counted tap by tap. The gradient is a
// gather over the kernel taps (which output reads this input through tap (i, j)), not over
// clipped window ranges as the fast kernels compute it, so the two formulations check each
// other. Global average pooling has no reference of its own: it is avg_pool2d with the
// window the whole plane.
#include "kernels/naive/loop_helpers.h"
#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

// The divisor of output (p, q)'s mean: every tap when padding counts, else the real ones.
static int64_t window_divisor(const Pool2dShape& s, bool count_include_pad, int64_t p, int64_t q) {
  if (count_include_pad) return s.kernel_h * s.kernel_w;
  int64_t real = 0;
  for (int64_t i = 0; i < s.kernel_h; ++i)
    for (int64_t j = 0; j < s.kernel_w; ++j)
      if (input_at(p, i, s.stride_h, s.pad_h, s.H) >= 0 && input_at(q, j, s.stride_w, s.pad_w, s.W) >= 0) ++real;
  return real;
}

template <class T>
void avg_pool2d_forward(const Pool2dShape& s, bool count_include_pad, const T* x, T* y) {
  for (int64_t plane = 0; plane < s.N * s.C; ++plane)
    for (int64_t p = 0; p < s.P; ++p)
      for (int64_t q = 0; q < s.Q; ++q) {
        double acc = 0.0;
        for (int64_t i = 0; i < s.kernel_h; ++i)
          for (int64_t j = 0; j < s.kernel_w; ++j) {
            int64_t h = input_at(p, i, s.stride_h, s.pad_h, s.H), w = input_at(q, j, s.stride_w, s.pad_w, s.W);
            if (h >= 0 && w >= 0) acc += double(x[(plane * s.H + h) * s.W + w]);  // padding adds 0
          }
        y[(plane * s.P + p) * s.Q + q] = T(acc / double(window_divisor(s, count_include_pad, p, q)));
      }
}

template <class T>
void avg_pool2d_backward(const Pool2dShape& s, bool count_include_pad, const T* dy, T* dx) {
  for (int64_t plane = 0; plane < s.N * s.C; ++plane)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t w = 0; w < s.W; ++w) {
        double acc = 0.0;
        for (int64_t i = 0; i < s.kernel_h; ++i)
          for (int64_t j = 0; j < s.kernel_w; ++j) {
            int64_t p = output_at(h, i, s.stride_h, s.pad_h, s.P), q = output_at(w, j, s.stride_w, s.pad_w, s.Q);
            if (p < 0 || q < 0) continue;
            acc += double(dy[(plane * s.P + p) * s.Q + q]) / double(window_divisor(s, count_include_pad, p, q));
          }
        dx[(plane * s.H + h) * s.W + w] = T(acc);
      }
}

#define DPCORE_INSTANTIATE(T)                                                                \
  template void avg_pool2d_forward<T>(const Pool2dShape&, bool, const T*, T*);               \
  template void avg_pool2d_backward<T>(const Pool2dShape&, bool, const T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::naive
