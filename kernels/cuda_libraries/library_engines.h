// The library engines as the engine dispatch (dispatch.cu) calls them: cuDNN's
// convolutions and cuBLAS's matrix products. A build with the NVIDIA libraries has them in
// a module of their own, libdpcore_cuda_libraries.so beside libdpcore (library_engines.cu,
// with library_handles.cu and the engines), which library_engines() loads on first use
// (load_library_engines.cpp): cuBLASLt's initialisation touches about 100 MB at every load,
// 85 ms of a program's start, which the CPU-only programs and tests no longer pay. The host
// build (DPCORE_CUDA=HOST, which runs the CUDA backend on the host CUDA runtime of
// tests/host_exec) has none (no_library_engines.cpp): its dispatch runs the hand kernels,
// and a choice of a library engine fails naming the op.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/kernels.h"
#include "kernels/shapes.h"

namespace dpcore::kernels::cuda_libraries {

// cuDNN's three convolutions on T (float, BFloat16 or Float16), as cudnn_conv2d.h.
template <class T>
struct LibraryConv {
  void (*forward)(const kernels::Conv2dShape& s, const T* x, const T* w, T* y, bool accumulate, cudaStream_t stream);
  void (*backward_data)(const kernels::Conv2dShape& s, const T* dy, const T* w, T* dx, cudaStream_t stream);
  void (*backward_weight)(const kernels::Conv2dShape& s, const T* x, const T* dy, T* dw, bool accumulate,
                          cudaStream_t stream);
};

struct LibraryEngines {
  LibraryConv<float> conv;
  // 16-bit tensors, float32 accumulation.
  LibraryConv<kernels::BFloat16> conv_bf16;
  LibraryConv<kernels::Float16> conv_fp16;
  kernels::cuda::SgemmFn sgemm;
  kernels::cuda::BatchedSgemmFn sgemm_strided_batched;
  // 16-bit inputs and outputs, float32 accumulation (cuBLAS); and 16-bit inputs with
  // float32 outputs (the tests hold both to the hand GEMM's contract).
  kernels::cuda::HalfGemmFn<kernels::BFloat16, kernels::BFloat16> gemm_bf16;
  kernels::cuda::HalfGemmFn<kernels::Float16, kernels::Float16> gemm_fp16;
  kernels::cuda::HalfGemmFn<kernels::BFloat16, float> gemm_bf16_f32;
  kernels::cuda::HalfGemmFn<kernels::Float16, float> gemm_fp16_f32;
  // Makes the stream's cuDNN and cuBLAS handles (before a graph capture: library_handles.h).
  void (*prepare_handles)(int device, cudaStream_t stream);
};

// Whether this build has the libraries (without loading them).
bool library_engines_in_build();
// The engines of this build, loaded on the first call; null when it has no libraries. A
// build with them whose module cannot be loaded fails, naming the file and why.
const LibraryEngines* library_engines();

}  // namespace dpcore::kernels::cuda_libraries

// The module's one entry point (library_engines.cu), found by name with dlsym.
extern "C" const dpcore::kernels::cuda_libraries::LibraryEngines* dpcore_cuda_library_engines();
