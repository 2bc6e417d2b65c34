#include "comm/collective_watchdog.h"

#include <algorithm>

#include "kernels/error.h"

namespace dpcore::comm {
namespace {
constexpr std::chrono::milliseconds kCheckEvery{50};
}  // namespace

CollectiveWatchdog::CollectiveWatchdog(std::chrono::milliseconds timeout,
                                       std::function<void(const std::string& op)> overdue)
    : timeout_(timeout), check_every_(std::min(timeout, kCheckEvery)), overdue_(std::move(overdue)) {
  DPCORE_CHECK(timeout.count() > 0, "collective watchdog: timeout ", timeout.count(), " ms; must be positive");
  thread_ = std::thread([this] { loop(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stopping_cv_.notify_one();
  thread_.join();
}

void CollectiveWatchdog::begin(const std::string& op) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  in_call_ = true;
  op_ = op;
  since_ = now;
}

void CollectiveWatchdog::end() {
  std::lock_guard<std::mutex> lock(mutex_);
  in_call_ = false;
}

void CollectiveWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_cv_.wait_for(lock, check_every_, [this] { return stopping_; })) {
    if (!in_call_ || std::chrono::steady_clock::now() - since_ < timeout_) continue;
    in_call_ = false;  // reported once
    const std::string op = op_;
    lock.unlock();  // `overdue` may take its time (or end the process)
    overdue_(op);
    lock.lock();
  }
}

}  // namespace dpcore::comm
