// The reference loop nests of max_pool2d. Each gradient is written as a gather (one output
// element, the sum of everything that feeds it), not as the scatter the fast paths use, so
// the two formulations check each other.
#include <cmath>
#include <limits>

#include "kernels/naive/loop_helpers.h"
#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

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

#define DPCORE_INSTANTIATE(T) \
  template void max_pool2d_forward<T>(const Pool2dShape&, const T*, T*, int32_t*);               \
  template void max_pool2d_backward<T>(const Pool2dShape&, const T*, const int32_t*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::naive
