#include "engine/memory_account.h"

#include <utility>

namespace dpcore {

namespace {

thread_local std::shared_ptr<MemoryAccount> current_account;

void raise_to(std::atomic<size_t>& peak, size_t now) {
  size_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

}  // namespace

void MemoryAccount::add(size_t bytes) {
  const size_t now = in_use_ += bytes;
  raise_to(peak_, now);
  raise_to(window_peak_, now);
}

void MemoryAccount::remove(size_t bytes) { in_use_ -= bytes; }

const std::shared_ptr<MemoryAccount>& MemoryAccount::current() { return current_account; }

MemoryAccount::Scope::Scope(std::shared_ptr<MemoryAccount> account) : outer_(std::move(current_account)) {
  current_account = std::move(account);
}

MemoryAccount::Scope::~Scope() { current_account = std::move(outer_); }

}  // namespace dpcore
