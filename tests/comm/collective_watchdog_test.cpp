// The collective watchdog of the mpi backend (comm/collective_watchdog.h), without MPI: a
// call still in progress after the timeout is reported once, naming it, while it goes on;
// a call that returns or throws in time is not; the call's result comes back.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/collective_watchdog.h"

namespace dpcore::testing {
namespace {

using comm::CollectiveWatchdog;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// What the watchdog reported, from its thread: each op, and when.
class Reports {
 public:
  void add(const std::string& op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ops_.push_back(op);
      times_.push_back(Clock::now());
    }
    added_.notify_all();
  }
  // Waits (at most 10 s, a broken watchdog) for the first report and returns its time.
  Clock::time_point first() {
    std::unique_lock<std::mutex> lock(mutex_);
    EXPECT_TRUE(added_.wait_for(lock, std::chrono::seconds(10), [&] { return !times_.empty(); }))
        << "nothing reported within 10 s";
    return times_.empty() ? Clock::now() : times_.front();
  }
  std::vector<std::string> ops() {
    std::lock_guard<std::mutex> lock(mutex_);
    return ops_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable added_;
  std::vector<std::string> ops_;
  std::vector<Clock::time_point> times_;
};

TEST(CollectiveWatchdog, ReportsACallStillInProgressAfterTheTimeoutOnceNamingIt) {
  Reports reports;
  CollectiveWatchdog dog(milliseconds(100), [&](const std::string& op) { reports.add(op); });
  const Clock::time_point start = Clock::now();
  const int result = dog.watch("mpi allreduce", [&] {
    const Clock::time_point reported = reports.first();
    EXPECT_GE(reported - start, milliseconds(100)) << "reported before the timeout";
    std::this_thread::sleep_for(milliseconds(400));  // eight check intervals more, still in the call
    return 7;
  });
  EXPECT_EQ(result, 7);
  EXPECT_EQ(reports.ops(), std::vector<std::string>{"mpi allreduce"});
}

TEST(CollectiveWatchdog, ACallThatReturnsOrThrowsInTimeIsNotReported) {
  Reports reports;
  CollectiveWatchdog dog(milliseconds(200), [&](const std::string& op) { reports.add(op); });
  EXPECT_EQ(dog.watch("mpi barrier", [] { return 3; }), 3);
  EXPECT_THROW(dog.watch("mpi broadcast", []() -> int { throw std::runtime_error("MPI error"); }), std::runtime_error);
  std::this_thread::sleep_for(milliseconds(600));  // three timeouts with no call in progress
  EXPECT_TRUE(reports.ops().empty()) << reports.ops().front();
  // The watchdog still watches: the next call that overruns is reported.
  dog.watch("mpi reduce", [&] { return reports.first(); });
  EXPECT_EQ(reports.ops(), std::vector<std::string>{"mpi reduce"});
}

}  // namespace
}  // namespace dpcore::testing
