// A collective watchdog: a thread that watches the blocking call in progress on another
// thread (the mpi backend's collectives on the communication thread) and reports one that
// has run past a timeout, while the call goes on blocking at full speed. An MPI collective
// cannot be cancelled or given a deadline; a watcher is how a rank notices that a peer died
// or hangs (comm/mpi.cpp then ends the job).
//
// The watched thread only records which call it is in and since when, under a mutex held
// for a few instructions; the watchdog wakes every check interval (50 ms, or the timeout
// when shorter) to compare, and at once when it is destroyed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dpcore::comm {

class CollectiveWatchdog {
 public:
  // `overdue(op)` runs on the watchdog's thread, once per call that is still in progress
  // `timeout` after it began (at most a check interval late).
  CollectiveWatchdog(std::chrono::milliseconds timeout, std::function<void(const std::string& op)> overdue);
  // Stops watching and joins (at once: it does not wait out the interval).
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Runs `call()`, the blocking call named `op`, under watch, and returns what it returns.
  // One call at a time.
  template <typename Call>
  auto watch(const std::string& op, Call call) {
    const Watching watching(*this, op);
    return call();
  }

 private:
  // Marks the call in progress from construction to destruction (also when it throws).
  class Watching {
   public:
    Watching(CollectiveWatchdog& dog, const std::string& op) : dog_(dog) { dog_.begin(op); }
    ~Watching() { dog_.end(); }
    Watching(const Watching&) = delete;
    Watching& operator=(const Watching&) = delete;

   private:
    CollectiveWatchdog& dog_;
  };

  void begin(const std::string& op);
  void end();
  void loop();

  const std::chrono::milliseconds timeout_, check_every_;
  const std::function<void(const std::string& op)> overdue_;
  std::mutex mutex_;  // guards what follows
  std::condition_variable stopping_cv_;
  bool stopping_ = false;
  bool in_call_ = false;  // a call is in progress and not yet reported
  std::string op_;
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;  // last: it starts once the members it reads exist
};

}  // namespace dpcore::comm
