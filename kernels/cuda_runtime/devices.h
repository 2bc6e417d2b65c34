// The CUDA devices of this machine: how many there are, which one the calling thread
// works on, and the per-device facts the kernels size their grids by.
#pragma once

namespace dpcore::kernels::cuda_runtime {

// Usable CUDA devices; 0 when there is no GPU or driver. Never throws and never prints:
// on a machine without a GPU cudaGetDeviceCount fails ("CUDA driver version is
// insufficient"), and that simply means no devices.
int device_count();

// Makes `device` the calling thread's current device (a no-op when it already is).
void set_device(int device);
int current_device();
// The device the calling thread last made current through set_device (every op of the
// CUDA backend does), or -1 when it never did: a thread that has queued no CUDA work.
int thread_device();

// Switches to `device` for a scope and back to the previous current device after, for
// code (allocators, copies) that must not leave the caller's device changed.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// Streaming multiprocessors of `device`, read once. Split-K GEMMs size their grids by it.
int multiprocessor_count(int device);

}  // namespace dpcore::kernels::cuda_runtime
