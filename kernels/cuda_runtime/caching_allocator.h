// The caching device allocator (one per GPU): cudaMalloc and cudaFree are slow and
// synchronize the device, so freed blocks are kept in free lists and handed out again.
// After the first training step every allocation is a free-list hit: a steady-state step
// makes no cudaMalloc call at all (cuda_malloc_calls() lets the tests check that).
//
// Blocks are rounded up (to 512 B below 1 MiB, to 2 MiB above, the driver's own large-page
// size) so that nearly equal requests share blocks. A freed block is reused only by
// allocations on the stream it was allocated on: work on one stream runs in order, so the
// next user of the block cannot overtake the last kernel that used it. Memory used across
// streams must be synchronized by its user before it is freed (PyTorch's recordStream rule).
//
// Graph capture: while a CudaGraph captures on a stream, allocations on that stream come
// from a private pool owned by the graph. Blocks of the pool are reused only inside the
// pool, never handed to other code, while the graph lives: its replays keep writing them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>


namespace dpcore::kernels::cuda_runtime {

// Free blocks by size.
using FreeList = std::multimap<size_t, void*>;

// The memory of one captured graph.
struct PrivatePool {
  FreeList free;
  bool released = false;  // the graph is gone: blocks freed from now on go to the shared cache
};

// The engine adapts it to its Allocator interface (engine/cuda_backend.cu).
class CachingAllocator {
 public:
  explicit CachingAllocator(int device);

  // On the calling thread's current stream of this device.
  void* allocate(size_t bytes);
  void* allocate(size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, size_t bytes);
  size_t bytes_in_use() const;
  size_t peak_bytes() const;
  void reset_peak();

  size_t bytes_cached() const;        // in free lists, ready for reuse
  int64_t cuda_malloc_calls() const;  // cudaMalloc calls so far
  // Gives every cached free block back to the driver. Not allowed during graph capture.
  void release_cached();

  // Between begin and end, allocations on `stream` come from `pool` (CudaGraph::capture).
  void begin_private_pool(cudaStream_t stream, std::shared_ptr<PrivatePool> pool);
  void end_private_pool(cudaStream_t stream);
  // The pool's graph is destroyed and the device is idle: its memory joins the shared cache.
  void release_private_pool(const std::shared_ptr<PrivatePool>& pool);

 private:
  struct Block {
    size_t size;
    cudaStream_t stream;
    std::shared_ptr<PrivatePool> pool;  // null for shared blocks
  };

  void* malloc_block(size_t size);
  void free_cached_locked();

  const int device_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::map<cudaStream_t, FreeList> free_;  // the shared cache, per stream
  std::map<cudaStream_t, std::shared_ptr<PrivatePool>> capturing_;
  size_t in_use_ = 0, peak_ = 0, cached_ = 0;
  int64_t malloc_calls_ = 0;
};

// The allocator of `device`, created on first use and kept for the life of the process.
CachingAllocator& device_allocator(int device);

// Scratch memory for a kernel sequence queued on `stream` of the current device, given
// back at the end of the scope. Giving it back before the kernels have run is safe: the
// next user of the block is on the same stream, so it runs after them.
class Workspace {
 public:
  Workspace(size_t bytes, cudaStream_t stream);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  void* data() const { return ptr_; }
  float* floats() const { return static_cast<float*>(ptr_); }

 private:
  int device_;
  void* ptr_;
  size_t bytes_;
};

}  // namespace dpcore::kernels::cuda_runtime
