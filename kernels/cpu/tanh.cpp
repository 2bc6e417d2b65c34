// tanh; backward from the OUTPUT, dx = dy * (1 - y * y) in PyTorch's order
// (tanh_backward: a * (1 - b * b)), so x need not be kept.
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

template <class T>
void tanh_forward(int64_t n, const T* x, T* y) {
#pragma omp parallel for num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

template <class T>
void tanh_backward(int64_t n, const T* dy, const T* y, T* dx) {
#pragma omp parallel for simd num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (T(1) - y[i] * y[i]);
}

template void tanh_forward<float>(int64_t, const float*, float*);
template void tanh_forward<double>(int64_t, const double*, double*);
template void tanh_backward<float>(int64_t, const float*, const float*, float*);
template void tanh_backward<double>(int64_t, const double*, const double*, double*);

}  // namespace dpcore::kernels::cpu
