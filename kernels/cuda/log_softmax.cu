// log_softmax over the last dimension, a warp per row.
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/log_softmax.cuh"

namespace dpcore::kernels::cuda {

namespace {

__global__ void log_softmax_forward_kernel(int64_t rows, int64_t cols, const float* x, float* y) {
  const int64_t row = warp_row(rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const float* xr = x + row * cols;
  const RowLogSumExp lse = row_log_sum_exp(xr, cols, lane);
  for (int64_t c = lane; c < cols; c += 32) y[row * cols + c] = (xr[c] - lse.max) - lse.log_sum;
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

}  // namespace

void log_softmax_forward(int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t stream) {
  if (rows * cols == 0) return;
  launch("log_softmax_forward_kernel", log_softmax_forward_kernel, row_blocks(rows), kRowThreads, stream, rows, cols, x, y);
}

void log_softmax_backward(int64_t rows, int64_t cols, const float* dy, const float* y, float* dx,
                          cudaStream_t stream) {
  if (rows * cols == 0) return;
  launch("log_softmax_backward_kernel", log_softmax_backward_kernel, row_blocks(rows), kRowThreads, stream, rows, cols, dy, y, dx);
}

}  // namespace dpcore::kernels::cuda
