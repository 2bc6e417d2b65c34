// The deterministic sum (or sum of squares) of a flat array, in two passes: a partition of x into at most
// kMaxBlocks block sums that depends on n only (not on the GPU), then one block adds the
// block sums in a fixed tree. No atomics, so the result has the same bits on every run.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

constexpr int kSumThreads = 256;
constexpr int64_t kPerBlock = 16 * kSumThreads;  // elements per block before the cap kicks in
constexpr int64_t kMaxBlocks = 1024;

// out[blockIdx.x] = sum of x[i] (of x[i] * x[i] when `squares`) over this block's
// grid-stride share.
__global__ void block_sums_kernel(int64_t n, const float* x, float* out, bool squares) {
  float partial = 0.f;
  for (int64_t i = blockIdx.x * int64_t(kSumThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kSumThreads)
    partial += squares ? x[i] * x[i] : x[i];
  const float total = block_sum(partial);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

// The two passes; the block sums are added as they are (squared already, when `squares`).
void fixed_order_sum(int64_t n, const float* x, float* out, bool squares, cudaStream_t stream) {
  const unsigned blocks = blocks_for(n, kPerBlock, kMaxBlocks);
  if (blocks == 1) {
    launch("block_sums_kernel", block_sums_kernel, 1, kSumThreads, stream, n, x, out, squares);
    return;
  }
  dpcore::kernels::cuda_runtime::Workspace partial(blocks * sizeof(float), stream);
  launch("block_sums_kernel", block_sums_kernel, blocks, kSumThreads, stream, n, x, partial.floats(), squares);
  launch("block_sums_kernel", block_sums_kernel, 1, kSumThreads, stream, int64_t(blocks), partial.floats(), out, false);
}

}  // namespace

void sum(int64_t n, const float* x, float* out, cudaStream_t stream) { fixed_order_sum(n, x, out, false, stream); }

void sum_of_squares(int64_t n, const float* x, float* out, cudaStream_t stream) {
  fixed_order_sum(n, x, out, true, stream);
}

}  // namespace dpcore::kernels::cuda
