#include "kernels/cuda_runtime/pinned.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"

namespace dpcore::kernels::cuda_runtime {

namespace {

constexpr size_t kPage = 4096;

// A stream that copied out of a buffer, and the event marking the end of its last copy.
struct Reader {
  int device;
  cudaStream_t stream;
  cudaEvent_t done;
};

struct PinnedCache {
  std::mutex mutex;
  std::multimap<size_t, void*> free;  // by size
  std::map<const char*, size_t> live;  // start -> size, ordered so is_pinned can find the enclosing block
  // By buffer start, kept when the buffer goes back to the cache (buffers are never
  // unpinned, so the events stay valid for the life of the process).
  std::map<const char*, std::vector<Reader>> readers;
};

PinnedCache& cache() {
  static PinnedCache* instance = new PinnedCache();  // never freed: see device_allocator
  return *instance;
}

// The start of the live buffer holding `p`, or null. Mutex held.
const char* enclosing_block(PinnedCache& c, const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  auto it = c.live.upper_bound(p);  // first block starting after p
  if (it == c.live.begin()) return nullptr;
  --it;
  return p < it->first + it->second ? it->first : nullptr;
}

// The events to wait for before `block` may be written again. Mutex held.
std::vector<cudaEvent_t> pending_reads(PinnedCache& c, const char* block) {
  std::vector<cudaEvent_t> events;
  auto it = c.readers.find(block);
  if (it != c.readers.end()) {
    for (const Reader& r : it->second) events.push_back(r.done);
  }
  return events;
}

// Outside the mutex: another thread may be recording a read of another buffer meanwhile.
void wait_for(const std::vector<cudaEvent_t>& events) {
  for (cudaEvent_t event : events) CUDA_CHECK(cudaEventSynchronize(event));
}

}  // namespace

void* pinned_alloc(size_t bytes) {
  const size_t size = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  PinnedCache& c = cache();
  std::vector<cudaEvent_t> reads;
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    size_t block = size;
    auto it = c.free.lower_bound(size);
    if (it != c.free.end() && it->first <= size + size / 4) {
      block = it->first;
      ptr = it->second;
      c.free.erase(it);
      reads = pending_reads(c, static_cast<const char*>(ptr));
    } else {
      cudaError_t error = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
      if (error != cudaSuccess) {
        cudaGetLastError();
        fail("pinned_alloc: cudaHostAlloc of ", size, " bytes failed: ", cudaGetErrorString(error));
      }
    }
    c.live.emplace(static_cast<const char*>(ptr), block);
  }
  wait_for(reads);  // its previous owner's copies may still be reading it
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
  return enclosing_block(c, ptr) != nullptr;
}

void record_pinned_read(const void* ptr, int device, cudaStream_t stream) {
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  const char* block = enclosing_block(c, ptr);
  DPCORE_CHECK(block, "record_pinned_read: ", ptr, " is not in a buffer from pinned_alloc");
  std::vector<Reader>& readers = c.readers[block];
  auto reader = std::find_if(readers.begin(), readers.end(),
                             [&](const Reader& r) { return r.device == device && r.stream == stream; });
  if (reader == readers.end()) {
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    reader = readers.insert(readers.end(), Reader{device, stream, done});
  }
  // Re-recording moves the mark: a stream runs its copies in order, so its last one is
  // the only one to wait for.
  CUDA_CHECK(cudaEventRecord(reader->done, stream));
}

void await_pinned_reads(const void* ptr) {
  PinnedCache& c = cache();
  std::vector<cudaEvent_t> reads;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    const char* block = enclosing_block(c, ptr);
    if (block) reads = pending_reads(c, block);
  }
  wait_for(reads);
}

}  // namespace dpcore::kernels::cuda_runtime
