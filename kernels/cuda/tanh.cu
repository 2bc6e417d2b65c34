// tanh on flat float arrays, through map() (kernels/cuda/map.cuh). tanhf is CUDA's
// full-precision tanh (within 2 ulp); backward reads the OUTPUT: dx = dy * (1 - y * y), as
// PyTorch's tanh_backward computes it.
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

void tanh_forward(int64_t n, const float* x, float* y, cudaStream_t stream) { map(n, x, nullptr, y, Tanh{}, stream); }

void tanh_backward(int64_t n, const float* dy, const float* y, float* dx, cudaStream_t stream) {
  map(n, dy, y, dx, TanhBackward{}, stream);
}

}  // namespace dpcore::kernels::cuda
