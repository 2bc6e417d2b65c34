#include "kernels/cuda_runtime/caching_allocator.h"

#include <algorithm>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_runtime/stream.h"

namespace dpcore::kernels::cuda_runtime {

namespace {

constexpr size_t kSmallLimit = size_t(1) << 20;  // requests up to 1 MiB are "small"
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;

size_t round_size(size_t bytes) {
  const size_t unit = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

std::string mib(size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << double(bytes) / double(1 << 20) << " MiB";
  return os.str();
}

// The smallest cached block that holds `size` without wasting more than a quarter of it
// (a huge block must not be pinned down by a small tensor); removes it from the list.
void* take_block(FreeList& list, size_t size, size_t* block_size) {
  auto it = list.lower_bound(size);
  if (it == list.end() || it->first > size + size / 4) return nullptr;
  void* ptr = it->second;
  *block_size = it->first;
  list.erase(it);
  return ptr;
}

}  // namespace

CachingAllocator::CachingAllocator(int device) : device_(device) {}

void* CachingAllocator::allocate(size_t bytes) { return allocate(bytes, current_stream(device_)); }

void* CachingAllocator::allocate(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto capture = capturing_.find(stream);
  std::shared_ptr<PrivatePool> pool = capture == capturing_.end() ? nullptr : capture->second;
  FreeList& list = pool ? pool->free : free_[stream];

  size_t block_size = size;
  void* ptr = take_block(list, size, &block_size);
  if (ptr) {
    cached_ -= block_size;
  } else {
    ptr = malloc_block(size);
  }
  live_.emplace(ptr, Block{block_size, stream, pool});
  in_use_ += block_size;
  peak_ = std::max(peak_, in_use_);
  return ptr;
}

void* CachingAllocator::malloc_block(size_t size) {
  DeviceGuard device(device_);
  void* ptr = nullptr;
  cudaError_t error;
  {
    // During graph capture cudaMalloc is refused in the default capture mode, yet the
    // graph's pool has to grow: the new block is only ever used by the graph's own
    // kernels, and it is not freed while the graph lives, which is what makes it safe.
    RelaxedCaptureMode relaxed;
    error = cudaMalloc(&ptr, size);
  }
  if (error == cudaErrorMemoryAllocation && capturing_.empty() && cached_ > 0) {
    cudaGetLastError();
    free_cached_locked();  // the cache may hold enough memory in blocks of the wrong sizes
    RelaxedCaptureMode relaxed;
    error = cudaMalloc(&ptr, size);
  }
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail("cuda:", device_, ": out of memory allocating ", mib(size), " (in use ", mib(in_use_), ", cached ",
         mib(cached_), ")");
  }
  CUDA_CHECK(error);
  ++malloc_calls_;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  DPCORE_CHECK(it != live_.end(), "cuda:", device_, ": freeing ", ptr, ", which this allocator did not hand out");
  const Block block = it->second;
  live_.erase(it);
  in_use_ -= block.size;
  cached_ += block.size;
  if (block.pool && !block.pool->released) {
    block.pool->free.emplace(block.size, ptr);
  } else if (block.pool) {
    // The graph that owned it is gone and the device was idle then: the legacy stream may
    // reuse it like any other cached block.
    free_[nullptr].emplace(block.size, ptr);
  } else {
    free_[block.stream].emplace(block.size, ptr);
  }
}

size_t CachingAllocator::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

size_t CachingAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = in_use_;
}

size_t CachingAllocator::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

int64_t CachingAllocator::cuda_malloc_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return malloc_calls_;
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  DPCORE_CHECK(capturing_.empty(), "cuda:", device_, ": cannot release cached memory during graph capture");
  free_cached_locked();
}

// cudaFree of every block in the shared cache. Private pools keep theirs: their graphs use them.
void CachingAllocator::free_cached_locked() {
  DeviceGuard device(device_);
  for (auto& [stream, list] : free_) {
    for (auto& [size, ptr] : list) {
      CUDA_CHECK(cudaFree(ptr));
      cached_ -= size;
    }
    list.clear();
  }
}

void CachingAllocator::begin_private_pool(cudaStream_t stream, std::shared_ptr<PrivatePool> pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  DPCORE_CHECK(!capturing_.count(stream), "cuda:", device_, ": a private memory pool is already active on this stream");
  capturing_[stream] = std::move(pool);
}

void CachingAllocator::end_private_pool(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_.erase(stream);
}

void CachingAllocator::release_private_pool(const std::shared_ptr<PrivatePool>& pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  FreeList& shared = free_[nullptr];
  shared.insert(pool->free.begin(), pool->free.end());
  pool->free.clear();
  pool->released = true;
}

CachingAllocator& device_allocator(int device) {
  // Never destroyed: freeing device memory during static destruction, when the CUDA
  // runtime may already be shut down, crashes; the driver reclaims it at process exit.
  static std::vector<CachingAllocator*>* allocators = [] {
    auto* all = new std::vector<CachingAllocator*>();
    for (int d = 0; d < device_count(); ++d) all->push_back(new CachingAllocator(d));
    return all;
  }();
  DPCORE_CHECK(device >= 0 && device < int(allocators->size()), "cuda:", device, " does not exist (",
               allocators->size(), " CUDA device(s) usable)");
  return *(*allocators)[device];
}

Workspace::Workspace(size_t bytes, cudaStream_t stream)
    : device_(current_device()), ptr_(device_allocator(device_).allocate(bytes, stream)), bytes_(bytes) {}

Workspace::~Workspace() { device_allocator(device_).deallocate(ptr_, bytes_); }

}  // namespace dpcore::kernels::cuda_runtime
