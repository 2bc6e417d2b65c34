// Kernel launches: queued on their stream like any task. A GPU faults when a kernel
// touches memory its device cannot reach, so a launch whose pointer arguments point into
// another device's allocations (without cudaDeviceEnablePeerAccess) fails its device with
// cudaErrorIllegalAddress when it runs. Pointers inside structs are not looked at.
#include <string>

#include "host_exec/runtime/runtime.h"

namespace host_runtime {

void check_kernel_pointers(const char* kernel, int device, const std::vector<const void*>& pointers) {
  for (size_t i = 0; i < pointers.size(); ++i) {
    if (!pointers[i]) continue;
    const Region r = region_of(pointers[i]);
    if (r.memory != Memory::Device || peer_access(device, r.device)) continue;
    fail_device(device, cudaErrorIllegalAddress,
                std::string("kernel ") + kernel + ": argument " + std::to_string(i) + " points into device " +
                    std::to_string(r.device) + "'s memory (an allocation of " + std::to_string(r.bytes) +
                    " bytes), but the kernel runs on device " + std::to_string(device) +
                    ", which has no peer access to it");
    return;
  }
}

void enqueue_kernel(const char* kernel, cudaStream_t stream, std::vector<const void*> pointers,
                    std::function<void()> run) {
  Bookkeeping hide;
  const std::shared_ptr<Stream> s = stream_for(stream);
  const int device = current_device();
  if (!s || s->device() != device)
    throw std::runtime_error(std::string("host kernel ") + kernel + ": invalid resource handle: " +
                             (s ? "the stream belongs to device " + std::to_string(s->device()) +
                                      ", the current device is " + std::to_string(device)
                                : std::string("not a live stream")));
  const cudaError_t error = submit(s, kernel, [kernel, device, pointers = std::move(pointers), run = std::move(run)] {
    {
      Bookkeeping hide;
      check_kernel_pointers(kernel, device, pointers);
      if (device_error(device) != cudaSuccess) return;
    }
    run();
  });
  if (error)
    throw std::runtime_error(std::string("host kernel ") + kernel + ": " + cudaGetErrorString(error) +
                             " (a capture refused the launch)");
}

}  // namespace host_runtime
