// avg_pool2d, one thread per output (forward) or per input element (backward); global
// average pooling, one warp per plane.
//
// avg_pool2d's backward is a GATHER, not a scatter: the thread of input element (h, w)
// visits the few windows that contain it and adds dy / divisor of each, in output order.
// Each dx element has exactly one writer, so there are no atomics and a rerun gives the
// same bits. 16-bit tensors (X = BFloat16 or Float16): values widened as they are read,
// sums in float32 and each result rounded once, the float32 kernel's bits on the widened
// tensors.

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

template <class X>
__global__ void avg_pool2d_forward_kernel(int64_t total, PoolDims d, bool count_include_pad, const X* x, X* y) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const int plane = int(o) / (d.P * d.Q), pq = int(o) - plane * (d.P * d.Q), p = pq / d.Q, q = pq - p * d.Q;
    const X* in = x + int64_t(plane) * d.H * d.W;
    const Span rows = window_span(p, d.kernel_h, d.stride_h, d.pad_h, d.H);
    const Span cols = window_span(q, d.kernel_w, d.stride_w, d.pad_w, d.W);
    float sum = 0.f;  // padding adds nothing
    for (int h = rows.begin; h < rows.end; ++h)
      for (int w = cols.begin; w < cols.end; ++w) sum += load(in + h * d.W + w);
    y[o] = from_float<X>(sum / window_divisor(d, count_include_pad, p, q));
  }
}

template <class X>
__global__ void avg_pool2d_backward_kernel(int64_t total, PoolDims d, bool count_include_pad, const X* dy, X* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int plane = int(i) / (d.H * d.W), hw = int(i) - plane * (d.H * d.W), h = hw / d.W, w = hw - h * d.W;
    const Span ps = windows_holding(h, d.kernel_h, d.stride_h, d.pad_h, d.P);
    const Span qs = windows_holding(w, d.kernel_w, d.stride_w, d.pad_w, d.Q);
    const X* grad = dy + plane * (d.P * d.Q);
    float sum = 0.f;
    for (int p = ps.begin; p < ps.end; ++p)
      for (int q = qs.begin; q < qs.end; ++q)
        sum += load(grad + p * d.Q + q) / window_divisor(d, count_include_pad, p, q);
    dx[i] = from_float<X>(sum);
  }
}

// A warp per plane (warp_row of log_softmax.cuh, a plane being a row): ResNet planes are
// small (7x7 to 8x8), so a block per plane would leave most of its threads idle.
template <class X>
__global__ void global_avg_pool2d_forward_kernel(int64_t planes, int plane_size, const X* x, X* y) {
  const int64_t plane = warp_row(planes);
  if (plane < 0) return;
  const int lane = threadIdx.x % 32;
  const X* in = x + plane * plane_size;
  float sum = 0.f;
  for (int e = lane; e < plane_size; e += 32) sum += load(in + e);
  sum = warp_sum(sum);
  if (lane == 0) y[plane] = from_float<X>(sum / float(plane_size));
}

template <class X>
__global__ void global_avg_pool2d_backward_kernel(int64_t total, int plane_size, const X* dy, X* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = from_float<X>(load(dy + int(i) / plane_size) / float(plane_size));
}

}  // namespace

template <class X>
void avg_pool2d_forward(const Pool2dShape& s, bool count_include_pad, const X* x, X* y, cudaStream_t stream) {
  const PoolDims d = pool_dims("avg_pool2d", s);
  const int64_t total = s.y_size();
  if (total == 0) return;
  launch("avg_pool2d_forward_kernel", avg_pool2d_forward_kernel<X>, blocks_for(total, kElementwiseThreads),
         kElementwiseThreads, stream, total, d, count_include_pad, x, y);
}

template <class X>
void avg_pool2d_backward(const Pool2dShape& s, bool count_include_pad, const X* dy, X* dx, cudaStream_t stream) {
  const PoolDims d = pool_dims("avg_pool2d backward", s);
  const int64_t total = s.x_size();
  if (total == 0) return;
  launch("avg_pool2d_backward_kernel", avg_pool2d_backward_kernel<X>, blocks_for(total, kElementwiseThreads),
         kElementwiseThreads, stream, total, d, count_include_pad, dy, dx);
}

template <class X>
void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const X* x, X* y, cudaStream_t stream) {
  check_int32("global_avg_pool2d", "input elements", planes * plane_size);
  if (planes * plane_size == 0) return;
  launch("global_avg_pool2d_forward_kernel", global_avg_pool2d_forward_kernel<X>, row_blocks(planes), kRowThreads,
         stream, planes, int(plane_size), x, y);
}

template <class X>
void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const X* dy, X* dx, cudaStream_t stream) {
  const int64_t total = planes * plane_size;
  check_int32("global_avg_pool2d backward", "input elements", total);
  if (total == 0) return;
  launch("global_avg_pool2d_backward_kernel", global_avg_pool2d_backward_kernel<X>,
         blocks_for(total, kElementwiseThreads), kElementwiseThreads, stream, total, int(plane_size), dy, dx);
}

#define DPCORE_INSTANTIATE(X)                                                                             \
  template void avg_pool2d_forward<X>(const Pool2dShape&, bool, const X*, X*, cudaStream_t);               \
  template void avg_pool2d_backward<X>(const Pool2dShape&, bool, const X*, X*, cudaStream_t);              \
  template void global_avg_pool2d_forward<X>(int64_t, int64_t, const X*, X*, cudaStream_t);                \
  template void global_avg_pool2d_backward<X>(int64_t, int64_t, const X*, X*, cudaStream_t);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cuda
