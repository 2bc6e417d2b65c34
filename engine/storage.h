// Storage: one allocation on one device. Tensors share it through shared_ptr, which is
// how views (reshapes, batch slices, the per-parameter views into the flat buffers) work
// without copies.
#pragma once

#include <cstddef>
#include <memory>

#include "engine/device.h"
#include "engine/memory_account.h"

namespace dpcore {

// Allocates and frees device or host memory. Each backend provides one per device
// (engine/backend.h); the CUDA one caches blocks so that a steady-state training step
// never calls cudaMalloc or cudaFree.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  // Bytes currently handed out and the most ever handed out at once.
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
};

class Storage {
 public:
  Storage(size_t bytes, Device device, Allocator* allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::shared_ptr<MemoryAccount> account_;  // the allocating thread's, if it had one (engine/memory_account.h)
};

}  // namespace dpcore
