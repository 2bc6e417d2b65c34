#include "train/runners/replica_threads.h"

#include "engine/trace.h"
#include "kernels/error.h"

namespace dpcore::train {

ReplicaThreads::ReplicaThreads(int replicas, std::function<void(int, const std::string&)> on_failure)
    : on_failure_(std::move(on_failure)) {
  for (int r = 0; r < replicas; ++r) threads_.emplace_back([this, r] { loop(r); });
}

ReplicaThreads::~ReplicaThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaThreads::run(const std::function<void(int)>& work) {
  // On the caller's lane: the time it waits for the replicas, and which one it waited for.
  trace::Span span("wait", [&] { return trace::Label{"wait for replicas", {{"replicas", int64_t(size())}}}; });
  std::unique_lock<std::mutex> lock(mutex_);
  work_ = &work;
  running_ = size();
  failures_.clear();
  ++generation_;
  wake_.notify_all();
  finished_.wait(lock, [&] { return running_ == 0; });
  span.add("last_to_finish", int64_t(last_finished_));
  work_ = nullptr;
  if (!failures_.empty()) {
    const ReplicaFailure& first = failures_.front();
    throw ReplicasFailed("replica " + std::to_string(first.replica) + " failed: " + first.message, failures_);
  }
}

void ReplicaThreads::loop(int replica) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int)>* work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      work = work_;
    }
    std::string error;
    std::exception_ptr thrown;
    try {
      (*work)(replica);
    } catch (const std::exception& e) {
      error = e.what(), thrown = std::current_exception();
    } catch (...) {
      error = "unknown exception", thrown = std::current_exception();
    }
    if (thrown) {
      // The first failure is usually the cause; later ones are usually its echo
      // (collectives that the abort below made fail), so it is recorded before anyone is
      // aborted. The exception moves into the record: this thread keeps no reference, so the
      // object dies on the thread that handles the failures (see comm::Completion).
      {
        std::lock_guard<std::mutex> lock(mutex_);
        failures_.push_back({replica, error, std::move(thrown)});
      }
      if (on_failure_) on_failure_(replica, error);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (--running_ == 0) {
      last_finished_ = replica;
      finished_.notify_all();
    }
  }
}

}  // namespace dpcore::train
