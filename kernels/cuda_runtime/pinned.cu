#include "kernels/cuda_runtime/pinned.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"

namespace dpcore::kernels::cuda_runtime {

namespace {

constexpr size_t kPage = 4096;

struct PinnedCache {
  std::mutex mutex;
  std::multimap<size_t, void*> free;  // by size
  std::map<const char*, size_t> live;  // start -> size, ordered so is_pinned can find the enclosing block
};

PinnedCache& cache() {
  static PinnedCache* instance = new PinnedCache();  // never freed: see device_allocator
  return *instance;
}

}  // namespace

void* pinned_alloc(size_t bytes) {
  const size_t size = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  void* ptr = nullptr;
  size_t block = size;
  auto it = c.free.lower_bound(size);
  if (it != c.free.end() && it->first <= size + size / 4) {
    block = it->first;
    ptr = it->second;
    c.free.erase(it);
  } else {
    cudaError_t error = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (error != cudaSuccess) {
      cudaGetLastError();
      fail("pinned_alloc: cudaHostAlloc of ", size, " bytes failed: ", cudaGetErrorString(error));
    }
  }
  c.live.emplace(static_cast<const char*>(ptr), block);
  return ptr;
}

void pinned_free(void* ptr) {
  if (!ptr) return;
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.live.find(static_cast<const char*>(ptr));
  DPCORE_CHECK(it != c.live.end(), "pinned_free: ", ptr, " was not returned by pinned_alloc");
  c.free.emplace(it->second, ptr);
  c.live.erase(it);
}

bool is_pinned(const void* ptr) {
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  const char* p = static_cast<const char*>(ptr);
  auto it = c.live.upper_bound(p);  // first block starting after p
  if (it == c.live.begin()) return false;
  --it;
  return p < it->first + it->second;
}

}  // namespace dpcore::kernels::cuda_runtime
