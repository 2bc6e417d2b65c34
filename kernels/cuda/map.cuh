// One grid-stride kernel template that applies a small functor to flat arrays of X (float,
// kernels::BFloat16 or kernels::Float16), always in float32: 16-bit values are widened as
// they are read and each result is rounded once as it is written, so a 16-bit run gives the
// float32 run's bits on the widened arrays, rounded. float arrays move as 16-byte (float4)
// loads and stores when every pointer is 16-byte aligned (the memory system moves 16 bytes
// per thread per instruction at full bandwidth). Each element is read and written by the
// same thread, so outputs may alias inputs. Internal to kernels/cuda.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/half_types.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

// y[i] = f(a[i], b[i]); b may be null for one-input functions (f then sees 0).
template <class X, class F>
__global__ void map_kernel(int64_t n, const X* a, const X* b, X* y, F f, bool vec) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if constexpr (std::is_same_v<X, float>) {
    if (vec) {
      const int64_t n4 = n / 4;
      for (int64_t i = first; i < n4; i += stride) {
        const float4 va = reinterpret_cast<const float4*>(a)[i];
        const float4 vb = b ? reinterpret_cast<const float4*>(b)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        reinterpret_cast<float4*>(y)[i] = make_float4(f(va.x, vb.x), f(va.y, vb.y), f(va.z, vb.z), f(va.w, vb.w));
      }
      done = n4 * 4;
    }
  }
  for (int64_t i = done + first; i < n; i += stride)
    y[i] = from_float<X>(f(to_float(a[i]), b ? to_float(b[i]) : 0.f));
}

// X is deduced from a alone (b may be given as nullptr).
template <class X, class F>
inline void map(int64_t n, const X* a, const std::common_type_t<X>* b, X* y, F f, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = std::is_same_v<X, float> && aligned16(a) && aligned16(b) && aligned16(y);
  launch("map_kernel", map_kernel<X, F>, blocks_for((n + 3) / 4, kElementwiseThreads), kElementwiseThreads, stream, n,
         a, b, y, f, vec);
}

}  // namespace dpcore::kernels::cuda
