// Error checks for every CUDA, cuDNN and cuBLAS call. A failure becomes a dpcore::Error
// naming the call, the file:line and the library's own error string, so that a bad launch
// or an out-of-memory surfaces where it happened instead of at some later synchronize.
//
// Kernel launches return nothing: CUDA_LAUNCH_CHECK() right after each one turns a bad
// launch configuration (too many threads, too much shared memory) into an error at once.
#pragma once

#include <cuda_runtime_api.h>

namespace dpcore::kernels::cuda_runtime {

[[noreturn]] void fail_cuda(cudaError_t error, const char* call, const char* file, int line);
// cuDNN and cuBLAS statuses are passed as int so that this header needs neither library
// (their definitions are with the libraries' handles, library_handles.cu).
[[noreturn]] void fail_cudnn(int status, const char* call, const char* file, int line);
[[noreturn]] void fail_cublas(int status, const char* call, const char* file, int line);
// "kernels/cuda/sgemm.cu" rather than the absolute path of the build machine, for the messages.
const char* source_path(const char* file);

}  // namespace dpcore::kernels::cuda_runtime

#define CUDA_CHECK(call)                                                                  \
  do {                                                                                    \
    cudaError_t dpcore_cuda_error_ = (call);                                              \
    if (dpcore_cuda_error_ != cudaSuccess)                                                \
      ::dpcore::kernels::cuda_runtime::fail_cuda(dpcore_cuda_error_, #call, __FILE__, __LINE__);           \
  } while (0)

// Both libraries use 0 for success (CUDNN_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS).
#define CUDNN_CHECK(call)                                                                 \
  do {                                                                                    \
    int dpcore_cudnn_status_ = int(call);                                                 \
    if (dpcore_cudnn_status_ != 0)                                                        \
      ::dpcore::kernels::cuda_runtime::fail_cudnn(dpcore_cudnn_status_, #call, __FILE__, __LINE__);        \
  } while (0)

#define CUBLAS_CHECK(call)                                                                \
  do {                                                                                    \
    int dpcore_cublas_status_ = int(call);                                                \
    if (dpcore_cublas_status_ != 0)                                                       \
      ::dpcore::kernels::cuda_runtime::fail_cublas(dpcore_cublas_status_, #call, __FILE__, __LINE__);      \
  } while (0)

#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())
