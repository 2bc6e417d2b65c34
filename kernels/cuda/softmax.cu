// softmax(x + mask) over the last dimension, float32, as on the CPU (kernels/softmax_mask.h
// says how the mask broadcasts and what causal masks). A warp per row (log_softmax.cuh's
// layout). The statistics take one pass over the row with an online max and sum: each lane
// keeps the max of its entries and the sum of their exponentials relative to it, rescaling
// the sum when the max grows; the lanes' pairs are then combined by warp_max and warp_sum's
// fixed trees, so the result has the same bits on every run. A second pass writes y.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/log_softmax.cuh"
#include "kernels/cuda_runtime/check.h"

namespace dpcore::kernels::cuda {

namespace {

__global__ void softmax_forward_kernel(SoftmaxShape s, const float* x, const float* mask, float* y) {
  const int64_t row = warp_row(s.rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const float* xr = x + row * s.cols;
  const float* mr = mask ? mask + softmax_mask_row(s, row) : nullptr;
  float m = -INFINITY, sum = 0.f;
  for (int64_t c = lane; c < s.cols; c += 32) {
    const float v = softmax_logit<float>(s, xr, mr, row, c);
    if (v == -INFINITY) continue;  // adds exp(-inf) = 0; computing it as -inf - -inf would be NaN
    if (v > m) {
      sum = sum * expf(m - v) + 1.f;
      m = v;
    } else {
      sum += expf(v - m);
    }
  }
  // A lane with nothing unmasked holds (-inf, 0) and adds 0 * exp(-inf) = 0. A row with
  // nothing unmasked has row_max -inf, so exp(-inf - -inf) makes it NaN, as in PyTorch.
  const float row_max = warp_max(m);
  const float inverse = 1.f / warp_sum(sum * expf(m - row_max));
  for (int64_t c = lane; c < s.cols; c += 32) y[row * s.cols + c] = expf(softmax_logit<float>(s, xr, mr, row, c) - row_max) * inverse;
}

__global__ void softmax_backward_kernel(int64_t rows, int64_t cols, const float* dy, const float* y, float* dx) {
  const int64_t row = warp_row(rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const float* dyr = dy + row * cols;
  const float* yr = y + row * cols;
  float dot = 0.f;
  for (int64_t c = lane; c < cols; c += 32) dot += dyr[c] * yr[c];
  dot = warp_sum(dot);
  for (int64_t c = lane; c < cols; c += 32) dx[row * cols + c] = yr[c] * (dyr[c] - dot);
}

}  // namespace

void softmax_forward(const SoftmaxShape& s, const float* x, const float* mask, float* y, cudaStream_t stream) {
  if (s.rows * s.cols == 0) return;
  launch("softmax_forward_kernel", softmax_forward_kernel, row_blocks(s.rows), kRowThreads, stream, s, x, mask, y);
}

void softmax_backward(int64_t rows, int64_t cols, const float* dy, const float* y, float* dx, cudaStream_t stream) {
  if (rows * cols == 0) return;
  launch("softmax_backward_kernel", softmax_backward_kernel, row_blocks(rows), kRowThreads, stream, rows, cols, dy, y,
         dx);
}

}  // namespace dpcore::kernels::cuda
