// The runtime under the host execution layer: the CUDA runtime API of
// include/cuda_runtime_api.h on host memory, and the functions of kernels/cuda_runtime
// that the kernel files call (error checks, the device and its SM count, scratch memory).
// Everything completes before it returns, so streams need no state.
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cuda_runtime_api.h"
#include "host_exec/host_config.h"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  }
  return "unknown cudaError_t";
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
  }
  return "unknown error";
}
// A bad launch throws at the launch itself (host_exec::run_grid): nothing is left pending.
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) { return cudaMemset(ptr, value, bytes); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes) std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

namespace dpcore::kernels::cuda_runtime {

void fail_cuda(cudaError_t error, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           cudaGetErrorString(error));
}

int current_device() { return 0; }
int multiprocessor_count(int) { return host_exec::multiprocessors(); }

// Scratch memory: plain allocations, so ASan sees a kernel that overruns its workspace.
Workspace::Workspace(size_t bytes, cudaStream_t) : device_(0), ptr_(nullptr), bytes_(bytes) {
  if (bytes) CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}
Workspace::~Workspace() { cudaFree(ptr_); }

}  // namespace dpcore::kernels::cuda_runtime

namespace host_exec {

int multiprocessors() {
  static const int count = [] {
    const char* text = std::getenv("DPCORE_HOST_SMS");
    if (!text) return 132;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || value < 1 || value > 1024)
      throw std::runtime_error("DPCORE_HOST_SMS = \"" + std::string(text) + "\": expected an SM count from 1 to 1024");
    return int(value);
  }();
  return count;
}

}  // namespace host_exec
