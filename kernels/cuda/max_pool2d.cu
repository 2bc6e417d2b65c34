// max_pool2d, one thread per output (forward) or per input element (backward).
//
// Backward is a GATHER, not a scatter: the thread of input element (h, w) visits the few
// output windows that can contain it and adds the dy of those whose argmax is (h, w).
// Each dx element has exactly one writer, so there are no atomics, overlapping windows
// need no care, and the additions run in output order: the same order as the CPU
// reference's scatter, hence the same bits. 16-bit tensors (X = BFloat16 or Float16):
// values widened as they are read and each output rounded once (the maximum exactly), the
// float32 kernel's bits on the widened tensors.

#include "kernels/error.h"
#include "kernels/half_types.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/pool2d.cuh"

namespace dpcore::kernels::cuda {

namespace {

template <class X>
__global__ void max_pool2d_forward_kernel(int64_t total, PoolDims d, const X* x, X* y, int32_t* argmax) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const int plane = int(o) / (d.P * d.Q), pq = int(o) - plane * (d.P * d.Q), p = pq / d.Q, q = pq - p * d.Q;
    const X* in = x + int64_t(plane) * d.H * d.W;
    const Span rows = window_span(p, d.kernel_h, d.stride_h, d.pad_h, d.H);
    const Span cols = window_span(q, d.kernel_w, d.stride_w, d.pad_w, d.W);
    // Row-major scan; strictly greater replaces (ties keep the first), NaN always replaces.
    float best = -INFINITY;
    int best_index = rows.begin * d.W + cols.begin;
    for (int h = rows.begin; h < rows.end; ++h)
      for (int w = cols.begin; w < cols.end; ++w) {
        const float v = load(in + h * d.W + w);
        if (v > best || isnan(v)) best = v, best_index = h * d.W + w;
      }
    y[o] = from_float<X>(best);
    argmax[o] = best_index;
  }
}

// relu_y == nullptr: plain pooling backward; otherwise the relu before the pool is
// backpropagated in the same pass (dx = 0 where relu_y <= 0, as relu_backward does).
template <class X>
__global__ void max_pool2d_backward_kernel(int64_t total, PoolDims d, const X* dy, const int32_t* argmax,
                                           const float* relu_y, X* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int plane = int(i) / (d.H * d.W), hw = int(i) - plane * (d.H * d.W), h = hw / d.W, w = hw - h * d.W;
    const Span ps = windows_holding(h, d.kernel_h, d.stride_h, d.pad_h, d.P);
    const Span qs = windows_holding(w, d.kernel_w, d.stride_w, d.pad_w, d.Q);
    const int32_t self = h * d.W + w;
    const int out_plane = plane * d.P * d.Q;
    float sum = 0.f;
    for (int p = ps.begin; p < ps.end; ++p)
      for (int q = qs.begin; q < qs.end; ++q) {
        const int o = out_plane + p * d.Q + q;
        if (__ldg(argmax + o) == self) sum += load(dy + o);
      }
    dx[i] = from_float<X>(relu_y && relu_y[i] <= 0.f ? 0.f : sum);
  }
}

template <class X>
void backward(const Pool2dShape& s, const X* dy, const int32_t* argmax, const float* relu_y, X* dx,
              cudaStream_t stream) {
  const PoolDims d = pool_dims("max_pool2d backward", s);
  const int64_t total = s.x_size();
  if (total == 0) return;
  launch("max_pool2d_backward_kernel", max_pool2d_backward_kernel<X>, blocks_for(total, kElementwiseThreads), kElementwiseThreads, stream, total, d, dy, argmax, relu_y, dx);
}

}  // namespace

template <class X>
void max_pool2d_forward(const Pool2dShape& s, const X* x, X* y, int32_t* argmax, cudaStream_t stream) {
  const PoolDims d = pool_dims("max_pool2d", s);
  const int64_t total = s.y_size();
  if (total == 0) return;
  launch("max_pool2d_forward_kernel", max_pool2d_forward_kernel<X>, blocks_for(total, kElementwiseThreads), kElementwiseThreads, stream, total, d, x, y,
                                                                                                     argmax);
}

template <class X>
void max_pool2d_backward(const Pool2dShape& s, const X* dy, const int32_t* argmax, X* dx, cudaStream_t stream) {
  backward(s, dy, argmax, nullptr, dx, stream);
}

void max_pool2d_relu_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, const float* relu_y,
                              float* dx, cudaStream_t stream) {
  backward(s, dy, argmax, relu_y, dx, stream);
}

#define DPCORE_INSTANTIATE(X)                                                                                       \
  template void max_pool2d_forward<X>(const Pool2dShape&, const X*, X*, int32_t*, cudaStream_t);                   \
  template void max_pool2d_backward<X>(const Pool2dShape&, const X*, const int32_t*, X*, cudaStream_t);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cuda
