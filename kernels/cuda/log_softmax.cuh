// The row layout log_softmax and the fused cross_entropy share, and global average
// pooling (a plane is a row). A warp owns a row (classifier rows are short: 10 classes
// here), so row reductions are warp shuffles with no shared memory and no barriers; every
// reduction has a fixed order, hence deterministic results. Internal to kernels/cuda.
#pragma once

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"

namespace dpcore::kernels::cuda {

constexpr int kRowThreads = 256;  // 8 warps, 8 rows per block
constexpr int kRowsPerBlock = kRowThreads / 32;

// The row of the calling warp, or -1 past the end (the whole warp returns together, so
// the shuffles of the warps that stay always see 32 lanes).
__device__ __forceinline__ int64_t warp_row(int64_t rows) {
  const int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  return row < rows ? row : -1;
}

// A row's log-sum-exp, kept as its two parts: lse = max + log_sum. Callers form
// (x - max) - log_sum, never x - (max + log_sum): x - max is exact for the large entries
// and log_sum is small, while max + log_sum rounds at the scale of max (an ulp is 1e-3
// at logits of 1e4, which a probability near 1 would inherit as a 1e-3 relative error).
struct RowLogSumExp {
  float max, log_sum;
};

// Every lane gets the row's max and log(sum(exp(x - max))).
__device__ __forceinline__ RowLogSumExp row_log_sum_exp(const float* x, int64_t cols, int lane) {
  float m = -INFINITY;
  for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, x[c]);
  m = warp_max(m);
  float s = 0.f;
  for (int64_t c = lane; c < cols; c += 32) s += expf(x[c] - m);  // max-subtracted: never overflows
  return {m, logf(warp_sum(s))};
}

inline unsigned row_blocks(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace dpcore::kernels::cuda
