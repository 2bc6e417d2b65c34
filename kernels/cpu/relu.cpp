// relu. NaN passes through both ways, as in PyTorch (relu is clamp_min(x, 0) there, and
// its backward zeroes the gradient only where the output is <= 0); the rules are in relu.h.
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/relu.h"

namespace dpcore::kernels::cpu {

template <class T>
void relu_forward(int64_t n, const T* x, T* y) {
#pragma omp parallel for simd num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = relu_value(x[i]);
}

template <class T>
void relu_backward(int64_t n, const T* dy, const T* y, T* dx) {
#pragma omp parallel for simd num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = relu_grad(dy[i], y[i]);
}

template void relu_forward<float>(int64_t, const float*, float*);
template void relu_forward<double>(int64_t, const double*, double*);
template void relu_backward<float>(int64_t, const float*, const float*, float*);
template void relu_backward<double>(int64_t, const double*, const double*, double*);

}  // namespace dpcore::kernels::cpu
