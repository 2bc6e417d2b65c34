// The devices: kDevices of them, each the host; the current one per host thread; peer
// access; and the sticky error a failed kernel leaves on its device.
#include <mutex>

#include "host_exec/host_config.h"
#include "host_exec/runtime/runtime.h"

namespace host_runtime {
namespace {

thread_local int current = 0;

struct DeviceState {
  bool peer[kDevices] = {};  // kernels of this device may touch peer[d]'s memory
  cudaError_t error = cudaSuccess;
  std::string detail;
};
std::mutex devices_mutex;
DeviceState devices[kDevices];

bool valid(int device) { return device >= 0 && device < kDevices; }

}  // namespace

int current_device() { return current; }

bool peer_access(int device, int peer) {
  std::lock_guard<std::mutex> lock(devices_mutex);
  return device == peer || devices[device].peer[peer];
}

void fail_device(int device, cudaError_t error, const std::string& detail) {
  std::lock_guard<std::mutex> lock(devices_mutex);
  if (devices[device].error != cudaSuccess) return;  // the first fault is the one reported
  devices[device].error = error;
  devices[device].detail = detail;
}

cudaError_t device_error(int device) {
  std::lock_guard<std::mutex> lock(devices_mutex);
  return devices[device].error;
}

std::string device_error_detail(int device) {
  std::lock_guard<std::mutex> lock(devices_mutex);
  return devices[device].detail;
}

void clear_device_error(int device) {
  std::lock_guard<std::mutex> lock(devices_mutex);
  devices[device].error = cudaSuccess;
  devices[device].detail.clear();
}

}  // namespace host_runtime

using host_runtime::kDevices;
using host_runtime::record_error;

cudaError_t cudaGetDeviceCount(int* count) {
  host_runtime::Bookkeeping hide;
  *count = kDevices;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  host_runtime::Bookkeeping hide;
  *device = host_runtime::current;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  host_runtime::Bookkeeping hide;
  if (!host_runtime::valid(device)) return record_error(cudaErrorInvalidDevice);
  host_runtime::current = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  host_runtime::Bookkeeping hide;
  if (!host_runtime::valid(device)) return record_error(cudaErrorInvalidDevice);
  if (attribute != cudaDevAttrMultiProcessorCount) return record_error(cudaErrorInvalidValue);
  *value = host_exec::multiprocessors();
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
  host_runtime::Bookkeeping hide;
  if (!host_runtime::valid(device) || !host_runtime::valid(peer_device)) return record_error(cudaErrorInvalidDevice);
  *can_access = device != peer_device;  // CUDA answers 0 for a device and itself
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned flags) {
  host_runtime::Bookkeeping hide;
  if (!host_runtime::valid(peer_device) || peer_device == host_runtime::current)
    return record_error(cudaErrorInvalidDevice);
  if (flags != 0) return record_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(host_runtime::devices_mutex);
  bool& enabled = host_runtime::devices[host_runtime::current].peer[peer_device];
  if (enabled) return record_error(cudaErrorPeerAccessAlreadyEnabled);
  enabled = true;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  host_runtime::Bookkeeping hide;
  const int device = host_runtime::current;
  if (const cudaError_t error = host_runtime::check_unsafe_call(device)) return error;
  host_runtime::drain(device);
  return record_error(host_runtime::device_error(device));
}
