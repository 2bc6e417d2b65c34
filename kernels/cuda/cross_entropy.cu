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
// A row whose target is ignore_index contributes a zero loss and a zero gradient; the
// divisor, read on the device (so a captured graph sees each batch's count), scales the rest.
__global__ void cross_entropy_kernel(int64_t rows, int64_t cols, const float* logits, const int64_t* target,
                                     int64_t ignore_index, float grad_scale, const int64_t* divisor, float* row_loss,
                                     float* dlogits) {
  const int64_t row = warp_row(rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const int64_t t = target[row];
  if (t == ignore_index) {
    if (lane == 0) row_loss[row] = 0.f;
    for (int64_t c = lane; c < cols; c += 32) dlogits[row * cols + c] = 0.f;
    return;
  }
  const float scale = divisor ? grad_scale * (1.f / float(divisor[0])) : grad_scale;
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
  const bool valid = t >= 0 && t < cols;
  if (lane == 0) row_loss[row] = valid ? log_s - (xr[t] - m) : NAN;
  // d(loss_row)/d(x_c) = softmax_c - [c == t]
  for (int64_t c = lane; c < cols; c += 32) {
    const float p = expf((xr[c] - m) - log_s);
    dlogits[row * cols + c] = valid ? scale * (p - (c == t ? 1.f : 0.f)) : NAN;
  }
}

// The mean: loss times 1/divisor, as the CPU rounds it (0 counted rows: 0 * inf = NaN).
__global__ void divide_loss_kernel(const int64_t* divisor, float* loss) { loss[0] *= 1.f / float(divisor[0]); }

constexpr int kCountThreads = 256;

// One block: each thread counts its strided share, then a fixed tree in shared memory.
__global__ void count_targets_kernel(int64_t rows, const int64_t* target, int64_t ignore_index, int64_t* counted) {
  __shared__ int64_t partial[kCountThreads];
  int64_t mine = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) mine += target[r] != ignore_index ? 1 : 0;
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int half = kCountThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) counted[0] = partial[0];
}

}  // namespace

void cross_entropy_forward_backward(int64_t rows, int64_t cols, const float* logits, const int64_t* target,
                                    int64_t ignore_index, float grad_scale, const int64_t* divisor, float* loss,
                                    float* dlogits, cudaStream_t stream) {
  if (rows == 0) {
    fill<float>(1, 0.f, loss, stream);
  } else {
    dpcore::kernels::cuda_runtime::Workspace row_loss(rows * sizeof(float), stream);
    launch("cross_entropy_kernel", cross_entropy_kernel, row_blocks(rows), kRowThreads, stream, rows, cols, logits,
           target, ignore_index, grad_scale, divisor, row_loss.floats(), dlogits);
    sum(rows, row_loss.floats(), loss, stream);
  }
  if (divisor) launch("divide_loss_kernel", divide_loss_kernel, 1, 1, stream, divisor, loss);
}

void count_targets(int64_t rows, const int64_t* target, int64_t ignore_index, int64_t* counted, cudaStream_t stream) {
  launch("count_targets_kernel", count_targets_kernel, 1, kCountThreads, stream, rows, target, ignore_index, counted);
}

}  // namespace dpcore::kernels::cuda
