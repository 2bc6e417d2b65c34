// log_softmax, nll loss and the fused cross-entropy. A warp owns a row (classifier rows
// are short: 10 classes here), so row reductions are warp shuffles with no shared memory
// and no barriers; every reduction has a fixed order, hence deterministic results.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

constexpr int kRowThreads = 256;  // 8 warps, 8 rows per block
constexpr int kRowsPerBlock = kRowThreads / 32;
constexpr int kLossThreads = 256;

// The row of the calling warp, or -1 past the end (the whole warp returns together, so
// the shuffles of the warps that stay always see 32 lanes).
__device__ __forceinline__ int64_t warp_row(int64_t rows) {
  const int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  return row < rows ? row : -1;
}

// max + log(sum(exp(x - max))) of one row, every lane getting the result.
__device__ __forceinline__ float row_log_sum_exp(const float* x, int64_t cols, int lane) {
  float m = -INFINITY;
  for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, x[c]);
  m = warp_max(m);
  float s = 0.f;
  for (int64_t c = lane; c < cols; c += 32) s += expf(x[c] - m);  // max-subtracted: never overflows
  return m + logf(warp_sum(s));
}

__global__ void log_softmax_forward_kernel(int64_t rows, int64_t cols, const float* x, float* y) {
  const int64_t row = warp_row(rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const float* xr = x + row * cols;
  const float lse = row_log_sum_exp(xr, cols, lane);
  for (int64_t c = lane; c < cols; c += 32) y[row * cols + c] = xr[c] - lse;
}

__global__ void log_softmax_backward_kernel(int64_t rows, int64_t cols, const float* dy, const float* y, float* dx) {
  const int64_t row = warp_row(rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const float* dyr = dy + row * cols;
  const float* yr = y + row * cols;
  float s = 0.f;
  for (int64_t c = lane; c < cols; c += 32) s += dyr[c];
  s = warp_sum(s);
  for (int64_t c = lane; c < cols; c += 32) dx[row * cols + c] = dyr[c] - expf(yr[c]) * s;
}

// One block for the whole batch: each thread adds a fixed set of rows, then a fixed tree.
__global__ void nll_loss_forward_kernel(int64_t rows, int64_t cols, const float* logp, const int64_t* target,
                                        float* loss_sum) {
  float partial = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = target[r];
    partial -= t >= 0 && t < cols ? logp[r * cols + t] : NAN;  // never read out of bounds
  }
  const float total = block_sum(partial);
  if (threadIdx.x == 0) loss_sum[0] = total;
}

__global__ void nll_loss_backward_kernel(int64_t rows, int64_t cols, const float* grad_per_row, const int64_t* target,
                                         float* dlogp) {
  const float g = -__ldg(grad_per_row);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = target[i / cols];
    dlogp[i] = t >= 0 && t < cols ? (i % cols == t ? g : 0.f) : NAN;
  }
}

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
  const float lse = m + logf(s);
  const int64_t t = target[row];
  const bool valid = t >= 0 && t < cols;
  if (lane == 0) row_loss[row] = valid ? lse - xr[t] : NAN;
  // d(loss_row)/d(x_c) = softmax_c - [c == t]
  for (int64_t c = lane; c < cols; c += 32) {
    const float p = expf(xr[c] - lse);
    dlogits[row * cols + c] = valid ? grad_scale * (p - (c == t ? 1.f : 0.f)) : NAN;
  }
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void log_softmax_forward(int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t stream) {
  if (rows * cols == 0) return;
  log_softmax_forward_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(rows, cols, x, y);
  CUDA_LAUNCH_CHECK();
}

void log_softmax_backward(int64_t rows, int64_t cols, const float* dy, const float* y, float* dx,
                          cudaStream_t stream) {
  if (rows * cols == 0) return;
  log_softmax_backward_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(rows, cols, dy, y, dx);
  CUDA_LAUNCH_CHECK();
}

void nll_loss_forward(int64_t rows, int64_t cols, const float* logp, const int64_t* target, float* loss_sum,
                      cudaStream_t stream) {
  nll_loss_forward_kernel<<<1, kLossThreads, 0, stream>>>(rows, cols, logp, target, loss_sum);
  CUDA_LAUNCH_CHECK();
}

void nll_loss_backward(int64_t rows, int64_t cols, const float* grad_per_row, const int64_t* target, float* dlogp,
                       cudaStream_t stream) {
  if (rows * cols == 0) return;
  nll_loss_backward_kernel<<<blocks_for(rows * cols, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(
      rows, cols, grad_per_row, target, dlogp);
  CUDA_LAUNCH_CHECK();
}

void cross_entropy_forward_backward(int64_t rows, int64_t cols, const float* logits, const int64_t* target,
                                    float grad_scale, float* loss_sum, float* dlogits, cudaStream_t stream) {
  if (rows == 0) {
    fill<float>(1, 0.f, loss_sum, stream);
    return;
  }
  dpcore::cuda::Workspace row_loss(rows * sizeof(float), stream);
  cross_entropy_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(rows, cols, logits, target, grad_scale,
                                                                    row_loss.floats(), dlogits);
  CUDA_LAUNCH_CHECK();
  sum(rows, row_loss.floats(), loss_sum, stream);
}

}  // namespace dpcore::kernels::cuda
