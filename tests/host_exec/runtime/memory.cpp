// Memory: device allocations per device, pinned host allocations, and the table that
// says what an address is (region_of), for the copies' rules and the kernels' pointer
// checks. Device memory is ordinary heap memory, so AddressSanitizer sees overruns; it is
// filled with NaN (every bit set: NaN for floats, -1 for integers) when allocated, so a
// read of memory nothing wrote shows up in the results, and again when freed. Freed
// blocks wait in a quarantine (still NaN) before they go back to the heap, so a kernel or
// copy that reads a buffer after its cudaFree reads NaN, and after the quarantine ASan
// reports a use after free.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include "host_exec/runtime/runtime.h"

namespace host_runtime {
namespace {

constexpr size_t kDeviceBytes = size_t(16) << 30;      // what each device claims to hold
constexpr size_t kQuarantineBytes = size_t(256) << 20;  // freed memory kept NaN-filled

struct Allocations {
  std::mutex mutex;
  std::map<const char*, Region> regions;  // by base address
  size_t in_use[kDevices] = {};
  std::deque<std::pair<char*, size_t>> quarantine;
  size_t quarantined = 0;
};
Allocations& allocations() {
  static auto* a = new Allocations;  // leaked: workers may run during static destruction
  return *a;
}

void* allocate(size_t bytes) {
  return std::aligned_alloc(256, std::max<size_t>(256, (bytes + 255) / 256 * 256));
}

// Takes the region out of the table; device memory is NaN-filled and quarantined.
cudaError_t release(const void* ptr, Memory expected) {
  Allocations& a = allocations();
  std::lock_guard<std::mutex> lock(a.mutex);
  const auto it = a.regions.find(static_cast<const char*>(ptr));
  if (it == a.regions.end() || it->second.memory != expected) return cudaErrorInvalidValue;
  const Region region = it->second;
  a.regions.erase(it);
  char* base = const_cast<char*>(region.base);
  if (expected == Memory::Pinned) {
    std::free(base);
    return cudaSuccess;
  }
  a.in_use[region.device] -= region.bytes;
  std::memset(base, 0xFF, region.bytes);
  a.quarantine.emplace_back(base, region.bytes);
  a.quarantined += region.bytes;
  while (a.quarantined > kQuarantineBytes) {
    std::free(a.quarantine.front().first);
    a.quarantined -= a.quarantine.front().second;
    a.quarantine.pop_front();
  }
  return cudaSuccess;
}

}  // namespace

Region region_of(const void* ptr) {
  Allocations& a = allocations();
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(a.mutex);
  auto it = a.regions.upper_bound(p);
  if (it == a.regions.begin()) return Region{};
  --it;
  const Region& r = it->second;
  // Not one past the end: the next heap block may start there.
  return p < r.base + r.bytes ? r : Region{};
}

}  // namespace host_runtime

using host_runtime::record_error;

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  host_runtime::Bookkeeping hide;
  host_runtime::Allocations& a = host_runtime::allocations();
  const int device = host_runtime::current_device();
  if (const cudaError_t error = host_runtime::check_unsafe_call()) return error;
  {
    std::lock_guard<std::mutex> lock(a.mutex);
    if (bytes > host_runtime::kDeviceBytes - a.in_use[device]) return record_error(cudaErrorMemoryAllocation);
  }
  char* base = static_cast<char*>(host_runtime::allocate(bytes));
  if (!base) return record_error(cudaErrorMemoryAllocation);
  std::memset(base, 0xFF, bytes);
  std::lock_guard<std::mutex> lock(a.mutex);
  a.regions[base] = host_runtime::Region{host_runtime::Memory::Device, device, base, bytes, 0};
  a.in_use[device] += bytes;
  *ptr = base;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  host_runtime::Bookkeeping hide;
  if (!ptr) return cudaSuccess;
  const host_runtime::Region region = host_runtime::region_of(ptr);
  if (region.memory != host_runtime::Memory::Device || region.base != ptr) return record_error(cudaErrorInvalidValue);
  if (const cudaError_t error = host_runtime::check_unsafe_call(region.device)) return error;
  host_runtime::drain(region.device);  // CUDA's cudaFree waits for the device to be idle
  return record_error(host_runtime::release(ptr, host_runtime::Memory::Device));
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  host_runtime::Bookkeeping hide;
  if (flags & ~(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
    return record_error(cudaErrorInvalidValue);
  if (const cudaError_t error = host_runtime::check_unsafe_call()) return error;
  char* base = static_cast<char*>(host_runtime::allocate(bytes));
  if (!base) return record_error(cudaErrorMemoryAllocation);
  host_runtime::Allocations& a = host_runtime::allocations();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.regions[base] = host_runtime::Region{host_runtime::Memory::Pinned, -1, base, bytes, flags};
  *ptr = base;
  return cudaSuccess;
}

// Frees at once, without waiting for copies still queued out of or into the block: a
// caller must wait for them first (an event), and one that does not is reported by ASan.
cudaError_t cudaFreeHost(void* ptr) {
  host_runtime::Bookkeeping hide;
  if (!ptr) return cudaSuccess;
  if (const cudaError_t error = host_runtime::check_unsafe_call()) return error;
  return record_error(host_runtime::release(ptr, host_runtime::Memory::Pinned));
}

cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags) {
  host_runtime::Bookkeeping hide;
  const host_runtime::Region region = host_runtime::region_of(host_ptr);
  if (flags != 0 || region.memory != host_runtime::Memory::Pinned || !(region.flags & cudaHostAllocMapped))
    return record_error(cudaErrorInvalidValue);
  *device_ptr = host_ptr;  // unified addressing: the same address on both sides
  return cudaSuccess;
}

cudaError_t cudaDeviceReset() {
  host_runtime::Bookkeeping hide;
  const int device = host_runtime::current_device();
  host_runtime::drain(device);
  std::vector<const void*> owned;
  {
    host_runtime::Allocations& a = host_runtime::allocations();
    std::lock_guard<std::mutex> lock(a.mutex);
    for (const auto& entry : a.regions)
      if (entry.second.memory == host_runtime::Memory::Device && entry.second.device == device)
        owned.push_back(entry.first);
  }
  for (const void* ptr : owned) host_runtime::release(ptr, host_runtime::Memory::Device);
  host_runtime::clear_device_error(device);
  return cudaSuccess;
}
