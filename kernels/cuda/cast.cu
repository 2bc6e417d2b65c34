// Casts between float32 and the 16-bit storage types (mixed precision, issue 27): the
// master weights' bfloat16 / float16 copy in one launch over the flat buffer, and 16-bit
// values widened back. The rounding is kernels/half_types.h's, the CPU's bit for bit.
#include "kernels/half_types.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

__device__ inline void convert(float x, BFloat16& y) { y = float_to_bfloat16(x); }
__device__ inline void convert(float x, Float16& y) { y = float_to_float16(x); }
__device__ inline void convert(BFloat16 x, float& y) { y = bfloat16_to_float(x); }
__device__ inline void convert(Float16 x, float& y) { y = float16_to_float(x); }

// Grid-stride, as map.cuh's kernels: a capped grid covers any n.
template <class From, class To>
__global__ void cast_kernel(int64_t n, const From* x, To* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    convert(x[i], y[i]);
}

}  // namespace

template <class From, class To>
void cast(int64_t n, const From* x, To* y, cudaStream_t stream) {
  DPCORE_CHECK(n >= 0, "cast: n = ", n, " must not be negative");
  if (n == 0) return;
  launch("cast_kernel", cast_kernel<From, To>, blocks_for(n, kElementwiseThreads), kElementwiseThreads, stream, n, x, y);
}

template void cast<float, BFloat16>(int64_t, const float*, BFloat16*, cudaStream_t);
template void cast<float, Float16>(int64_t, const float*, Float16*, cudaStream_t);
template void cast<BFloat16, float>(int64_t, const BFloat16*, float*, cudaStream_t);
template void cast<Float16, float>(int64_t, const Float16*, float*, cudaStream_t);

}  // namespace dpcore::kernels::cuda
