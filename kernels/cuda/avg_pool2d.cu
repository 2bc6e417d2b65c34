// avg_pool2d, one thread per output (forward) or per input element (backward); global
// average pooling, one warp per plane.
//
// avg_pool2d's backward is a GATHER, not a scatter: the thread of input element (h, w)
// visits the few windows that contain it and adds dy / divisor of each, in output order.
// Each dx element has exactly one writer, so there are no atomics and a rerun gives the
// same bits.

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/log_softmax.cuh"
#include "kernels/cuda/pool2d.cuh"

namespace dpcore::kernels::cuda {

namespace {

// What the mean of window (p, q) divides by: the whole kernel when the padding counts as
// zeros (PyTorch's default), else the window's real elements.
__device__ __forceinline__ float window_divisor(const PoolDims& d, bool count_include_pad, int p, int q) {
  if (count_include_pad) return float(d.kernel_h * d.kernel_w);
  const Span rows = window_span(p, d.kernel_h, d.stride_h, d.pad_h, d.H);
  const Span cols = window_span(q, d.kernel_w, d.stride_w, d.pad_w, d.W);
  return float((rows.end - rows.begin) * (cols.end - cols.begin));
}

__global__ void avg_pool2d_forward_kernel(int64_t total, PoolDims d, bool count_include_pad, const float* x,
                                          float* y) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const int plane = int(o) / (d.P * d.Q), pq = int(o) - plane * (d.P * d.Q), p = pq / d.Q, q = pq - p * d.Q;
    const float* in = x + int64_t(plane) * d.H * d.W;
    const Span rows = window_span(p, d.kernel_h, d.stride_h, d.pad_h, d.H);
    const Span cols = window_span(q, d.kernel_w, d.stride_w, d.pad_w, d.W);
    float sum = 0.f;  // padding adds nothing
    for (int h = rows.begin; h < rows.end; ++h)
      for (int w = cols.begin; w < cols.end; ++w) sum += __ldg(in + h * d.W + w);
    y[o] = sum / window_divisor(d, count_include_pad, p, q);
  }
}

__global__ void avg_pool2d_backward_kernel(int64_t total, PoolDims d, bool count_include_pad, const float* dy,
                                           float* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int plane = int(i) / (d.H * d.W), hw = int(i) - plane * (d.H * d.W), h = hw / d.W, w = hw - h * d.W;
    const Span ps = windows_holding(h, d.kernel_h, d.stride_h, d.pad_h, d.P);
    const Span qs = windows_holding(w, d.kernel_w, d.stride_w, d.pad_w, d.Q);
    const float* grad = dy + plane * (d.P * d.Q);
    float sum = 0.f;
    for (int p = ps.begin; p < ps.end; ++p)
      for (int q = qs.begin; q < qs.end; ++q)
        sum += __ldg(grad + p * d.Q + q) / window_divisor(d, count_include_pad, p, q);
    dx[i] = sum;
  }
}

// A warp per plane (warp_row of log_softmax.cuh, a plane being a row): ResNet planes are
// small (7x7 to 8x8), so a block per plane would leave most of its threads idle.
__global__ void global_avg_pool2d_forward_kernel(int64_t planes, int plane_size, const float* x, float* y) {
  const int64_t plane = warp_row(planes);
  if (plane < 0) return;
  const int lane = threadIdx.x % 32;
  const float* in = x + plane * plane_size;
  float sum = 0.f;
  for (int e = lane; e < plane_size; e += 32) sum += __ldg(in + e);
  sum = warp_sum(sum);
  if (lane == 0) y[plane] = sum / float(plane_size);
}

__global__ void global_avg_pool2d_backward_kernel(int64_t total, int plane_size, const float* dy, float* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = __ldg(dy + int(i) / plane_size) / float(plane_size);
}

}  // namespace

void avg_pool2d_forward(const Pool2dShape& s, bool count_include_pad, const float* x, float* y,
                        cudaStream_t stream) {
  const PoolDims d = pool_dims("avg_pool2d", s);
  const int64_t total = s.y_size();
  if (total == 0) return;
  launch("avg_pool2d_forward_kernel", avg_pool2d_forward_kernel, blocks_for(total, kElementwiseThreads),
         kElementwiseThreads, stream, total, d, count_include_pad, x, y);
}

void avg_pool2d_backward(const Pool2dShape& s, bool count_include_pad, const float* dy, float* dx,
                         cudaStream_t stream) {
  const PoolDims d = pool_dims("avg_pool2d backward", s);
  const int64_t total = s.x_size();
  if (total == 0) return;
  launch("avg_pool2d_backward_kernel", avg_pool2d_backward_kernel, blocks_for(total, kElementwiseThreads),
         kElementwiseThreads, stream, total, d, count_include_pad, dy, dx);
}

void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const float* x, float* y, cudaStream_t stream) {
  check_int32("global_avg_pool2d", "input elements", planes * plane_size);
  if (planes * plane_size == 0) return;
  launch("global_avg_pool2d_forward_kernel", global_avg_pool2d_forward_kernel, row_blocks(planes), kRowThreads,
         stream, planes, int(plane_size), x, y);
}

void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const float* dy, float* dx,
                                cudaStream_t stream) {
  const int64_t total = planes * plane_size;
  check_int32("global_avg_pool2d backward", "input elements", total);
  if (total == 0) return;
  launch("global_avg_pool2d_backward_kernel", global_avg_pool2d_backward_kernel,
         blocks_for(total, kElementwiseThreads), kElementwiseThreads, stream, total, int(plane_size), dy, dx);
}

}  // namespace dpcore::kernels::cuda
