#include "kernels/cuda_runtime/devices.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"

namespace dpcore::kernels::cuda_runtime {

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // leave no stale error behind for later checks
      n = 0;
    }
    return n;
  }();
  return count;
}

namespace {
thread_local int t_device = -1;  // set_device's last device on this thread
}

void set_device(int device) {
  DPCORE_CHECK(device >= 0 && device < device_count(), "cuda:", device, " does not exist (", device_count(),
               " CUDA device(s) usable)");
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) CUDA_CHECK(cudaSetDevice(device));
  t_device = device;
}

int thread_device() { return t_device; }

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

DeviceGuard::DeviceGuard(int device) : previous_(current_device()) { set_device(device); }

DeviceGuard::~DeviceGuard() {
  cudaSetDevice(previous_);
  t_device = previous_;
}

int multiprocessor_count(int device) {
  static std::mutex mutex;
  static std::vector<int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  if (counts.empty()) counts.assign(device_count(), 0);
  DPCORE_CHECK(device >= 0 && device < int(counts.size()), "cuda:", device, " does not exist");
  if (counts[device] == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device));
  }
  return counts[device];
}

}  // namespace dpcore::kernels::cuda_runtime
