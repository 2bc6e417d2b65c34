#include "engine/backend.h"

#include <array>
#include <map>
#include <cstdlib>

#include "engine/runtime.h"

namespace dpcore {

std::unique_ptr<Backend::Captured> Backend::make_graph(int) { return nullptr; }
void Backend::synchronize_stream(int) {}
void Backend::use_thread_stream(int, int) {}
void Backend::use_own_stream(int) {}
std::shared_ptr<Backend::Event> Backend::record_event(int) { return nullptr; }
void Backend::wait_event(int, const std::shared_ptr<Event>& event) {
  if (event) event->synchronize();
}
void Backend::await_host_reads(const void*) {}
void* Backend::alloc_host(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) fail("host allocation of ", bytes, " bytes failed");
  return p;
}
void Backend::free_host(void* ptr) { std::free(ptr); }

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

namespace {
std::map<std::pair<int, int>, Allocator*>& plugged_allocators() {
  static std::map<std::pair<int, int>, Allocator*> allocators;
  return allocators;
}
}  // namespace

Allocator& allocator_for(Device device) {
  auto& plugged = plugged_allocators();
  auto it = plugged.find({int(device.type), device.is_cpu() ? 0 : device.index});
  return it != plugged.end() ? *it->second : backend_for(device).allocator(device.index);
}

void set_allocator(Device device, Allocator* allocator) {
  std::pair<int, int> key{int(device.type), device.is_cpu() ? 0 : device.index};
  if (allocator) plugged_allocators()[key] = allocator;
  else plugged_allocators().erase(key);
}

int cuda_device_count() {
  Backend* cuda = find_backend(Device::Type::CUDA);
  return cuda ? cuda->device_count() : 0;
}

Device best_device() { return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu(); }

void synchronize(Device device) { backend_for(device).synchronize(device.index); }

void synchronize_stream(Device device) { backend_for(device).synchronize_stream(device.index); }

size_t bytes_in_use(Device device) { return allocator_for(device).bytes_in_use(); }

size_t peak_bytes(Device device) { return allocator_for(device).peak_bytes(); }

void reset_peak_bytes(Device device) { allocator_for(device).reset_peak(); }

}  // namespace runtime
}  // namespace dpcore
