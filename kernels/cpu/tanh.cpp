// tanh; backward from the OUTPUT, dx = dy * (1 - y * y) in PyTorch's order
// (tanh_backward: a * (1 - b * b)), so x need not be kept. bfloat16 and float16 run float's
// loops on widened pieces (kernels/cpu/half/widened.h), each output rounded once: float's
// bits on the widened tensor.
#include <cmath>
#include <type_traits>

#include "kernels/cpu/half/widened.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

namespace {

// The loops on one thread's range, shared by every dtype.
template <class T>
void tanh_range(int64_t n, const T* x, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}
template <class T>
void tanh_backward_range(int64_t n, const T* dy, const T* y, T* dx) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (T(1) - y[i] * y[i]);
}

}  // namespace

template <class T>
void tanh_forward(int64_t n, const T* x, T* y) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    for_element_chunks(n, [&](int64_t begin, int64_t end) { tanh_range(end - begin, x + begin, y + begin); });
  } else {
    map_widened(n, x, static_cast<const T*>(nullptr), y,
                [](int64_t count, const float* wx, const float*, float* wy) { tanh_range(count, wx, wy); });
  }
}

template <class T>
void tanh_backward(int64_t n, const T* dy, const T* y, T* dx) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    for_element_chunks(n, [&](int64_t begin, int64_t end) {
      tanh_backward_range(end - begin, dy + begin, y + begin, dx + begin);
    });
  } else {
    map_widened(n, dy, y, dx, [](int64_t count, const float* wdy, const float* wy, float* wdx) {
      tanh_backward_range(count, wdy, wy, wdx);
    });
  }
}

template void tanh_forward<float>(int64_t, const float*, float*);
template void tanh_forward<double>(int64_t, const double*, double*);
template void tanh_forward<BFloat16>(int64_t, const BFloat16*, BFloat16*);
template void tanh_forward<Float16>(int64_t, const Float16*, Float16*);
template void tanh_backward<float>(int64_t, const float*, const float*, float*);
template void tanh_backward<double>(int64_t, const double*, const double*, double*);
template void tanh_backward<BFloat16>(int64_t, const BFloat16*, const BFloat16*, BFloat16*);
template void tanh_backward<Float16>(int64_t, const Float16*, const Float16*, Float16*);

}  // namespace dpcore::kernels::cpu
