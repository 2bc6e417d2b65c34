// The elementwise sum of two 16-bit arrays: the reduction step of a 16-bit allreduce
// (--grad-dtype bf16: the local ring adds one neighbour's partial sum to its own chunk per
// step). Each sum is formed in float32, which holds the sum of two bfloat16 or float16
// values exactly unless their exponents are far apart, and rounded once to nearest even:
// what NCCL's reduction kernels do for 16-bit types, and the CPU's kernel bit for bit.
#include "kernels/half_types.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

// Grid-stride, as map.cuh's kernels; y may alias a or b (each element is read, then
// written, by one thread).
template <class H>
__global__ void add_half_kernel(int64_t n, const H* a, const H* b, H* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_float<H>(to_float(a[i]) + to_float(b[i]));
}

}  // namespace

template <class H>
void add_half(int64_t n, const H* a, const H* b, H* y, cudaStream_t stream) {
  DPCORE_CHECK(n >= 0, "add: n = ", n, " must not be negative");
  if (n == 0) return;
  launch("add_half_kernel", add_half_kernel<H>, blocks_for(n, kElementwiseThreads), kElementwiseThreads, stream, n, a,
         b, y);
}

template void add_half<BFloat16>(int64_t, const BFloat16*, const BFloat16*, BFloat16*, cudaStream_t);
template void add_half<Float16>(int64_t, const Float16*, const Float16*, Float16*, cudaStream_t);

}  // namespace dpcore::kernels::cuda
