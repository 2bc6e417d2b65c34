// The fused log_softmax + nll loss (llm.c's fused classifier), a warp per row.
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/log_softmax.cuh"

namespace dpcore::kernels::cuda {

namespace {

// (m, s) pairs of a running max and the sum of exp(x - m); merging two of them rescales
// each sum to the common max. -inf (no columns seen) contributes nothing.
__device__ __forceinline__ void merge_online(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  s = (m == -INFINITY ? 0.f : s * expf(m - mm)) + (m2 == -INFINITY ? 0.f : s2 * expf(m2 - mm));
  m = mm;
}

// llm.c's fused classifier: one read of the logits gives the log-sum-exp by an online max
// and sum; the second read writes the gradient. The probabilities are never stored.
__global__ void cross_entropy_kernel(int64_t rows, int64_t cols, const float* logits, const int64_t* target,
                                     float grad_scale, float* row_loss, float* dlogits) {
  const int64_t row = warp_row(rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const float* xr = logits + row * cols;
  float m = -INFINITY, s = 0.f;
  for (int64_t c = lane; c < cols; c += 32) merge_online(m, s, xr[c], 1.f);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    merge_online(m, s, m2, s2);
  }
  // lse = m + log(s), used as (x - m) - log(s): see RowLogSumExp (log_softmax.cuh).
  const float log_s = logf(s);
  const int64_t t = target[row];
  const bool valid = t >= 0 && t < cols;
  if (lane == 0) row_loss[row] = valid ? log_s - (xr[t] - m) : NAN;
  // d(loss_row)/d(x_c) = softmax_c - [c == t]
  for (int64_t c = lane; c < cols; c += 32) {
    const float p = expf((xr[c] - m) - log_s);
    dlogits[row * cols + c] = valid ? grad_scale * (p - (c == t ? 1.f : 0.f)) : NAN;
  }
}

}  // namespace

void cross_entropy_forward_backward(int64_t rows, int64_t cols, const float* logits, const int64_t* target,
                                    float grad_scale, float* loss_sum, float* dlogits, cudaStream_t stream) {
  if (rows == 0) {
    fill<float>(1, 0.f, loss_sum, stream);
    return;
  }
  dpcore::kernels::cuda_runtime::Workspace row_loss(rows * sizeof(float), stream);
  launch("cross_entropy_kernel", cross_entropy_kernel, row_blocks(rows), kRowThreads, stream, rows, cols, logits, target, grad_scale,
                                                                    row_loss.floats(), dlogits);
  sum(rows, row_loss.floats(), loss_sum, stream);
}

}  // namespace dpcore::kernels::cuda
