// relu on flat float arrays, through map() (kernels/cuda/map.cuh), and on 16-bit ones.
#include "kernels/half_types.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
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

namespace {

// 16-bit: the float32 rules above on widened values, rounded back (exactly: the value is
// the input or zero), grid-stride as map's kernels. b is null for the forward.
template <class H, class F>
__global__ void relu_half_kernel(int64_t n, const H* a, const H* b, H* y, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_float<H>(f(to_float(a[i]), b ? to_float(b[i]) : 0.f));
}

template <class H, class F>
void relu_half(const char* name, int64_t n, const H* a, const H* b, H* y, F f, cudaStream_t stream) {
  if (n == 0) return;
  launch(name, relu_half_kernel<H, F>, blocks_for(n, kElementwiseThreads), kElementwiseThreads, stream, n, a, b, y, f);
}

}  // namespace

template <class H>
void relu_forward_half(int64_t n, const H* x, H* y, cudaStream_t stream) {
  relu_half("relu_half_kernel", n, x, static_cast<const H*>(nullptr), y, Relu{}, stream);
}

template <class H>
void relu_backward_half(int64_t n, const H* dy, const H* y, H* dx, cudaStream_t stream) {
  relu_half("relu_backward_half_kernel", n, dy, y, dx, ReluBackward{}, stream);
}

template void relu_forward_half<BFloat16>(int64_t, const BFloat16*, BFloat16*, cudaStream_t);
template void relu_forward_half<Float16>(int64_t, const Float16*, Float16*, cudaStream_t);
template void relu_backward_half<BFloat16>(int64_t, const BFloat16*, const BFloat16*, BFloat16*, cudaStream_t);
template void relu_backward_half<Float16>(int64_t, const Float16*, const Float16*, Float16*, cudaStream_t);

}  // namespace dpcore::kernels::cuda
