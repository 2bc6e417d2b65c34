#include "engine/backend.h"

#include <array>

#include "engine/runtime.h"

namespace dpcore {

namespace {
// One slot per device type, filled by static registrars at library load time.
std::array<Backend*, 2>& registry() {
  static std::array<Backend*, 2> backends{};
  return backends;
}
}  // namespace

void register_backend(Device::Type type, Backend* backend) { registry()[size_t(type)] = backend; }

Backend* find_backend(Device::Type type) { return registry()[size_t(type)]; }

Backend& backend_for(Device device) {
  Backend* backend = find_backend(device.type);
  if (!backend) fail("device ", device.str(), ": this build of dpcore has no CUDA backend (configure with DPCORE_CUDA=ON)");
  if (device.is_cuda() && device.index >= backend->device_count()) {
    fail("device ", device.str(), ": only ", backend->device_count(), " CUDA device(s) are usable on this machine");
  }
  return *backend;
}

namespace runtime {

int cuda_device_count() {
  Backend* cuda = find_backend(Device::Type::CUDA);
  return cuda ? cuda->device_count() : 0;
}

Device best_device() { return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu(); }

void synchronize(Device device) { backend_for(device).synchronize(device.index); }

size_t peak_bytes(Device device) { return backend_for(device).allocator(device.index).peak_bytes(); }

void reset_peak_bytes(Device device) { backend_for(device).allocator(device.index).reset_peak(); }

}  // namespace runtime
}  // namespace dpcore
