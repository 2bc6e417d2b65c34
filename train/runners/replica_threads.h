// One long-lived thread per replica of this process: parallel_apply's workers. A replica's
// work always runs on the same thread, so per-thread state (a CUDA stream, the autograd
// graph of its forward) stays with its replica across calls.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/error.h"

namespace dpcore::train {

// One replica's work that threw during ReplicaThreads::run.
struct ReplicaFailure {
  int replica = 0;             // this process's replica number (its thread)
  std::string message;         // what it threw
  std::exception_ptr error;    // the exception itself, to tell causes from echoes by type
};

// What ReplicaThreads::run throws when replicas failed: "replica 1 failed: ..." (the first
// failure), and every failure of that run in the order they happened.
class ReplicasFailed : public Error {
 public:
  ReplicasFailed(const std::string& what, std::vector<ReplicaFailure> failures)
      : Error(what), failures_(std::move(failures)) {}
  const std::vector<ReplicaFailure>& failures() const { return failures_; }

 private:
  std::vector<ReplicaFailure> failures_;
};

class ReplicaThreads {
 public:
  // on_failure(replica, message) runs on the failing replica's thread as soon as its work
  // throws (the runners abort their communicators there, so that replicas waiting in a
  // collective fail instead of hanging).
  ReplicaThreads(int replicas, std::function<void(int, const std::string&)> on_failure);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  int size() const { return int(threads_.size()); }
  // Runs work(r) on replica r's thread for every r and waits for all of them. If any threw,
  // throws ReplicasFailed, its message naming the first replica that failed and its error.
  void run(const std::function<void(int replica)>& work);

 private:
  void loop(int replica);

  std::function<void(int, const std::string&)> on_failure_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  const std::function<void(int)>* work_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  int last_finished_ = -1;  // the replica whose work ended last in the latest run()
  bool stopping_ = false;
  std::vector<ReplicaFailure> failures_;  // of the latest run(), in the order they happened
};

}  // namespace dpcore::train
