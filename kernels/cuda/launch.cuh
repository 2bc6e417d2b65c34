// Small helpers shared by the kernel files: the launch itself, grid sizes, alignment
// tests, index-range checks.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>

#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/shapes.h"

namespace dpcore::kernels::cuda {

// Every kernel launch of kernels/cuda: `kernel` on `grid` x `block` threads with `args`,
// queued on `stream` and checked at once (a bad configuration fails here, naming the
// call). nvcc compiles the triple-chevron launch. The host execution layer
// (tests/host_exec), which compiles these same files with g++ to run the kernels on CPU
// threads under the sanitizers, provides host_exec::launch through its <cuda_runtime.h>;
// `name` is for its error messages (which kernel, block and thread went wrong).
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
            Args&&... args) {
#ifdef __CUDACC__
  (void)name;
  kernel<<<grid, block, 0, stream>>>(std::forward<Args>(args)...);
  CUDA_LAUNCH_CHECK();
#else
  host_exec::launch(name, kernel, grid, block, stream, std::forward<Args>(args)...);
#endif
}

// Elementwise kernels use this many threads per block and grid-stride loops.
constexpr int kElementwiseThreads = 256;

// Blocks for `work` items at `per_block` items per block, capped: grid-stride loops cover
// the rest, and a cap independent of the GPU keeps reduction partitions fixed.
inline unsigned blocks_for(int64_t work, int64_t per_block, int64_t cap = 4096) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((work + per_block - 1) / per_block, cap)));
}

// 16-byte aligned, so float4 loads and stores are legal.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The kernels index with int; anything larger fails here with the op's name instead of
// silently wrapping around.
inline void check_int32(const char* op, const char* what, int64_t value) {
  DPCORE_CHECK(value >= 0 && value <= INT_MAX, op, ": ", what, " = ", value,
               " is outside the int32 range the CUDA kernels index with");
}

inline void check_conv_shape(const char* op, const Conv2dShape& s) {
  check_int32(op, "input elements", s.x_size());
  check_int32(op, "weight elements", s.w_size());
  check_int32(op, "output elements", s.y_size());
}

// Streaming multiprocessors of the current device (grids and split-K are sized by it).
inline int sm_count() { return dpcore::kernels::cuda_runtime::multiprocessor_count(dpcore::kernels::cuda_runtime::current_device()); }

}  // namespace dpcore::kernels::cuda
