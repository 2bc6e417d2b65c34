// Elementwise kernels on flat float arrays (fill, add, axpy, scale, GradScaler's unscale), each a functor applied
// by map() (kernels/cuda/map.cuh). Outputs may alias inputs. add and scale also on 16-bit
// arrays: each result formed in float32 and rounded once (for add, the reduction step of a
// 16-bit allreduce: what NCCL's kernels do for 16-bit types, and the CPU's bits).
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/map.cuh"

namespace dpcore::kernels::cuda {

namespace {

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Axpy {  // a = y, b = x
  float alpha;
  __device__ float operator()(float a, float b) const { return a + alpha * b; }
};
struct Scale {
  float alpha;
  __device__ float operator()(float a, float) const { return alpha * a; }
};
struct ScaleBy {
  const float* s;
  __device__ float operator()(float a, float) const { return __ldg(s) * a; }
};

template <class T>
__global__ void fill_kernel(int64_t n, T value, T* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = value;
}

// Every thread that meets an Inf or NaN writes the same 1, so the race is benign.
__global__ void unscale_and_check_finite_kernel(int64_t n, float inv_scale, float* x, float* found_inf) {
  bool nonfinite = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    nonfinite |= !isfinite(v);
    x[i] = v * inv_scale;
  }
  if (nonfinite) *found_inf = 1.0f;
}

}  // namespace

template <class T>
void fill(int64_t n, T value, T* y, cudaStream_t stream) {
  if (n == 0) return;
  launch("fill_kernel", fill_kernel<T>, blocks_for(n, kElementwiseThreads), kElementwiseThreads, stream, n, value, y);
}
template void fill<float>(int64_t, float, float*, cudaStream_t);
template void fill<int32_t>(int64_t, int32_t, int32_t*, cudaStream_t);
template void fill<int64_t>(int64_t, int64_t, int64_t*, cudaStream_t);

template <class X>
void add(int64_t n, const X* a, const X* b, X* y, cudaStream_t stream) {
  map(n, a, b, y, Add{}, stream);
}

void axpy(int64_t n, float alpha, const float* x, float* y, cudaStream_t stream) {
  map(n, y, x, y, Axpy{alpha}, stream);
}

template <class X>
void scale(int64_t n, float alpha, const X* x, X* y, cudaStream_t stream) {
  map(n, x, nullptr, y, Scale{alpha}, stream);
}

#define DPCORE_INSTANTIATE(X)                                                 \
  template void add<X>(int64_t, const X*, const X*, X*, cudaStream_t);        \
  template void scale<X>(int64_t, float, const X*, X*, cudaStream_t);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE

void scale_by(int64_t n, const float* s, const float* x, float* y, cudaStream_t stream) {
  map(n, x, nullptr, y, ScaleBy{s}, stream);
}

void unscale_and_check_finite(int64_t n, float inv_scale, float* x, float* found_inf, cudaStream_t stream) {
  if (n == 0) return;
  launch("unscale_and_check_finite_kernel", unscale_and_check_finite_kernel, blocks_for(n, kElementwiseThreads),
         kElementwiseThreads, stream, n, inv_scale, x, found_inf);
}

}  // namespace dpcore::kernels::cuda
