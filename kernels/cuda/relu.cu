// relu on flat arrays of float, bfloat16 or float16, through map() (kernels/cuda/map.cuh):
// relu commutes with rounding, so a 16-bit output is exactly the float32 relu of the
// widened value.
#include "kernels/half_types.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/map.cuh"

namespace dpcore::kernels::cuda {

namespace {

// relu keeps NaN (x < 0 is false for NaN); its backward zeroes where the OUTPUT is <= 0.
struct Relu {
  __device__ float operator()(float a, float) const { return a < 0.f ? 0.f : a; }
};
struct ReluBackward {  // a = dy, b = y
  __device__ float operator()(float a, float b) const { return b <= 0.f ? 0.f : a; }
};

}  // namespace

template <class X>
void relu_forward(int64_t n, const X* x, X* y, cudaStream_t stream) {
  map(n, x, nullptr, y, Relu{}, stream);
}

template <class X>
void relu_backward(int64_t n, const X* dy, const X* y, X* dx, cudaStream_t stream) {
  map(n, dy, y, dx, ReluBackward{}, stream);
}

#define DPCORE_INSTANTIATE(X)                                                   \
  template void relu_forward<X>(int64_t, const X*, X*, cudaStream_t);           \
  template void relu_backward<X>(int64_t, const X*, const X*, X*, cudaStream_t);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cuda
