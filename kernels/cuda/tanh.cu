// tanh on flat arrays of float, bfloat16 or float16, through map() (kernels/cuda/map.cuh).
// tanhf is CUDA's full-precision tanh (within 2 ulp); backward reads the OUTPUT:
// dx = dy * (1 - y * y), as PyTorch's tanh_backward computes it.
#include <cmath>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/map.cuh"

namespace dpcore::kernels::cuda {

namespace {

struct Tanh {
  __device__ float operator()(float x, float) const { return tanhf(x); }
};
struct TanhBackward {  // a = dy, b = y
  __device__ float operator()(float dy, float y) const { return dy * (1.f - y * y); }
};

}  // namespace

template <class X>
void tanh_forward(int64_t n, const X* x, X* y, cudaStream_t stream) {
  map(n, x, nullptr, y, Tanh{}, stream);
}

template <class X>
void tanh_backward(int64_t n, const X* dy, const X* y, X* dx, cudaStream_t stream) {
  map(n, dy, y, dx, TanhBackward{}, stream);
}

#define DPCORE_INSTANTIATE(X)                                                   \
  template void tanh_forward<X>(int64_t, const X*, X*, cudaStream_t);           \
  template void tanh_backward<X>(int64_t, const X*, const X*, X*, cudaStream_t);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cuda
