// The host execution layer's <cuda_runtime.h>: the runtime API (cuda_runtime_api.h) plus
// the CUDA C++ dialect the kernels are written in, so that g++ compiles the same kernel
// files nvcc does. Like nvcc, the host build includes this header first in every kernel
// file. What each piece means is in host_exec.h.
#pragma once

#include "cuda_runtime_api.h"
#include "host_exec/host_exec.h"

// The C++ API's typed overloads (CUDA's cuda_runtime.h has them too).
template <class T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
template <class T>
cudaError_t cudaHostAlloc(T** ptr, size_t bytes, unsigned flags) {
  return cudaHostAlloc(reinterpret_cast<void**>(ptr), bytes, flags);
}
