// A communication thread: runs submitted tasks one at a time, in submission order, so that
// a rank's collectives keep the order in which the caller issued them while the caller
// goes on computing. The local and mpi backends run every collective on one.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/work.h"

namespace dpcore::comm {

class CommThread {
 public:
  CommThread();
  // Runs the tasks still queued, then joins.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `task`; the Work finishes when it has run and carries what it threw.
  Work submit(std::function<void()> task);
  // Queues `task` and waits for it: for setup calls that must run on this thread.
  void run(std::function<void()> task) { submit(std::move(task)).wait(); }

 private:
  struct Item {
    std::function<void()> task;
    std::shared_ptr<Completion> completion;
  };
  void loop();

  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dpcore::comm
