// transpose: one thread per output element, which reads its source (kernels/transpose_shape.h).
// Writes are coalesced; reads are too whenever inner (the head size d when attention splits
// its heads) spans a warp, since neighbouring threads then read neighbouring elements of one
// run. A tiled shared-memory transpose only pays when inner is small, which attention never has.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

__global__ void transpose_kernel(TransposeShape s, int64_t n, const float* x, float* y) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t out = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; out < n; out += stride) {
    y[out] = x[transpose_source(s, out)];
  }
}

}  // namespace

void transpose(const TransposeShape& s, const float* x, float* y, cudaStream_t stream) {
  const int64_t n = s.numel();
  if (n == 0) return;
  launch("transpose_kernel", transpose_kernel, blocks_for(n, kElementwiseThreads), kElementwiseThreads, stream, s, n,
         x, y);
}

}  // namespace dpcore::kernels::cuda
