// Tensor memory counted by who allocated it. A thread that opens a MemoryAccount::Scope
// charges every Storage it allocates (on any device) to that account until the storage is
// freed, on whatever thread that happens. A pipeline stage's account is what its thread
// holds: the activations its forwards keep for their backwards, the inputs it received,
// the gradients on their way back. (Kernel scratch, kept per thread outside Storage, and
// the flat parameter and gradient buffers, allocated before, are not in it.)
//
// Two peaks: the most bytes held at once since reset_peak() (a run's, an epoch's) and
// since begin_window() (a step's); both are updated by every allocation.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

namespace dpcore {

class MemoryAccount {
 public:
  void add(size_t bytes);
  void remove(size_t bytes);

  size_t bytes_in_use() const { return in_use_.load(); }
  size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_ = in_use_.load(); }
  size_t window_peak_bytes() const { return window_peak_.load(); }
  void begin_window() { window_peak_ = in_use_.load(); }

  // The calling thread's account while a Scope is open on it, else null.
  static const std::shared_ptr<MemoryAccount>& current();

  // Charges the calling thread's allocations to `account` while it lives (scopes nest: the
  // outer account comes back at the end).
  class Scope {
   public:
    explicit Scope(std::shared_ptr<MemoryAccount> account);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::shared_ptr<MemoryAccount> outer_;
  };

 private:
  std::atomic<size_t> in_use_{0}, peak_{0}, window_peak_{0};
};

}  // namespace dpcore
