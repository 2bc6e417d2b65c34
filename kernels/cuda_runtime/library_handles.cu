#include "kernels/cuda_runtime/library_handles.h"

#include <map>
#include <mutex>
#include <utility>

#include "kernels/error.h"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"

namespace dpcore::kernels::cuda_runtime {

namespace {

constexpr size_t kCublasWorkspace = size_t(32) << 20;  // NVIDIA's recommendation for Hopper

using HandleKey = std::pair<int, cudaStream_t>;

}  // namespace

void fail_cudnn(int status, const char* call, const char* file, int line) {
  fail(source_path(file), ":", line, ": ", call, " failed: ", cudnnGetErrorString(cudnnStatus_t(status)));
}

void fail_cublas(int status, const char* call, const char* file, int line) {
  fail(source_path(file), ":", line, ": ", call, " failed: ", cublasGetStatusString(cublasStatus_t(status)), " (",
       cublasGetStatusName(cublasStatus_t(status)), ")");
}

void make_library_handles(int device, cudaStream_t stream) {
  cudnn_handle(device, stream);
  cublas_handle(device, stream);
}

cudnnHandle_t cudnn_handle(int device, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<HandleKey, cudnnHandle_t> handles;  // never destroyed: see device_allocator
  std::lock_guard<std::mutex> lock(mutex);
  cudnnHandle_t& handle = handles[{device, stream}];
  if (!handle) {
    DeviceGuard guard(device);
    CUDNN_CHECK(cudnnCreate(&handle));
    CUDNN_CHECK(cudnnSetStream(handle, stream));
  }
  return handle;
}

cublasHandle_t cublas_handle(int device, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<HandleKey, cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  cublasHandle_t& handle = handles[{device, stream}];
  if (!handle) {
    DeviceGuard guard(device);
    CUBLAS_CHECK(cublasCreate(&handle));
    CUBLAS_CHECK(cublasSetStream(handle, stream));
    // From the caching allocator, on the handle's own stream (its only user), so that the
    // device's peak memory counts it as PyTorch's counts its cuBLAS workspaces. Never given
    // back: the handle keeps using it for the life of the process.
    void* workspace = device_allocator(device).allocate(kCublasWorkspace, stream);
    CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, kCublasWorkspace));
    // A 16-bit product is rounded once from its float32 result, as the hand GEMM's: no
    // split-K partial sums kept in 16 bits (PyTorch allows them by default; docs/differences.md).
    CUBLAS_CHECK(cublasSetMathMode(
        handle, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  }
  return handle;
}

}  // namespace dpcore::kernels::cuda_runtime
