// One grid-stride kernel template that applies a small functor to flat float arrays, with
// 16-byte (float4) loads and stores when every pointer is 16-byte aligned (the memory
// system moves 16 bytes per thread per instruction at full bandwidth). Each element is read
// and written by the same thread, so outputs may alias inputs. Internal to kernels/cuda.
#pragma once

#include <cstdint>

#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

// y[i] = f(a[i], b[i]); b may be null for one-input functions (f then sees 0).
template <class F>
__global__ void map_kernel(int64_t n, const float* a, const float* b, float* y, F f, bool vec) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride) {
      const float4 va = reinterpret_cast<const float4*>(a)[i];
      const float4 vb = b ? reinterpret_cast<const float4*>(b)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
      reinterpret_cast<float4*>(y)[i] = make_float4(f(va.x, vb.x), f(va.y, vb.y), f(va.z, vb.z), f(va.w, vb.w));
    }
    done = n4 * 4;
  }
  for (int64_t i = done + first; i < n; i += stride) y[i] = f(a[i], b ? b[i] : 0.f);
}

template <class F>
inline void map(int64_t n, const float* a, const float* b, float* y, F f, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(a) && aligned16(b) && aligned16(y);
  launch("map_kernel", map_kernel<F>, blocks_for((n + 3) / 4, kElementwiseThreads), kElementwiseThreads, stream, n, a, b, y, f, vec);
}

}  // namespace dpcore::kernels::cuda
