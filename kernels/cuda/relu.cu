// relu on flat float arrays, through map() (kernels/cuda/map.cuh).
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

void relu_forward(int64_t n, const float* x, float* y, cudaStream_t stream) { map(n, x, nullptr, y, Relu{}, stream); }

void relu_backward(int64_t n, const float* dy, const float* y, float* dx, cudaStream_t stream) {
  map(n, dy, y, dx, ReluBackward{}, stream);
}

}  // namespace dpcore::kernels::cuda
