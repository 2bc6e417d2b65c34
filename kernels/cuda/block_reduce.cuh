// Deterministic sums across a warp and a thread block. The order of the additions is a
// fixed tree (xor butterfly inside warps, then the warp sums by a single warp), so a given
// launch configuration gives bit-identical results on every run; no atomics anywhere.
#pragma once

#include <cuda_runtime.h>

namespace dpcore::kernels::cuda {

// Every lane ends with the same sum (a + b == b + a, so both partners of a swap agree).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32); the result is valid in thread 0.
// Ends with a barrier, so it can be called again in the same kernel.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum(lane < int(blockDim.x / 32) ? warp_sums[lane] : 0.f);
  __syncthreads();
  return v;
}

}  // namespace dpcore::kernels::cuda
