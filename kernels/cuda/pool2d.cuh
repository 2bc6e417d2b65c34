// What the pooling kernels (max_pool2d.cu, avg_pool2d.cu) share: their shape in int32, the
// window arithmetic along one axis, and how they read float32 and 16-bit inputs. Internal
// to kernels/cuda.
#pragma once

#include "kernels/cuda/launch.cuh"
#include "kernels/half_types.h"
#include "kernels/shapes.h"

namespace dpcore::kernels::cuda {

// A value of an input the kernel does not write, as float: through the read-only cache
// where it is float, widened (exactly) where it is BFloat16 or Float16.
__device__ __forceinline__ float load(const float* p) { return __ldg(p); }
template <class H>
__device__ __forceinline__ float load(const H* p) {
  return to_float(*p);
}

struct PoolDims {
  int C, H, W, P, Q;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

// The kernels decode indices in int32 (int64 division is many times slower on the GPU):
// both tensors must have fewer than 2^31 elements, as conv2d's must.
inline PoolDims pool_dims(const char* op, const Pool2dShape& s) {
  check_int32(op, "input elements", s.x_size());
  check_int32(op, "output elements", s.y_size());
  return PoolDims{int(s.C), int(s.H), int(s.W), int(s.P), int(s.Q), int(s.kernel_h), int(s.kernel_w),
                  int(s.stride_h), int(s.stride_w), int(s.pad_h), int(s.pad_w)};
}

// Along one axis: the input range [begin, end) that window o covers, clipped to the input,
// and the outputs [begin, end) whose windows contain input index i (the gathers of both
// pooling backwards visit exactly these).
struct Span {
  int begin, end;
};
__device__ __forceinline__ Span window_span(int o, int kernel, int stride, int pad, int size) {
  const int start = o * stride - pad;
  return {max(start, 0), min(start + kernel, size)};
}
__device__ __forceinline__ Span windows_holding(int i, int kernel, int stride, int pad, int outputs) {
  const int shifted = i + pad;  // window o holds i when o * stride <= shifted < o * stride + kernel
  return {shifted < kernel ? 0 : (shifted - kernel) / stride + 1, min(shifted / stride + 1, outputs)};
}

}  // namespace dpcore::kernels::cuda
