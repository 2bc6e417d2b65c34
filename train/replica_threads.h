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

namespace dpcore::train {

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
  // throws an Error naming the first replica that failed and its message.
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
  int first_failed_ = -1;
  std::string first_error_;
};

}  // namespace dpcore::train
