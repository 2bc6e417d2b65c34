// The functions of kernels/cuda_runtime that the kernel files call (error checks, the
// device and its SM count, scratch memory), on the host runtime of runtime/.
#include <stdexcept>
#include <string>

#include "cuda_runtime_api.h"
#include "host_exec/runtime/runtime.h"
#include "host_exec/host_config.h"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"

namespace dpcore::kernels::cuda_runtime {

// A device's sticky error comes with what caused it (the kernel, block and thread).
void fail_cuda(cudaError_t error, const char* call, const char* file, int line) {
  const int device = host_runtime::current_device();
  const std::string cause =
      host_runtime::device_error(device) == error ? " (" + host_runtime::device_error_detail(device) + ")" : "";
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           cudaGetErrorString(error) + cause);
}

int current_device() { return host_runtime::current_device(); }
int multiprocessor_count(int) { return host_exec::multiprocessors(); }

// Scratch memory: a device allocation (ASan sees a kernel that overruns it); the free
// waits for the device, so for the kernels queued on it.
Workspace::Workspace(size_t bytes, cudaStream_t) : device_(host_runtime::current_device()), ptr_(nullptr), bytes_(bytes) {
  if (bytes) CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}
Workspace::~Workspace() { cudaFree(ptr_); }

}  // namespace dpcore::kernels::cuda_runtime
