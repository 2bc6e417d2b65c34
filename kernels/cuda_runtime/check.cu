#include "kernels/cuda_runtime/check.h"

#include <cstring>
#include <string>

#include "kernels/error.h"

namespace dpcore::kernels::cuda_runtime {

const char* source_path(const char* file) {
  const char* p = std::strstr(file, "kernels/cuda/");
  return p ? p : file;
}

void fail_cuda(cudaError_t error, const char* call, const char* file, int line) {
  // Clear the runtime's last-error slot, or the next CUDA_LAUNCH_CHECK would report this
  // same (already handled) failure again.
  cudaGetLastError();
  fail(source_path(file), ":", line, ": ", call, " failed: ", cudaGetErrorString(error), " (",
       cudaGetErrorName(error), ")");
}

}  // namespace dpcore::kernels::cuda_runtime
