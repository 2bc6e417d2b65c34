// transpose: one thread per output element, which reads its source (kernels/transpose_shape.h).
// Writes are coalesced; reads are too whenever inner (the head size d when attention splits
// its heads) spans a warp, since neighbouring threads then read neighbouring elements of one
// run. A tiled shared-memory transpose only pays when inner is small, which attention never has.
// Pure data movement, so one template serves float32 and the 16-bit types (autocast's
// attention heads are split and merged in bfloat16 or float16).
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

template <class T>
__global__ void transpose_kernel(TransposeShape s, int64_t n, const T* x, T* y) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t out = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; out < n; out += stride) {
    y[out] = x[transpose_source(s, out)];
  }
}

}  // namespace

template <class T>
void transpose(const TransposeShape& s, const T* x, T* y, cudaStream_t stream) {
  const int64_t n = s.numel();
  if (n == 0) return;
  launch("transpose_kernel", transpose_kernel<T>, blocks_for(n, kElementwiseThreads), kElementwiseThreads, stream, s, n,
         x, y);
}

template void transpose<float>(const TransposeShape&, const float*, float*, cudaStream_t);
template void transpose<BFloat16>(const TransposeShape&, const BFloat16*, BFloat16*, cudaStream_t);
template void transpose<Float16>(const TransposeShape&, const Float16*, Float16*, cudaStream_t);

}  // namespace dpcore::kernels::cuda
