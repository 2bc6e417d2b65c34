// What the pooling kernels (max_pool2d.cu, avg_pool2d.cu) share: their shape in int32.
// Internal to kernels/cuda.
#pragma once

#include "kernels/cuda/launch.cuh"
#include "kernels/shapes.h"

namespace dpcore::kernels::cuda {

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

}  // namespace dpcore::kernels::cuda
